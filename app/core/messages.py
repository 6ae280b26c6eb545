"""Messages between the desktop app and the engine process that runs a goal.

The engine sends lifecycle messages and events on a queue; the window sends commands on a
pipe. Plain picklable data, so either side can check what it got with isinstance instead of
unpacking tagged tuples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.evaluator import DeviceInfo
from app.core.events import Event

# ---- engine -> window ----------------------------------------------------------------------


@dataclass(frozen=True)
class EnginePrepared:
    """The run exists (its id, None without a store) and the backend is up on `device`."""

    run_id: int | None
    device: DeviceInfo


@dataclass(frozen=True)
class EngineEvent:
    """One event of the run's bus, as the engine published it."""

    event: Event


@dataclass(frozen=True)
class EngineDone:
    """The run ended; `result` is the coordinator's RunResult (its history left empty: the
    window already has every evaluation from the events). Typed Any: core knows no swarm."""

    result: Any


@dataclass(frozen=True)
class EngineFailed:
    """The run could not start or crashed; `message` is for the user, `traceback` for the log."""

    message: str
    traceback: str = ""


@dataclass(frozen=True)
class EngineSearches:
    """The goal is one search per GPU model, run one after the other (app.cluster.per_model):
    for each model an EnginePrepared, its events and an EngineRunEnded follow, then one
    EngineDone (or EngineFailed when no model could be searched)."""

    models: tuple[str, ...]


@dataclass(frozen=True)
class EngineRunEnded:
    """One model's run of a per-model goal ended: its result (history left empty), or None and
    `message` when that model's run could not start (the next model is searched anyway)."""

    model: str
    run_id: int | None
    result: Any = None
    message: str = ""


EngineMessage = (EnginePrepared | EngineEvent | EngineDone | EngineFailed | EngineSearches
                 | EngineRunEnded)

# ---- window -> engine ----------------------------------------------------------------------


@dataclass(frozen=True)
class Pause:
    pass


@dataclass(frozen=True)
class Resume:
    pass


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class ContinueHere:
    """The cluster is gone and the run waits for it: go on on this machine instead."""


EngineCommand = Pause | Resume | Stop | ContinueHere
