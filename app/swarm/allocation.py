"""Budget allocation between agents: more proposals go to agents that recently improved.

Each agent keeps an exponentially decayed reward over its own recent evaluations (1 for a new
global best, a smaller reward for a correct result in the top decile, 0 otherwise). An agent's
share of proposals is a floor (so no strategy starves: evidence from every strategy keeps the
others honest) plus a part proportional to its reward.
"""

from __future__ import annotations

import random


class BudgetAllocator:
    def __init__(self, agents: list[str], decay: float = 0.85, floor: float = 0.5) -> None:
        if not agents:
            raise ValueError("no agents to allocate budget to")
        self.agents = list(agents)
        self.decay = decay
        self.floor = floor  # fraction of proposals spread evenly
        self.reward = {a: 0.0 for a in self.agents}

    def update(self, agent: str, reward: float) -> None:
        if agent in self.reward:
            self.reward[agent] = self.decay * self.reward[agent] + (1.0 - self.decay) * reward

    def shares(self) -> dict[str, float]:
        n = len(self.agents)
        total = sum(self.reward.values())
        out = {}
        for a in self.agents:
            earned = self.reward[a] / total if total > 0 else 1.0 / n
            out[a] = self.floor / n + (1.0 - self.floor) * earned
        return out

    def pick(self, rng: random.Random, exclude: set[str] = frozenset()) -> str | None:
        shares = {a: s for a, s in self.shares().items() if a not in exclude}
        if not shares:
            return None
        r = rng.random() * sum(shares.values())
        for a, s in shares.items():
            r -= s
            if r <= 0:
                return a
        return next(reversed(shares))
