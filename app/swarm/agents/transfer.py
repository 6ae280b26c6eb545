"""Transfer: proposes, in order, the configurations that ranked best for this kernel on other
devices (app.swarm.transfer). It checks the ranking as it goes: every result on this device
of a configuration the other devices measured (whoever proposed it, the explorer's pure
exploration included) is compared with its rank there, and once the rank correlation is weak
the agent falls silent, so a device where the old ranking is wrong is not misled further. It
also runs out of ideas at the end of its short ranking; until then it competes for budget
like any agent."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.swarm.agents.base import Agent, Config
from app.swarm.agents.moves import Picker
from app.swarm.blackboard import Blackboard
from app.swarm.transfer import rank_correlation

CHECK_AFTER = 8  # results on this device needed before the ranking is judged
MIN_CORRELATION = 0.3


class TransferAgent(Agent):
    name = "transfer"
    strategy = "rank transfer from earlier runs of the same kernel (here and on other devices)"

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True,
                 ranked: Sequence[Config] = (), scores: Mapping[str, float] | None = None) -> None:
        super().__init__(space, rng, minimize)
        self.ranked = [dict(c) for c in ranked]
        self.scores = dict(scores or {})
        self._next = 0  # position in the ranking of the next proposal
        self._elsewhere: list[float] = []  # percentile on the other devices
        self._here: list[float] = []  # result on this device (smaller is better)
        self.trusted = True

    def observe(self, evaluation: Evaluation) -> None:
        p = self.scores.get(evaluation.key)
        if p is None or not evaluation.ok or evaluation.value is None:
            return
        self._elsewhere.append(p)
        self._here.append(evaluation.value if self.minimize else -evaluation.value)
        if len(self._here) >= CHECK_AFTER:
            self.trusted = rank_correlation(self._elsewhere, self._here) >= MIN_CORRELATION

    def propose(self, board: Blackboard, n: int = 1) -> list[Config]:
        picker = Picker(self.space, board)
        out: list[Config] = []
        while self.trusted and len(out) < n and self._next < len(self.ranked):
            cand = self.ranked[self._next]
            self._next += 1
            if picker.is_free(cand):
                out.append(picker.take(cand))
        return out
