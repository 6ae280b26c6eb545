"""Runs a goal in a worker thread and reports back to the GUI thread.

The RunSession is built and run on the worker (building loads recorded spaces or starts
compilers, which must not freeze the window). Its events reach the GUI only through the
EventBridge; the controller itself only reports lifecycle: started (with the run id), failed
(with a message) and finished.
"""

from __future__ import annotations

import logging
import threading
import time

from PySide6.QtCore import QObject, Qt, Signal

from app.goal import Goal
from app.swarm.events import EventBus
from app.ui.bridge import EventBridge

log = logging.getLogger(__name__)


class RunController(QObject):
    prepared = Signal(int, object)  # run id (or -1), DeviceInfo
    failed = Signal(str)  # a message for the user: the run did not start or crashed
    finished = Signal(object)  # RunResult
    stateChanged = Signal(str)  # "idle", "starting", "running", "paused", "stopping"

    def __init__(self, bridge: EventBridge, store_factory, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._store_factory = store_factory  # callable -> Store (the app's one store)
        self._thread: threading.Thread | None = None
        self._session = None
        self._stop_requested = threading.Event()
        self.state = "idle"
        self.run_id: int | None = None
        self.goal: Goal | None = None
        # Cross-thread reports arrive as queued signals in the GUI thread.
        self._prepared.connect(self._on_prepared, Qt.QueuedConnection)
        self._done.connect(self._on_done, Qt.QueuedConnection)

    _prepared = Signal(int, object)
    _done = Signal(object, str)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, goal: Goal, resume_run_id: int | None = None) -> None:
        if self.running:
            raise RuntimeError("a run is already in progress")
        self.goal = goal
        self.run_id = resume_run_id
        self._stop_requested.clear()
        self._set_state("starting")
        self._thread = threading.Thread(target=self._work, args=(goal, resume_run_id),
                                        name="kernelswarm-run", daemon=True)
        self._thread.start()

    def _work(self, goal: Goal, resume_run_id: int | None) -> None:
        from app.session import RunSession  # heavy imports stay off the GUI's start-up path

        try:
            bus = EventBus()
            self.bridge.attach(bus)
            session = RunSession(goal if resume_run_id is None else None, store=self._store_factory(),
                                 bus=bus, resume_run_id=resume_run_id)
            self._session = session
            self._prepared.emit(session.run_id if session.run_id is not None else -1,
                                session.evaluator.device())
            if self._stop_requested.is_set():
                session.stop()
            result = session.run()
            self._done.emit(result, "")
        except Exception as exc:
            log.exception("run failed")
            self._done.emit(None, f"{type(exc).__name__}: {exc}" if not str(exc).startswith(
                type(exc).__name__) else str(exc))

    def _on_prepared(self, run_id: int, device: object) -> None:
        self.run_id = None if run_id < 0 else run_id
        self._set_state("paused" if self.state == "paused" else "running")
        self.prepared.emit(run_id, device)

    def _on_done(self, result: object, error: str) -> None:
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None
        self._session = None
        self._set_state("idle")
        if error:
            self.failed.emit(error)
        else:
            self.finished.emit(result)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.stateChanged.emit(state)

    # ---- control ----------------------------------------------------------------------------
    def pause(self) -> None:
        if self._session is not None and self.state == "running":
            self._session.pause()
            self._set_state("paused")

    def resume(self) -> None:
        if self._session is not None and self.state == "paused":
            self._session.resume()
            self._set_state("running")

    def stop(self) -> None:
        self._stop_requested.set()
        if self._session is not None:
            self._session.stop()
        if self.running:
            self._set_state("stopping")

    def stop_and_wait(self, timeout_s: float = 30.0) -> bool:
        """Stop and block until the run has recorded its end (used when the window closes).
        Returns False when the worker did not finish in time."""
        self.stop()
        thread = self._thread
        deadline = time.monotonic() + timeout_s
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            thread.join(timeout=0.05)
        self.bridge.drain()
        return thread is None or not thread.is_alive()
