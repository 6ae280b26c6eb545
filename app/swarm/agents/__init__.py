"""The swarm's agents, made by name.

Each owns one strategy: space-filling exploration, local search around elites, evolution,
model-guided proposals.
"""

from __future__ import annotations

import random

from app.swarm.agents.base import Agent
from app.swarm.agents.evolution import EvolutionAgent
from app.swarm.agents.explorer import ExplorerAgent
from app.swarm.agents.local import LocalAgent
from app.swarm.agents.model import ModelAgent
from app.swarm.space import SearchSpace

_AGENTS: dict[str, type[Agent]] = {
    "explorer": ExplorerAgent,
    "local": LocalAgent,
    "evolution": EvolutionAgent,
    "model": ModelAgent,
}
AGENT_NAMES: tuple[str, ...] = tuple(_AGENTS)


def make_agent(name: str, space: SearchSpace, rng: random.Random, minimize: bool = True) -> Agent:
    """A new agent of the named strategy."""
    try:
        cls = _AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r}; known agents: {', '.join(AGENT_NAMES)}") from None
    return cls(space, rng, minimize)


__all__ = ["AGENT_NAMES", "Agent", "make_agent"]
