"""Space-filling exploration: each proposal is the valid configuration farthest from
everything already evaluated (max-min distance among random valid samples), so the swarm's
early evidence covers the space instead of clustering."""

from __future__ import annotations

import random

from app.swarm.agents.base import Agent, Config
from app.swarm.agents.moves import Picker, distance, random_free
from app.swarm.blackboard import Blackboard
from app.swarm.space import SearchSpace


class ExplorerAgent(Agent):
    name = "explorer"
    strategy = "space-filling exploration (max-min distance sampling)"

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True,
                 pool: int = 32) -> None:
        super().__init__(space, rng, minimize)
        self.pool = pool

    def propose(self, board: Blackboard, n: int = 1) -> list[Config]:
        picker = Picker(self.space, board)
        seen = [e.config for e in board.evaluations]
        out: list[Config] = []
        for _ in range(n):
            candidates = []
            for _ in range(self.pool):
                cand = random_free(self.space, picker.is_free, self.rng, tries=20)
                if cand is not None:
                    candidates.append(cand)
            if not candidates:
                break
            # Farthest from its nearest evaluated (or just proposed) neighbour.
            best = max(candidates, key=lambda c: min((distance(self.space, c, s) for s in seen),
                                                      default=0.0))
            out.append(picker.take(best))
            seen.append(best)
        return out
