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

    # ---- optional capabilities: a backend overrides what it has; the defaults say "none" ----
    #: the operator this backend verifies against (None: a recorded space has none)
    op: Any = None
    #: retime_pair works here (cpu, cuda); replay's figures are recorded means
    can_retime: bool = False
    #: answers at once from recorded figures (a local replay): the coordinator then takes
    #: results strictly oldest first, so a goal and seed give one run with any workers
    answers_at_once: bool = False

    def baseline_name(self) -> str | None:
        """The name of the library baseline `baseline()` measured (e.g. "numpy")."""
        return None

    def attach_bus(self, bus: Any, run_id: int | None = None) -> None:
        """Publish the backend's own events (telemetry, a cluster's questions) on `bus`."""

    def candidate_key(self, config: dict[str, Any], source: str | None = None) -> str | None:
        """The backend's key for a configuration of `source` (None: the caller's own key)."""
        return None

    def retime_pair(self, a: Candidate | Evaluation, b: Candidate | Evaluation
                    ) -> dict[str, dict[str, float]] | None:
        """Both timed again in one interleaved measurement (only where `can_retime`)."""
        return None

    def final_comparison(self, best: Evaluation) -> dict[str, float] | None:
        """The best and the baseline timed again, interleaved, before a speedup is claimed."""
        return None

    def continue_here(self) -> bool:
        """A run waiting for a cluster that went away may go on on this machine."""
        return False

    def probe(self, candidate: Candidate | Evaluation, cases: list[dict[str, Any]]
              ) -> list[dict[str, Any]] | None:
        """Run `candidate` on the given validation cases only, untimed, and score each (the
        adversary's question); None where the backend cannot."""
        return None

    def probe_plan(self) -> dict[str, Any] | None:
        """What the adversary may draw for this goal (shapes, distributions); None: no probe."""
        return None

    # What this machine's roof probes measured (an LLM prompt's hardware sheet states them):
    def limits(self) -> Any:
        """The GPU's copy bandwidth and peaks (a cuda.roofline.Limits); None: not a GPU."""
        return None

    def roofs(self) -> Any:
        """The CPU cache levels' copy roofs (memory-bound operators); None: not measured."""
        return None

    def peak(self) -> Any:
        """The CPU's FP32 peak at one and at every thread (compute-bound); None: not measured."""
        return None

    def add_validation_case(self, case: dict[str, Any]) -> None:
        """A new failing input every later evaluation is checked against."""

    @property
    def validation_cases(self) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        """Release workers and devices."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
