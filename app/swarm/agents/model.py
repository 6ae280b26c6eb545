"""Model-guided proposals: optuna's multivariate TPE sampler, driven through ask/tell, learns
from every evaluation on the board (all agents'), and its suggestions are repaired onto the
nearest free valid configuration.

Parameters are given to the sampler as positions in their value lists (integers), so ordered
values keep their order. Failed configurations are told as infeasible trials (a violated
constraint): TPE puts them in its "bad" density, so failing regions are avoided without a
made-up objective value distorting the good ones.

Where the model ranks this run's own results no better than chance (model_check: a TPE-style
density ratio against the results, rank correlation below 0 over the latest 40), the agent
yields its turns to the others: its suggestions would be no better than random draws, only
more clustered (alone on convolution_MI250X the unchecked agent ended far below random search).
Judged leave-one-space-out this is neutral on the swarm's P and halves the agent's share where
its model does not predict (bench/README.md); `check_predictive(None)` turns it off.
"""

from __future__ import annotations

import random
import warnings

import optuna
from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.swarm.agents.base import Agent, Config
from app.swarm.agents.model_check import MIN_CORRELATION, PredictiveCheck
from app.swarm.agents.moves import Picker, Positions, free_params, repair
from app.swarm.blackboard import Blackboard

optuna.logging.set_verbosity(optuna.logging.WARNING)


class ModelAgent(Agent):
    name = "model"
    strategy = "model-guided (optuna multivariate TPE over all evidence)"

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True,
                 n_startup: int = 10, check: float | None = MIN_CORRELATION) -> None:
        super().__init__(space, rng, minimize)
        self.names = free_params(space)
        self.dists = {n: IntDistribution(0, len(space.params[n]) - 1) for n in self.names}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # multivariate TPE is marked experimental
            sampler = optuna.samplers.TPESampler(
                seed=rng.getrandbits(32), multivariate=True, constant_liar=False,
                n_startup_trials=n_startup, warn_independent_sampling=False)
        self.study = optuna.create_study(
            direction="minimize" if minimize else "maximize", sampler=sampler)
        self._synced = 0  # how many of the board's evaluations the study has seen
        self._worst: float | None = None
        self.check: PredictiveCheck | None = None
        self.check_predictive(check)

    def check_predictive(self, min_correlation: float | None = MIN_CORRELATION) -> None:
        """Yield turns while the model ranks the run's results below min_correlation (None:
        never). Set before the run: the check scores every result in order."""
        self.check = (PredictiveCheck(Positions(self.space), self.minimize, min_correlation)
                      if self.names and min_correlation is not None else None)

    def _tell(self, e: Evaluation) -> None:
        params = {n: self.space.params[n].index(e.config[n]) for n in self.names}
        ok = e.ok and e.value is not None
        if self.check is not None:
            self.check.add(e.config, float(e.value) if ok else None)
        if ok:
            value, violation = float(e.value), 0.0
            if self._worst is None or (value > self._worst if self.minimize else value < self._worst):
                self._worst = value
        else:
            # The value is irrelevant for an infeasible trial; any finite number will do.
            value, violation = (self._worst if self._worst is not None else 0.0), 1.0
        self.study.add_trial(create_trial(params=params, distributions=self.dists, value=value,
                                          constraints={"failed": violation}))

    def _sync(self, board: Blackboard) -> None:
        evaluations = board.evaluations
        for e in evaluations[self._synced:]:
            self._tell(e)
        self._synced = len(evaluations)

    def _suggest(self) -> Config:
        trial = self.study.ask(self.dists)
        indices = dict(trial.params)
        # The suggestion is only a wish: what gets evaluated is its repaired neighbour, and
        # that result reaches the study through the board. Discard the wish itself.
        self.study.tell(trial, state=TrialState.FAIL)
        return {n: (v[indices[n]] if n in indices else v[0]) for n, v in self.space.params.items()}

    def propose(self, board: Blackboard, n: int = 1) -> list[Config]:
        self._sync(board)
        if self.check is not None and not self.check.predictive:
            return []  # not predictive here: the turn goes to the others
        picker = Picker(self.space, board)
        out: list[Config] = []
        for _ in range(n):
            if not self.names:
                break
            cand = repair(self.space, self._suggest(), picker.is_free, self.rng)
            if cand is None:
                break
            out.append(picker.take(cand))
        return out
