"""Transfer: proposes, in order, the configurations that ranked best for this kernel on other
devices (app.swarm.transfer). It runs out of ideas at the end of that short ranking; until
then it competes for budget like any agent, so a device where the old ranking is wrong soon
gives its share to the others."""

from __future__ import annotations

import random
from collections.abc import Sequence

from app.core.space import SearchSpace
from app.swarm.agents.base import Agent, Config
from app.swarm.agents.moves import Picker
from app.swarm.blackboard import Blackboard


class TransferAgent(Agent):
    name = "transfer"
    strategy = "rank transfer from runs of the same kernel on other devices"

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True,
                 ranked: Sequence[Config] = ()) -> None:
        super().__init__(space, rng, minimize)
        self.ranked = [dict(c) for c in ranked]
        self._next = 0  # position in the ranking of the next proposal

    def propose(self, board: Blackboard, n: int = 1) -> list[Config]:
        picker = Picker(self.space, board)
        out: list[Config] = []
        while len(out) < n and self._next < len(self.ranked):
            cand = self.ranked[self._next]
            self._next += 1
            if picker.is_free(cand):
                out.append(picker.take(cand))
        return out
