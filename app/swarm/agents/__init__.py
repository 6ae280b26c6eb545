"""The swarm's agents, registered by name.

Each owns one strategy: space-filling exploration, local search around elites, evolution,
model-guided proposals. Other packages register theirs (app.llm registers "llm") without the
swarm importing them. An agent made per run as a team (the LLM roles, which share a client and
wrap the evaluator) registers without a factory; the session makes it.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.space import SearchSpace
from app.goal import GoalError
from app.swarm.agents.base import Agent

AgentFactory = Callable[[SearchSpace, random.Random, bool], Agent]


@dataclass(frozen=True)
class AgentSpec:
    name: str
    label: str
    make: AgentFactory | None = None  # None: made by the session as a team (see app.llm)
    check_goal: Callable[[Any], None] | None = None  # its goal settings; raises GoalError
    settings_field: str = ""  # the goal table this agent reads, checked whenever present


_AGENTS: dict[str, AgentSpec] = {}


def register_agent(spec: AgentSpec) -> AgentSpec:
    _AGENTS[spec.name] = spec
    return spec


def _lazy(target: str) -> AgentFactory:
    """A factory that imports its class when first used: the model agent pulls in optuna,
    which a headless GPU box may lack while the other strategies still run there."""
    def make(space: SearchSpace, rng: random.Random, minimize: bool) -> Agent:
        module_name, class_name = target.split(":")
        cls: type[Agent] = getattr(importlib.import_module(module_name), class_name)
        return cls(space, rng, minimize)
    return make


for _name, _label, _target in (
        ("explorer", "space-filling exploration", "app.swarm.agents.explorer:ExplorerAgent"),
        ("local", "local search around the elites", "app.swarm.agents.local:LocalAgent"),
        ("evolution", "crossover and mutation of elites", "app.swarm.agents.evolution:EvolutionAgent"),
        ("model", "model-guided proposals (optuna)", "app.swarm.agents.model:ModelAgent")):
    register_agent(AgentSpec(_name, _label, make=_lazy(_target)))

# The search strategies the swarm itself provides (every one can be made by name).
AGENT_NAMES: tuple[str, ...] = tuple(_AGENTS)


def agent_names() -> tuple[str, ...]:
    """Every registered agent, including those other packages registered."""
    return tuple(_AGENTS)


def agent_spec(name: str) -> AgentSpec:
    try:
        return _AGENTS[name]
    except KeyError:
        raise GoalError("swarm.agents", f"unknown agent {name!r}; known: "
                        f"{', '.join(_AGENTS)}") from None


def check_agents(goal: Any) -> list[AgentSpec]:
    """The goal's agents, after each checked the goal settings it reads."""
    specs = [agent_spec(name) for name in goal.swarm.agents]
    checked = {s.name for s in specs}
    for spec in _AGENTS.values():
        if spec.check_goal is None:
            continue
        if spec.name in checked or (spec.settings_field and getattr(goal, spec.settings_field, None)):
            spec.check_goal(goal)
    return specs


def make_agent(name: str, space: SearchSpace, rng: random.Random, minimize: bool = True) -> Agent:
    """A new agent of the named strategy."""
    spec = _AGENTS.get(name)
    if spec is None or spec.make is None:
        raise ValueError(f"unknown agent {name!r}; known agents: {', '.join(AGENT_NAMES)}")
    return spec.make(space, rng, minimize)


__all__ = ["AGENT_NAMES", "Agent", "AgentSpec", "agent_names", "agent_spec", "check_agents",
           "make_agent", "register_agent"]
