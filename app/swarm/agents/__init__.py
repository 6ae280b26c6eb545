"""The swarm's agents, made by name.

Each owns one strategy: space-filling exploration, local search around elites, evolution,
model-guided proposals.
"""

from __future__ import annotations

import importlib
import random

from app.swarm.agents.base import Agent
from app.core.space import SearchSpace

# Imported when first made: the model agent pulls in optuna, which a headless GPU box may lack
# while the other strategies still run there.
_AGENTS: dict[str, str] = {
    "explorer": "app.swarm.agents.explorer:ExplorerAgent",
    "local": "app.swarm.agents.local:LocalAgent",
    "evolution": "app.swarm.agents.evolution:EvolutionAgent",
    "model": "app.swarm.agents.model:ModelAgent",
}
AGENT_NAMES: tuple[str, ...] = tuple(_AGENTS)


def make_agent(name: str, space: SearchSpace, rng: random.Random, minimize: bool = True) -> Agent:
    """A new agent of the named strategy."""
    try:
        module_name, class_name = _AGENTS[name].split(":")
    except KeyError:
        raise ValueError(f"unknown agent {name!r}; known agents: {', '.join(AGENT_NAMES)}") from None
    cls: type[Agent] = getattr(importlib.import_module(module_name), class_name)
    return cls(space, rng, minimize)


__all__ = ["AGENT_NAMES", "Agent", "make_agent"]
