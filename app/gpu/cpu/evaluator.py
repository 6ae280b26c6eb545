"""The CPU backend's engine side: CpuEvaluator sends each candidate to a worker process
(app.gpu.cpu.worker) and turns its reply into an Evaluation with the roof it is held to."""

from __future__ import annotations

import dataclasses
import os
import platform
import random
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.catalog import get_operator
from app.catalog.cpu.operator import CpuOperator
from app.catalog.custom import custom_operator
from app.core.evaluator import DeviceInfo
from app.core.space import SearchSpace
from app.core.types import Candidate, Evaluation, Stage
from app.goal import Goal, GoalError
from app.gpu.backend_evaluator import BackendEvaluator
from app.gpu.cascade import CascadeRequest
from app.gpu.cpu import compute_roof, memory_roof
from app.gpu.cpu.kernel_host import host_supported
from app.gpu.cpu.toolchain import build_key, key_extra, toolchain
from app.gpu.cpu.worker import declared_threads, host_program_for
from app.gpu.roof_check import RoofCheck, beyond
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines, WorkerPool

# OpenBLAS's workers spin 2^28 TSC cycles after a call (measured 0.105 s of CPU here): the
# pause before timing the other contestant, with room for a slower clock
BLAS_SETTLE_S = 0.15
# words of a source that can start threads (OpenMP, pthreads, C11 threads, raw clone): a kernel
# without any runs one; with any, it may run as many as there are cores
_STARTS_THREADS = re.compile(r"omp|pthread|thrd_|clone|_Pragma|syscall|dlsym|__asm|asm\s*\(",
                             re.IGNORECASE)


@dataclass
class CpuSettings:
    timing: TimingSettings = field(default_factory=TimingSettings)
    baseline_timing: TimingSettings = field(default_factory=lambda: TimingSettings(
        warmup=1, min_samples=5, max_samples=30, max_seconds=5.0))
    deadlines: Deadlines = field(default_factory=lambda: Deadlines(compile_s=60.0, run_s=60.0))
    recycle_after: int = 50
    memory_limit_bytes: int | None = None  # None: half the machine's memory
    flush_bytes: int = 64 * 2**20  # written between timing samples to evict caches
    # hold figures to the roofs: cache levels (memory-bound), FP32 peak (compute-bound)
    measure_roofs: bool = True
    roof_file: Path | None = None  # None: memory_roof.default_file() (trusted, MAC-checked)
    compute_roof_file: Path | None = None  # None: compute_roof.default_file() (the same)


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


class CpuEvaluator(BackendEvaluator):
    """Evaluates candidates of a CPU goal in one isolated worker process."""

    max_parallel = 1  # one worker: concurrent timing on the same cores would lie

    def __init__(self, goal: Goal, validation_cases: Sequence[dict] = (), *,
                 settings: CpuSettings | None = None) -> None:
        super().__init__(goal, validation_cases)
        self.settings = settings or CpuSettings()
        self.deadlines = self.settings.deadlines
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
        self.template = self.op.template()
        # keys hash what runs: a template candidate's key is its build key
        self.space = SearchSpace(params, restrictions=self.op.restrictions + list(goal.constraints.restrictions),
                                 key_extra=key_extra(self.op, self.template, self.tc))
        self._lock = threading.Lock()
        memory = self.settings.memory_limit_bytes or _half_memory()
        host = host_program_for(self.tc) if host_supported() else ""
        # the kernel host holds each candidate's process to its declared THREADS (ThreadLimit);
        # without it (InProcessHost) nothing does
        self.threads_held = bool(host)
        self.pool = WorkerPool("app.gpu.cpu.worker:CpuWorker",
                               [(self.op if goal.kernel else self.op.name, self.tc.compiler, self.deadlines.compile_s,
                                 self.settings.flush_bytes, host)],
                               recycle_after=self.settings.recycle_after, memory_limit_bytes=memory,
                               name=f"cpu-{self.op.name}-", programs=[host] if host else [])
        self._baselines: dict[str, Any] | None = None
        self._baseline_start_s = 0.0  # seconds the baselines' request spent starting the worker
        self._roof: memory_roof.Roofs | compute_roof.ComputeRoof | bool | None = None
        self._roof_lock = threading.Lock()
        # GB/s the worker measured beside a candidate this run, by (level, threads): they only
        # ever raise the cached roofs (a cached roof may have been measured on a loaded machine)
        self._measured_beside: dict[tuple[str, int], float] = {}
        self._rng = random.SystemRandom()

    # ---- candidates -----------------------------------------------------------------------
    def candidate_key(self, config: dict[str, Any], source: str | None = None) -> str:
        return build_key(self.op, config, source if source is not None else self.template, self.tc)

    def _machine_roof(self) -> memory_roof.Roofs | compute_roof.ComputeRoof | None:
        """The machine's roof for this operator, measured by our own probe in this process once
        per machine and compiler and cached where no cell may write: the L1/L2/L3/DRAM copy
        roofs (memory_roof) of a memory-bound operator, the FP32 peak at one and at every
        thread (compute_roof) of a compute-bound one. None: roofs off, or not measurable."""
        if not self.settings.measure_roofs:
            return None
        module, path = ((memory_roof, self.settings.roof_file) if self.op.memory_bound
                        else (compute_roof, self.settings.compute_roof_file))
        with self._roof_lock:
            if self._roof is None:
                try:
                    self._roof, _ = module.cached(self.tc.compiler, self.tc.identity,
                                                  path or module.default_file())
                except (OSError, RuntimeError, ValueError):
                    self._roof = False  # not measurable here: no roof, for the whole run
            return self._roof or None

    def roofs(self) -> memory_roof.Roofs | None:
        """The cache levels' copy roofs (memory-bound operators only)."""
        return self._machine_roof() if self.op.memory_bound else None

    def peak(self) -> compute_roof.ComputeRoof | None:
        """The FP32 peak at one and at every thread (compute-bound operators only)."""
        return None if self.op.memory_bound else self._machine_roof()

    def guard_threads(self, config: dict[str, Any], source: str | None = None) -> int:
        """The threads the guard holds a figure to: the most the kernel may really run, so that
        no honest kernel is refused as faster than the hardware. A catalog template runs
        THREADS; any other code (your own kernel, an LLM's rewrite) may start its own: every
        core, unless its source has no way to start a thread at all. (The kernel host holds a
        process to THREADS only within a margin: kernel_host.THREAD_MARGIN.)"""
        cores = os.cpu_count() or 1
        own = source is not None and source != self.template
        if "THREADS" in config and not own and not self.goal.kernel:
            try:
                return max(1, min(int(config["THREADS"]), cores))
            except (TypeError, ValueError):
                return cores
        text = source if source is not None else self.template
        return cores if _STARTS_THREADS.search(text) else 1

    def shown_threads(self, config: dict[str, Any], source: str | None = None) -> int:
        """The threads a kept figure is shown against ("% of roof"): the THREADS its
        configuration declares where the kernel host holds its process to them (ThreadLimit
        beyond), whatever its source; else the guard's. Never more than the guard's: a source
        that cannot start a thread runs one. The guard's roof, at every core for a kernel that
        may start threads, would understate a one-thread kernel."""
        guard = self.guard_threads(config, source)
        declared = declared_threads(config) if self.threads_held else None
        return guard if declared is None else min(declared, guard)

    def roof(self, config: dict[str, Any], source: str | None = None) -> RoofCheck | None:
        """What the guard holds a candidate to, at guard_threads: memory-bound, each goal
        shape's working set at the cached roof of the cache level it fits in; compute-bound,
        its FLOPs at the FP32 peak. The worker measures it again beside the candidate before
        refusing anything."""
        return self._roof_at(self.guard_threads(config, source))

    def _roof_at(self, threads: int) -> RoofCheck | None:
        """The roof at `threads` threads: the cached one, raised by what was measured beside a
        candidate at that count this run. None: no roof here."""
        if not self.op.memory_bound:
            return self._compute_roof(threads)
        roofs = self.roofs()
        if roofs is None:
            return None
        shapes = []
        for shape in self.shapes:
            nbytes = self.work(shape)
            level, gbs = roofs.roof_for(nbytes, threads)
            # more threads never lower the hardware's roof (a loaded machine can measure so)
            gbs = max(gbs or 0.0, roofs.bandwidth(level, 1) or 0.0,
                      self._measured_beside.get((level, threads), 0.0))
            if not gbs:
                return None
            shapes.append((nbytes, level, gbs))
        return RoofCheck(threads, [(lv.name, lv.size_bytes, lv.shared_by) for lv in roofs.levels],
                         shapes)

    def _compute_roof(self, threads: int) -> RoofCheck | None:
        """A compute-bound figure's roof: the FLOPs of every goal shape at the FP32 peak at
        `threads` threads."""
        peak = self.peak()
        if peak is None:
            return None
        gflops = max(peak.gflops(threads),
                     self._measured_beside.get((compute_roof.LEVEL, threads), 0.0))
        flops = [self.work(s) for s in self.shapes]
        if not gflops or not all(f > 0 for f in flops):
            return None
        return RoofCheck(threads, [], [(f, compute_roof.LEVEL, gflops) for f in flops],
                         unit="GFLOP/s")

    def _request(self, candidate: Candidate | Evaluation) -> CascadeRequest:
        check = self.roof(candidate.config, candidate.source)
        return self._cascade_request(
            candidate, seed=self._rng.randrange(2**31), timing=self._timing(candidate.config),
            roof_ms=check.roof_ms() if check else None, roof_detail=check.label() if check else "",
            roof_check=check)

    def _timing(self, config: dict[str, Any]) -> TimingSettings:
        """The run's timing settings; a multi-threaded candidate against a threaded BLAS
        baseline waits for the BLAS's spinning threads to sleep (settle_s). A 1-thread
        candidate runs on a core they leave free, and the pause would cost seconds."""
        timing = self.settings.timing
        try:
            threads = int(config.get("THREADS", 1))
        except (TypeError, ValueError):
            threads = 1
        if self.op.threaded_baseline and (os.cpu_count() or 1) > 1 \
                and threads > 1 and timing.settle_s == 0:
            return dataclasses.replace(timing, settle_s=BLAS_SETTLE_S)
        return timing

    def _prepare(self, candidate: Candidate) -> tuple[CascadeRequest, list[Stage]]:
        before: list[Stage] = []
        t = time.perf_counter()
        self.baselines()  # measured once per run, on the first evaluation
        if time.perf_counter() - t >= 0.001:
            started, self._baseline_start_s = self._baseline_start_s, 0.0
            if started:  # the request that measured them started the worker
                before.append(Stage("worker_start", True, started, "a fresh worker process"))
            before.append(Stage("baselines", True, time.perf_counter() - t - started,
                                "numpy and the C reference, once per run"))
        t = time.perf_counter()
        request = self._request(candidate)  # the cached roofs are measured on the first
        if time.perf_counter() - t >= 0.001:
            before.append(Stage("roofs", True, time.perf_counter() - t, "the machine's memory "
                                "roofs or FP32 peak, or the cached ones read"))
        return request, before

    def _finish(self, ev: Evaluation, request: CascadeRequest) -> None:
        check = request.roof_check
        self._hardware_fraction(ev, check)
        if ev.ok and check is not None:  # a second roof only where fewer threads are shown
            shown = self.shown_threads(request.config, request.source)
            if shown < check.threads:
                self._show_against(ev, self._roof_at(shown))
        if ev.ok:
            self._relative_metrics(ev, self._baselines or {})

    def _probe_request(self, candidate: Candidate | Evaluation) -> CascadeRequest:
        return dataclasses.replace(self._request(candidate), roof_check=None)

    def _retime_requests(self, a: Candidate | Evaluation, b: Candidate | Evaluation
                         ) -> tuple[CascadeRequest, CascadeRequest]:
        return self._request(a), self._request(b)  # ABBA blocks in the worker

    def _hardware_fraction(self, ev: Evaluation, check: RoofCheck | None) -> None:
        """One fraction of the hardware per candidate, named by its roof: the cascade wrote
        fraction_of_roof and the roof's label (raised by a fresh measurement where there was
        one); without a roof (the peak could not be measured, roofs off) it says so."""
        if check is None:
            if ev.ok and not self.op.memory_bound:
                ev.resources["roof"] = "no roof (the FP32 peak was not measured)"
            return
        level = check.shapes[0][1]
        ev.resources["roof_level"] = level
        ev.metrics.setdefault(check.metric, check.rate(level))
        ev.metrics["roof_threads"] = float(check.threads)
        if "measured again beside" in str(ev.resources.get("roof", "")):
            # the rest of the run starts from the higher roof: no probe for every candidate
            key = (level, check.threads)
            with self._roof_lock:
                self._measured_beside[key] = max(self._measured_beside.get(key, 0.0),
                                                 float(ev.metrics[check.metric]))

    @staticmethod
    def _show_against(ev: Evaluation, shown: RoofCheck | None) -> None:
        """A kept figure's fraction of the hardware, shown against the roof of the threads its
        process is held to (shown_threads), called for a kept figure where they are fewer than
        the guard's. A figure beyond that roof (cached on a loaded machine, say) keeps the roof
        the guard held it to: the guard measured that one again beside it."""
        if shown is None or ev.time_ms <= 0 or "fraction_of_roof" not in ev.metrics \
                or beyond(ev.time_ms, shown.roof_ms()):
            return
        level = shown.shapes[0][1]
        ev.metrics["fraction_of_roof"] = shown.roof_ms() / ev.time_ms
        ev.metrics[shown.metric] = shown.rate(level)
        ev.metrics["roof_threads"] = float(shown.threads)
        ev.resources["roof"] = shown.label()
        ev.resources["roof_level"] = level

    def _relative_metrics(self, ev: Evaluation, b: dict[str, Any]) -> None:
        unit = "gbs" if self.op.memory_bound else "gflops"
        if "throughput" in ev.metrics:
            ev.metrics[unit] = ev.metrics.pop("throughput")
        if b.get("c_reference_ms") and ev.time_ms:
            # the C reference loop is timed once per run (interleaved with numpy): it can be
            # far too slow to time beside every candidate; `compare` times all three together
            ev.metrics["speedup_vs_c_reference"] = b["c_reference_ms"] / ev.time_ms

    def compare(self, candidate: Candidate | Evaluation) -> dict[str, float] | None:
        """Time a (verified) candidate, numpy and the plain C reference loop interleaved in one
        measurement: medians in ms and the candidate's speedups over both. None on a fault."""
        reply = self.pool.call(("compare", self._request(candidate)), self.deadlines)
        if reply.fault is not None:
            return None
        t = reply.result
        if "error" in t:
            return None
        return {**{f"{k}_ms": v for k, v in t.items()},
                "speedup_vs_numpy": t["numpy"] / t["candidate"],
                "speedup_vs_c_reference": t["c_reference"] / t["candidate"]}

    # ---- baselines and limits -------------------------------------------------------------
    def baselines(self) -> dict[str, Any] | None:
        """numpy_ms, c_reference_ms (medians summed over the goal's shapes), copy_gbs; measured
        once per run, by the first call."""
        with self._lock:
            if self._baselines is not None:
                return self._baselines or None
        reply = self.pool.call(("baselines", self.shapes, self.settings.baseline_timing),
                               self.deadlines)
        with self._lock:
            self._baseline_start_s = reply.started_s
            self._baselines = reply.result if reply.fault is None else {}
            self.baseline_log = reply.fault.detail if reply.fault else ""
            return self._baselines or None

    def _baseline(self) -> tuple[str, float] | None:
        b = self.baselines()
        return ("numpy", b["numpy_ms"]) if b and b.get("numpy_ms") else None

    def final_comparison(self, best: Evaluation) -> dict[str, float] | None:
        """The run's best and its baselines timed again, interleaved, in one measurement at the
        end of a run: the speedup a run claims comes from this, not from the baseline measured
        at its start under whatever load the machine had then."""
        figures = self.compare(best)
        if not figures or not figures.get("numpy_ms"):
            return None
        return {**figures, "baseline_value": self._objective(figures["numpy_ms"]),
                "best_value": self._objective(figures["candidate_ms"])}

    def run_threads(self) -> int:
        """The most threads a candidate of this run may run, for the run's roof line: the
        largest THREADS the space lists where the kernel host holds every candidate to its
        THREADS (the list bounds what restrictions leave), else every core (a memory-bound
        goal's own kernel: as for the guard)."""
        cores = os.cpu_count() or 1
        values = self.space.params.get("THREADS")
        if values and self.threads_held:
            return min(cores, max(declared_threads({"THREADS": v}) or 1 for v in values))
        return self.guard_threads({"THREADS": cores}) if self.op.memory_bound else cores

    def _limit_ms(self) -> float | None:
        """Memory-bound operators: the time at the roof of the cache level the goal's working
        set fits in, at the run's threads (run_threads; at the measured copy bandwidth without
        roofs). Compute-bound ones: at the FP32 peak at the run's threads. The roof comes first:
        your own kernel has no baselines (so no copy bandwidth) but the same roofs."""
        roof = self._roof_at(self.run_threads())
        if roof is not None or not self.op.memory_bound:
            return roof.roof_ms() if roof is not None else None
        b = self.baselines()
        if not b or not b.get("copy_gbs"):
            return None
        return sum(self.work(s) for s in self.shapes) / (b["copy_gbs"] * 1e9) * 1e3

    def device(self) -> DeviceInfo:
        return DeviceInfo(kind="cpu", name=cpu_name(),
                          details={"cores": os.cpu_count(), "compiler": self.tc.identity,
                                   "openmp": "yes" if self.tc.openmp else "no"})

    def close(self) -> None:
        self.pool.close()
