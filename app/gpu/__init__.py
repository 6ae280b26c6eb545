"""Evaluation backends (replay, cpu, cuda) and everything that touches a device. No Qt.

The built-in backends are declared here and registered by register_builtin_backends(), which
the session's wiring calls (see app.gpu.registry). Each entry imports its heavy
modules (compilers, CuPy, NVML) only inside its factory and probe; what a goal must name is
the catalog's to check (app.catalog.goals), a recorded space the replay backend's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from app.catalog.goals import check_operator_goal, goal_is_memory_bound, recorded_space
from app.core.units import objective_unit
from app.goal import DTYPES, GoalError
from app.gpu.registry import BackendSpec, backend_names, register_backend
from app.gpu.replay import check_replay_goal, make_replay_evaluator, probe_recorded_spaces

if TYPE_CHECKING:
    from app.core.evaluator import Evaluator
    from app.goal import Goal


def _operator_unit(backend: str, goal: Goal) -> str:
    metric = goal.objective.metric
    return objective_unit(metric, metric == "throughput" and goal_is_memory_bound(backend, goal))


def _custom_evaluator(goal: Goal, backend: str, live: Callable[[], Evaluator]) -> Evaluator:
    """Your own kernel: replayed from its recorded space where the GPU is missing, otherwise
    measured live once its reference has run cleanly (in a worker, never here)."""
    from app.catalog.custom import custom_operator
    from app.core.evaluator import BackendUnavailable
    from app.gpu.custom_reference.probe import probe_reference

    op = custom_operator(goal, backend)
    if backend == "cuda" and op.spec.recorded_space:
        from app.gpu.cuda.evaluator import visible_devices

        try:
            visible_devices(goal.device)
        except BackendUnavailable:
            from app.gpu.replay import ReplayEvaluator, load_cache_file

            recorded = load_cache_file(recorded_space(goal, op.spec.recorded_space))
            return ReplayEvaluator(recorded, restrictions=op.restrictions + list(
                goal.constraints.restrictions), simulate_time=goal.simulate_time)
    problem = probe_reference(op, goal.shapes[0])
    if problem:
        field = "kernel.reference_source" if op.spec.reference_source else "kernel.reference"
        raise GoalError(field, problem)
    return live()


def _make_live(backend: str, goal: Goal, cases: Sequence[dict]) -> Evaluator:
    """The cpu or cuda evaluator (imported only now: compilers, CuPy); your own kernel's
    through _custom_evaluator."""
    if backend == "cpu":
        from app.gpu.cpu.evaluator import CpuEvaluator as make
    else:
        from app.gpu.cuda.evaluator import CudaEvaluator as make

    def live() -> Evaluator:
        return make(goal, validation_cases=list(cases))
    return live() if goal.kernel is None else _custom_evaluator(goal, backend, live)


def _probe_cpu() -> tuple[bool, str]:
    from app.gpu.cpu.toolchain import find_compiler

    compiler = find_compiler()
    return (True, f"C compiler {compiler}") if compiler else (
        False, "no C compiler found (install gcc or clang)")


def _probe_cuda() -> tuple[bool, str]:
    from app.gpu.cuda.telemetry import probe_driver

    return probe_driver()


def register_builtin_backends() -> None:
    """Register the replay, cpu and cuda backends; a name already registered is left as it is
    (idempotent). Called by the session's wiring, never on import: importing app.gpu (for its
    sandbox, say) leaves the registry as it was."""
    for spec in _builtin_backends():
        if spec.name not in backend_names():
            register_backend(spec)


def _builtin_backends() -> tuple[BackendSpec, ...]:
    return (
        BackendSpec(
            name="replay", label="replay — recorded measurements",
            make_evaluator=lambda goal, cases: make_replay_evaluator(goal),
            probe=probe_recorded_spaces, check_goal=check_replay_goal,
            unit=lambda goal: objective_unit(goal.objective.metric), simulated_clock=True),
        BackendSpec(
            name="cpu", label="cpu — C kernels, OpenMP", make_evaluator=partial(_make_live, "cpu"), probe=_probe_cpu,
            check_goal=partial(check_operator_goal, "cpu"), unit=partial(_operator_unit, "cpu"),
            language="c", source_suffix=".c", dtypes=DTYPES, compiles=True),
        BackendSpec(
            name="cuda", label="cuda — NVIDIA GPU", make_evaluator=partial(_make_live, "cuda"), probe=_probe_cuda,
            check_goal=partial(check_operator_goal, "cuda"), unit=partial(_operator_unit, "cuda"),
            language="cuda", source_suffix=".cu", dtypes=DTYPES, compiles=True,
            selects_device=True),
    )
