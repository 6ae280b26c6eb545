"""Turns a run's bus events (app.core.events) into rows of the history database.

The session subscribes the recorder as a critical subscriber, so a failed write stops the run
instead of silently losing evaluations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from app.core.events import (
    AgentCredit,
    BestRechecked,
    BestRevoked,
    CaseFound,
    Evaluated,
    Event,
    LessonLearned,
    RunFinished,
    RunStarted,
    Telemetry,
)

if TYPE_CHECKING:
    from app.store.db import Store


class Recorder:
    """Records the events of one run into a store; call it with each event."""

    def __init__(self, store: Store, run_id: int) -> None:
        store.run_goal(run_id)  # fail now, not at the first event, on an unknown run
        self.store = store
        self.run_id = run_id

    def __call__(self, event: Event) -> None:
        if event.run_id is not None and event.run_id != self.run_id:
            return  # another run's event on a shared bus
        store, run_id = self.store, self.run_id
        if isinstance(event, Evaluated):
            store.record_evaluation(run_id, event.index, event.evaluation, event.elapsed_s,
                                    event.best_value)
        elif isinstance(event, BestRevoked):
            store.revoke_evaluation(run_id, event.evaluation)
        elif isinstance(event, CaseFound):  # the coordinator names the case by this id
            event.case_id = store.add_run_case(run_id, event.case, event.origin)
        elif isinstance(event, BestRechecked):
            store.refresh_evaluation(run_id, event.evaluation)
        elif isinstance(event, LessonLearned):
            store.add_lesson(run_id, event.lesson)
        elif isinstance(event, Telemetry):
            store.add_telemetry(run_id, event.device, event.readings, event.at)
        elif isinstance(event, RunStarted):
            store.mark_running(run_id)
            store.set_run_info(run_id, baseline_value=event.baseline_value,
                               limit_value=event.limit_value)
        elif isinstance(event, AgentCredit):
            store.set_run_info(run_id, credits=event.credits)
        elif isinstance(event, RunFinished):
            store.finish_run(run_id, event.reason, event.best, event.elapsed_s, event.message)


def subscriber(store: Store, run_id: int) -> Callable[[Event], None]:
    """An event-bus subscriber that records `run_id`'s events into `store`."""
    return Recorder(store, run_id)
