"""A run in a process of its own, driven by the desktop app.

The GUI and the engine share nothing but a queue of events and a pipe of commands: the
engine's Python work (agents, models, the store) never competes with the window's event loop
for the interpreter lock, the two use both cores, and a crash in a backend cannot take the
window down. No Qt here: the child process imports only the engine.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import threading
import traceback
from dataclasses import replace
from typing import Any

from app.core.events import Proposed

log = logging.getLogger(__name__)

# Messages on the event queue: ("prepared", run_id, DeviceInfo), ("event", Event),
# ("done", RunResult), ("error", message). Commands on the pipe: "pause", "resume", "stop".


def run_engine(goal: dict[str, Any] | None, goal_source: str, db_path: str | None,
               resume_run_id: int | None, events: Any, commands: Any) -> None:
    """Entry point of the engine process (spawned)."""
    from app.goal import Goal
    from app.session import RunSession
    from app.core.events import EventBus

    store = None
    try:
        if db_path:
            from app.store import Store

            store = Store(db_path)
        the_goal = None
        if goal is not None:
            the_goal = Goal.from_dict(goal)
            the_goal.source_path = goal_source
        bus = EventBus()
        bus.subscribe(lambda e: None if isinstance(e, Proposed) else events.put(("event", e)))
        session = RunSession(the_goal, store=store, bus=bus, resume_run_id=resume_run_id)
        events.put(("prepared", session.run_id, session.evaluator.device()))
        threading.Thread(target=_obey, args=(commands, session), daemon=True,
                         name="engine-commands").start()
        result = session.run()
        # The window already has every evaluation from the events; don't send them twice.
        events.put(("done", replace(result, history=[])))
    except Exception as exc:
        log.exception("engine process failed")
        message = str(exc) if str(exc).startswith(type(exc).__name__) else f"{type(exc).__name__}: {exc}"
        events.put(("error", message, traceback.format_exc()))
    finally:
        if store is not None:
            store.close()


def _obey(commands: Any, session: Any) -> None:
    while True:
        try:
            command = commands.recv()
        except (EOFError, OSError):  # the window went away: stop, keeping what was measured
            session.stop()
            return
        if command == "pause":
            session.pause()
        elif command == "resume":
            session.resume()
        elif command == "stop":
            session.stop()


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
            name="kernelswarm-engine", daemon=True)

    def start(self) -> None:
        self.process.start()

    def messages(self, on_event: Any):
        """Yield the lifecycle messages; events go to `on_event` as they arrive. Ends after
        "done"/"error", or with an error when the process died without saying so."""
        while True:
            try:
                message = self._events.get(timeout=0.5)
            except queue.Empty:  # nothing for a while: check the process is still there
                if not self.process.is_alive():
                    code = self.process.exitcode
                    yield ("error", f"the engine process ended unexpectedly (exit code {code})", "")
                    return
                continue
            kind = message[0]
            if kind == "event":
                on_event(message[1])
                continue
            yield message
            if kind in ("done", "error"):
                return

    def send(self, command: str) -> None:
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
