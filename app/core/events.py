"""Typed engine events and a thread-safe publisher.

Events are plain dataclasses published from engine threads. Subscribers are called
synchronously, in subscription order, under one lock, so a store subscriber has committed an
evaluation before the coordinator accepts the next result. The UI subscribes through a single
bridge object that turns events into queued Qt signals.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.core.types import Evaluation, Lesson

log = logging.getLogger(__name__)


@dataclass
class Event:
    run_id: int | None = field(default=None, kw_only=True)
    at: float = field(default_factory=time.time, kw_only=True)


@dataclass
class RunStarted(Event):
    goal_name: str
    backend: str
    agents: list[str]
    max_evals: int | None
    time_budget_s: float | None
    baseline_value: float | None = None
    limit_value: float | None = None
    target_value: float | None = None
    baseline_name: str = ""  # which library or compiler the baseline is ("numpy", "triton:softmax")
    resumed_evals: int = 0
    unit: str = ""  # the objective's unit (app.core.units), decided once per run
    # earlier runs on other devices this run starts from: run_id, device, evaluations
    learned_from: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Proposed(Event):
    agent: str
    key: str
    config: dict[str, Any]


@dataclass
class Evaluated(Event):
    index: int  # 1-based position of this evaluation in the run
    evaluation: Evaluation
    elapsed_s: float  # run clock (simulated for replay) when it completed
    best_value: float | None  # best-so-far after this evaluation


@dataclass
class NewBest(Event):
    index: int
    evaluation: Evaluation
    elapsed_s: float
    previous_value: float | None


@dataclass
class BestRevoked(Event):
    """The best so far failed re-verification against a newly found failing input: it is no
    longer a correct candidate, and the best falls back to the next one."""

    key: str
    evaluation: Evaluation  # the failed re-verification
    new_best_value: float | None
    # the validation case that broke it (the store's id; None: no store, or a full re-check)
    case_id: int | None = None
    was_best: bool = True  # False: a kept kernel below the best, re-verified against a case


@dataclass
class CaseFound(Event):
    """A validation case joined the goal's set for good: an input the adversary found and
    shrank, or one a verification failure left. Every kept kernel is re-verified against it.
    The store's recorder fills in `case_id` (its row) while the event is published, so the
    coordinator can name the case in what it revokes ("broken by case N")."""

    case: dict[str, Any]
    origin: str  # "adversary ...", "verification failure of candidate K", "user file PATH"
    broke: str = ""  # the key of the kernel it was found on ("" for none)
    case_id: int | None = None


@dataclass
class BestRechecked(Event):
    """A stored row (a resumed run's history, untrusted) was about to be the run's best: it was
    verified and timed again under the same rules and passed; it keeps the figure measured
    now, never the stored one (a failure is a BestRevoked instead)."""

    key: str
    evaluation: Evaluation  # the fresh evaluation
    stored_value: float | None  # what the history said


@dataclass
class LessonLearned(Event):
    lesson: Lesson


@dataclass
class Telemetry(Event):
    device: str
    readings: dict[str, float]


@dataclass
class AgentCredit(Event):
    credits: dict[str, dict[str, float]]  # agent -> {"proposed", "evaluated", "improvements", "share"}


@dataclass
class RunFinished(Event):
    reason: str  # "max_evals", "time_budget", "plateau", "target", "exhausted", "stopped", "error"
    evaluations: int
    best: Evaluation | None
    elapsed_s: float
    message: str = ""
    # the run's one speedup and what it stands on (app.run_summary), the same figure `show`,
    # the report and a reopened run give; None when there is nothing to compare
    speedup: float | None = None
    speedup_basis: str = ""
    summary: dict[str, Any] = field(default_factory=dict)  # RunSummary.to_dict()


@dataclass
class Notice(Event):
    """Something the user must know while the run goes on (the cluster went away, came back).
    `choices` name what the user can do about it now: "continue_here" (go on on this machine)."""

    text: str
    choices: tuple[str, ...] = ()


Subscriber = Callable[[Event], None]


class EventBus:
    """Publish events to subscribers; thread-safe; a failing subscriber is logged, not fatal
    (except for subscribers registered with critical=True, whose errors propagate: the store
    must not silently lose evaluations)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._subs: list[tuple[Subscriber, bool]] = []

    def subscribe(self, fn: Subscriber, critical: bool = False) -> Callable[[], None]:
        with self._lock:
            self._subs.append((fn, critical))

        def unsubscribe() -> None:
            with self._lock:
                self._subs[:] = [(f, c) for f, c in self._subs if f is not fn]

        return unsubscribe

    def publish(self, event: Event) -> None:
        with self._lock:
            subs = list(self._subs)
            for fn, critical in subs:
                try:
                    fn(event)
                except Exception:
                    if critical:
                        raise
                    log.exception("event subscriber %r failed on %s", fn, type(event).__name__)
