"""What every search agent is: a strategy that proposes configurations and learns from all
evidence (its own evaluations and everyone else's)."""

from __future__ import annotations

import abc
import random
from typing import Any

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.swarm.blackboard import Blackboard

Config = dict[str, Any]


class Agent(abc.ABC):
    """A search strategy. `propose` is called by the coordinator (one caller at a time per
    agent); it returns up to n configurations the agent wants evaluated next. The coordinator
    dedupes them against the blackboard, so an agent may return already-seen ones, but a good
    agent avoids it (`board.known(space.key(cfg))`). `observe` is called for every completed
    evaluation of the run, whoever proposed it (shared evidence)."""

    name: str = "agent"
    strategy: str = ""
    #: tokens paid for so far (an LLM agent's requests); None: proposals cost nothing
    tokens_spent: int | None = None

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True) -> None:
        self.space = space
        self.rng = rng
        self.minimize = minimize

    @abc.abstractmethod
    def propose(self, board: Blackboard, n: int = 1) -> list[Config]:
        ...

    def observe(self, evaluation: Evaluation) -> None:
        """Learn from one evaluation (default: nothing; the board holds the evidence)."""

    def ready(self) -> bool:
        """Proposals already paid for wait here (an LLM reply): the coordinator serves this
        agent before its allocation share comes round, so nothing paid for goes unevaluated."""
        return False

    def pending(self) -> bool:
        """Ideas still on their way (requests in flight): the agent is not out of ideas."""
        return False

    def close(self) -> None:
        """Release resources (models, threads)."""
