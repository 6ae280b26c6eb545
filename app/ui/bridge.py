"""The one place engine events enter the GUI.

The bridge is an EventBus subscriber. Engine threads call it; it only appends the event to a
locked list and, when the list was empty, posts one queued signal. In the GUI thread the list is
drained and re-emitted as typed signals (consecutive evaluations in one batch), so widgets never
run on engine threads and never see one signal per event under load.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal

from app.core.events import (
    AgentCredit,
    BestRechecked,
    BestRevoked,
    CaseFound,
    Evaluated,
    Event,
    EventBus,
    LessonLearned,
    NewBest,
    Notice,
    Proposed,
    RunFinished,
    RunStarted,
    Telemetry,
)
from app.core.messages import EngineRunEnded


class EventBridge(QObject):
    runStarted = Signal(object)  # RunStarted
    evaluated = Signal(list)  # list[Evaluated], in order
    newBest = Signal(object)  # NewBest
    credit = Signal(object)  # AgentCredit
    lesson = Signal(object)  # LessonLearned
    revoked = Signal(object)  # BestRevoked: a kept kernel failed re-verification
    rechecked = Signal(object)  # BestRechecked: a stored best passed, with its figure of now
    caseFound = Signal(object)  # CaseFound: a validation case joined the goal's set
    telemetry = Signal(list)  # list[Telemetry]
    runFinished = Signal(object)  # RunFinished
    notice = Signal(object)  # Notice: something the user must know now (the cluster went away)
    modelRunEnded = Signal(object)  # EngineRunEnded: one model's run of a per-model goal

    _pending = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lock = threading.Lock()
        self._queue: list[Event] = []
        self._unsubscribe: Callable[[], None] | None = None
        self._pending.connect(self.drain, Qt.QueuedConnection)

    # ---- engine side (any thread) ---------------------------------------------------------
    def attach(self, bus: EventBus) -> None:
        self.detach()
        self._unsubscribe = bus.subscribe(self)

    def detach(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def __call__(self, event: Event | EngineRunEnded) -> None:
        if isinstance(event, Proposed):
            return  # proposals are not drawn; skipping them halves the traffic
        with self._lock:
            self._queue.append(event)
            first = len(self._queue) == 1
        if first:
            self._pending.emit()

    # ---- GUI side -------------------------------------------------------------------------
    def drain(self) -> None:
        with self._lock:
            events, self._queue = self._queue, []
        batch: list[Evaluated] = []
        telemetry: list[Telemetry] = []
        for event in events:
            if isinstance(event, Evaluated):
                batch.append(event)
                continue
            if isinstance(event, Telemetry):
                telemetry.append(event)
                continue
            if batch:  # keep order: evaluations before whatever followed them
                self.evaluated.emit(batch)
                batch = []
            if isinstance(event, RunStarted):
                self.runStarted.emit(event)
            elif isinstance(event, NewBest):
                self.newBest.emit(event)
            elif isinstance(event, AgentCredit):
                self.credit.emit(event)
            elif isinstance(event, LessonLearned):
                self.lesson.emit(event)
            elif isinstance(event, BestRevoked):
                self.revoked.emit(event)
            elif isinstance(event, BestRechecked):
                self.rechecked.emit(event)
            elif isinstance(event, CaseFound):
                self.caseFound.emit(event)
            elif isinstance(event, RunFinished):
                if telemetry:
                    self.telemetry.emit(telemetry)
                    telemetry = []
                self.runFinished.emit(event)
            elif isinstance(event, Notice):
                self.notice.emit(event)
            elif isinstance(event, EngineRunEnded):
                self.modelRunEnded.emit(event)
        if batch:
            self.evaluated.emit(batch)
        if telemetry:
            self.telemetry.emit(telemetry)
