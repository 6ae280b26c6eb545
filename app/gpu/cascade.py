"""The evaluation cascade shared by every compiling backend (cpu and cuda); it runs inside the
backend's worker process.

static checks -> compile (cached by candidate key) -> resource limits -> load -> verify ->
time (the backend's timer, on rotating input slots with outputs poisoned before every call and
checked after: app.gpu.timed_slots; a figure beyond the hardware roof is held to a roof measured
again beside it, re-timed once, then refused: app.gpu.roof_check) -> re-verify on fresh inputs
written into the very buffers that were timed. A backend supplies the hooks (CascadeBackend);
the verification is app.gpu.verify on the backend's array module. Each stage's outcome and
duration lands in `Evaluation.stages` (loading the candidate counts in verify); the first
failing stage ends the cascade with its reason. An evaluator adds its own stages around the
worker's (account_stages, ENGINE_STAGES) so that together they account for its wall time. Before each stage the cascade reports the stage's name (`progress`), so the parent's
watchdog applies the compile or the run deadline and can name the stage a crash happened in.
"""

from __future__ import annotations

import os
import re
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from app.catalog.protocol import Operator
from app.core.types import (
    OUT_OF_MEMORY,
    RUNTIME_FAILED,
    STATIC_CHECK,
    SUSPECT,
    VERIFY_FAILED,
    Evaluation,
    Stage,
)
from app.gpu.probe import case_label, check_crafted, is_crafted, probe_cases
from app.gpu.roof_check import RoofCheck, beyond
from app.gpu.timed_slots import TimedSlots
from app.gpu.timing import TimingStats
from app.gpu.verify import (
    CheckCase,
    GuardedOutput,
    Runner,
    plan_checks,
    refill_inputs,
    run_check,
    shapes_of,
    tolerance_for,
    verify,
)

if TYPE_CHECKING:
    from app.gpu.worker import WorkerReply

NOISY_SPREAD = 0.15  # (p90 - p10) / median above this: the measurement is noisy
STAGES = ("static_check", "compile", "resources", "verify", "time", "reverify")
# stages an evaluator adds around the worker's (account_stages): where the rest of the time went
ENGINE_STAGES = frozenset({"baselines", "roofs", "wait_worker", "worker_start", "exchange"})

Progress = Callable[[str], None]


class StageFailed(Exception):
    """A stage rejected the candidate (reason from app.core.types)."""

    def __init__(self, reason: str, detail: str, log: str = "",
                 failing_case: dict[str, Any] | None = None, restart: bool = False,
                 metrics: dict[str, float] | None = None,
                 resources: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.log = reason, detail, log
        self.failing_case, self.restart = failing_case, restart
        # figures a refusal carries (measured_ms, roof_ms and the roof's label)
        self.metrics, self.resources = metrics or {}, resources or {}


@dataclass
class Built:
    """A compiled candidate: what to load, and what the build said about itself."""

    artifact: Any
    key: str
    cached: bool = False
    log: str = ""
    command: str = ""  # the compiler command, as shown to the user (no local paths)


@dataclass
class TimerResult:
    """What a backend's timer measured for one shape: statistics per timed call ("candidate"
    plus baselines), and how it measured (metrics are numbers, resources are labels)."""

    stats: dict[str, TimingStats]
    metrics: dict[str, float] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    comparable_to_roof: bool = True  # False: warm-cache or graph figures, not held to the roof


class CascadeBackend(Protocol):
    """What a backend supplies to the cascade (all of it runs in the worker process)."""

    xp: Any  # the array module verification runs on: numpy or cupy

    def static_check(self, source: str, config: dict[str, Any], shapes: list[list[int]]) -> list[str]: ...
    def build(self, source: str, config: dict[str, Any], shapes: list[list[int]]) -> Built:
        """Compile for every shape the candidate will run (raises StageFailed)."""
    def check_resources(self, built: Built, config: dict[str, Any]) -> dict[str, Any]: ...
    def load(self, built: Built) -> Runner: ...
    def timing_calls(self, runner: Runner, inputs: dict[str, Any], outputs: dict[str, GuardedOutput],
                     shape: tuple[int, ...]) -> dict[str, Callable[[], None]]:
        """Zero-argument calls to time, interleaved: "candidate" plus baselines by name."""
    def timer(self, calls: dict[str, Callable[[], None]], settings: Any,
              before: Callable[[str], None] | None = None) -> TimerResult:
        """The backend's timing protocol (request.timing is its settings); `before(name)` runs
        before each call of `name`, outside the timed window."""
    def fault(self, exc: BaseException) -> StageFailed | None:
        """A device error as a stage failure (None: not the backend's kind of error)."""
    def release(self) -> None:
        """Free cached device memory between stages (a no-op on the CPU)."""
    def measure_roof(self, check: RoofCheck) -> dict[str, float] | None:
        """GB/s of each level in `check` (GFLOP/s of the peak for a compute-bound check),
        measured now beside the candidate at its thread count (None: this backend cannot, its
        figure is held to the cached roof)."""


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
    # the fastest time the hardware allows for the goal's shapes (ms; None: no roof known) and
    # how it was found ("L2 roof 210 GB/s at 4 threads"): a faster figure is re-timed, then refused
    roof_ms: float | None = None
    roof_detail: str = ""
    # cpu goals: the roof per shape and level (memory levels, or the FP32 peak for a compute-
    # bound operator), measured again before a refusal
    roof_check: RoofCheck | None = None
    # the adversary's probe (app.gpu.probe): run the candidate on these cases only, untimed,
    # and score each; None: the whole cascade
    probe_cases: list[dict[str, Any]] | None = None


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
        # crafted cases (the adversary's, app.gpu.probe) are checked by their own steps
        crafted = [c for c in request.validation_cases if is_crafted(c)]
        plain = [c for c in request.validation_cases if not is_crafted(c)]
        cases = plan_checks(op, request.goal_shapes, request.params, request.dtype,
                            plain, seed=request.seed)
        extra = [CheckCase(list(c["shape"]), "normal", 0) for c in
                 (request.probe_cases if request.probe_cases is not None else crafted)
                 if isinstance(c.get("shape"), list)]
        shapes = shapes_of(request.goal_shapes if request.probe_cases is None else [],
                           extra + ([] if request.probe_cases is not None else cases))
        stage("static_check", lambda: _static(backend, source, request.config, shapes))
        built = stage("compile", lambda: _build(backend, source, request.config, shapes))
        ev.resources["build_key"] = built.key
        if built.command:
            ev.resources["compile_command"] = built.command
        ev.log = built.log
        ev.resources.update(stage("resources", lambda: (backend.check_resources(built, request.config), "")))
        if request.probe_cases is not None:  # a probe ends after its probe stage: no timing
            ev.resources["probe"] = stage("probe", lambda: _probe(op, backend, built, request))
            restart = any(r.get("corrupted") for r in ev.resources["probe"])
        else:
            runner = stage("verify", lambda: _verify(op, backend, built, cases, request, crafted))
            backend.release()
            timed = stage("time", lambda: _time(op, backend, runner, request, request.seed + 7))
            timed, roof = _hold_to_roof(op, backend, runner, request, timed, stage)
            stage("reverify", lambda: _reverify(op, backend, runner, timed, request))
            _fill_result(ev, timed, request, throughput, roof)
        ev.ok = True
    except StageFailed as exc:
        _failed(ev, exc)
        restart = exc.restart
    except Exception as exc:  # noqa: BLE001 - a harness or loader error must still be an evaluation
        known = backend.fault(exc)
        if known is None and isinstance(exc, MemoryError):
            known = StageFailed(OUT_OF_MEMORY, "ran out of memory in the worker", restart=True)
        if known is None:
            # a loader's or the harness's message: nothing of this machine goes into the log
            known = StageFailed(RUNTIME_FAILED, scrub(f"{type(exc).__name__}: {exc}"),
                                log=scrub(traceback.format_exc()), restart=True)
        # the stage after the last one done: the one it failed in
        stages.append(Stage(STAGES[min(len(stages), len(STAGES) - 1)], False, 0.0, known.detail))
        _failed(ev, known)
        restart = known.restart
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
    ev.metrics.update(exc.metrics)
    ev.resources.update(exc.resources)


# ---- the engine side: a worker's reply as an Evaluation ----------------------------------
def evaluation_from_reply(reply: WorkerReply, **base: Any) -> Evaluation:
    """A worker's answer to an "evaluate" request (a serialised Evaluation, or a fault: the
    worker died or was killed, stages done before, then the one it died in)."""
    if (fault := reply.fault) is not None:
        stages = [Stage(name, True, secs) for name, secs in fault.completed]
        stages.append(Stage(fault.stage, False, fault.stage_seconds, fault.detail))
        return Evaluation(ok=False, reason=fault.reason, detail=fault.detail,
                          log=scrub(fault.log), stages=stages, **base)
    ev = Evaluation.from_dict(reply.result["evaluation"])
    if reply.log.strip():
        ev.log = "\n".join(x for x in (ev.log, "--- worker output ---\n" + reply.log) if x)
    ev.log = scrub(ev.log)  # again here: the parent knows the user's name, a sealed worker may not
    return ev


def probe_results(reply: WorkerReply, n: int) -> list[dict[str, Any]]:
    """A probe request's answer: one scored result per case. A kernel that crashed, hung or
    failed to build on the probe fails every case of it (the adversary probes them one by one
    to find which), with the reason as its problem."""
    ev = evaluation_from_reply(reply, key="", config={})
    results = list(ev.resources.get("probe") or []) if ev.ok else []
    if not ev.ok:
        return [{"score": float("inf"), "problem": f"{ev.reason}: {ev.detail}", "fault": True,
                 "corrupted": False}] * n
    return results + [{"score": None, "problem": "", "corrupted": False,
                       "skipped": "after a case that corrupted memory"}] * (n - len(results))


def account_stages(ev: Evaluation, before: Sequence[Stage], reply: WorkerReply,
                   wall_s: float) -> None:
    """The evaluation's stages around the worker's own, so that together they account for its
    wall time `wall_s`: the engine's stages `before` the request (baselines, roofs), waiting
    for a worker and starting one, the worker's stages, then "exchange": the rest of the
    request's `call_s` (the request out, the result back, the worker's bookkeeping) and the
    engine's own after it."""
    pre = list(before)
    if reply.waited_s >= 0.001:
        pre.append(Stage("wait_worker", True, reply.waited_s, "another request held the worker"))
    if reply.started_s >= 0.001:
        pre.append(Stage("worker_start", True, reply.started_s, "a fresh worker process"))
    rest = max(0.0, wall_s - sum(st.seconds for st in (*pre, *ev.stages)))
    # before the worker's stages: a failed evaluation still ends with the stage that failed
    pre.append(Stage("exchange", True, rest, "request and result between the engine and the "
                     "worker"))
    ev.stages = [*pre, *ev.stages]
    ev.sim_seconds = wall_s


def scrub(text: str, keep: Sequence[str] = ()) -> str:
    """Compiler and loader output with nothing of this machine in it: paths outside the
    candidate's own file, the user's name and home directory."""
    for path in sorted(keep, key=len, reverse=True):
        text = text.replace(path, "kernel.c")
    text = re.sub(r"(?<![\w.])/(?:[\w.+@~-]+/)+([\w.+@~-]+)", r"<path>/\1", text)
    home = os.path.expanduser("~")
    if home and home != "/":
        text = text.replace(home, "~")
    for user in _user_names():
        text = re.sub(rf"\b{re.escape(user)}\b", "<user>", text)
    return text


def _user_names() -> set[str]:
    """The user's name as this process knows it (never a passwd lookup: NSS may open a socket,
    which a sealed worker may not)."""
    names = {os.environ.get("USER"), os.environ.get("LOGNAME")}
    home = os.path.expanduser("~")
    if home.startswith(("/home/", "/Users/")):
        names.add(os.path.basename(home.rstrip("/")))
    return {n for n in names if n and len(n) > 2}


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


def _probe(op: Operator, backend: CascadeBackend, built: Built, request: CascadeRequest
           ) -> tuple[list[dict[str, Any]], str]:
    """The adversary's probe: the candidate on the given cases only, each scored."""
    runner = backend.load(built)
    results = probe_cases(backend.xp, op, runner, request.probe_cases or [], request.dtype,
                          request.rtol, request.atol)
    failed = sum(1 for r in results if r.get("problem"))
    return results, f"{len(results)} inputs probed, {failed} failed"


def _verify(op: Operator, backend: CascadeBackend, built: Built, cases: list[CheckCase],
            request: CascadeRequest, crafted: Sequence[dict[str, Any]] = ()) -> tuple[Runner, str]:
    """Load the candidate (its process, on the cpu) and check it on every case: the crafted
    validation cases first (they once broke a kernel), then the planned ones."""
    t0 = time.perf_counter()
    runner = backend.load(built)
    loaded_s = time.perf_counter() - t0
    broke = check_crafted(backend.xp, op, runner, crafted, request.dtype, request.rtol,
                          request.atol)
    if broke is not None:
        data, problem, corrupted = broke
        raise StageFailed(VERIFY_FAILED, f"verify: {problem} (shape {list(data['shape'])}, "
                          f"crafted case {case_label(data)})",
                          failing_case=dict(data), restart=corrupted)
    failure = verify(backend.xp, op, runner, cases, request.dtype, request.rtol, request.atol)
    if failure is not None:
        raise StageFailed(VERIFY_FAILED, f"{failure.check}: {failure.problem} "
                          f"(shape {failure.case.shape}, {failure.case.distribution} inputs, "
                          f"seed {failure.case.seed})",
                          failing_case=failure.failing_case(op.name, request.dtype),
                          restart=failure.corrupted_memory)
    return runner, (f"{len(cases) + len(crafted)} checks passed (loading took "
                    f"{loaded_s:.2f} s)")


@dataclass
class _Timed:
    shape: tuple[int, ...]
    slots: TimedSlots
    result: TimerResult


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _time(op: Operator, backend: CascadeBackend, runner: Runner, request: CascadeRequest,
          seed: int) -> tuple[list[_Timed], str]:
    """Time every goal shape on rotating slots, then check what the timed calls wrote; the
    machine's load before and after goes with the first shape's figures."""
    load_before = _load()
    rng = np.random.default_rng(seed)
    timed = []
    for shape in request.goal_shapes:
        shape_t = tuple(int(d) for d in shape)
        slots = TimedSlots(backend.xp, op, shape_t, request.dtype, int(rng.integers(2**31)),
                           lambda i, o, s=shape_t: backend.timing_calls(runner, i, o, s))
        result = backend.timer(slots.calls(), request.timing, slots.before)
        tol = tolerance_for(op, shape_t, request.dtype, request.rtol, request.atol)
        problem = slots.check(tol)
        if problem:
            raise StageFailed(VERIFY_FAILED, f"outputs of a timed call were wrong: {problem} "
                              f"(shape {list(shape_t)})")
        timed.append(_Timed(shape_t, slots, result))
    load_after = _load()
    if timed and load_before is not None and load_after is not None:
        timed[0].result.metrics.update(load_before=load_before, load_after=load_after)
    return timed, ""


def _candidate_ms(timed: list[_Timed]) -> float:
    return sum(t.result.stats["candidate"].median_ms for t in timed)


def _hold_to_roof(op: Operator, backend: CascadeBackend, runner: Runner, request: CascadeRequest,
                  timed: list[_Timed], stage: Callable[[str, Callable[[], Any]], Any]
                  ) -> tuple[list[_Timed], tuple[float, str] | None]:
    """A figure beyond the cached roof: the roof measured again beside it, then a re-timing,
    then a refusal only beyond the highest roof seen (app.gpu.roof_check). (timed, (roof ms,
    roof label)) for the figure that stands."""
    check = request.roof_check
    roof_ms = check.roof_ms() if check else request.roof_ms
    label = check.label() if check else request.roof_detail
    comparable = all(t.result.comparable_to_roof for t in timed)
    if not roof_ms:
        return timed, None
    if not comparable or beyond(_candidate_ms(timed), roof_ms) is None:
        return timed, (roof_ms, label)

    def measure_again() -> tuple[tuple[float, str], str]:
        got = backend.measure_roof(check) if check else None
        if got:
            check.raise_to(got)
            return (check.roof_ms(), check.label()), ", ".join(
                f"{lv} {rate:.1f} {check.unit}" for lv, rate in got.items()
            ) + f" at {check.threads} thread(s)"
        return (roof_ms, label), "no fresh measurement on this backend"

    if check is not None:
        roof_ms, label = stage("roof", measure_again)
        if beyond(_candidate_ms(timed), roof_ms) is None:
            return timed, (roof_ms, label)
    backend.release()
    timed = stage("retime", lambda: _time(op, backend, runner, request, request.seed + 13))

    def judge() -> tuple[tuple[float, str], str]:
        roof, detail = measure_again() if check is not None else ((roof_ms, label), "")
        ms = _candidate_ms(timed)
        factor = beyond(ms, roof[0])
        if factor is not None and all(t.result.comparable_to_roof for t in timed):
            raise StageFailed(SUSPECT, f"measured {ms:.4g} ms, {factor:.2f}x faster than the "
                              f"hardware allows ({roof[1]}: at least {roof[0]:.4g} ms), twice: "
                              "the kernel skips work or the timing is wrong",
                              metrics={"measured_ms": ms, "roof_ms": roof[0],
                                       **({check.metric: check.rate(check.shapes[0][1])}
                                          if check is not None else {})},
                              resources={"roof": roof[1]})
        return roof, detail or "the re-timed figure is within the roof"

    # judged beside a fresh measurement of the roof where the backend has one
    return timed, stage("roof", judge)


def _reverify(op: Operator, backend: CascadeBackend, runner: Runner, timed: list[_Timed],
              request: CascadeRequest) -> tuple[None, str]:
    """Fresh values in the timed buffers (same addresses) must give fresh, correct results."""
    rng = np.random.default_rng(request.seed + 11)
    for t in timed:
        case = CheckCase(list(t.shape), "normal", int(rng.integers(2**31)), "reverify")
        slot = t.slots.first
        if op.inputs_vary:  # stored or fixed inputs: these are the values
            refill_inputs(backend.xp, op, slot.inputs, case, request.dtype)
        tol = tolerance_for(op, t.shape, request.dtype, request.rtol, request.atol)
        problem, corrupted = run_check(backend.xp, op, runner, slot.inputs, slot.outputs, t.shape,
                                       request.dtype, tol)
        if problem:
            raise StageFailed(VERIFY_FAILED, f"reverify: {problem} (shape {list(t.shape)}, "
                              f"{case.distribution} inputs, seed {case.seed})", restart=corrupted,
                              failing_case={**case.to_dict(), "operator": op.name,
                                            "dtype": request.dtype, "check": "reverify",
                                            "problem": problem})
    return None, f"{len(timed)} fresh inputs after timing"


def _fill_result(ev: Evaluation, timed: list[_Timed], request: CascadeRequest,
                 throughput: Callable[[tuple[int, ...], float], float] | None,
                 roof: tuple[float, str] | None) -> None:
    cand = [t.result.stats["candidate"] for t in timed]
    ev.time_ms = sum(s.median_ms for s in cand)
    ev.p10_ms = sum(s.p10_ms for s in cand)
    ev.p90_ms = sum(s.p90_ms for s in cand)
    ev.samples_ms = list(cand[0].samples_ms) if len(cand) == 1 else [
        sum(vals) for vals in zip(*(s.samples_ms for s in cand))]
    for name in [n for n in timed[0].result.stats if n != "candidate"]:  # the baselines
        base_ms = sum(t.result.stats[name].median_ms for t in timed)
        ev.metrics[f"{name}_ms"] = base_ms
        if ev.time_ms > 0:
            ev.metrics[f"speedup_vs_{name}"] = base_ms / ev.time_ms
    ev.metrics["spread"] = max(s.spread for s in cand)
    ev.metrics["samples"] = float(min(len(s.samples_ms) for s in cand))
    ev.metrics["cpu_count"] = float(os.cpu_count() or 1)
    for t in reversed(timed):  # the first goal shape's labels win; numbers: the worst shape
        ev.resources.update(t.result.resources)
    for t in timed:
        for k, v in t.result.metrics.items():
            ev.metrics[k] = max(v, ev.metrics.get(k, v))
    load = max(ev.metrics.get("load_before", 0.0), ev.metrics.get("load_after", 0.0))
    noisy = (load > ev.metrics["cpu_count"] * 0.5 or ev.metrics["spread"] > NOISY_SPREAD
             or ev.metrics.get("throttled_discarded", 0.0) > 0)
    ev.metrics["noisy"] = 1.0 if noisy else 0.0
    if roof and ev.time_ms > 0:  # the one fraction of the hardware, named by its roof
        ev.metrics["fraction_of_roof"] = roof[0] / ev.time_ms
        ev.resources["roof"] = roof[1]
        check = request.roof_check
        if check is not None:  # the level's GB/s (GFLOP/s), raised by a fresh measurement
            ev.metrics[check.metric] = check.rate(check.shapes[0][1])
    rate = None
    if throughput is not None and ev.time_ms > 0:
        rate = sum(throughput(t.shape, 1.0) for t in timed) / (ev.time_ms / 1000.0)
        ev.metrics["throughput"] = rate
    ev.value = rate if request.metric == "throughput" and rate is not None else ev.time_ms
