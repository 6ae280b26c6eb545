"""The backends a goal can run on, each described once.

A backend registers a BackendSpec: its name, the language its candidates are written in, its
dtypes and metrics, whether it compiles code or replays recordings, how it checks a goal's
backend-specific fields, the objective's unit for a goal, how to make its evaluator and how to
probe this machine for it. Code that used to compare backend names (`backend == "cpu"`) asks
the spec instead. Factories and probes import the heavy modules (CuPy, compilers) lazily.
The built-in backends are declared in app/gpu/__init__.py and registered only when
app.gpu.register_builtin_backends() is called (the session's wire() does, at every entry
point): importing a module never fills a registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.goal import GoalError

if TYPE_CHECKING:
    from app.core.evaluator import Evaluator
    from app.goal import Goal


@dataclass(frozen=True)
class BackendSpec:
    name: str
    label: str  # one line for pickers: what the backend runs on
    make_evaluator: Callable[[Goal, Sequence[dict]], Evaluator]
    probe: Callable[[], tuple[bool, str]]  # (usable here, details) for `kernelswarm devices`
    check_goal: Callable[[Goal], None]  # backend-specific fields; raises GoalError naming one
    unit: Callable[[Goal], str]  # the objective's unit for a goal on this backend
    language: str = ""  # language candidates are written in ("c", "cuda"); "" when none
    source_suffix: str = ""  # file suffix for exported sources
    dtypes: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ("time", "throughput", "energy")
    compiles: bool = False  # builds candidate code (operators from the catalog, shapes)
    simulated_clock: bool = False  # can charge recorded times to a simulated run clock
    selects_device: bool = False  # the goal's `device` index picks one of several devices

    def runs_on_simulated_clock(self, goal: Goal) -> bool:
        return self.simulated_clock and goal.simulate_time


_BACKENDS: dict[str, BackendSpec] = {}


def register_backend(spec: BackendSpec) -> BackendSpec:
    _BACKENDS[spec.name] = spec
    return spec


def backend_names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def backends() -> list[BackendSpec]:
    return list(_BACKENDS.values())


def backend_spec(name: str) -> BackendSpec:
    """The named backend; GoalError on the `backend` field for an unknown one."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise GoalError("backend", f"unknown backend {name!r}; choose one of "
                        f"{', '.join(_BACKENDS)}") from None


def check_backend_fields(goal: Goal) -> BackendSpec:
    """The goal's backend, after checking the fields only a backend can judge."""
    spec = backend_spec(goal.backend)
    if goal.objective.metric not in spec.metrics:
        raise GoalError("objective.metric", f"backend {spec.name} measures "
                        f"{', '.join(spec.metrics)}, not {goal.objective.metric!r}")
    if spec.dtypes and goal.dtype not in spec.dtypes:
        raise GoalError("dtype", f"backend {spec.name} supports {', '.join(spec.dtypes)}, "
                        f"not {goal.dtype!r}")
    spec.check_goal(goal)
    return spec
