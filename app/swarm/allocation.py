"""Budget allocation between agents: the run's own evidence decides which agents get proposals.

The coordinator's policy (`BudgetAllocator`, "decay") keeps an exponentially decayed reward
over each agent's own evaluations (1 for a new global best, a smaller reward for a correct
result in the top decile, 0 otherwise). An agent's share of proposals is a floor (so no
strategy starves: evidence from every strategy keeps the others honest) plus a part
proportional to its reward.

Other policies, run by name (`make_allocator`; bench/search_efficiency.py `swarm@POLICY`) and
judged leave-one-space-out on the recorded spaces (bench/README.md), none better there so far:
"bandit" and its variants, discounted Thompson sampling over the agents (each agent's rewards
per evaluation, discounted at every evaluation of the run so old evidence fades for all
agents alike; a floor of the picks spread evenly), and "decay-paid", the decay rule with each
agent's earned part weighed by its new bests per evaluation against the run's rate. Against an
agent far below random alone keeping a large share, these were added, all measured and not
adopted:
"decay-strict" (only new bests earn), "decay-vs-explorer" (decay-paid against the explorer's
rate: an agent improving less often than space-filling draws loses its earned part;
"-floor": its floor part too) and "decay-vs-random" (a reward counts only above what a random
proposal would earn against the run's results so far). "decay-cap" keeps an agent to its floor
part while its credit per evaluation over the run's latest evaluations is below the explorer's
(space-filling draws, the run's own stand-in for random search): it almost never fires, since
in the swarm the agents that are far below random alone beat the explorer's rate there.
Two that weigh an agent's marginal value rather than its credit, also measured and not
adopted: "decay-redundant" (a result one parameter from the incumbent earns an agent other
than the local walker, who would have measured it anyway, a quarter of its credit) and
"decay-holdout" (HoldoutAllocator: stretches with and without the model's turns, the model
dropped when the run does better without it).

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
from functools import partial

MAX_COST_FACTOR = 4.0  # one agent's cost weight stays within [1/4, 4] of the others' mean
IMPROVEMENT_REWARD = 1.0  # the coordinator's reward for a new global best
NEAR_REWARD = 0.25  # and for a correct result in the top decile (coordinator._reward)
SHARE_SAMPLES = 400  # Thompson draws behind a displayed share (shares() only, not picks)
CAP_WINDOW = 60  # "decay-cap": the run's latest evaluations an agent is compared over
CAP_EVIDENCE = 8  # evaluations of both the agent and the reference in that window
CAP_Z = 1.0  # standard errors below the reference's credit per evaluation
NEIGHBOURHOOD_AGENT = "local"  # "decay-redundant": the agent that walks the incumbent's neighbourhood


class _Allocator:
    """What every policy shares: the agents, their improvements and cost weights."""

    floor = 0.5

    def __init__(self, agents: list[str], spend: Callable[[str], float | None] | None = None
                 ) -> None:
        if not agents:
            raise ValueError("no agents to allocate budget to")
        self.agents = list(agents)
        self.improvements = {a: 0 for a in self.agents}
        self.spend = spend  # agent -> what it has spent so far (tokens), None when free

    def _count(self, agent: str, reward: float) -> None:
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
        raise NotImplementedError

    #: whether near_incumbent is worth telling (the coordinator skips the comparison if not)
    wants_near_incumbent = False

    def near_incumbent(self, agent: str, near: bool) -> None:
        """Told before `update` of the same result whether it lies one parameter from the best
        it was measured against (only "decay-redundant" uses it)."""

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


class DecayAllocator(_Allocator):
    """The previous rule: a floor plus a part proportional to each agent's reward, decayed
    over its own evaluations."""

    def __init__(self, agents: list[str], decay: float = 0.85, floor: float = 0.5,
                 paid: float = 0.0, near_credit: float = 1.0, reference: str = "",
                 floor_paid: float = 1.0, random_level: float = 0.0, cap_reference: str = "",
                 redundant_credit: float = 1.0,
                 spend: Callable[[str], float | None] | None = None) -> None:
        super().__init__(agents, spend)
        # "": no cap; else the agent whose recent credit per evaluation the others must match
        # (see capped); the recent credits of the run, in order: (agent, credit)
        self.cap_reference = cap_reference
        self.recent: list[tuple[str, float]] = []
        self.decay = decay
        self.random_level = random_level  # > 0: rewards count above a random proposal's (random_reward)
        self.floor = floor  # fraction of proposals spread evenly
        self.reward = {a: 0.0 for a in self.agents}
        self.evaluations = {a: 0 for a in self.agents}
        self.paid = paid  # > 0: the earned part follows new bests per evaluation (see paid_factors)
        self.near_credit = near_credit  # weight of a reward short of a new best
        self.reference = reference  # whose new-best rate paid_factors measures against
        self.floor_paid = floor_paid  # < 1: the floor part shrinks too, to this fraction at most
        # < 1: what a result one parameter from the incumbent earns an agent other than the
        # neighbourhood walker (the walker would have measured it anyway: see near_incumbent)
        self.redundant_credit = redundant_credit
        self.wants_near_incumbent = redundant_credit < 1.0
        self._near = False

    def near_incumbent(self, agent: str, near: bool) -> None:
        self._near = near and agent != NEIGHBOURHOOD_AGENT and NEIGHBOURHOOD_AGENT in self.reward

    def update(self, agent: str, reward: float) -> None:
        if agent in self.reward:
            credit = reward if reward >= IMPROVEMENT_REWARD else self.near_credit * reward
            if self._near:
                credit *= self.redundant_credit
            self._near = False
            self.reward[agent] = self.decay * self.reward[agent] + (1.0 - self.decay) * credit
            self.evaluations[agent] += 1
            self._count(agent, reward)
            if self.cap_reference:
                self.recent = [*self.recent[1 - CAP_WINDOW:], (agent, credit)]

    def capped(self) -> set[str]:
        """Agents whose credit per evaluation over the run's last CAP_WINDOW evaluations is
        below the reference's (a space-filling agent: what proposals with no model earn in the
        same stretch of the run) by more than CAP_Z standard errors, both with at least
        CAP_EVIDENCE evaluations there. A capped agent keeps its floor part only: an agent that
        does worse than chance over enough evidence cannot hold a large share however much
        reward it earned before."""
        ref = self.cap_reference
        if not ref:
            return set()
        by: dict[str, list[float]] = {}
        for a, credit in self.recent:
            by.setdefault(a, []).append(credit)

        def rate(a: str) -> tuple[float, float]:
            xs = by.get(a, [])
            mean = sum(xs) / len(xs)
            return mean, sum((x - mean) ** 2 for x in xs) / max(1, len(xs) - 1) / len(xs)
        if len(by.get(ref, [])) < CAP_EVIDENCE:
            return set()
        ref_rate, ref_var = rate(ref)
        out = set()
        for a in self.agents:
            if a == ref or len(by.get(a, [])) < CAP_EVIDENCE:
                continue
            mean, var = rate(a)
            if ref_rate - mean > CAP_Z * math.sqrt(var + ref_var) and ref_rate > mean:
                out.add(a)
        return out

    def paid_factors(self) -> dict[str, float]:
        """Each agent's new bests over what its evaluations would have brought at the run's
        own rate (both with one pseudo-count), capped at 1 and floored at `paid`: an agent
        whose results land near the top without ever beating the best (a model repeating
        the elite's neighbourhood) cannot keep a large part on near-misses alone."""
        total = sum(self.evaluations.values())
        if not self.paid or not total:
            return {a: 1.0 for a in self.agents}
        rate = sum(self.improvements.values()) / total
        ref = self.reference
        if ref in self.evaluations:  # the reference's own rate, shrunk to the run's (10 evals)
            rate = (self.improvements[ref] + 10.0 * rate) / (self.evaluations[ref] + 10.0)
        return {a: min(1.0, max(self.paid, (self.improvements[a] + 1.0)
                                / (self.evaluations[a] * rate + 1.0))) for a in self.agents}

    def random_reward(self) -> float:
        """What a uniformly random proposal would earn now, per evaluation, if the run's t
        results were random draws: a new best with chance 1/(t+1), a place in the top decile
        (at least the 3 best) with chance k/(t+1)."""
        t = sum(self.evaluations.values())
        top = max(3.0, t / 10.0)
        return min(IMPROVEMENT_REWARD, (IMPROVEMENT_REWARD + NEAR_REWARD * (top - 1.0)) / (t + 1.0))

    def shares(self) -> dict[str, float]:
        factors = self.cost_factors()
        paid = self.paid_factors()
        weight = {a: self.reward[a] * factors[a] * paid[a] for a in self.agents}
        for a in self.capped():
            weight[a] = 0.0
        if self.random_level > 0:  # an agent earning no more than chance is weighed as chance
            level = self.random_level * self.random_reward()
            weight = {a: max(w, level) for a, w in weight.items()}
        total = sum(weight.values())
        floor = {a: max(self.floor_paid, paid[a]) for a in self.agents}
        spread = sum(floor.values())
        return {a: self.floor * floor[a] / spread
                + (1.0 - self.floor) * (weight[a] / total if total > 0 else floor[a] / spread)
                for a in self.agents}


class HoldoutAllocator(DecayAllocator):
    """The decay rule plus an in-run counterfactual for one agent (the subject): from
    evaluation `start` on, the run alternates stretches of `stretch` evaluations with the
    subject's turns and without them (its share goes to the others), and compares the whole
    run's credit per evaluation (every agent's rewards: new bests and top-decile results) in
    the two kinds. Once the stretches without it have done better, by more than one standard
    error over at least `pairs` pairs or on the sign after `max_pairs`, the subject keeps no
    share for the rest of the run; once those with it have, the test ends and the decay rule
    alone decides. This measures the subject's marginal value (what the run gains from giving
    it turns rather than giving them to the others), which its own credit does not."""

    def __init__(self, agents: list[str], subject: str = "model", stretch: int = 10,
                 start: int = 10, pairs: int = 3, max_pairs: int = 6, **kwargs) -> None:
        super().__init__(agents, **kwargs)
        self.subject = subject if subject in self.agents and len(self.agents) > 1 else ""
        self.stretch, self.start, self.pairs, self.max_pairs = stretch, start, pairs, max_pairs
        self.seen = 0  # results so far (all agents)
        self.stretches: dict[bool, list[float]] = {True: [], False: []}  # with it: credits
        self._running = 0.0
        self.verdict: bool | None = None  # None: testing; True: kept; False: dropped

    def _with_subject(self) -> bool:
        """Whether the current stretch gives the subject turns."""
        if self.verdict is not None or not self.subject or self.seen < self.start:
            return self.verdict is not False
        return (self.seen - self.start) // self.stretch % 2 == 0

    def update(self, agent: str, reward: float) -> None:
        testing = self.verdict is None and self.subject and self.seen >= self.start
        kind = self._with_subject()
        super().update(agent, reward)
        self.seen += 1
        if not testing:
            return
        self._running += max(0.0, reward)
        if (self.seen - self.start) % self.stretch == 0:
            self.stretches[kind].append(self._running / self.stretch)
            self._running = 0.0
            self._decide()

    def _decide(self) -> None:
        on, off = self.stretches[True], self.stretches[False]
        n = min(len(on), len(off))
        if n < self.pairs or len(on) != len(off):
            return

        def mean_var(xs: list[float]) -> tuple[float, float]:
            m = sum(xs) / len(xs)
            return m, sum((x - m) ** 2 for x in xs) / max(1, len(xs) - 1) / len(xs)
        (m_on, v_on), (m_off, v_off) = mean_var(on), mean_var(off)
        se = math.sqrt(v_on + v_off)
        if m_off - m_on > se or (n >= self.max_pairs and m_off > m_on):
            self.verdict = False
        elif m_on - m_off > se or n >= self.max_pairs:
            self.verdict = True

    def shares(self) -> dict[str, float]:
        out = super().shares()
        if self._with_subject():
            return out
        out[self.subject] = 0.0
        total = sum(out.values())
        return {a: s / total for a, s in out.items()}

    def pick(self, rng: random.Random, exclude: set[str] = frozenset()) -> str | None:
        if not self._with_subject():
            exclude = {*exclude, self.subject}
        return super().pick(rng, exclude)


class BanditAllocator(_Allocator):
    """Discounted Thompson sampling over agents (see the module's docstring).

    discount: every evaluation multiplies all agents' evidence by it (0.97: the last ~30
    evaluations of the run weigh most); prior: Beta(prior_hits, prior_misses) on a reward
    rate, a first guess of one improvement in five evaluations, worth a few evaluations."""

    def __init__(self, agents: list[str], discount: float = 0.97, floor: float = 0.3,
                 prior_hits: float = 0.5, prior_misses: float = 2.0, near_credit: float = 1.0,
                 matching: bool = False,
                 spend: Callable[[str], float | None] | None = None) -> None:
        super().__init__(agents, spend)
        self.discount = discount
        self.floor = floor
        self.prior = (prior_hits, prior_misses)
        self.near_credit = near_credit  # weight of a reward short of a new best
        self.matching = matching  # shares proportional to the posterior means, no draws
        self.hits = {a: 0.0 for a in self.agents}  # discounted rewards
        self.trials = {a: 0.0 for a in self.agents}  # discounted evaluations

    def update(self, agent: str, reward: float) -> None:
        if agent not in self.hits:
            return
        for a in self.agents:
            self.hits[a] *= self.discount
            self.trials[a] *= self.discount
        credit = 1.0 if reward >= IMPROVEMENT_REWARD else self.near_credit * max(0.0, reward)
        self.hits[agent] += credit
        self.trials[agent] += 1.0
        self._count(agent, reward)

    def _draw(self, rng: random.Random, agents: list[str], factors: dict[str, float]) -> str:
        a0, b0 = self.prior

        def sample(a: str) -> float:
            hits = self.hits[a]
            return rng.betavariate(a0 + hits, b0 + max(0.0, self.trials[a] - hits)) * factors[a]
        return max(agents, key=sample)

    def _means(self) -> dict[str, float]:
        a0, b0 = self.prior
        factors = self.cost_factors()
        return {a: factors[a] * (a0 + self.hits[a]) / (a0 + b0 + self.trials[a])
                for a in self.agents}

    def shares(self) -> dict[str, float]:
        """Each agent's chance of being picked now (the Thompson part estimated by a fixed
        number of draws from a fixed generator: the same state gives the same shares)."""
        n = len(self.agents)
        if self.matching:
            means = self._means()
            total = sum(means.values())
            return {a: self.floor / n + (1.0 - self.floor) * means[a] / total for a in self.agents}
        factors = self.cost_factors()
        rng = random.Random(0)
        wins = {a: 0 for a in self.agents}
        for _ in range(SHARE_SAMPLES):
            wins[self._draw(rng, self.agents, factors)] += 1
        return {a: self.floor / n + (1.0 - self.floor) * wins[a] / SHARE_SAMPLES
                for a in self.agents}

    def pick(self, rng: random.Random, exclude: set[str] = frozenset()) -> str | None:
        allowed = [a for a in self.agents if a not in exclude]
        if not allowed:
            return None
        if self.matching:
            return super().pick(rng, exclude)
        if rng.random() < self.floor:
            return allowed[rng.randrange(len(allowed))]
        return self._draw(rng, allowed, self.cost_factors())


ALLOCATORS: dict[str, Callable[..., _Allocator]] = {
    "bandit": BanditAllocator, "decay": DecayAllocator,
    "bandit-strict": partial(BanditAllocator, near_credit=0.0),
    "bandit-lean": partial(BanditAllocator, prior_misses=5.0),
    "bandit-lean-slow": partial(BanditAllocator, prior_misses=5.0, discount=0.99),
    "bandit-greedy": partial(BanditAllocator, prior_misses=5.0, floor=0.2, discount=0.98),
    "decay-paid": partial(DecayAllocator, paid=0.25),
    "bandit-mean": partial(BanditAllocator, matching=True, floor=0.5),
    "decay-paid-hard": partial(DecayAllocator, paid=0.05),
    "decay-strict": partial(DecayAllocator, near_credit=0.0),
    "decay-vs-explorer": partial(DecayAllocator, paid=0.25, reference="explorer"),
    "decay-vs-explorer-floor": partial(DecayAllocator, paid=0.25, reference="explorer",
                                       floor_paid=0.5),
    "decay-vs-random": partial(DecayAllocator, random_level=1.0),
    "decay-cap": partial(DecayAllocator, cap_reference="explorer"),
    "decay-redundant": partial(DecayAllocator, redundant_credit=0.25),
    "decay-holdout": HoldoutAllocator}
BudgetAllocator = DecayAllocator  # the policy the coordinator makes


def make_allocator(policy: str, agents: list[str],
                   spend: Callable[[str], float | None] | None = None) -> _Allocator:
    try:
        return ALLOCATORS[policy](agents, spend=spend)
    except KeyError:
        raise ValueError(f"unknown allocation policy {policy!r}; known: "
                         f"{', '.join(ALLOCATORS)}") from None
