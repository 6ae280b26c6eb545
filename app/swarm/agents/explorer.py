"""Space-filling exploration: each proposal is the valid configuration farthest from
everything already evaluated (max-min distance among random valid samples), so the swarm's
early evidence covers the space instead of clustering."""

from __future__ import annotations

import random

import numpy as np

from app.core.space import SearchSpace
from app.swarm.agents.base import Agent, Config
from app.swarm.agents.moves import Picker, Positions, random_free
from app.swarm.blackboard import Blackboard


class ExplorerAgent(Agent):
    name = "explorer"
    strategy = "space-filling exploration (max-min distance sampling)"

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True,
                 pool: int = 32) -> None:
        super().__init__(space, rng, minimize)
        self.pool = pool
        self.positions = Positions(space)
        self._seen = np.zeros((0, len(self.positions.names)))
        self._synced = 0

    def _sync(self, board: Blackboard) -> None:
        evaluations = board.evaluations
        new = self.positions.matrix(e.config for e in evaluations[self._synced:])
        self._seen = np.vstack([self._seen, new])
        self._synced = len(evaluations)

    def propose(self, board: Blackboard, n: int = 1) -> list[Config]:
        self._sync(board)
        picker = Picker(self.space, board)
        seen = self._seen
        out: list[Config] = []
        for _ in range(n):
            candidates = []
            for _ in range(self.pool):
                cand = random_free(self.space, picker.is_free, self.rng, tries=20)
                if cand is not None:
                    candidates.append(cand)
            if not candidates:
                break
            # Farthest from its nearest evaluated (or just proposed) configuration.
            cands = self.positions.matrix(candidates)
            if len(seen):
                gaps = np.abs(cands[:, None, :] - seen[None, :, :]).sum(axis=2).min(axis=1)
                best = candidates[int(np.argmax(gaps))]
            else:
                best = candidates[0]
            out.append(picker.take(best))
            seen = np.vstack([seen, self.positions.matrix([best])])
        return out
