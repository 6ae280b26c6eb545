"""The evaluator interface every backend implements.

The coordinator only sees this: a space to search, a baseline and limits to compare against,
and `evaluate(candidate)`, which may be called from several threads at once (up to
`max_parallel`, one per evaluation worker: a GPU, a CPU worker process, later a Ray actor).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from app.core.space import SearchSpace
from app.core.types import Candidate, Evaluation


class BackendUnavailable(RuntimeError):
    """The backend cannot run here (no compiler, no GPU, no driver); the message says why and
    what to use instead."""


@dataclass
class DeviceInfo:
    kind: str  # "replay", "cpu", "cuda"
    name: str
    details: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        extra = ", ".join(f"{k} {v}" for k, v in self.details.items() if v not in (None, ""))
        return f"{self.name} ({extra})" if extra else self.name


class Evaluator(abc.ABC):
    """Evaluates candidates of one goal. Thread-safe up to `max_parallel` concurrent calls."""

    #: the goal's space as this backend knows it
    space: SearchSpace
    #: how many evaluations may run at once (evaluation workers)
    max_parallel: int = 1

    @abc.abstractmethod
    def evaluate(self, candidate: Candidate) -> Evaluation:
        """Run the evaluation cascade for one candidate; never raises for a bad candidate."""

    def recheck(self, candidate: Candidate) -> Evaluation | None:
        """Evaluate an already accepted candidate again against the validation set as it is
        now (after a new failing input was found). None: this backend cannot (replay)."""
        return None

    def baseline(self) -> float | None:
        """The best library baseline's objective value, measured by the same protocol."""
        return None

    def limit(self) -> float | None:
        """The hardware limit expressed in the objective's unit (e.g. the time a kernel would
        take at measured copy bandwidth), when known."""
        return None

    def device(self) -> DeviceInfo:
        return DeviceInfo(kind="unknown", name="unknown")

    def close(self) -> None:
        """Release workers and devices."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
