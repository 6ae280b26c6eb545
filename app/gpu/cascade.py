"""The evaluation cascade shared by every compiling backend (cpu and cuda); it runs inside the
backend's worker process.

static checks -> compile (cached by candidate key) -> resource limits -> load -> verify ->
time (the backend's timer) -> re-verify on fresh inputs written into the very buffers that
were timed. A backend supplies the hooks (CascadeBackend); the verification is app.gpu.verify
on the backend's array module. Each stage's outcome
and duration lands in `Evaluation.stages`; the first failing stage ends the cascade with its
reason. Before each stage the cascade reports the stage's name (`progress`), so the parent's
watchdog applies the compile or the run deadline and can name the stage a crash happened in.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from app.catalog.protocol import Operator
from app.core.types import (
    OUT_OF_MEMORY,
    RUNTIME_FAILED,
    STATIC_CHECK,
    VERIFY_FAILED,
    Evaluation,
    Stage,
)
from app.gpu.timing import TimingStats
from app.gpu.verify import (
    CheckCase,
    GuardedOutput,
    Runner,
    make_inputs,
    make_outputs,
    plan_checks,
    refill_inputs,
    run_check,
    shapes_of,
    tolerance_for,
    verify,
)

if TYPE_CHECKING:
    from app.gpu.worker import WorkerFault, WorkerReply

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


@dataclass
class TimerResult:
    """What a backend's timer measured for one shape: statistics per timed call ("candidate"
    plus baselines), and how it measured (metrics are numbers, resources are labels)."""

    stats: dict[str, TimingStats]
    metrics: dict[str, float] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)


class CascadeBackend(Protocol):
    """What a backend supplies to the cascade (all of it runs in the worker process)."""

    xp: Any  # the array module verification runs on: numpy or cupy

    def static_check(self, source: str, config: dict[str, Any], shapes: list[list[int]]) -> list[str]: ...
    def build(self, source: str, config: dict[str, Any], shapes: list[list[int]]) -> Built:
        """Compile for every shape the candidate will run (raises StageFailed)."""
        ...
    def check_resources(self, built: Built, config: dict[str, Any]) -> dict[str, Any]: ...
    def load(self, built: Built) -> Runner: ...
    def timing_calls(self, runner: Runner, inputs: dict[str, Any], outputs: dict[str, GuardedOutput],
                     shape: tuple[int, ...]) -> dict[str, Callable[[], None]]:
        """Zero-argument calls to time, interleaved: "candidate" plus baselines by name."""
        ...
    def timer(self, calls: dict[str, Callable[[], None]], settings: Any) -> TimerResult:
        """The backend's timing protocol (request.timing is its settings)."""
        ...
    def fault(self, exc: BaseException) -> StageFailed | None:
        """A device error as a stage failure (None: not the backend's kind of error)."""
        ...
    def release(self) -> None:
        """Free cached device memory between stages (a no-op on the CPU)."""
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
    timing: Any = None  # the backend timer's settings (TimingSettings, cuda Protocol)
    agent: str = ""
    parent_key: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # backend specifics (limits, baseline)


def run_cascade(request: CascadeRequest, op: Operator, backend: CascadeBackend,
                progress: Progress = lambda name: None,
                throughput: Callable[[tuple[int, ...], float], float] | None = None,
                ) -> tuple[Evaluation, bool]:
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
            result, detail = fn()
        except StageFailed as exc:
            stages.append(Stage(name, False, time.perf_counter() - t0, exc.detail))
            raise
        stages.append(Stage(name, True, time.perf_counter() - t0, detail))
        return result

    restart = False
    try:
        cases = plan_checks(op, request.goal_shapes, request.params, request.dtype,
                            request.validation_cases, seed=request.seed)
        shapes = shapes_of(request.goal_shapes, cases)
        stage("static_check", lambda: _static(backend, source, request.config, shapes))
        built = stage("compile", lambda: _build(backend, source, request.config, shapes))
        ev.resources["build_key"] = built.key
        ev.log = built.log
        ev.resources.update(stage("resources", lambda: (backend.check_resources(built, request.config), "")))
        runner = backend.load(built)
        stage("verify", lambda: _verify(op, backend, runner, cases, request))
        backend.release()
        timed = stage("time", lambda: (_time(op, backend, runner, request), ""))
        stage("reverify", lambda: _reverify(op, backend, runner, timed, request))
        _fill_result(ev, timed, request, throughput)
        ev.ok = True
    except StageFailed as exc:
        _failed(ev, exc)
        restart = exc.restart
    except Exception as exc:  # noqa: BLE001 - a harness or loader error must still be an evaluation
        known = backend.fault(exc)
        if known is None and isinstance(exc, MemoryError):
            known = StageFailed(OUT_OF_MEMORY, "ran out of memory in the worker", restart=True)
        if known is not None:
            stages.append(Stage(_next_stage(stages), False, 0.0, known.detail))
            _failed(ev, known)
            restart = known.restart
        else:
            ev.reason, ev.detail = RUNTIME_FAILED, f"{type(exc).__name__}: {exc}"
            ev.log = "\n".join(x for x in (ev.log, traceback.format_exc()) if x)
            stages.append(Stage(_next_stage(stages), False, 0.0, ev.detail))
            restart = True
    ev.stages = stages
    ev.sim_seconds = time.perf_counter() - t_start
    try:
        backend.release()
    except Exception:  # noqa: BLE001 - a poisoned context is restarted anyway
        restart = True
    return ev, restart


def _failed(ev: Evaluation, exc: StageFailed) -> None:
    ev.reason, ev.detail = exc.reason, exc.detail
    ev.log = "\n".join(x for x in (ev.log, exc.log) if x)
    ev.failing_case = exc.failing_case


# ---- the engine side: a worker's reply as an Evaluation ----------------------------------
def evaluation_from_fault(fault: WorkerFault, **base: Any) -> Evaluation:
    """The worker died or was killed: stages done before, then the one it died in."""
    stages = [Stage(name, True, secs) for name, secs in fault.completed]
    stages.append(Stage(fault.stage, False, fault.stage_seconds, fault.detail))
    return Evaluation(ok=False, reason=fault.reason, detail=fault.detail, log=fault.log,
                      stages=stages, **base)


def evaluation_from_reply(reply: WorkerReply, **base: Any) -> Evaluation:
    """A worker's answer to an "evaluate" request (a serialised Evaluation, or a fault)."""
    if reply.fault is not None:
        return evaluation_from_fault(reply.fault, **base)
    ev = Evaluation.from_dict(reply.result["evaluation"])
    if reply.log.strip():
        ev.log = "\n".join(x for x in (ev.log, "--- worker output ---\n" + reply.log) if x)
    return ev


def _next_stage(done: list[Stage]) -> str:
    return STAGES[min(len(done), len(STAGES) - 1)]


def _static(backend: CascadeBackend, source: str, config: dict[str, Any],
            shapes: list[list[int]]) -> tuple[None, str]:
    problems = backend.static_check(source, config, shapes)
    if problems:
        raise StageFailed(STATIC_CHECK, "; ".join(problems))
    return None, ""


def _build(backend: CascadeBackend, source: str, config: dict[str, Any],
           shapes: list[list[int]]) -> tuple[Built, str]:
    built = backend.build(source, config, shapes)
    return built, "cached" if built.cached else ""


def _verify(op: Operator, backend: CascadeBackend, runner: Runner, cases: list[CheckCase],
            request: CascadeRequest) -> tuple[None, str]:
    failure = verify(backend.xp, op, runner, cases, request.dtype, request.rtol, request.atol)
    if failure is not None:
        raise StageFailed(VERIFY_FAILED, f"{failure.check}: {failure.problem} "
                          f"(shape {failure.case.shape}, {failure.case.distribution} inputs, "
                          f"seed {failure.case.seed})",
                          failing_case=failure.failing_case(op.name, request.dtype),
                          restart=failure.corrupted_memory)
    return None, f"{len(cases)} checks passed"


@dataclass
class _Timed:
    shape: tuple[int, ...]
    inputs: dict[str, Any]
    outputs: dict[str, GuardedOutput]
    result: TimerResult


def _time(op: Operator, backend: CascadeBackend, runner: Runner,
          request: CascadeRequest) -> list[_Timed]:
    rng = np.random.default_rng(request.seed + 7)
    timed = []
    for shape in request.goal_shapes:
        case = CheckCase(list(shape), "normal", int(rng.integers(2**31)), "timing")
        inputs = make_inputs(backend.xp, op, case, request.dtype)
        outputs = make_outputs(backend.xp, op, shape, request.dtype)
        calls = backend.timing_calls(runner, inputs, outputs, tuple(shape))
        timed.append(_Timed(tuple(shape), inputs, outputs, backend.timer(calls, request.timing)))
    return timed


def _reverify(op: Operator, backend: CascadeBackend, runner: Runner, timed: list[_Timed],
              request: CascadeRequest) -> tuple[None, str]:
    """Fresh values in the timed buffers (same addresses) must give fresh, correct results."""
    rng = np.random.default_rng(request.seed + 11)
    for t in timed:
        case = CheckCase(list(t.shape), "normal", int(rng.integers(2**31)), "reverify")
        refill_inputs(backend.xp, op, t.inputs, case, request.dtype)
        tol = tolerance_for(op, t.shape, request.dtype, request.rtol, request.atol)
        problem, corrupted = run_check(backend.xp, op, runner, t.inputs, t.outputs, t.shape,
                                       request.dtype, tol)
        if problem:
            raise StageFailed(VERIFY_FAILED, f"reverify: {problem} (shape {list(t.shape)}, "
                              f"{case.distribution} inputs, seed {case.seed})", restart=corrupted,
                              failing_case={**case.to_dict(), "operator": op.name,
                                            "dtype": request.dtype, "check": "reverify",
                                            "problem": problem})
    return None, f"{len(timed)} fresh inputs after timing"


def _fill_result(ev: Evaluation, timed: list[_Timed], request: CascadeRequest,
                 throughput: Callable[[tuple[int, ...], float], float] | None) -> None:
    cand = [t.result.stats["candidate"] for t in timed]
    ev.time_ms = sum(s.median_ms for s in cand)
    ev.p10_ms = sum(s.p10_ms for s in cand)
    ev.p90_ms = sum(s.p90_ms for s in cand)
    ev.samples_ms = list(cand[0].samples_ms) if len(cand) == 1 else [
        sum(vals) for vals in zip(*(s.samples_ms for s in cand))]
    baselines = [n for n in timed[0].result.stats if n != "candidate"]
    for name in baselines:
        base_ms = sum(t.result.stats[name].median_ms for t in timed)
        ev.metrics[f"{name}_ms"] = base_ms
        if ev.time_ms > 0:
            ev.metrics[f"speedup_vs_{name}"] = base_ms / ev.time_ms
    ev.metrics["spread"] = max(s.spread for s in cand)
    ev.metrics["samples"] = float(min(len(s.samples_ms) for s in cand))
    for t in reversed(timed):  # the first goal shape's labels win; numbers: the worst shape
        ev.resources.update(t.result.resources)
    for t in timed:
        for k, v in t.result.metrics.items():
            ev.metrics[k] = max(v, ev.metrics.get(k, v))
    rate = None
    if throughput is not None and ev.time_ms > 0:
        rate = sum(throughput(t.shape, 1.0) for t in timed) / (ev.time_ms / 1000.0)
        ev.metrics["throughput"] = rate
    ev.value = rate if request.metric == "throughput" and rate is not None else ev.time_ms
