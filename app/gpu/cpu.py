"""CPU backend: catalog operators as C11 + OpenMP kernels built by the system C compiler.

The engine process never loads a candidate. It sends each candidate to a worker process
(app.gpu.worker) where the cascade (app.gpu.cascade) checks the source, compiles it into a
shared library in the cache directory (one file per candidate key), checks what the library
imports, loads it with ctypes, verifies it (app.gpu.verify), times it against numpy interleaved
(app.gpu.timing) and verifies it again. A plain C reference loop and numpy are measured once
per run as baselines.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import os
import platform
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import app.gpu.custom_reference  # noqa: F401 - reference kernel runners (custom goals)
from app.catalog import get_operator
from app.catalog.cpu.operator import ENTRY_SYMBOL, REFERENCE_SOURCE, CpuOperator, kernel_source
from app.catalog.custom import custom_operator
from app.core.evaluator import BackendUnavailable, DeviceInfo, Evaluator
from app.core.space import SearchSpace, config_key
from app.core.types import (
    COMPILE_FAILED,
    CRASH,
    INVALID,
    RESOURCE_LIMIT,
    RUNTIME_FAILED,
    SUSPECT,
    TIMEOUT,
    Candidate,
    Evaluation,
    Stage,
)
from app.goal import Goal, GoalError
from app.gpu import c_checks, cpu_roof, sandbox
from app.gpu.cascade import (
    Built,
    CascadeRequest,
    StageFailed,
    TimerResult,
    evaluation_from_reply,
    run_cascade,
    scrub,
)
from app.gpu.kernel_host import (
    ArrayArg,
    ForgedTiming,
    HostDied,
    HostError,
    InProcessHost,
    KernelHost,
    Scalar,
    host_binary,
    host_supported,
)
from app.gpu.timed_slots import TimedSlots
from app.gpu.timing import (
    CacheFlusher,
    TimingSettings,
    add_shape_figures,
    summarize,
    time_interleaved,
)
from app.gpu.verify import CheckCase, GuardedOutput, ValidationSet, make_inputs, tolerance_for
from app.gpu.worker import Deadlines, WorkerPool
from app.paths import cache_dir

BASE_FLAGS = ("-O3", "-march=native", "-std=c11", "-shared", "-fPIC")
MAX_SOURCE_BYTES = 200_000
# OpenBLAS's workers spin 2^28 TSC cycles after a call (measured 0.105 s of CPU here): the
# pause before timing the other contestant, with room for a slower clock
BLAS_SETTLE_S = 0.15
# Re-timing two candidates (CpuEvaluator.retime_pair): blocks per candidate, in ABBA order.
RETIME_BLOCKS = 4
# ---- the compiler -------------------------------------------------------------------------
@dataclass(frozen=True)
class Toolchain:
    compiler: str
    identity: str  # first line of `cc --version`: part of every candidate key
    openmp: bool

    @property
    def flags(self) -> tuple[str, ...]:
        return BASE_FLAGS + (("-fopenmp",) if self.openmp else ())


def find_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


@functools.lru_cache(maxsize=4)
def toolchain(compiler: str | None = None) -> Toolchain:
    """The machine's C toolchain; BackendUnavailable with a plain message when there is none."""
    compiler = compiler or find_compiler()
    if not compiler:
        raise BackendUnavailable(
            "The CPU backend needs a C compiler and none was found (looked for $CC, cc, gcc and "
            "clang on PATH). Install gcc or clang, or choose the replay backend (recorded spaces) "
            "or the cuda backend.")
    try:
        version = subprocess.run([compiler, "--version"], check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendUnavailable(f"The C compiler {compiler} does not run ({exc}); the CPU backend "
                                 "needs a working C compiler.") from None
    identity = (version.stdout or version.stderr).strip().splitlines()[0] if version.returncode == 0 else compiler
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text("#include <omp.h>\nint ks_probe(void) { return omp_get_max_threads(); }\n")
        probe = subprocess.run([compiler, *BASE_FLAGS, "-fopenmp", str(src), "-o", str(Path(tmp) / "p.so")],
                               check=False, capture_output=True, text=True, timeout=60)
    return Toolchain(compiler, identity, probe.returncode == 0)


def build_key(op: CpuOperator, config: dict[str, Any], source: str, tc: Toolchain) -> str:
    """What actually runs: parameters, final source, flags, compiler."""
    return config_key(config, extra={"operator": op.name,
                                     "source": hashlib.sha256(source.encode()).hexdigest(),
                                     "flags": " ".join(tc.flags), "compiler": tc.identity})


def static_problems(source: str, tc: Toolchain, defines: dict[str, Any] | None = None,
                    entry: str = ENTRY_SYMBOL) -> list[str]:
    """What the compiler's preprocessor makes of `source`: vetted includes only, no forbidden
    construct in the candidate's own expanded code (app.gpu.c_checks)."""
    return c_checks.check_source(source, tc.compiler, tc.flags, defines or {}, entry,
                                 max_bytes=MAX_SOURCE_BYTES)


def compile_library(source: str, defines: dict[str, Any], out: Path, tc: Toolchain,
                    timeout_s: float) -> tuple[bool, str]:
    """Build `source` into `out` (atomically); (ok, compiler output)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_src = tempfile.mkstemp(suffix=".c", dir=out.parent)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    tmp_out = f"{tmp_src[:-2]}.so"
    cmd = [tc.compiler, *tc.flags, *(f"-D{k}={v}" for k, v in defines.items()), tmp_src, "-o", tmp_out]
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout_s)
        log = scrub(proc.stderr, keep=(tmp_src,))
        if proc.returncode != 0:
            return False, log
        os.replace(tmp_out, out)
        return True, log
    except subprocess.TimeoutExpired:
        return False, f"the compiler ran longer than {timeout_s:g} s"
    finally:
        for p in (tmp_src, tmp_out):
            if os.path.exists(p):
                os.unlink(p)


def compile_command(defines: dict[str, Any], tc: Toolchain) -> str:
    """The compiler command a candidate is built with, as a user would type it (no paths)."""
    return " ".join([os.path.basename(tc.compiler), *tc.flags,
                     *(f"-D{k}={v}" for k, v in defines.items()), "kernel.c", "-o", "kernel.so"])


def kernels_dir() -> Path:
    return cache_dir() / "cpu-kernels"


# ---- the worker side ----------------------------------------------------------------------
class CpuKernelBackend:
    """The cascade's CPU hooks (app.gpu.cascade.CascadeBackend); lives in the worker process."""

    xp = np

    def __init__(self, op: CpuOperator, tc: Toolchain, compile_timeout_s: float,
                 flusher: CacheFlusher | None = None,
                 host: KernelHost | InProcessHost | None = None) -> None:
        self.op, self.tc, self.compile_timeout_s = op, tc, compile_timeout_s
        self.flusher = flusher
        self.host = host  # where candidates run (app.gpu.kernel_host); None: in this process

    def static_check(self, source: str, config: dict[str, Any] | None = None,
                     shapes: Sequence[Sequence[int]] = ()) -> list[str]:
        return static_problems(source, self.tc, dict(config or {}), self.op.entry())

    def build(self, source: str, config: dict[str, Any], shapes: Sequence[Sequence[int]] = ()) -> Built:
        """One library serves every shape (dimensions are call arguments)."""
        key = build_key(self.op, config, source, self.tc)
        lib = kernels_dir() / f"{self.op.name}-{key}.so"
        command = compile_command(config, self.tc)
        if lib.exists():
            return Built(lib, key, cached=True, command=command)
        ok, log = compile_library(source, config, lib, self.tc, self.compile_timeout_s)
        if not ok:
            reason = TIMEOUT if "ran longer" in log else COMPILE_FAILED
            first = next((line for line in log.splitlines() if "error" in line), log.strip()[:300])
            raise StageFailed(reason, f"compile error: {first.strip()}", log=f"$ {command}\n{log}")
        return Built(lib, key, cached=False, log=log, command=command)

    def check_resources(self, built: Built, config: dict[str, Any]) -> dict[str, Any]:
        info: dict[str, Any] = {"library_bytes": built.artifact.stat().st_size}
        threads = int(config.get("THREADS", 1))
        if threads > (os.cpu_count() or 1):
            raise StageFailed(RESOURCE_LIMIT, f"asks for {threads} threads; this machine has "
                              f"{os.cpu_count()} cores")
        problems = c_checks.library_problems(built.artifact, self.tc.compiler, self.tc.flags)
        if problems:
            raise StageFailed(RESOURCE_LIMIT, "the kernel library " + "; ".join(problems))
        return info

    def load(self, built: Built) -> KernelRunner:
        if self.host is None:
            raise HostError("the kernel host did not start in this worker")
        self.host.load(str(built.artifact), self.op.entry())
        return KernelRunner(self.host, self.op)

    def timing_calls(self, runner: KernelRunner, inputs: dict[str, np.ndarray],
                     outputs: dict[str, GuardedOutput], shape: tuple[int, ...] = ()
                     ) -> dict[str, Callable[[], None]]:
        args = host_args(self.op, inputs, outputs, shape)  # resolved once, outside the timing
        host = runner.host

        def candidate() -> float | None:  # the candidate's own process times it (see timer)
            return host.call(args, timed=True, flush=self.flusher is not None)

        candidate.flushes_itself = isinstance(host, KernelHost)
        if hasattr(self.op, "prepare_call"):  # your own kernel (app.catalog.custom): no baseline
            return {"candidate": candidate}
        out = outputs[self.op.output_name]
        numpy_out = np.empty(out.shape, dtype=np.float32)

        def numpy_call() -> None:
            self.op.numpy_baseline(inputs, numpy_out)

        numpy_call.poison = lambda: numpy_out.fill(np.nan)  # same terms as the candidate's outputs
        return {"candidate": candidate, "numpy": numpy_call}

    def timer(self, calls: dict[str, Callable[[], None]], settings: TimingSettings | None,
              before: Callable[[str], None] | None = None) -> TimerResult:
        stats = time_interleaved(calls, settings or TimingSettings(), self.flusher, before)
        if self.host is not None:
            try:
                self.host.check_reports()
            except ForgedTiming:  # measured again once: a loaded machine is not a cheat
                stats = time_interleaved(calls, settings or TimingSettings(), self.flusher, before)
                self.host.check_reports()
        return TimerResult(stats)

    def fault(self, exc: BaseException) -> StageFailed | None:
        """The candidate's own process died, or wrote to the harness, or lied about time."""
        if isinstance(exc, HostDied):
            if exc.signal_number == signal.SIGSYS:
                return StageFailed(CRASH, "sandbox violation: the candidate made a forbidden system "
                                   "call (starting a process or program, opening a socket or file, "
                                   "making memory executable, signalling) and its process was "
                                   "killed (SIGSYS)")
            return StageFailed(CRASH, f"{exc} (its own process; the worker is unharmed)")
        if isinstance(exc, ForgedTiming):
            return StageFailed(SUSPECT, f"forged timing: {exc}")
        if isinstance(exc, HostError):  # its channel is out of step: a fresh worker, fresh host
            return StageFailed(RUNTIME_FAILED, f"kernel host: {exc}", restart=True)
        return None

    def release(self) -> None:
        pass


def _load_entry(path: Path, symbol: str, op: CpuOperator) -> Any:
    fn = getattr(ctypes.CDLL(str(path)), symbol)
    if hasattr(op, "c_argtypes"):  # your own kernel declares its signature
        fn.argtypes, fn.restype = op.c_argtypes(), None
        return fn
    n_dims = len(op.call_dims(tuple(range(1, op.ndim + 1))))
    fn.argtypes = [ctypes.c_void_p] * (1 + len(op.input_shapes(tuple([1] * op.ndim)))) + [ctypes.c_long] * n_dims
    fn.restype = None
    return fn


def _args(op: CpuOperator, inputs: dict[str, np.ndarray], out: np.ndarray) -> tuple:
    shape = tuple(int(d) for d in op.shape_of(inputs))
    return (out.ctypes.data, *(inputs[name].ctypes.data for name in op.input_shapes(shape)),
            *op.call_dims(shape))


_SCALAR_KINDS = {"float32": "f", "float64": "d"}  # every other scalar dtype is a C integer


def host_args(op: CpuOperator, inputs: dict[str, np.ndarray], outputs: dict[str, GuardedOutput],
              shape: Sequence[int] = ()) -> list[ArrayArg | Scalar]:
    """A call's arguments for the kernel host: outputs whole with their guards (the pointer is
    the interior), inputs, dimensions; your own kernel in its declared order and roles."""
    def guarded(out: GuardedOutput, preset: np.ndarray | None = None) -> ArrayArg:
        return ArrayArg(out.buffer, out.guard * out.buffer.itemsize, copy_back=True, preset=preset)

    spec = getattr(op, "spec", None)
    if spec is not None and hasattr(op, "prepare_call"):
        args: list[ArrayArg | Scalar] = []
        for a in spec.args:
            if a.role == "scalar":
                args.append(Scalar(_SCALAR_KINDS.get(a.dtype, "l"), op.scalar(a, shape).item()))
            elif a.role == "input":
                args.append(ArrayArg(inputs[a.name]))
            else:
                args.append(guarded(outputs[a.name], inputs[a.name] if a.role == "inout" else None))
        return args
    dims = tuple(int(d) for d in op.shape_of(inputs))
    return [guarded(outputs[op.output_name]),
            *(ArrayArg(inputs[name]) for name in op.input_shapes(dims)),
            *(Scalar("l", d) for d in op.call_dims(dims))]


class KernelRunner:
    """Calls the loaded candidate, in its own process, on host arrays (the verification runner)."""

    def __init__(self, host: KernelHost | InProcessHost, op: CpuOperator) -> None:
        self.host, self.op = host, op

    def __call__(self, inputs: dict[str, np.ndarray], outputs: dict[str, GuardedOutput],
                 shape: tuple[int, ...] = ()) -> None:
        self.host.call(host_args(self.op, inputs, outputs, shape))


class CpuWorker:
    """The request handler inside a CPU worker process (see app.gpu.worker)."""

    def __init__(self, operator: Any, compiler: str, compile_timeout_s: float, flush_bytes: int,
                 host_program: str = "") -> None:  # "": built here (outside a cell)
        # a catalog name, or your own kernel's operator object (app.catalog.custom, picklable)
        self.op: CpuOperator = get_operator("cpu", operator) if isinstance(operator, str) else operator
        self.tc = toolchain(compiler)
        self.flusher = CacheFlusher(flush_bytes) if flush_bytes > 0 else None
        if host_supported():
            host_program = host_program or host_program_for(self.tc)
        self.host = _start_host(host_program, flush_bytes)
        self.backend = CpuKernelBackend(self.op, self.tc, compile_timeout_s, self.flusher, self.host)

    def __call__(self, request: tuple, progress: Callable[[str], None]) -> dict[str, Any]:
        kind = request[0]
        if kind == "evaluate":
            evaluation, restart = run_cascade(request[1], self.op, self.backend, progress,
                                              throughput=self.op.throughput)
            return {"evaluation": evaluation.to_dict(), "restart": restart}
        if kind == "compare":
            progress("time")
            return self.compare(request[1])
        if kind == "retime":
            return self.retime(request[1], request[2], progress)
        if kind == "baselines":
            progress("baselines")
            return self.baselines(request[1], request[2])
        raise ValueError(f"unknown request {kind!r}")

    def _reference(self) -> Any:
        """The plain C reference loop of this operator, built once into the cache."""
        source = kernel_source(REFERENCE_SOURCE)
        lib = kernels_dir() / f"reference-{build_key(self.op, {}, source, self.tc)}.so"
        if not lib.exists():
            ok, log = compile_library(source, {}, lib, self.tc, 120)
            if not ok:
                raise RuntimeError(f"the C reference does not compile: {log[:500]}")
        return _load_entry(lib, self.op.reference_symbol, self.op)

    def compare(self, request: CascadeRequest) -> dict[str, Any]:
        """A verified candidate, numpy and the C reference timed interleaved on rotating input
        slots, outputs poisoned before each call and checked after (app.gpu.timed_slots):
        medians in ms summed over the goal's shapes, or {"error": ...} when a timed output
        was wrong."""
        source = request.source if request.source is not None else request.template
        runner = self.backend.load(self.backend.build(source, request.config, request.goal_shapes))
        ref = self._reference()
        totals = {"candidate": 0.0, "numpy": 0.0, "c_reference": 0.0}
        for shape in request.goal_shapes:
            shape_t = tuple(int(d) for d in shape)

            def make_calls(inputs: dict[str, np.ndarray], outputs: dict[str, GuardedOutput],
                           s: tuple[int, ...] = shape_t) -> dict[str, Callable[[], None]]:
                calls = self.backend.timing_calls(runner, inputs, outputs, s)
                ref_out = np.empty(self.op.output_shape(s), np.float32)  # the call holds its address
                ref_args = _args(self.op, inputs, ref_out)

                def c_reference() -> None:
                    ref(*ref_args)

                c_reference.poison = lambda: ref_out.fill(np.nan)
                calls["c_reference"] = c_reference
                return calls

            slots = TimedSlots(np, self.op, shape_t, "float32", request.seed, make_calls)
            try:
                stats = self.backend.timer(slots.calls(), request.timing, slots.before).stats
            except (HostDied, HostError, ForgedTiming) as exc:
                return {"error": f"the candidate failed while timed: {exc}"}
            problem = slots.check(tolerance_for(self.op, shape_t, "float32", request.rtol,
                                                request.atol))
            if problem:
                return {"error": f"outputs of a timed call were wrong: {problem}"}
            for name, st in stats.items():
                totals[name] += st.median_ms
        return totals

    def retime(self, first: CascadeRequest, second: CascadeRequest,
               progress: Callable[[str], None]) -> dict[str, Any]:
        """Two verified candidates timed again in one measurement, interleaved. The kernel host
        runs one candidate's process at a time, so they alternate in blocks, ABBA order (drift
        in machine load hits both alike), each block after an untimed warm-up call; the input
        slots are shared, outputs poisoned before every call and checked after every block
        (app.gpu.timed_slots). {"a": first's, "b": second's figures: median, p10, p90 in ms
        summed over the goal's shapes, samples per shape}, or {"error": ...}."""
        progress("compile")  # both were built when evaluated: normally from the cache
        built = {name: self.backend.build(r.source if r.source is not None else r.template,
                                          r.config, r.goal_shapes)
                 for name, r in (("a", first), ("b", second))}
        timing = first.timing or TimingSettings()
        per_block = max(3, -(-timing.max_samples // RETIME_BLOCKS))
        block = dataclasses.replace(timing, warmup=1, min_samples=per_block,
                                    max_samples=per_block,
                                    target_spread=0.0,  # a block takes all its samples
                                    max_seconds=timing.max_seconds / RETIME_BLOCKS)
        runner = KernelRunner(self.host, self.op)  # calls whichever candidate is loaded
        totals = {n: {"median_ms": 0.0, "p10_ms": 0.0, "p90_ms": 0.0, "samples": 0}
                  for n in built}
        loaded = ""
        for shape in first.goal_shapes:
            shape_t = tuple(int(d) for d in shape)

            def make_calls(inputs: dict[str, np.ndarray], outputs: dict[str, GuardedOutput],
                           s: tuple[int, ...] = shape_t) -> dict[str, Callable[[], None]]:
                return {"candidate": self.backend.timing_calls(runner, inputs, outputs, s)["candidate"]}

            slots = TimedSlots(np, self.op, shape_t, "float32", first.seed, make_calls)
            tol = tolerance_for(self.op, shape_t, "float32", first.rtol, first.atol)
            samples: dict[str, list[float]] = {n: [] for n in built}
            for i in range(RETIME_BLOCKS):
                for name in ("a", "b") if i % 2 == 0 else ("b", "a"):
                    progress("time")
                    try:
                        if loaded != name:
                            self.backend.load(built[name])
                            loaded = name
                        stats = self.backend.timer(slots.calls(), block, slots.before).stats
                    except (HostDied, HostError, ForgedTiming) as exc:
                        return {"error": f"candidate {name} failed while timed: {exc}"}
                    problem = slots.check(tol)
                    if problem:
                        return {"error": f"outputs of a timed call of candidate {name} were "
                                         f"wrong: {problem}"}
                    for slot in slots.slots:  # the next block's check covers its own calls
                        slot.written = False
                    samples[name] += stats["candidate"].samples_ms
            for name, got in samples.items():
                st = summarize(got)
                add_shape_figures(totals[name], st.median_ms, st.p10_ms, st.p90_ms, len(got))
        return totals

    def baselines(self, shapes: list[list[int]], timing: TimingSettings) -> dict[str, Any]:
        """numpy and the plain C reference loop, interleaved, on the goal's shapes; plus the
        machine's copy bandwidth (the limit for memory-bound operators)."""
        if not self.op.reference_symbol:
            return {}  # your own kernel: no library or plain-loop baseline to compare with
        ref = self._reference()
        result: dict[str, Any] = {"numpy_ms": 0.0, "c_reference_ms": 0.0, "per_shape": []}
        for shape in shapes:
            inputs = make_inputs(np, self.op, CheckCase(list(shape), "normal", 1), "float32")
            out_np = np.empty(self.op.output_shape(tuple(shape)), np.float32)
            out_c = np.empty_like(out_np)
            args = _args(self.op, inputs, out_c)
            stats = time_interleaved(
                {"numpy": lambda x=inputs, o=out_np: self.op.numpy_baseline(x, o),
                 "c_reference": lambda a=args: ref(*a)}, timing, self.flusher)
            result["numpy_ms"] += stats["numpy"].median_ms
            result["c_reference_ms"] += stats["c_reference"].median_ms
            result["per_shape"].append({k: s.median_ms for k, s in stats.items()})
        src = np.ones(32 * 2**20 // 4, np.float32)
        dst = np.empty_like(src)
        copy = time_interleaved({"copy": lambda: np.copyto(dst, src)}, timing)["copy"]
        result["copy_gbs"] = 2 * src.nbytes / (copy.median_ms / 1000) / 1e9
        return result


def _start_host(program: str, flush_bytes: int) -> KernelHost | InProcessHost:
    """The kernel host, started before the cell is sealed (it may start no process after).
    Its children load the candidate filter unless the sandbox is switched off."""
    if not host_supported():
        sandbox.note("candidates", "off: candidates run in the worker itself (no kernel host on "
                     "this platform)")
        return InProcessHost()
    plan = sandbox.current_plan()
    filters = None
    if plan is None or plan.enabled:
        filters = tuple(os.path.join(tempfile.gettempdir(), f"candidate-{stage}.bpf")
                        for stage in ("load", "run"))
        line = sandbox.seccomp.export_candidate_filters(*filters)
        if line.startswith("on"):
            sandbox.note("candidates", sandbox.CANDIDATE_LINE)
        else:
            sandbox.note("candidates", "partial: each CPU candidate in its own process, without "
                         f"seccomp filters ({line})")
            filters = None
    return KernelHost(program, filters, flush_bytes)


def host_program_for(tc: Toolchain) -> str:
    """The kernel host for this compiler, built once into the cache (app/gpu/host)."""
    try:
        return str(host_binary(tc.compiler, tc.identity, cache_dir() / "cpu-host"))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        raise BackendUnavailable(f"the CPU backend's kernel host does not build: {exc}") from None


# ---- the engine side ----------------------------------------------------------------------
@dataclass
class CpuSettings:
    timing: TimingSettings = field(default_factory=TimingSettings)
    baseline_timing: TimingSettings = field(default_factory=lambda: TimingSettings(
        warmup=1, min_samples=5, max_samples=30, max_seconds=5.0))
    deadlines: Deadlines = field(default_factory=lambda: Deadlines(compile_s=60.0, run_s=60.0))
    recycle_after: int = 50
    memory_limit_bytes: int | None = None  # None: half the machine's memory
    flush_bytes: int = 64 * 2**20  # written between timing samples to evict caches
    measure_roofs: bool = True  # memory-bound operators: hold figures to the cache-level roofs
    roof_file: Path | None = None  # None: the cache directory's cpu-roofs.json


def _half_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


class CpuEvaluator(Evaluator):
    """Evaluates candidates of a CPU goal in one isolated worker process."""

    max_parallel = 1  # one worker: concurrent timing on the same cores would lie

    def __init__(self, goal: Goal, validation_cases: Sequence[dict] = (), *,
                 settings: CpuSettings | None = None) -> None:
        self.goal = goal
        self.settings = settings or CpuSettings()
        self.tc = toolchain()
        if goal.backend != "cpu":
            raise GoalError("backend", f"CpuEvaluator runs cpu goals, not {goal.backend!r}")
        if goal.dtype != "float32":
            raise GoalError("dtype", f"the cpu operators are float32 kernels; got {goal.dtype!r}")
        if goal.objective.metric == "energy":
            raise GoalError("objective.metric", "the cpu backend measures time and throughput, not energy")
        try:
            self.op: CpuOperator = custom_operator(goal, "cpu") if goal.kernel else \
                get_operator("cpu", goal.operator)
        except KeyError as exc:
            raise GoalError("operator", str(exc.args[0])) from None
        if not goal.shapes:
            raise GoalError("shapes", f"give at least one shape {self.op.shape_help}")
        for i, shape in enumerate(goal.shapes):
            problem = self.op.check_shape(tuple(shape))
            if problem:
                raise GoalError(f"shapes[{i}]", problem)
        params = self.op.params()
        if not self.tc.openmp and "THREADS" in params:
            params["THREADS"] = [1]
        self.space = SearchSpace(params, restrictions=self.op.restrictions + list(goal.constraints.restrictions))
        self.template = self.op.template()
        self._validation = ValidationSet(validation_cases)
        self._lock = threading.Lock()
        memory = self.settings.memory_limit_bytes or _half_memory()
        host = host_program_for(self.tc) if host_supported() else ""
        self.pool = WorkerPool("app.gpu.cpu:CpuWorker",
                               [(self.op if goal.kernel else self.op.name, self.tc.compiler, self.settings.deadlines.compile_s,
                                 self.settings.flush_bytes, host)],
                               recycle_after=self.settings.recycle_after, memory_limit_bytes=memory,
                               name=f"cpu-{self.op.name}-", programs=[host] if host else [])
        self._baselines: dict[str, Any] | None = None
        self._roofs: cpu_roof.Roofs | bool | None = None
        self._roof_lock = threading.Lock()
        self.roof_error = ""
        self._rng = random.SystemRandom()

    # ---- candidates -----------------------------------------------------------------------
    def candidate_key(self, config: dict[str, Any], source: str | None = None) -> str:
        return build_key(self.op, config, source if source is not None else self.template, self.tc)

    def add_validation_case(self, case: dict) -> None:
        """A case that broke a candidate: every later candidate is checked against it too."""
        self._validation.add(case)

    @property
    def validation_cases(self) -> list[dict]:
        return self._validation.cases()

    def roofs(self) -> cpu_roof.Roofs | None:
        """The machine's L1/L2/L3/DRAM copy roofs (memory-bound operators only), measured by
        our own probe in this process once per machine and compiler (app.gpu.cpu_roof)."""
        if self.op.throughput_unit != "GB/s" or not self.settings.measure_roofs:
            return None
        with self._roof_lock:
            if self._roofs is None:
                path = self.settings.roof_file or cache_dir() / "cpu-roofs.json"
                try:
                    self._roofs, _ = cpu_roof.cached(self.tc.compiler, self.tc.identity, path)
                except (OSError, RuntimeError, ValueError) as exc:
                    self._roofs, self.roof_error = False, str(exc)[:300]
            return self._roofs or None

    def roof(self, config: dict[str, Any]) -> tuple[float, str, str, float] | None:
        """(fastest possible ms over the goal's shapes, level, how it was found, GB/s) for a
        memory-bound candidate: each shape's working set at the roof of the cache level it fits
        in, at the candidate's THREADS."""
        roofs = self.roofs()
        if roofs is None or self.op.throughput_unit != "GB/s":
            return None
        threads = int(config.get("THREADS", 1))
        total_ms, first = 0.0, None
        for shape in self.goal.shapes:
            nbytes = float(self.op.bytes_moved(tuple(shape)))
            level, gbs = roofs.roof_for(nbytes, threads)
            # more threads never lower the hardware's roof (a loaded machine can measure so)
            gbs = max(gbs or 0.0, roofs.bandwidth(level, 1) or 0.0)
            if not gbs:
                return None
            total_ms += nbytes / (gbs * 1e9) * 1e3
            first = first or (level, gbs)
        level, gbs = first
        return total_ms, level, f"{level} roof {gbs:.1f} GB/s at {threads} threads", gbs

    def _request(self, candidate: Candidate | Evaluation) -> CascadeRequest:
        roof = self.roof(candidate.config)
        return CascadeRequest(
            roof_ms=roof[0] if roof else None, roof_detail=roof[2] if roof else "",
            key=candidate.key, config=dict(candidate.config), source=candidate.source,
            template=self.template, goal_shapes=[list(s) for s in self.goal.shapes],
            params=self.space.params, dtype=self.goal.dtype, rtol=self.goal.tolerance.rtol,
            atol=self.goal.tolerance.atol, validation_cases=self.validation_cases,
            seed=self._rng.randrange(2**31), metric=self.goal.objective.metric,
            timing=self._timing(candidate.config), agent=candidate.agent,
            parent_key=candidate.parent_key)

    def _timing(self, config: dict[str, Any]) -> TimingSettings:
        """The run's timing settings; a multi-threaded candidate against a threaded BLAS
        baseline waits for the BLAS's spinning threads to sleep (settle_s). A 1-thread
        candidate runs on a core they leave free, and the pause would cost seconds."""
        timing = self.settings.timing
        try:
            threads = int(config.get("THREADS", 1))
        except (TypeError, ValueError):
            threads = 1
        if getattr(self.op, "threaded_baseline", False) and (os.cpu_count() or 1) > 1 \
                and threads > 1 and timing.settle_s == 0:
            return dataclasses.replace(timing, settle_s=BLAS_SETTLE_S)
        return timing

    def evaluate(self, candidate: Candidate) -> Evaluation:
        t0 = time.perf_counter()
        base = {"key": candidate.key, "config": dict(candidate.config), "agent": candidate.agent,
                "source": candidate.source, "parent_key": candidate.parent_key}
        if not self.space.is_valid(candidate.config):
            return Evaluation(ok=False, reason=INVALID, detail="not a valid configuration of the space",
                              stages=[Stage("static_check", False, 0.0, "invalid configuration")], **base)
        baselines = self._ensure_baselines()
        reply = self.pool.call(("evaluate", self._request(candidate)), self.settings.deadlines)
        ev = evaluation_from_reply(reply, **base)
        roof = self.roof(candidate.config)
        if roof is not None:
            ev.resources["roof_level"] = roof[1]
            ev.metrics["roof_gbs"] = roof[3]
        if ev.ok:
            self._relative_metrics(ev, baselines or {})
        if ev.failing_case:
            self.add_validation_case(ev.failing_case)
        ev.sim_seconds = time.perf_counter() - t0
        return ev

    def recheck(self, candidate: Candidate) -> Evaluation:
        return self.evaluate(candidate)  # the cascade checks the stored cases first

    def _relative_metrics(self, ev: Evaluation, b: dict[str, Any]) -> None:
        unit = "gflops" if self.op.throughput_unit == "GFLOP/s" else "gbs"
        if "throughput" in ev.metrics:
            ev.metrics[unit] = ev.metrics.pop("throughput")
        if b.get("c_reference_ms") and ev.time_ms:
            # the C reference loop is timed once per run (interleaved with numpy): it can be
            # far too slow to time beside every candidate; `compare` times all three together
            ev.metrics["speedup_vs_c_reference"] = b["c_reference_ms"] / ev.time_ms
        if unit == "gbs" and b.get("copy_gbs") and ev.metrics.get("gbs"):
            ev.metrics["fraction_of_copy_bandwidth"] = ev.metrics["gbs"] / b["copy_gbs"]

    @staticmethod
    def operator_of(name: str) -> CpuOperator:
        return get_operator("cpu", name)

    def compare(self, candidate: Candidate | Evaluation) -> dict[str, float] | None:
        """Time a (verified) candidate, numpy and the plain C reference loop interleaved in one
        measurement: medians in ms and the candidate's speedups over both. None on a fault."""
        request = self._request(candidate)
        reply = self.pool.call(("compare", request), self.settings.deadlines)
        if reply.fault is not None:
            return None
        t = reply.result
        if "error" in t:
            return None
        return {**{f"{k}_ms": v for k, v in t.items()},
                "speedup_vs_numpy": t["numpy"] / t["candidate"],
                "speedup_vs_c_reference": t["c_reference"] / t["candidate"]}

    def retime_pair(self, a: Candidate | Evaluation, b: Candidate | Evaluation
                    ) -> dict[str, dict[str, float]] | None:
        """Two verified kernels (an LLM rewrite and the kernel it started from, say) timed
        again in one measurement, interleaved in ABBA blocks in the worker: {"a": ..., "b": ...}
        each with median_ms, p10_ms, p90_ms (summed over the goal's shapes) and samples. None
        on a fault or when a timed output was wrong. Thread-safe: the worker pool serves one
        request at a time, so a re-timing never overlaps an evaluation's timing."""
        reply = self.pool.call(("retime", self._request(a), self._request(b)),
                               self.settings.deadlines)
        if reply.fault is not None:
            return None
        t = reply.result
        if not isinstance(t, dict) or "error" in t or not {"a", "b"} <= set(t):
            return None
        return {k: dict(t[k]) for k in ("a", "b")}

    # ---- baselines and limits -------------------------------------------------------------
    def _ensure_baselines(self) -> dict[str, Any] | None:
        with self._lock:
            if self._baselines is not None:
                return self._baselines or None
        reply = self.pool.call(("baselines", [list(s) for s in self.goal.shapes],
                                self.settings.baseline_timing), self.settings.deadlines)
        with self._lock:
            self._baselines = reply.result if reply.fault is None else {}
            self.baseline_log = reply.fault.detail if reply.fault else ""
            return self._baselines or None

    def baselines(self) -> dict[str, Any] | None:
        """numpy_ms, c_reference_ms (medians summed over the goal's shapes), copy_gbs."""
        return self._ensure_baselines()

    def _objective(self, ms: float) -> float:
        if self.goal.objective.metric == "throughput":
            return sum(self.op.throughput(tuple(s), 1.0) for s in self.goal.shapes) / (ms / 1000.0)
        return ms

    def baseline(self) -> float | None:
        b = self._ensure_baselines()
        return self._objective(b["numpy_ms"]) if b and b.get("numpy_ms") else None

    def baseline_name(self) -> str | None:
        return "numpy" if self.baseline() is not None else None

    def final_comparison(self, best: Evaluation) -> dict[str, float] | None:
        """The run's best and its baselines timed again, interleaved, in one measurement at the
        end of a run: the speedup a run claims comes from this, not from the baseline measured
        at its start under whatever load the machine had then."""
        figures = self.compare(best)
        if not figures or not figures.get("numpy_ms"):
            return None
        return {**figures, "baseline_value": self._objective(figures["numpy_ms"]),
                "best_value": self._objective(figures["candidate_ms"])}

    def limit(self) -> float | None:
        """Memory-bound operators: the time (or GB/s) at the roof of the cache level the goal's
        working set fits in, at every thread (the measured copy bandwidth without roofs)."""
        b = self._ensure_baselines()
        if not b or not b.get("copy_gbs") or self.op.throughput_unit != "GB/s":
            return None
        roof = self.roof({"THREADS": os.cpu_count() or 1})
        if roof is not None:
            if self.goal.objective.metric == "throughput":
                return sum(self.op.bytes_moved(tuple(s)) for s in self.goal.shapes) / roof[0] / 1e6
            return roof[0]
        if self.goal.objective.metric == "throughput":
            return b["copy_gbs"]
        return sum(self.op.bytes_moved(tuple(s)) for s in self.goal.shapes) / (b["copy_gbs"] * 1e9) * 1000.0

    def device(self) -> DeviceInfo:
        return DeviceInfo(kind="cpu", name=cpu_name(),
                          details={"cores": os.cpu_count(), "compiler": self.tc.identity,
                                   "openmp": "yes" if self.tc.openmp else "no"})

    def close(self) -> None:
        self.pool.close()
