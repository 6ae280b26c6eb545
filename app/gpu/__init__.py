"""Evaluation backends (replay, cpu, cuda) and everything that touches a device. No Qt.

The built-in backends register here (see app.gpu.registry). Each entry imports its heavy
modules (compilers, CuPy, NVML) only inside its factory and probe.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.core.units import objective_unit
from app.goal import DTYPES, GoalError
from app.gpu.registry import BackendSpec, register_backend

if TYPE_CHECKING:
    from app.core.evaluator import Evaluator
    from app.goal import Goal


# ---- operators from the catalog (cpu, cuda) ---------------------------------------------
def _check_operator_goal(backend: str) -> Any:
    def check(goal: Goal) -> None:
        from app.catalog import known_operators

        if goal.kernel is not None:  # your own kernel: its [kernel] table, files and expressions
            _check_custom_goal(backend, goal)
            return
        if not goal.operator:
            raise GoalError("operator", f"a {backend} goal needs an operator from the catalog")
        ops = known_operators(backend)
        if goal.operator not in ops:
            raise GoalError("operator", f"unknown operator {goal.operator!r} for backend "
                            f"{backend}; known: {', '.join(sorted(ops)) or 'none'}")
        if not goal.shapes:
            raise GoalError("shapes", "give at least one shape")
    return check


def _check_custom_goal(backend: str, goal: Goal) -> None:
    from app.catalog.custom import load_spec

    spec = load_spec(goal, backend)
    goal.operator = ""  # the [kernel] table wins over an operator a form kept (stored runs say so)
    if spec.recorded_space:
        try:
            goal.resolve_space_path() if goal.space else _find_recorded(goal, spec.recorded_space)
        except FileNotFoundError as exc:
            raise GoalError("kernel.recorded_space", str(exc)) from None


def _find_recorded(goal: Goal, name: str) -> Any:
    from pathlib import Path

    from app.paths import find_space

    return find_space(name, Path(goal.source_path).parent if goal.source_path else None)


def _custom_evaluator(goal: Goal, backend: str, live: Any) -> Evaluator:
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

            recorded = load_cache_file(_find_recorded(goal, op.spec.recorded_space))
            return ReplayEvaluator(recorded, restrictions=op.restrictions + list(
                goal.constraints.restrictions), simulate_time=goal.simulate_time)
    problem = probe_reference(op, goal.shapes[0])
    if problem:
        field = "kernel.reference_source" if op.spec.reference_source else "kernel.reference"
        raise GoalError(field, problem)
    return live()


def operator_is_memory_bound(backend: str, goal: Goal) -> bool:
    """Whether the goal's operator is judged by bytes moved (GB/s) rather than FLOPs.

    The catalog is being reshaped behind one operator protocol; until then CPU operators say
    it as `throughput_unit` and CUDA operators as `memory_bound` (or by having no FLOPs, which
    is how the CUDA evaluator picks bytes over FLOPs). This is the one place that reads them.
    """
    from app.catalog import known_operators

    if goal.kernel is not None:  # your own kernel: bytes unless it gives a FLOP count
        return not goal.kernel.flops
    op = known_operators(backend).get(goal.operator)
    if op is None:
        return False
    if hasattr(op, "throughput_unit"):
        return op.throughput_unit == "GB/s"
    if getattr(op, "memory_bound", False):
        return True
    flops = getattr(op, "flops", None)
    if not goal.shapes or flops is None:
        return False
    try:
        return not flops(list(goal.shapes[0]))
    except (ValueError, TypeError, IndexError):  # a bad shape: the evaluator names it
        return False


def _operator_unit(backend: str) -> Any:
    def unit(goal: Goal) -> str:
        memory_bound = goal.objective.metric == "throughput" and operator_is_memory_bound(
            backend, goal)
        return objective_unit(goal.objective.metric, memory_bound)
    return unit


# ---- cpu --------------------------------------------------------------------------------
def _make_cpu(goal: Goal, cases: Sequence[dict]) -> Evaluator:
    from app.gpu.cpu import CpuEvaluator

    if goal.kernel is not None:
        return _custom_evaluator(goal, "cpu", lambda: CpuEvaluator(goal, validation_cases=list(cases)))
    return CpuEvaluator(goal, validation_cases=list(cases))


def _probe_cpu() -> tuple[bool, str]:
    compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang")
                     if c and shutil.which(c)), None)
    if compiler is None:
        return False, "no C compiler found (install gcc or clang)"
    return True, f"C compiler {shutil.which(compiler)}"


# ---- cuda -------------------------------------------------------------------------------
def _make_cuda(goal: Goal, cases: Sequence[dict]) -> Evaluator:
    from app.gpu.cuda import CudaEvaluator

    if goal.kernel is not None:
        return _custom_evaluator(goal, "cuda", lambda: CudaEvaluator(goal, validation_cases=list(cases)))
    return CudaEvaluator(goal, validation_cases=list(cases))


def _probe_cuda() -> tuple[bool, str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                     for i in range(pynvml.nvmlDeviceGetCount())]
            driver = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - no driver, no library: say so, don't fail
        return False, f"no NVIDIA driver ({type(exc).__name__}: {exc})"
    gpus = ", ".join(f"{i}: {n if isinstance(n, str) else n.decode()}" for i, n in enumerate(names))
    return bool(names), f"driver {driver}; {gpus or 'no GPUs'}"


# ---- replay -----------------------------------------------------------------------------
def _make_replay(goal: Goal, cases: Sequence[dict]) -> Evaluator:
    from app.gpu.replay import make_replay_evaluator

    return make_replay_evaluator(goal)


def _probe_replay() -> tuple[bool, str]:
    from app.gpu.replay import probe_recorded_spaces

    return probe_recorded_spaces()


def _check_replay_goal(goal: Goal) -> None:
    if not goal.space:
        raise GoalError("space", "a replay goal needs a recorded space (Kernel Tuner cache file)")


register_backend(BackendSpec(
    name="replay", label="replay — recorded measurements", make_evaluator=_make_replay,
    probe=_probe_replay, check_goal=_check_replay_goal,
    unit=lambda goal: objective_unit(goal.objective.metric), simulated_clock=True))
register_backend(BackendSpec(
    name="cpu", label="cpu — C kernels, OpenMP", make_evaluator=_make_cpu, probe=_probe_cpu,
    check_goal=_check_operator_goal("cpu"), unit=_operator_unit("cpu"), language="c",
    source_suffix=".c", dtypes=DTYPES, compiles=True))
register_backend(BackendSpec(
    name="cuda", label="cuda — NVIDIA GPU", make_evaluator=_make_cuda, probe=_probe_cuda,
    check_goal=_check_operator_goal("cuda"), unit=_operator_unit("cuda"), language="cuda",
    source_suffix=".cu", dtypes=DTYPES, compiles=True, selects_device=True))
