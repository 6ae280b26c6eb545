"""Transfer: proposes the configurations that ranked best for this kernel on other devices
(app.swarm.transfer), and learns as it goes how this device differs from them.

First the head of the ranking (its best configurations from distinct regions, in order).
After that every proposal is chosen by a small Gaussian-process model of the *difference*
between this device and the others: for each configuration the sources measured, the
prediction here is its gap to the sources' best (`prior`, log units) plus a residual learned
from the results here of configurations the sources measured (whoever proposed them). A
region whose seeds ran slower here than the sources promised is demoted together with its
near-duplicates in the ranking; a region that ran faster is raised; regions nothing has
measured here keep the sources' word, with an uncertainty bonus (the lower confidence bound)
so that a well-ranked region nobody has tried is tried before a third near-copy of one that
disappointed.

It also checks the ranking as a whole: once the rank correlation between the sources'
percentiles and the results here is weak, the agent falls silent, so a device where the old
ranking is wrong is not misled further. Until then it competes for budget like any agent."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import numpy as np

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.swarm.agents.base import Agent, Config
from app.swarm.agents.moves import Picker, Positions
from app.swarm.blackboard import Blackboard
from app.swarm.transfer import HEAD, rank_correlation

CHECK_AFTER = 8  # results on this device needed before the ranking is judged
MIN_CORRELATION = 0.3
# The residual model: a Laplace kernel on the normalised index distance (half of one
# parameter's range end to end: correlation 1/e), measurement noise as a share of the
# residuals' variance, and how many standard deviations of optimism the choice allows.
LENGTH_SCALE = 0.5
NOISE = 0.05
OPTIMISM = 1.0
FAILED_PENALTY = 1.0  # a failure here counts as this much (log units) above the worst residual


class TransferAgent(Agent):
    name = "transfer"
    strategy = "rank transfer from earlier runs of the same kernel (here and on other devices)"

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True,
                 ranked: Sequence[Config] = (), scores: Mapping[str, float] | None = None,
                 prior: Mapping[str, float] | None = None,
                 candidates: Mapping[str, Config] | None = None, head: int = HEAD) -> None:
        super().__init__(space, rng, minimize)
        self.ranked = [dict(c) for c in ranked]
        self.scores = dict(scores or {})
        self.head = head
        self._next = 0  # position in the ranking of the next proposal
        self._elsewhere: list[float] = []  # percentile on the other devices
        self._here: list[float] = []  # result on this device (smaller is better)
        self.trusted = True
        # the residual model over the candidates (empty: follow the ranking to its end)
        self.prior = dict(prior or {})
        self._keys = [k for k in (candidates or {}) if k in self.prior]
        self._row = {k: i for i, k in enumerate(self._keys)}
        self._positions = Positions(space)
        self._x = self._positions.matrix((candidates or {})[k] for k in self._keys)
        self._base = np.array([self.prior[k] for k in self._keys])
        self._configs = [dict((candidates or {})[k]) for k in self._keys]
        self._obs_x: list[np.ndarray] = []
        self._obs_r: list[float | None] = []  # residual here, None: failed here
        self._seen: set[str] = set()

    def observe(self, evaluation: Evaluation) -> None:
        self._learn(evaluation)
        p = self.scores.get(evaluation.key)
        if p is None or not evaluation.ok or evaluation.value is None:
            return
        self._elsewhere.append(p)
        self._here.append(evaluation.value if self.minimize else -evaluation.value)
        if len(self._here) >= CHECK_AFTER:
            self.trusted = rank_correlation(self._elsewhere, self._here) >= MIN_CORRELATION

    def _learn(self, evaluation: Evaluation) -> None:
        """One more residual: how much worse (log units) than the sources promised."""
        gap = self.prior.get(evaluation.key)
        if gap is None or evaluation.key in self._seen:
            return
        self._seen.add(evaluation.key)
        if evaluation.ok and evaluation.value is not None:
            if evaluation.value <= 0:
                self.prior, self._keys = {}, []  # no ratios to model: follow the ranking
                return
            here = math.log(evaluation.value) if self.minimize else -math.log(evaluation.value)
            self._obs_r.append(here - gap)
        else:
            self._obs_r.append(None)
        self._obs_x.append(self._positions.vector(evaluation.config))

    def _acquisition(self) -> np.ndarray:
        """Per candidate: predicted gap here minus OPTIMISM standard deviations."""
        measured = [r for r in self._obs_r if r is not None]
        if not measured:
            return self._base.copy()
        fill = max(measured) + FAILED_PENALTY
        r = np.array([fill if v is None else v for v in self._obs_r])
        mean = float(r.mean())
        var = max(float(r.var()), 1e-4)
        xo = np.array(self._obs_x)
        k_oo = var * np.exp(-np.abs(xo[:, None, :] - xo[None, :, :]).sum(axis=2) / LENGTH_SCALE)
        k_oo += NOISE * var * np.eye(len(xo))
        k_co = var * np.exp(-np.abs(self._x[:, None, :] - xo[None, :, :]).sum(axis=2) / LENGTH_SCALE)
        solved = np.linalg.solve(k_oo, np.column_stack([r - mean, k_co.T]))
        mu = mean + k_co @ solved[:, 0]
        sd = np.sqrt(np.maximum(var - (k_co * solved[:, 1:].T).sum(axis=1), 0.0))
        return self._base + mu - OPTIMISM * sd

    def propose(self, board: Blackboard, n: int = 1) -> list[Config]:
        picker = Picker(self.space, board)
        out: list[Config] = []
        # the head of the ranking (distinct regions), then the model; without one, the ranking
        while self.trusted and len(out) < n and self._next < len(self.ranked) and (
                self._next < self.head or not self._keys):
            cand = self.ranked[self._next]
            self._next += 1
            if picker.is_free(cand):
                out.append(picker.take(cand))
        if not self.trusted or len(out) >= n or not self._keys:
            return out
        score = self._acquisition()
        for i in np.argsort(score, kind="stable"):
            if len(out) >= n:
                break
            cand = self._configs[int(i)]
            if picker.is_free(cand):
                out.append(picker.take(cand))
        return out
