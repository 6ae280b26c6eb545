"""The blackboard: everything the swarm knows during a run, shared by all agents.

Dedupes candidates by key (each configuration is evaluated at most once per run), keeps the
global and per-agent elites, the evidence (every evaluation so far) and the lessons. All
methods are thread-safe.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

from app.core.space import SearchSpace
from app.core.types import Evaluation, Lesson


class Blackboard:
    def __init__(self, space: SearchSpace, minimize: bool = True) -> None:
        self.space = space
        self.minimize = minimize
        self._lock = threading.RLock()
        self._evaluations: list[Evaluation] = []
        self._by_key: dict[str, Evaluation] = {}
        self._in_flight: set[str] = set()
        self._lessons: list[Lesson] = []
        self._best: Evaluation | None = None
        self._by_agent: dict[str, list[Evaluation]] = defaultdict(list)
        # Correct evaluations kept sorted best-first (ties in arrival order), so elites are a
        # slice instead of a sort per proposal.
        self._ranked: list[Evaluation] = []

    # ---- ordering ----------------------------------------------------------------------
    def better(self, a: float, b: float | None) -> bool:
        """True when objective value `a` beats `b` (None is beaten by anything)."""
        if b is None:
            return True
        return a < b if self.minimize else a > b

    def sort_key(self, e: Evaluation) -> float:
        assert e.value is not None
        return e.value if self.minimize else -e.value

    # ---- dedupe ------------------------------------------------------------------------
    def claim(self, key: str) -> bool:
        """Reserve a key for evaluation; False when it was already evaluated or is in flight."""
        with self._lock:
            if key in self._by_key or key in self._in_flight:
                return False
            self._in_flight.add(key)
            return True

    def release(self, key: str) -> None:
        with self._lock:
            self._in_flight.discard(key)

    def known(self, key: str) -> bool:
        with self._lock:
            return key in self._by_key or key in self._in_flight

    # ---- evidence ----------------------------------------------------------------------
    def record(self, evaluation: Evaluation) -> bool:
        """Add an evaluation; return True when it is a new global best."""
        with self._lock:
            self._in_flight.discard(evaluation.key)
            if evaluation.key in self._by_key:
                return False
            self._by_key[evaluation.key] = evaluation
            self._evaluations.append(evaluation)
            self._by_agent[evaluation.agent].append(evaluation)
            if not (evaluation.ok and evaluation.value is not None):
                return False
            bisect.insort_right(self._ranked, evaluation, key=self.sort_key)
            if self.better(evaluation.value, self._best.value if self._best else None):
                self._best = evaluation
                return True
            return False

    def revoke(self, failed: Evaluation) -> Evaluation | None:
        """An accepted candidate failed re-verification: it stops counting as correct (its
        record becomes `failed`) and the best falls back. Returns the new best."""
        return self.replace(failed)

    def replace(self, again: Evaluation) -> Evaluation | None:
        """A recorded candidate was evaluated again (a stored row re-checked on resume, a best
        re-verified): its record becomes `again`, ranked by the figure measured now or, when
        it failed, no longer ranked. Returns the new best."""
        with self._lock:
            if again.key not in self._by_key:
                return self._best
            self._by_key[again.key] = again
            self._evaluations = [again if e.key == again.key else e for e in self._evaluations]
            for agent, evs in self._by_agent.items():
                self._by_agent[agent] = [again if e.key == again.key else e for e in evs]
            self._ranked = [e for e in self._ranked if e.key != again.key]
            if again.ok and again.value is not None:
                bisect.insort_right(self._ranked, again, key=self.sort_key)
            self._best = self._ranked[0] if self._ranked else None
            return self._best

    def add_lesson(self, lesson: Lesson) -> None:
        with self._lock:
            self._lessons.append(lesson)

    @property
    def best(self) -> Evaluation | None:
        with self._lock:
            return self._best

    @property
    def evaluations(self) -> list[Evaluation]:
        with self._lock:
            return list(self._evaluations)

    @property
    def lessons(self) -> list[Lesson]:
        with self._lock:
            return list(self._lessons)

    def __len__(self) -> int:
        with self._lock:
            return len(self._evaluations)

    def get(self, key: str) -> Evaluation | None:
        with self._lock:
            return self._by_key.get(key)

    def successes(self) -> list[Evaluation]:
        with self._lock:
            return [e for e in self._evaluations if e.ok and e.value is not None]

    def elites(self, k: int, agent: str | None = None) -> list[Evaluation]:
        """The k best correct evaluations, globally or of one agent."""
        with self._lock:
            if agent is None:
                return self._ranked[:k]
            ok = [e for e in self._by_agent.get(agent, []) if e.ok and e.value is not None]
        return sorted(ok, key=self.sort_key)[:k]

    def rank_threshold(self, k: int) -> float | None:
        """The objective value of the k-th best correct evaluation, or of the last one when
        there are fewer (None when there is none)."""
        with self._lock:
            n = min(k, len(self._ranked))
            return self._ranked[n - 1].value if n > 0 else None

    def quantile(self, value: float) -> float:
        """The fraction of correct evaluations strictly better than `value` (0: none is)."""
        with self._lock:
            if not self._ranked:
                return 0.0
            key = value if self.minimize else -value
            better = bisect.bisect_left(self._ranked, key, key=self.sort_key)
            return better / len(self._ranked)
