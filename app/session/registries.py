"""The registries, wired in one place: every entry point (the CLI, the window, the engine
process) calls `wire()` before it reads a registry, and the session's goal check calls it too,
so no module has to be imported for its side effects and no caller has to know which. A
process that evaluates for a run elsewhere (a Ray actor, app.cluster) is handed `wire` by the
session and calls it there: it is a module-level function, so it travels by reference.

What is registered:
- backends (app.gpu.registry): the built-in cpu, cuda and replay backends, declared by the
  app.gpu package and registered by its register_builtin_backends();
- agents (app.swarm.agents): the swarm's own strategies, declared there, and the LLM agent,
  declared here because the swarm sits below app.llm and must not reach up for it;
- catalog operators load per backend on first use (app.catalog.known_operators), and each
  backend's worker registers its reference-kernel runner in the worker process itself.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_wired = False


def wire() -> None:
    """Fill every registry once; later calls return at once (idempotent, thread-safe)."""
    global _wired
    with _lock:
        if _wired:
            return
        _backends()
        _agents()
        _wired = True


def _backends() -> None:
    from app.gpu import register_builtin_backends

    register_builtin_backends()


def _agents() -> None:
    from app.llm.settings import check_goal_settings
    from app.swarm.agents import AgentSpec, register_agent

    # The LLM roles are made per run as a team (app.llm.make_llm_team), so the registry knows
    # only the name and how to check the goal's [llm] table.
    register_agent(AgentSpec("llm", "LLM rewrites of device code", make=None,
                             check_goal=check_goal_settings, settings_field="llm"))
