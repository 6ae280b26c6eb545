"""The CPU backend's worker side: the cascade's hooks (CpuKernelBackend) and the request
handler (CpuWorker) that live in the sandboxed worker process. Candidates run in the kernel
host's child process (app.gpu.cpu.kernel_host), never in the worker itself."""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import app.gpu.cpu.reference_kernel  # noqa: F401 - registers the C reference runner (custom goals)
from app.catalog import get_operator
from app.catalog.cpu.operator import REFERENCE_SOURCE, CpuOperator, kernel_source
from app.core.evaluator import BackendUnavailable
from app.core.types import COMPILE_FAILED, CRASH, RESOURCE_LIMIT, RUNTIME_FAILED, SUSPECT, TIMEOUT
from app.gpu import sandbox
from app.gpu.cascade import Built, CascadeRequest, StageFailed, TimerResult, run_cascade
from app.gpu.cpu import compute_roof, elf_check, memory_roof
from app.gpu.cpu.kernel_host import (
    ArrayArg,
    ForgedTiming,
    HostDied,
    HostError,
    InProcessHost,
    KernelHost,
    Scalar,
    ThreadLimit,
    host_binary,
    host_supported,
)
from app.gpu.cpu.toolchain import (
    Toolchain,
    build_key,
    compile_command,
    compile_library,
    kernels_dir,
    static_problems,
    toolchain,
)
from app.gpu.roof_check import RoofCheck
from app.gpu.timed_slots import TimedSlots
from app.gpu.timing import (
    CacheFlusher,
    TimingSettings,
    add_shape_figures,
    summarize,
    time_interleaved,
)
from app.gpu.trusted_cache import trusted_dir
from app.gpu.verify import CheckCase, GuardedOutput, make_inputs, tolerance_for

# Re-timing two candidates (CpuEvaluator.retime_pair): blocks per candidate, in ABBA order.
RETIME_BLOCKS = 4


def declared_threads(config: dict[str, Any]) -> int | None:
    """The threads a configuration declares (THREADS, at least one; one when it is not a
    number), as the kernel host holds the candidate's process to them; None: none declared.
    The engine reads the same figure for the roof it shows (CpuEvaluator.shown_threads)."""
    if "THREADS" not in config:
        return None
    try:
        return max(1, int(config["THREADS"]))
    except (TypeError, ValueError):
        return 1


class CpuKernelBackend:
    """The cascade's CPU hooks (app.gpu.cascade.CascadeBackend); lives in the worker process."""

    xp = np

    def __init__(self, op: CpuOperator, tc: Toolchain, compile_timeout_s: float,
                 flusher: CacheFlusher | None = None,
                 host: KernelHost | InProcessHost | None = None) -> None:
        self.op, self.tc, self.compile_timeout_s = op, tc, compile_timeout_s
        self.flusher = flusher
        self.host = host  # where candidates run (app.gpu.cpu.kernel_host); None: in this process
        self._probe: memory_roof.Probe | None = None  # built on the first figure beyond the roof

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

    def declare_threads(self, config: dict[str, Any]) -> None:
        """The candidate's process is held to the THREADS its configuration declares (the
        goal's restrictions bound it); without THREADS it may use every core."""
        if self.host is not None:
            self.host.thread_limit = declared_threads(config) or 0

    def check_resources(self, built: Built, config: dict[str, Any]) -> dict[str, Any]:
        info: dict[str, Any] = {"library_bytes": built.artifact.stat().st_size}
        self.declare_threads(config)
        threads = int(config.get("THREADS", 1))
        if threads > (os.cpu_count() or 1):
            raise StageFailed(RESOURCE_LIMIT, f"asks for {threads} threads; this machine has "
                              f"{os.cpu_count()} cores")
        problems = elf_check.library_problems(built.artifact, self.tc.compiler, self.tc.flags)
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
        if self.op.custom:  # your own kernel (app.catalog.custom): no baseline
            return {"candidate": candidate}
        out = outputs[self.op.output_name]
        numpy_out = np.empty(out.shape, dtype=np.float32)

        def numpy_call() -> None:
            self.op.numpy_baseline(inputs, numpy_out)

        numpy_call.poison = lambda: numpy_out.fill(np.nan)  # same terms as the candidate's outputs
        return {"candidate": candidate, "numpy": numpy_call}

    def timer(self, calls: dict[str, Callable[[], None]], settings: TimingSettings | None,
              before: Callable[[str], None] | None = None) -> TimerResult:
        if self.host is not None:
            self.host.clamped = 0
        stats = time_interleaved(calls, settings or TimingSettings(), self.flusher, before)
        metrics: dict[str, float] = {}
        if self.host is not None:
            # every timed call's figure is already held to the zygote's clock (kernel_host);
            # reports short of it on every call are refused as forged (ForgedTiming)
            self.host.check_reports()
            metrics["cores_busy"] = self.host.cores_busy()  # CPU time / window, all calls
            if self.host.threads_seen:
                metrics["threads"] = float(self.host.threads_seen)  # counted between calls
            n = len(stats["candidate"].samples_ms) if "candidate" in stats else 0
            if n and self.host.clamped:
                metrics["timed_by_cell_clock"] = self.host.clamped / n
        return TimerResult(stats, metrics=metrics)

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
        if isinstance(exc, ThreadLimit):
            return StageFailed(RESOURCE_LIMIT, f"more threads than declared: {exc}")
        if isinstance(exc, HostError):  # its channel is out of step: a fresh worker, fresh host
            return StageFailed(RUNTIME_FAILED, f"kernel host: {exc}", restart=True)
        return None

    def measure_roof(self, check: RoofCheck) -> dict[str, float]:
        """Each level of `check` measured now, in this cell, at the kernel's thread count
        (app.gpu.cpu.memory_roof.Probe) and at its own working set, or the FP32 peak for a
        compute-bound check (compute_roof); the candidate's process is idle meanwhile."""
        if check.compute:
            return compute_roof.measure_beside(self.tc.compiler, check.threads)
        if self._probe is None:
            self._probe = memory_roof.Probe(self.tc.compiler)
        levels = [memory_roof.CacheLevel(*lv) for lv in check.levels]
        by_name = {lv.name: lv for lv in levels}
        rates: dict[str, float] = {}
        for amount, name, _ in check.shapes:
            if name not in by_name:
                continue
            if name not in rates:
                rates[name] = self._probe.rate(by_name[name], levels, check.threads)
            # and at the candidate's own working set: the level table may misplace it
            rates[name] = max(rates[name], self._probe.rate_at(int(amount), check.threads))
        return rates

    def release(self) -> None:
        pass


def _load_entry(path: Path, symbol: str, op: CpuOperator) -> Any:
    fn = getattr(ctypes.CDLL(str(path)), symbol)
    declared = op.c_argtypes()  # your own kernel declares its signature
    if declared is not None:
        fn.argtypes, fn.restype = declared, None
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

    if op.custom:
        args: list[ArrayArg | Scalar] = []
        for a in op.spec.args:
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
        # the kernel host copies inputs into the candidate's arena and never back: the cell's
        # input arrays are out of the kernel's reach (app.gpu.verify.run_check)
        self.inputs_protected = isinstance(host, KernelHost)

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
        self.backend.declare_threads(request.config)
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
            except (HostDied, HostError, ForgedTiming, ThreadLimit) as exc:
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
                            self.backend.declare_threads((first if name == "a" else second).config)
                            self.backend.load(built[name])
                            loaded = name
                        stats = self.backend.timer(slots.calls(), block, slots.before).stats
                    except (HostDied, HostError, ForgedTiming, ThreadLimit) as exc:
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
        # the cell's own scratch; outside a cell a private directory, never a fixed name in
        # /tmp (another user could create it first, keep it writable and swap the filter)
        where = plan.scratch if plan is not None else _private_dir()
        filters = tuple(os.path.join(where, f"candidate-{stage}.bpf") for stage in ("load", "run"))
        line = sandbox.seccomp.export_candidate_filters(*filters)
        if line.startswith("on"):
            sandbox.note("candidates", sandbox.CANDIDATE_LINE)
        else:
            sandbox.note("candidates", "partial: each CPU candidate in its own process, without "
                         f"seccomp filters ({line})")
            filters = None
    return KernelHost(program, filters, flush_bytes)


def _private_dir() -> str:
    """A directory only this user can enter, removed at exit."""
    path = tempfile.mkdtemp(prefix="kernelswarm-filters-")
    atexit.register(shutil.rmtree, path, True)
    return path


def host_program_for(tc: Toolchain) -> str:
    """The kernel host for this compiler, built once into the cache (app/gpu/cpu/host)."""
    try:
        # outside every cell's write set (app.gpu.trusted_cache): a cell could replace it
        return str(host_binary(tc.compiler, tc.identity, trusted_dir() / "cpu-host"))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        raise BackendUnavailable(f"the CPU backend's kernel host does not build: {exc}") from None


