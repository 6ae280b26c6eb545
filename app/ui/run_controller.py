"""Runs a goal in an engine process and reports back to the GUI thread.

The RunSession is built and run in a separate process (app.engine_process): the engine's
Python work never holds the interpreter lock the window needs, and a crashing backend cannot
take the window down. A reader thread here passes the engine's events to the EventBridge (the
only way they reach widgets); the controller itself only reports lifecycle: prepared (run id,
device), failed (with a message) and finished.
"""

from __future__ import annotations

import logging
import threading
import time

from PySide6.QtCore import QObject, Qt, Signal

from app.core.messages import (
    ContinueHere,
    EngineDone,
    EngineFailed,
    EnginePrepared,
    EngineRunEnded,
    EngineSearches,
    Pause,
    Resume,
    Stop,
)
from app.engine_process import EngineProcess
from app.goal import Goal
from app.store import StoreError
from app.ui.bridge import EventBridge

log = logging.getLogger(__name__)


class RunController(QObject):
    prepared = Signal(int, object)  # run id (or -1), DeviceInfo
    failed = Signal(str)  # a message for the user: the run did not start or crashed
    finished = Signal(object)  # RunResult
    stateChanged = Signal(str)  # "idle", "starting", "running", "paused", "stopping"
    # the goal is one search per GPU model (their names, in order); each model's run then
    # reports `prepared`, its events, and an EngineRunEnded through the bridge (in order)
    searchesPlanned = Signal(list)

    def __init__(self, bridge: EventBridge, store_factory, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self._store_factory = store_factory  # callable -> Store (the app's one store)
        self._thread: threading.Thread | None = None
        self._engine: EngineProcess | None = None
        self._stop_requested = threading.Event()
        self.state = "idle"
        self.run_id: int | None = None
        self.goal: Goal | None = None
        # Cross-thread reports arrive as queued signals in the GUI thread.
        self._prepared.connect(self._on_prepared, Qt.QueuedConnection)
        self._searches.connect(self.searchesPlanned, Qt.QueuedConnection)
        self._done.connect(self._on_done, Qt.QueuedConnection)

    _prepared = Signal(int, object)
    _searches = Signal(list)
    _done = Signal(object, str)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, goal: Goal, resume_run_id: int | None = None) -> bool:
        """Start the run; False (with `failed` emitted and the state back to idle) when it
        cannot start: a run left "starting" with nothing behind it could never be stopped."""
        if self.running:
            raise RuntimeError("a run is already in progress")
        self.goal = goal
        self.run_id = resume_run_id
        self._stop_requested.clear()
        self._set_state("starting")
        try:
            store = self._store_factory()
            db_path = str(store.path) if store is not None else None
            self._engine = EngineProcess(goal if resume_run_id is None else None, db_path,
                                         resume_run_id)
            self._thread = threading.Thread(target=self._work, args=(self._engine,),
                                            name="kernelswarm-run", daemon=True)
            self._thread.start()
        except Exception as exc:  # any cause: idle again, and the reason said
            log.exception("the run could not start")
            self._thread, self._engine = None, None
            self._set_state("idle")
            self.failed.emit(str(exc) if isinstance(exc, StoreError) else f"{type(exc).__name__}: {exc}")
            return False
        return True

    def _work(self, engine: EngineProcess) -> None:
        try:
            engine.start()
            if self._stop_requested.is_set():
                engine.send(Stop())
            for message in engine.messages(self.bridge):
                if isinstance(message, EngineSearches):
                    self._searches.emit(list(message.models))
                elif isinstance(message, EngineRunEnded):
                    self.bridge(message)  # after that run's events, before the next run's
                elif isinstance(message, EnginePrepared):
                    run_id = message.run_id
                    self._prepared.emit(run_id if run_id is not None else -1, message.device)
                elif isinstance(message, EngineDone):
                    engine.join(10)
                    self._done.emit(message.result, "")
                elif isinstance(message, EngineFailed):
                    log.error("run failed: %s\n%s", message.message, message.traceback)
                    engine.join(10)
                    self._done.emit(None, message.message)
        except Exception as exc:  # the process could not even start
            log.exception("run failed")
            self._done.emit(None, f"{type(exc).__name__}: {exc}")

    def _on_prepared(self, run_id: int, device: object) -> None:
        self.run_id = None if run_id < 0 else run_id
        self._set_state("paused" if self.state == "paused" else "running")
        self.prepared.emit(run_id, device)

    def _on_done(self, result: object, error: str) -> None:
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None
        self._engine = None
        self._set_state("idle")
        if error:
            self._record_failure(error)
            self.failed.emit(error)
        else:
            self.finished.emit(result)

    def _record_failure(self, error: str) -> None:
        """An engine that died without closing its run (killed, crashed) leaves it 'running':
        record the failure on it, so the history says what happened."""
        if self.run_id is None:
            return
        try:
            store = self._store_factory()
            if store.get_run(self.run_id)["status"] == "running":
                store.finish_run(self.run_id, "error", message=error)
        except Exception:  # the failure is still shown in the window
            log.exception("could not record the failure of run %s", self.run_id)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.stateChanged.emit(state)

    # ---- control ----------------------------------------------------------------------------
    def pause(self) -> None:
        if self._engine is not None and self.state == "running":
            self._engine.send(Pause())
            self._set_state("paused")

    def resume(self) -> None:
        if self._engine is not None and self.state == "paused":
            self._engine.send(Resume())
            self._set_state("running")

    def stop(self) -> None:
        self._stop_requested.set()
        if self._engine is not None:
            self._engine.send(Stop())
        if self.running:
            self._set_state("stopping")
        elif self.state != "idle":  # nothing is behind the state: Stop always gets out
            self._set_state("idle")

    def continue_here(self) -> None:
        """The cluster went away and the run waits for it: go on on this machine."""
        if self._engine is not None:
            self._engine.send(ContinueHere())

    def stop_and_wait(self, timeout_s: float = 30.0) -> bool:
        """Stop and block until the run has recorded its end (used when the window closes).
        Returns False when the engine did not finish in time (it is then killed: every
        evaluation it completed is already committed)."""
        self.stop()
        thread, engine = self._thread, self._engine
        deadline = time.monotonic() + timeout_s
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            thread.join(timeout=0.05)
        finished = thread is None or not thread.is_alive()
        if engine is not None:
            # The engine is not a daemon: never leave it behind (the window is closing).
            left = max(1.0, deadline - time.monotonic())
            finished = engine.shutdown(timeout_s=left if finished else 0.1) and finished
        self.bridge.drain()
        return finished
