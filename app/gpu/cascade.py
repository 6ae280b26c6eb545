"""The evaluation cascade shared by every compiling backend; it runs inside a worker process.

static checks -> compile (cached by candidate key) -> resource limits -> verify -> time ->
re-verify on fresh inputs written into the very buffers that were timed. Each stage's outcome
and duration lands in `Evaluation.stages`; the first failing stage ends the cascade with its
reason. Before each stage the cascade reports the stage's name (`progress`), so the parent's
watchdog applies the compile or the run deadline and can name the stage a crash happened in.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from app.gpu.timing import CacheFlusher, TimingSettings, TimingStats, time_interleaved
from app.gpu.verify import (
    CheckCase,
    GuardedOutput,
    Runner,
    VerifiableOperator,
    make_inputs,
    plan_checks,
    refill_inputs,
    run_check,
    tolerance_for,
    verify,
)
from app.core.types import (
    OUT_OF_MEMORY,
    RUNTIME_FAILED,
    STATIC_CHECK,
    VERIFY_FAILED,
    Evaluation,
    Stage,
)

STAGES = ("static_check", "compile", "resources", "verify", "time", "reverify")
COMPILE_STAGES = frozenset({"static_check", "compile", "resources"})

Progress = Callable[[str], None]


class StageFailed(Exception):
    """A stage rejected the candidate (reason from app.core.types)."""

    def __init__(self, reason: str, detail: str, log: str = "",
                 failing_case: dict[str, Any] | None = None, restart: bool = False) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.log = reason, detail, log
        self.failing_case, self.restart = failing_case, restart


@dataclass
class Built:
    """A compiled candidate: what to load, and what the build said about itself."""

    artifact: Any
    key: str
    cached: bool = False
    log: str = ""


class CascadeBackend(Protocol):
    """What a backend supplies to the cascade (all of it runs in the worker process)."""

    def static_check(self, source: str) -> list[str]: ...
    def build(self, source: str, config: dict[str, Any]) -> Built: ...  # raises StageFailed
    def check_resources(self, built: Built, config: dict[str, Any]) -> dict[str, Any]: ...
    def load(self, built: Built) -> Runner: ...
    def timing_calls(self, runner: Runner, inputs: dict[str, np.ndarray],
                     out: GuardedOutput) -> dict[str, Callable[[], None]]:
        """Zero-argument calls to time, interleaved: "candidate" plus baselines by name."""
        ...


@dataclass
class CascadeRequest:
    key: str
    config: dict[str, Any]
    source: str | None  # None: the operator's template
    template: str
    goal_shapes: list[list[int]]
    params: dict[str, list]  # the space's values (edge shapes avoid every tile size)
    dtype: str = "float32"
    rtol: float | None = None
    atol: float | None = None
    validation_cases: list[dict[str, Any]] = field(default_factory=list)
    seed: int = 0
    metric: str = "time"  # time | throughput
    timing: TimingSettings = field(default_factory=TimingSettings)
    agent: str = ""
    parent_key: str | None = None


@dataclass
class _Clock:
    stages: list[Stage] = field(default_factory=list)


def run_cascade(request: CascadeRequest, op: VerifiableOperator, backend: CascadeBackend,
                progress: Progress = lambda name: None,
                throughput: Callable[[tuple[int, ...], float], float] | None = None,
                flusher: CacheFlusher | None = None) -> tuple[Evaluation, bool]:
    """Evaluate one candidate; (evaluation, restart_worker). Never raises for a bad candidate."""
    ev = Evaluation(key=request.key, config=dict(request.config), ok=False, agent=request.agent,
                    source=request.source, parent_key=request.parent_key)
    source = request.source if request.source is not None else request.template
    stages: list[Stage] = []
    t_start = time.perf_counter()

    def stage(name: str, fn: Callable[[], Any]) -> Any:
        progress(name)
        t0 = time.perf_counter()
        try:
            result = fn()
        except StageFailed as exc:
            stages.append(Stage(name, False, time.perf_counter() - t0, exc.detail))
            raise
        detail = result[1] if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], str) else ""
        stages.append(Stage(name, True, time.perf_counter() - t0, detail))
        return result

    restart = False
    try:
        stage("static_check", lambda: _static(backend, source))
        built = stage("compile", lambda: _build(backend, source, request.config))[0]
        ev.resources["build_key"] = built.key
        ev.log = built.log
        ev.resources.update(stage("resources", lambda: (backend.check_resources(built, request.config), ""))[0])
        runner = backend.load(built)
        cases = plan_checks(op, request.goal_shapes, request.params, request.validation_cases,
                            seed=request.seed)
        stage("verify", lambda: _verify(op, runner, cases, request))
        timed = stage("time", lambda: (_time(op, backend, runner, request, flusher), ""))[0]
        stage("reverify", lambda: _reverify(op, runner, timed, request))
        _fill_result(ev, op, timed, request, throughput)
        ev.ok = True
    except StageFailed as exc:
        ev.reason, ev.detail = exc.reason, exc.detail
        ev.log = "\n".join(x for x in (ev.log, exc.log) if x)
        ev.failing_case = exc.failing_case
        restart = exc.restart
    except MemoryError:
        ev.reason, ev.detail = OUT_OF_MEMORY, "ran out of memory in the worker"
        stages.append(Stage(_next_stage(stages), False, 0.0, ev.detail))
        restart = True
    except Exception as exc:  # noqa: BLE001 - a harness or loader error must still be an evaluation
        ev.reason, ev.detail = RUNTIME_FAILED, f"{type(exc).__name__}: {exc}"
        ev.log = "\n".join(x for x in (ev.log, traceback.format_exc()) if x)
        stages.append(Stage(_next_stage(stages), False, 0.0, ev.detail))
        restart = True
    ev.stages = stages
    ev.sim_seconds = time.perf_counter() - t_start
    return ev, restart


def _next_stage(done: list[Stage]) -> str:
    return STAGES[min(len(done), len(STAGES) - 1)]


def _static(backend: CascadeBackend, source: str) -> tuple[None, str]:
    problems = backend.static_check(source)
    if problems:
        raise StageFailed(STATIC_CHECK, "; ".join(problems))
    return None, ""


def _build(backend: CascadeBackend, source: str, config: dict[str, Any]) -> tuple[Built, str]:
    built = backend.build(source, config)
    return built, "cached" if built.cached else ""


def _verify(op: VerifiableOperator, runner: Runner, cases: list[CheckCase],
            request: CascadeRequest) -> tuple[None, str]:
    failure = verify(op, runner, cases, request.dtype, request.rtol, request.atol)
    if failure is not None:
        raise StageFailed(VERIFY_FAILED, f"{failure.check}: {failure.problem} "
                          f"(shape {failure.case.shape}, {failure.case.distribution} inputs, "
                          f"seed {failure.case.seed})",
                          failing_case=failure.failing_case(op.name), restart=failure.corrupted_memory)
    return None, f"{len(cases)} checks passed"


@dataclass
class _Timed:
    shape: tuple[int, ...]
    inputs: dict[str, np.ndarray]
    out: GuardedOutput
    stats: dict[str, TimingStats]


def _time(op: VerifiableOperator, backend: CascadeBackend, runner: Runner, request: CascadeRequest,
          flusher: CacheFlusher | None) -> list[_Timed]:
    rng = np.random.default_rng(request.seed + 7)
    timed = []
    for shape in request.goal_shapes:
        case = CheckCase(list(shape), "normal", int(rng.integers(2**31)), "timing")
        inputs = make_inputs(op, case, request.dtype)
        out = GuardedOutput(op.output_shape(tuple(shape)), request.dtype)
        stats = time_interleaved(backend.timing_calls(runner, inputs, out), request.timing, flusher)
        timed.append(_Timed(tuple(shape), inputs, out, stats))
    return timed


def _reverify(op: VerifiableOperator, runner: Runner, timed: list[_Timed],
              request: CascadeRequest) -> tuple[None, str]:
    """Fresh values in the timed buffers (same addresses) must give fresh, correct results."""
    rng = np.random.default_rng(request.seed + 11)
    for t in timed:
        case = CheckCase(list(t.shape), "normal", int(rng.integers(2**31)), "goal")
        refill_inputs(op, t.inputs, case, request.dtype)
        tol = tolerance_for(op, t.shape, request.dtype, request.rtol, request.atol)
        problem, corrupted = run_check(op, runner, t.inputs, t.out, tol)
        if problem:
            raise StageFailed(VERIFY_FAILED, f"reverify after timing: {problem} (shape {list(t.shape)}, "
                              f"seed {case.seed})", restart=corrupted,
                              failing_case={**case.to_dict(), "operator": op.name,
                                            "check": "reverify", "problem": problem})
    return None, f"{len(timed)} fresh inputs after timing"


def _fill_result(ev: Evaluation, op: VerifiableOperator, timed: list[_Timed], request: CascadeRequest,
                 throughput: Callable[[tuple[int, ...], float], float] | None) -> None:
    cand = [t.stats["candidate"] for t in timed]
    ev.time_ms = sum(s.median_ms for s in cand)
    ev.p10_ms = sum(s.p10_ms for s in cand)
    ev.p90_ms = sum(s.p90_ms for s in cand)
    ev.samples_ms = list(cand[0].samples_ms) if len(cand) == 1 else [
        sum(vals) for vals in zip(*(s.samples_ms for s in cand))]
    baselines = [n for n in timed[0].stats if n != "candidate"]
    for name in baselines:
        base_ms = sum(t.stats[name].median_ms for t in timed)
        ev.metrics[f"{name}_ms"] = base_ms
        if ev.time_ms > 0:
            ev.metrics[f"speedup_vs_{name}"] = base_ms / ev.time_ms
    ev.metrics["spread"] = max(s.spread for s in cand)
    ev.metrics["samples"] = float(min(len(s.samples_ms) for s in cand))
    rate = None
    if throughput is not None and ev.time_ms > 0:
        rate = sum(throughput(t.shape, 1.0) for t in timed) / (ev.time_ms / 1000.0)
        ev.metrics["throughput"] = rate
    ev.value = rate if request.metric == "throughput" and rate is not None else ev.time_ms
