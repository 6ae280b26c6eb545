"""LLM agents for KernelSwarm: kernel rewrites from any OpenAI-compatible endpoint.

`make_llm_team(goal, evaluator, ...)` is what a run calls when the goal's agents include "llm":
it returns the agents (one per role), and the evaluator wrapped with the source policy (static
checks before compiling). The key is never part of any of it: see app.llm.settings.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.llm.settings import LLMSettings, LLMSettingsError, resolve_api_key

if TYPE_CHECKING:
    from app.core.evaluator import Evaluator
    from app.core.events import EventBus
    from app.goal import Goal
    from app.llm.agent import LLMAgent
    from app.llm.client import LLMClient
    from app.llm.lessons import LessonBook
    from app.llm.usage import UsageLog


@dataclass
class LLMTeam:
    agents: list[LLMAgent]
    evaluator: Evaluator  # the run's evaluator behind the source policy
    client: LLMClient
    book: LessonBook
    usage: UsageLog | None = None
    warm_start: list[dict[str, Any]] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        return self.client.totals()


def make_llm_team(goal: Goal, evaluator: Evaluator, *, settings: LLMSettings | None = None,
                  bus: EventBus | None = None, run_id: int | None = None,
                  db_path: str | Path | None = None, client: LLMClient | None = None,
                  seed: int | None = None, retime: Any = None) -> LLMTeam:
    """LLM agents for a goal, one per configured role, sharing one client (so the concurrency
    limit and the run's token/cost budget hold across them), one lesson book, and the usage
    log and warm start of the history database at `db_path` (when given). `retime`: the
    backend's retime_pair, when the session offers it (the lesson book re-times close calls)."""
    from app.core.events import LessonLearned
    from app.llm.agent import LLMAgent
    from app.llm.client import LLMClient
    from app.llm.guard import PolicyEvaluator
    from app.llm.hardware import measured_figures
    from app.llm.lessons import LessonBook, load_prior
    from app.llm.spec import kernel_spec
    from app.llm.usage import UsageLog
    from app.llm.warm import retune_warm_start

    settings = (settings or LLMSettings.from_env()).validate()
    space = evaluator.space
    spec = kernel_spec(goal, params=list(space.params), operator=evaluator.op)
    client = client or LLMClient(settings, seed=goal.swarm.seed if seed is None else seed)
    device = evaluator.device()
    # in the objective's unit; the prompt states both with the unit and CURRENT's fraction
    # "measured": the hardware sheet's figures, where this backend's roof probes measured them
    limits = {"baseline": evaluator.baseline(), "roof": evaluator.limit(),
              "measured": measured_figures(evaluator)}
    prior = load_prior(db_path, goal, params=list(space.params)) if db_path else None

    def publish(lesson):  # type: ignore[no-untyped-def]
        if bus is not None:
            bus.publish(LessonLearned(lesson=lesson, run_id=run_id))

    book = LessonBook(goal, device.summary(), minimize=goal.objective.minimize, publish=publish,
                      prior_lessons=prior.lessons if prior else [], retime=retime,
                      template=spec.template, language=spec.language)
    usage = UsageLog(db_path, run_id) if db_path else None
    base_seed = goal.swarm.seed if seed is None else seed
    from app.llm.agent import candidate_key

    def key_fn(config: dict, source: str) -> str:  # the backend's keying where it has one
        return evaluator.candidate_key(config, source) or candidate_key(config, source)
    agents = []
    for i, role in enumerate(settings.roles):
        agents.append(LLMAgent(
            space, random.Random(f"{base_seed}:llm:{role}"), goal.objective.minimize, role=role,
            client=client, spec=spec, goal=goal, book=book, device=device.summary(),
            limits=limits, usage=usage, key_fn=key_fn,
            warm_start=(prior.kernels if prior and i == 0 else [])))
    if agents and prior and prior.kernels:
        retune_warm_start(agents[0], prior.kernels, list(spec.params), key_fn)
    guarded = PolicyEvaluator(evaluator, spec, dtype=goal.dtype, forbid=goal.constraints.forbid)
    return LLMTeam(agents, guarded, client, book, usage, prior.kernels if prior else [])


__all__ = ["LLMSettings", "LLMSettingsError", "LLMTeam", "make_llm_team", "resolve_api_key"]
