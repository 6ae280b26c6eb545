"""Is the model agent's model predictive on this run? A TPE-style density ratio (Parzen
estimators over the good tenth of the results and over the rest, on normalised parameter
positions) scores each new result from the evidence before it, and the scores are ranked
against what the results turned out to be (Spearman, the latest WINDOW results).

Where the ratio ranks the run's own results no better than chance, the model's suggestions
are no better than random draws, only more clustered (optuna TPE alone on convolution_MI250X:
its proposals at the 35th-50th percentile of the space all run long, and it ends below random
search), so the agent yields its turns to the others until the check recovers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from app.swarm.agents.moves import Positions
from app.swarm.transfer import rank_correlation

START = 10  # results before anything is scored (the sampler's own start-up trials)
CHECK_AFTER = 20  # scored results before the model may be judged
WINDOW = 40  # the latest scored results the check ranks
MIN_CORRELATION = 0.0  # below: worse than chance (0.2, about 1.3 s.e. over 40, was measured too)


class PredictiveCheck:
    def __init__(self, positions: Positions, minimize: bool = True,
                 min_correlation: float = MIN_CORRELATION) -> None:
        self.positions = positions
        self.minimize = minimize
        self.min_correlation = min_correlation
        self._x: list[np.ndarray] = []
        self._good: list[float] = []  # -value when minimising; failures -inf (the worst)
        self._scores: list[float] = []
        self._outcomes: list[float] = []
        self.predictive = True

    def add(self, config: Mapping[str, Any], value: float | None) -> None:
        """One more result, in the run's order (value None: it failed)."""
        x = self.positions.vector(config)
        good = -math.inf if value is None else (-value if self.minimize else value)
        if len(self._good) >= START:
            self._scores.append(self.ratio(x))
            self._outcomes.append(good)
            if len(self._scores) >= CHECK_AFTER:
                self.predictive = self.correlation() >= self.min_correlation
        self._x.append(x)
        self._good.append(good)

    def correlation(self) -> float:
        """Rank correlation of the scores with the outcomes over the latest WINDOW results."""
        return rank_correlation(self._scores[-WINDOW:], self._outcomes[-WINDOW:])

    def ratio(self, x: np.ndarray) -> float:
        """log l(x) - log g(x): l over the best tenth of the results so far (at most 25, as
        optuna's TPE splits them), g over the rest; Gaussian kernels, one bandwidth per
        parameter shrinking with the evidence (Scott's rule, at least one value step)."""
        xs = np.array(self._x)
        goods = np.array(self._good)
        n, d = xs.shape
        n_good = min(max(1, math.ceil(0.1 * n)), 25, int(np.isfinite(goods).sum()) or 1)
        order = np.argsort(-goods, kind="stable")
        width = np.maximum(n ** (-1.0 / (d + 4)) / 2.0, 1.0 / np.maximum(self.positions.scale, 1.0))
        z = ((xs - x) / width) ** 2
        log_k = -0.5 * z.sum(axis=1)

        def log_density(rows: np.ndarray) -> float:
            if not len(rows):
                return -50.0
            top = log_k[rows].max()
            return float(top + np.log(np.exp(log_k[rows] - top).mean()))
        return log_density(order[:n_good]) - log_density(order[n_good:])
