"""A run in a process of its own, driven by the desktop app.

The GUI and the engine share nothing but a queue of messages and a pipe of commands
(app.core.messages): the engine's Python work (agents, models, the store) never competes with
the window's event loop for the interpreter lock, the two use both cores, and a crash in a
backend cannot take the window down. No Qt here: the child process imports only the engine.

The engine process is not a daemon, because backends start worker processes of their own (a
daemon may not have children). It ends itself instead: when the window's end of the pipe
closes or the parent process goes away it stops the run (keeping what was measured) and, if
the run does not end within a grace period, exits.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import multiprocessing.util  # its exit handler (it joins children) must predate ours
import os
import queue
import signal
import threading
import time
import traceback
import weakref
from dataclasses import replace
from typing import Any

from app.core.events import Proposed
from app.core.messages import (
    ContinueHere,
    EngineCommand,
    EngineDone,
    EngineEvent,
    EngineFailed,
    EngineMessage,
    EnginePrepared,
    EngineRunEnded,
    EngineSearches,
    Pause,
    Resume,
    Stop,
)
from app.store import Store

log = logging.getLogger(__name__)

ORPHAN_GRACE_S = 30.0  # an engine whose window is gone gets this long to stop cleanly
_PARENT_POLL_S = 0.5


def run_engine(goal: dict[str, Any] | None, goal_source: str, db_path: str | None,
               resume_run_id: int | None, events: Any, commands: Any) -> None:
    """Entry point of the engine process (spawned)."""
    from app.core.events import EventBus
    from app.goal import Goal
    from app.session.registries import wire

    wire()  # a spawned process starts with empty registries
    # A Ctrl-C in the terminal that started the app goes to its whole process group: the window
    # owns the engine's life (it stops it, or the engine stops when the window is gone), and
    # worker processes started from here inherit the ignored signal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = _Commands(commands)
    threading.Thread(target=control.serve, daemon=True, name="engine-commands").start()
    store = None
    try:
        if db_path:
            store = _EngineStore(db_path)
        the_goal = None
        if goal is not None:
            the_goal = Goal.from_dict(goal)
            the_goal.source_path = goal_source
        bus = EventBus()
        bus.subscribe(lambda e: None if isinstance(e, Proposed) else events.put(EngineEvent(e)))
        models = _models_to_search(the_goal) if resume_run_id is None else []
        if models:
            result = _run_per_model(the_goal, models, store, bus, events, control)
        else:
            _session, result = _run_one(the_goal, store, bus, events, control, resume_run_id)
        # The window already has every evaluation from the events; don't send them twice.
        events.put(EngineDone(replace(result, history=[])))
    except Exception as exc:
        log.exception("engine process failed")
        message = _message(exc)
        _record_failure(store, getattr(store, "created_run_id", None), message)
        events.put(EngineFailed(message, traceback.format_exc()))
    finally:
        if store is not None:
            store.close()


def _message(exc: BaseException) -> str:
    text = str(exc)
    return text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}"


def _models_to_search(goal: Any) -> list[str]:
    """The GPU models of a cuda goal on a cluster with several (one search each); [] otherwise.
    Ray is imported only for a goal with a [cluster] table."""
    if goal is None or not goal.cluster:
        return []
    from app.cluster.per_model import models_to_search

    return models_to_search(goal)


def _run_one(goal: Any, store: Any, bus: Any, events: Any, control: _Commands,
             resume_run_id: int | None = None) -> tuple[Any, Any]:
    """Prepare one run, tell the window, run it under the window's commands."""
    from app.session import RunSession

    session = RunSession(goal, store=store, bus=bus, resume_run_id=resume_run_id)
    events.put(EnginePrepared(session.run_id, session.evaluator.device()))
    control.attach(session)  # a pause or stop sent while the run was being prepared applies now
    return session, session.run()


def _run_per_model(goal: Any, models: list[str], store: Any, bus: Any, events: Any,
                   control: _Commands) -> Any:
    """One run per GPU model, one after the other, as `kernelswarm run` does (app.cluster.
    per_model says why not at once). A model whose run cannot start is reported and skipped;
    a stop ends the sequence. Returns the last run's result."""
    from app.cluster.per_model import goal_for_model
    from app.core.evaluator import BackendUnavailable

    events.put(EngineSearches(tuple(models)))
    result, failures = None, []
    for model in models:
        if control.stopped:  # the window stopped the previous run: the rest is not searched
            break
        before = getattr(store, "created_run_id", None)
        try:
            session, one = _run_one(goal_for_model(goal, model), store, bus, events, control)
        except BackendUnavailable as exc:  # this model's actors did not start: go on
            run_id = getattr(store, "created_run_id", None)
            run_id = run_id if run_id != before else None
            _record_failure(store, run_id, _message(exc))
            failures.append(f"{model}: {exc}")
            events.put(EngineRunEnded(model, run_id, None, str(exc)))
            continue
        result = one
        events.put(EngineRunEnded(model, session.run_id, replace(one, history=[])))
    if result is None:
        from app.cluster.connect import ClusterUnavailable

        raise ClusterUnavailable("no GPU model could be searched: " + "; ".join(failures)
                                 if failures else "stopped before the first GPU model's run")
    return result


class _EngineStore(Store):
    """The engine's store, remembering the run it created: a session that fails after creating
    its run (say, while measuring the baseline) never returns its id, yet the run must be
    marked failed with the reason, not left 'running' to be reaped as 'interrupted'."""

    created_run_id: int | None = None

    def create_run(self, *args: Any, **kwargs: Any) -> int:
        run_id = super().create_run(*args, **kwargs)
        self.created_run_id = run_id
        return run_id


def _record_failure(store: Any, run_id: int | None, message: str) -> None:
    """Close a run this process left 'running' as failed, with the message the user sees."""
    if store is None or run_id is None:
        return
    try:
        if store.get_run(run_id)["status"] == "running":
            store.finish_run(run_id, "error", message=message)
    except Exception:  # the failure itself is still reported to the window
        log.exception("could not record the failure of run %s", run_id)


class _Commands:
    """Serves the window's commands; commands that arrive before the session exists wait for
    it. Watches for the window going away (pipe closed, parent gone) and stops the run then."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._session: Any = None
        self._pending: list[EngineCommand] = []
        self.stopped = False  # the window asked to stop: a per-model sequence starts no more runs
        self._paused = False  # carried to the next model's run of a per-model sequence

    def attach(self, session: Any) -> None:
        with self._lock:
            self._session = session
            pending, self._pending = self._pending, []
        if self._paused and not any(isinstance(c, (Pause, Resume)) for c in pending):
            session.pause()  # paused during the previous model's run: this one starts paused
        for command in pending:
            self._apply(command)

    def serve(self) -> None:
        parent = os.getppid()
        while True:
            try:
                ready = self._conn.poll(_PARENT_POLL_S)
                command = self._conn.recv() if ready else None
            except (EOFError, OSError):  # the window went away
                self._orphaned()
                return
            if command is None:
                if os.getppid() != parent:  # re-parented: the window's process died
                    self._orphaned()
                    return
                continue
            self._apply(command)

    def _apply(self, command: EngineCommand) -> None:
        if isinstance(command, Stop):
            self.stopped = True
        elif isinstance(command, (Pause, Resume)):
            self._paused = isinstance(command, Pause)
        with self._lock:
            session = self._session
            if session is None:
                self._pending.append(command)
                return
        if isinstance(command, Pause):
            session.pause()
        elif isinstance(command, Resume):
            session.resume()
        elif isinstance(command, Stop):
            session.stop()
        elif isinstance(command, ContinueHere):
            session.continue_here()
        else:
            log.warning("unknown engine command %r", command)

    def _orphaned(self) -> None:
        """Stop, keeping what was measured; exit anyway if the run does not end in time."""
        log.warning("the window went away: stopping the run")
        self._apply(Stop())
        timer = threading.Timer(ORPHAN_GRACE_S, os._exit, args=(1,))
        timer.daemon = True
        timer.start()


# ---- the window's side -------------------------------------------------------------------------
_live_engines: weakref.WeakSet[EngineProcess] = weakref.WeakSet()


@atexit.register
def _end_engines_at_exit() -> None:
    """multiprocessing joins non-daemon children at exit: end ours first so exit never hangs.
    (Registered after multiprocessing.util's handler, imported above, so it runs before it.)"""
    for engine in list(_live_engines):
        engine.shutdown(timeout_s=5.0)


class EngineProcess:
    """The GUI side's handle on one engine process: start it, read its messages (on a thread
    of the caller's choosing), send it commands, wait for it."""

    def __init__(self, goal: Any | None, db_path: str | None, resume_run_id: int | None) -> None:
        ctx = mp.get_context("spawn")
        self._events = ctx.Queue()
        self._commands, child_end = ctx.Pipe()
        goal_dict = goal.to_dict() if goal is not None else None
        source = getattr(goal, "source_path", "") if goal is not None else ""
        self.process = ctx.Process(
            target=run_engine, args=(goal_dict, source, db_path, resume_run_id, self._events,
                                     child_end),
            name="kernelswarm-engine", daemon=False)
        self._child_end = child_end

    def start(self) -> None:
        self.process.start()
        # Only the child holds its end now, so the child sees EOF when this process dies.
        self._child_end.close()
        _live_engines.add(self)

    def messages(self, on_event: Any):
        """Yield the lifecycle messages (EnginePrepared, EngineDone, EngineFailed); events go to
        `on_event` as they arrive. Ends after EngineDone or EngineFailed, or with an
        EngineFailed when the process died without saying so."""
        while True:
            try:
                message: EngineMessage = self._events.get(timeout=0.5)
            except queue.Empty:  # nothing for a while: check the process is still there
                if not self.process.is_alive():
                    code = self.process.exitcode
                    yield EngineFailed(f"the engine process ended unexpectedly (exit code {code})")
                    return
                continue
            if isinstance(message, EngineEvent):
                on_event(message.event)
                continue
            yield message
            if isinstance(message, (EngineDone, EngineFailed)):
                return

    def send(self, command: EngineCommand) -> None:
        try:
            self._commands.send(command)
        except (BrokenPipeError, OSError):
            pass  # the process has already ended

    def join(self, timeout: float | None = None) -> bool:
        self.process.join(timeout)
        return not self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)

    def shutdown(self, timeout_s: float = 10.0) -> bool:
        """Stop the run and wait for the process; kill it when it does not end in time.
        Returns whether it ended by itself. Messages nobody reads any more are drained: an
        engine cannot exit while its queue's pipe is full."""
        if self.process.pid is None:  # never started
            return True
        if self.process.is_alive():
            self.send(Stop())
        deadline = time.monotonic() + timeout_s
        while self.process.is_alive() and time.monotonic() < deadline:
            try:
                self._events.get(timeout=0.05)
            except (queue.Empty, OSError, EOFError):
                pass
        ended = self.join(0.1)
        if not ended:
            self.kill()
        return ended
