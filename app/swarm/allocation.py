"""Budget allocation between agents: more proposals go to agents that recently improved.

Each agent keeps an exponentially decayed reward over its own recent evaluations (1 for a new
global best, a smaller reward for a correct result in the top decile, 0 otherwise). An agent's
share of proposals is a floor (so no strategy starves: evidence from every strategy keeps the
others honest) plus a part proportional to its reward.

Agents that pay for their proposals (LLM agents: tokens) report what they spent through
`spend(agent)`; their reward is weighed by cost per improvement, relative to the other paying
agents: one that spends twice the tokens per new best earns half the part the other earns with
the same reward (within [1/MAX_COST_FACTOR, MAX_COST_FACTOR]). Agents that report nothing are
free and unweighed; the floor is kept for everyone.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

MAX_COST_FACTOR = 4.0  # one agent's cost weight stays within [1/4, 4] of the others' mean
IMPROVEMENT_REWARD = 1.0  # the coordinator's reward for a new global best


class BudgetAllocator:
    def __init__(self, agents: list[str], decay: float = 0.85, floor: float = 0.5,
                 spend: Callable[[str], float | None] | None = None) -> None:
        if not agents:
            raise ValueError("no agents to allocate budget to")
        self.agents = list(agents)
        self.decay = decay
        self.floor = floor  # fraction of proposals spread evenly
        self.reward = {a: 0.0 for a in self.agents}
        self.improvements = {a: 0 for a in self.agents}
        self.spend = spend  # agent -> what it has spent so far (tokens), None when free

    def update(self, agent: str, reward: float) -> None:
        if agent in self.reward:
            self.reward[agent] = self.decay * self.reward[agent] + (1.0 - self.decay) * reward
            self.improvements[agent] += reward >= IMPROVEMENT_REWARD

    def cost_factors(self) -> dict[str, float]:
        """Each paying agent's weight: the paying agents' geometric mean cost per improvement
        over its own (spent / (improvements + 1): a costly agent with no improvement yet is
        the costliest). 1.0 for free agents, and while fewer than two agents pay."""
        costs: dict[str, float] = {}
        for a in self.agents:
            spent = self.spend(a) if self.spend is not None else None
            if spent is not None and spent > 0:
                costs[a] = spent / (self.improvements[a] + 1)
        out = {a: 1.0 for a in self.agents}
        if len(costs) < 2:
            return out
        mean = math.exp(sum(math.log(c) for c in costs.values()) / len(costs))
        for a, c in costs.items():
            out[a] = min(MAX_COST_FACTOR, max(1.0 / MAX_COST_FACTOR, mean / c))
        return out

    def shares(self) -> dict[str, float]:
        n = len(self.agents)
        factors = self.cost_factors()
        weight = {a: self.reward[a] * factors[a] for a in self.agents}
        total = sum(weight.values())
        out = {}
        for a in self.agents:
            earned = weight[a] / total if total > 0 else 1.0 / n
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
