"""Numpy buffers the live view draws from: a growable column store for the run's evaluations
and fixed ring buffers for telemetry. Appending is amortised O(1); plots read views."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from app.core.noise import ImprovementCount, clear_of_noise, spread_of
from app.core.types import Evaluation


class GrowingArray:
    """A 1-D numpy array that doubles its capacity as it fills."""

    def __init__(self, dtype: type = np.float64, capacity: int = 1024) -> None:
        self._data = np.empty(capacity, dtype=dtype)
        self._n = 0

    def append(self, values: np.ndarray | list) -> None:
        values = np.asarray(values, dtype=self._data.dtype)
        need = self._n + len(values)
        if need > len(self._data):
            grown = np.empty(max(need, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self._n] = self._data[: self._n]
            self._data = grown
        self._data[self._n:need] = values
        self._n = need

    def view(self) -> np.ndarray:
        return self._data[: self._n]

    def clear(self) -> None:
        self._n = 0

    def __len__(self) -> int:
        return self._n


class RingBuffer:
    """The last `capacity` samples of a strip chart."""

    def __init__(self, capacity: int = 600) -> None:
        self._data = np.full(capacity, np.nan)
        self._t = np.full(capacity, np.nan)
        self._i = 0
        self._full = False

    def append(self, t: float, value: float) -> None:
        self._data[self._i] = value
        self._t[self._i] = t
        self._i = (self._i + 1) % len(self._data)
        self._full = self._full or self._i == 0

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._full:
            return self._t[: self._i], self._data[: self._i]
        return np.roll(self._t, -self._i), np.roll(self._data, -self._i)

    def __len__(self) -> int:
        return len(self._data) if self._full else self._i


@dataclass
class RunData:
    """Everything about one run the plots need, as columns.

    `value` is NaN for failed candidates; `best` is best-so-far after each evaluation.
    `version` grows on every change so a timer can redraw only when something is new."""

    minimize: bool = True
    index: GrowingArray = field(default_factory=lambda: GrowingArray(np.int64))
    elapsed: GrowingArray = field(default_factory=GrowingArray)
    value: GrowingArray = field(default_factory=GrowingArray)
    spread: GrowingArray = field(default_factory=GrowingArray)  # p10-p90 / median, 0 if none
    best: GrowingArray = field(default_factory=GrowingArray)
    agent_code: GrowingArray = field(default_factory=lambda: GrowingArray(np.int16))
    reason_code: GrowingArray = field(default_factory=lambda: GrowingArray(np.int16))
    keys: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    improvements: list[int] = field(default_factory=list)  # rows where best improved
    within_noise: list[int] = field(default_factory=list)  # those inside the replaced best's noise
    failed_by_reason: Counter = field(default_factory=Counter)
    evaluated_by_agent: Counter = field(default_factory=Counter)
    improved_by_agent: Counter = field(default_factory=Counter)
    clear_by_agent: Counter = field(default_factory=Counter)  # improvements clear of the noise
    baseline: float | None = None
    baseline_name: str = ""  # which library or compiler, for the label
    limit: float | None = None
    target: float | None = None
    max_evals: int | None = None
    time_budget_s: float | None = None
    finished_reason: str | None = None
    # kept kernels a validation case broke: (row, the value they had, "broken by case N")
    broken: list[tuple[int, float, str]] = field(default_factory=list)
    # agents whose share is of the run's time, not of its evaluations (the adversary):
    # name -> (% of the run's time, validation cases found)
    time_shares: dict[str, tuple[float, int]] = field(default_factory=dict)
    version: int = 0

    def __len__(self) -> int:
        return len(self.index)

    @property
    def best_value(self) -> float | None:
        if not len(self.best):
            return None
        b = float(self.best.view()[-1])
        return None if math.isnan(b) else b

    @property
    def improvement_count(self) -> ImprovementCount:
        """New bests clear of the noise and inside it (app.core.noise): what `run`, `show`
        and the report count from the same stored rows."""
        within = len(self.within_noise)
        return ImprovementCount(clear=len(self.improvements) - within, within=within)

    def _new_best(self, row: int, agent: str, value: float, spread: float,
                  best: float | None, best_spread: float) -> None:
        self.improvements.append(row)
        self.improved_by_agent[agent] += 1
        if clear_of_noise(value, spread, best, best_spread, self.minimize):
            self.clear_by_agent[agent] += 1
        else:
            self.within_noise.append(row)

    def _best_spread(self) -> float:
        return float(self.spread.view()[self.improvements[-1]]) if self.improvements else 0.0

    def _code(self, table: list[str], name: str) -> int:
        try:
            return table.index(name)
        except ValueError:
            table.append(name)
            return len(table) - 1

    def add(self, rows: list[tuple[int, Evaluation, float]]) -> None:
        """Append (index, evaluation, elapsed_s) rows, in run order."""
        if not rows:
            return
        best, best_spread = self.best_value, self._best_spread()
        idx, el, val, spr, bst, ac, rc = [], [], [], [], [], [], []
        for i, ev, elapsed in rows:
            ok = ev.ok and ev.value is not None
            v = float(ev.value) if ok else math.nan
            s = spread_of(ev.metrics)
            agent = ev.agent or "?"
            self.evaluated_by_agent[agent] += 1
            if ok and (best is None or (v < best if self.minimize else v > best)):
                self._new_best(len(self.index) + len(idx), agent, v, s, best, best_spread)
                best, best_spread = v, s
            if not ok:
                self.failed_by_reason[ev.reason or "failed"] += 1
            self.keys.append(ev.key)
            idx.append(i)
            el.append(elapsed)
            val.append(v)
            spr.append(s)
            bst.append(math.nan if best is None else best)
            ac.append(self._code(self.agents, agent))
            rc.append(-1 if ok else self._code(self.reasons, ev.reason or "failed"))
        self.index.append(idx)
        self.elapsed.append(el)
        self.value.append(val)
        self.spread.append(spr)
        self.best.append(bst)
        self.agent_code.append(ac)
        self.reason_code.append(rc)
        self.version += 1

    def revoke(self, key: str, reason: str, label: str = "") -> bool:
        """A candidate failed re-verification after it was accepted: it becomes a failure and
        best-so-far is recomputed without it (a rare event, so from scratch). `label` ("broken
        by case N") marks where it stood."""
        try:
            row = self.keys.index(key)
        except ValueError:
            return False
        values = self.value.view()
        if math.isnan(values[row]):
            return False
        if label:
            self.broken.append((row, float(values[row]), label))
        values[row] = math.nan
        self.reason_code.view()[row] = self._code(self.reasons, reason)
        self.failed_by_reason[reason] += 1
        self._rebest()
        return True

    def recheck(self, key: str, evaluation: Evaluation) -> bool:
        """A stored row was verified and timed again (a resumed run): the figure measured now
        and its spread replace the stored ones, as the reopened run will read them."""
        try:
            row = self.keys.index(key)
        except ValueError:
            return False
        if evaluation.value is None or math.isnan(self.value.view()[row]):
            return False
        self.value.view()[row] = float(evaluation.value)
        self.spread.view()[row] = spread_of(evaluation.metrics)
        self._rebest()
        return True

    def _rebest(self) -> None:
        values, spreads = self.value.view(), self.spread.view()
        best_col, codes = self.best.view(), self.agent_code.view()
        best: float | None = None
        best_spread = 0.0
        self.improvements, self.within_noise = [], []
        self.improved_by_agent, self.clear_by_agent = Counter(), Counter()
        for i, v in enumerate(values):
            if not math.isnan(v) and (best is None or (v < best if self.minimize else v > best)):
                s = float(spreads[i])
                self._new_best(i, self.agents[codes[i]], float(v), s, best, best_spread)
                best, best_spread = float(v), s
            best_col[i] = math.nan if best is None else best
        self.version += 1

    @property
    def n_failed(self) -> int:
        return sum(self.failed_by_reason.values())

    def best_steps(self, use_time: bool) -> tuple[np.ndarray, np.ndarray]:
        """The best-so-far staircase: one point per improvement plus the current end."""
        if not self.improvements:
            return np.empty(0), np.empty(0)
        x_all = self.elapsed.view() if use_time else self.index.view().astype(float)
        rows = np.asarray(self.improvements)
        x = x_all[rows]
        y = self.best.view()[rows]
        # extend the last best to the latest evaluation so the line reaches "now"
        x = np.append(x, x_all[-1])
        y = np.append(y, y[-1])
        return x, y

    def speedup_over_first(self) -> float | None:
        vals = self.value.view()
        ok = vals[~np.isnan(vals)]
        best = self.best_value
        if not len(ok) or best is None or best == 0:
            return None
        first = float(ok[0])
        return first / best if self.minimize else best / first
