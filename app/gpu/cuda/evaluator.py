"""CudaEvaluator: the cuda backend behind app.core.evaluator.Evaluator.

Thin, like CpuEvaluator: it checks the goal, sends each candidate as a CascadeRequest to a GPU
worker process (one per visible GPU, or the goal's pinned device) through
app.gpu.worker.WorkerPool, and turns the reply (a serialised Evaluation, or a WorkerFault) into
an Evaluation with the roofline figures added; `retime_pair` times two verified kernels again,
interleaved on one GPU (the lesson book's close calls). Everything that touches candidate code (NVRTC
compile under the compile deadline, resources, load, verify, time, re-verify) runs in the
worker (app.gpu.cuda.worker): a crash, a hang or a sticky CUDA error costs one worker process,
which is replaced, and the run continues.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import random
import threading
import time
from typing import Any

from app.catalog import get_operator
from app.catalog.cuda.base import CudaOperator
from app.catalog.cuda.compiled_baselines import COMPILERS, compiled_kinds
from app.catalog.custom import custom_operator
from app.core.evaluator import BackendUnavailable, DeviceInfo
from app.core.space import SearchSpace
from app.core.types import Candidate, Evaluation, Stage
from app.goal import Goal
from app.gpu.backend_evaluator import BackendEvaluator
from app.gpu.cascade import CascadeRequest
from app.gpu.cuda.roofline import Limits, peak_flops
from app.gpu.cuda.telemetry import TelemetrySampler
from app.gpu.cuda.timing import Protocol
from app.gpu.cuda.worker import fastest_baseline
from app.gpu.worker import Deadlines, WorkerPool

log = logging.getLogger(__name__)
WORKER_FACTORY = "app.gpu.cuda.worker:make_handler"
BASELINE_FACTORY = "app.gpu.cuda.worker:make_baseline_handler"  # the trusted baseline cell


def visible_devices(pinned: int | None = None) -> list[int]:
    """Indices of the GPUs this process may use; BackendUnavailable with a plain reason if none."""
    try:
        import cupy  # noqa: F401
        from cupy.cuda import runtime
    except Exception as exc:  # noqa: BLE001 - any import failure means no cuda backend
        raise BackendUnavailable(f"the cuda backend needs CuPy ({exc}); install cupy-cuda12x, "
                                 "or choose the 'cpu' or 'replay' backend") from None
    try:
        count = runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no driver, no device: the same answer
        raise BackendUnavailable(f"no usable NVIDIA GPU here ({exc}); choose the 'cpu' or "
                                 "'replay' backend") from None
    if count == 0:
        raise BackendUnavailable("no NVIDIA GPU is visible; choose the 'cpu' or 'replay' backend")
    if pinned is not None:
        if pinned >= count:
            raise BackendUnavailable(f"the goal asks for GPU {pinned}, but only {count} "
                                     f"GPU{'s are' if count > 1 else ' is'} visible")
        return [pinned]
    return list(range(count))


def make_pool(devices: list[int], worker_factory: str = WORKER_FACTORY) -> WorkerPool:
    """One GPU worker process per device."""
    return WorkerPool(worker_factory, [(d,) for d in devices], name="cuda", recycle_after=200)


class CudaEvaluator(BackendEvaluator):
    def __init__(self, goal: Goal, validation_cases: list[dict] | tuple = (), *, bus: Any = None,
                 run_id: int | None = None, protocol: Protocol | None = None,
                 deadlines: Deadlines | None = None, compile_cache: Any = True,
                 measure_baseline: bool = True, telemetry_interval_s: float = 1.0,
                 devices: list[int] | None = None, worker_factory: str = WORKER_FACTORY,
                 pool: WorkerPool | None = None, baseline_factory: str | None = None,
                 compilers: tuple[str, ...] = COMPILERS) -> None:
        # a catalog operator, or your own kernel (app.catalog.custom): no library baselines then
        op = custom_operator(goal, "cuda") if goal.kernel else get_operator("cuda", goal.operator)
        measure_baseline = measure_baseline and not goal.kernel
        op.check_dtype(goal.dtype)
        for shape in goal.shapes:
            problem = op.check_shape(list(shape), goal.dtype)
            if problem:
                raise ValueError(f"shapes: {problem}")
        if goal.objective.metric not in ("time", "throughput"):
            raise ValueError(f"objective.metric: the cuda backend measures time and throughput, "
                             f"not {goal.objective.metric!r}")
        super().__init__(goal, validation_cases)
        self._use(op)
        self.protocol = protocol or Protocol()
        self.deadlines = deadlines or Deadlines(compile_s=120.0, run_s=90.0)
        # True: the default cache (the worker's sandbox may write only under app.paths.cache_dir)
        self.compile_cache = compile_cache
        self.measure_baseline = measure_baseline
        # compiled baselines (Triton, torch.compile: both launch on torch tensors) run in a
        # trusted cell of their own; a stand-in worker (tests) gets none unless it names its own
        self.baseline_factory = baseline_factory if baseline_factory is not None else (
            BASELINE_FACTORY if worker_factory == WORKER_FACTORY
            and importlib.util.find_spec("torch") is not None else None)
        self.compilers = tuple(compilers)  # which compiled baselines (torch.compile's are slow to build)
        self.devices = devices if devices is not None else visible_devices(goal.device)
        self.max_parallel = len(self.devices)
        # A pool may be shared by several evaluators (a benchmark over many goals): its worker
        # processes, CUDA contexts and imported libraries are then set up once.
        self._own_pool = pool is None
        self.pool = pool or make_pool(self.devices, worker_factory)
        self.telemetry = TelemetrySampler(self.devices, bus=bus, interval_s=telemetry_interval_s,
                                          run_id=run_id)
        if bus is not None:
            self.telemetry.start()
        self._lock = threading.Lock()
        self._info: dict[str, Any] | None = None
        self._baselines: dict[str, Any] | None = None
        self._seed = random.Random(goal.swarm.seed).randrange(1 << 30)
        self._evals = 0
        self._retime_seeds = random.Random(self._seed + 1)  # re-timings' input seeds
        if op.device_specific:  # gemm: wgmma + TMA on sm_90, mma.sync elsewhere
            self._resolve_for_device()

    def _resolve_for_device(self) -> None:
        """The operator, space and template of the device the workers run on (the worker
        resolves the same way: app.gpu.cuda.worker.device_operator). Without a device answer the
        generic operator stays; evaluate() reports the missing device as before."""
        try:
            cc = self.info()["compute_capability"]
        except BackendUnavailable:
            return
        op = self.op.for_device(cc)
        if op is not self.op:
            self._use(op)

    def _use(self, op: CudaOperator) -> None:
        """The operator, its template and the goal's space, keyed by what runs: an edited
        kernel's configurations are new keys."""
        base = op.space(self.dtype)
        self.op: CudaOperator = op
        self.template = op.template_source(self.dtype)
        extra = {"operator": op.name, "source": hashlib.sha256(self.template.encode()).hexdigest()}
        self.space = SearchSpace(base.params, restrictions=base.restrictions + list(
            self.goal.constraints.restrictions), key_extra=extra)

    # ---- device and limits ----------------------------------------------------------------
    def attach_bus(self, bus: Any, run_id: int | None = None) -> None:
        """Publish telemetry on `bus` from now on (the session makes the bus after the evaluator)."""
        self.telemetry.bus, self.telemetry.run_id = bus, run_id
        self.telemetry.start()

    def info(self) -> dict[str, Any]:
        with self._lock:
            if self._info is None:
                reply = self.pool.call(("info", False), self.deadlines)
                if reply.fault is not None:
                    raise BackendUnavailable(f"the GPU worker could not start: {reply.fault.detail}\n"
                                             f"{reply.fault.log[-2000:]}")
                if not reply.result.get("ok"):
                    raise BackendUnavailable(f"the GPU worker failed: {reply.result.get('detail')}")
                self._info = reply.result
            return self._info

    def limits(self) -> Limits:
        info = self.info()
        peaks = {d: p for d in ("float32", "float16", "bfloat16") if (p := peak_flops(info["name"], d))}
        return Limits(device=info["name"], copy_bw=info["copy_bw"], peak=peaks)

    def device(self) -> DeviceInfo:
        try:
            info = self.info()
        except BackendUnavailable as exc:
            return DeviceInfo(kind="cuda", name="unavailable", details={"reason": str(exc)})
        return DeviceInfo(kind="cuda", name=info["name"], details={
            "cc": info["compute_capability"], "SMs": info["sms"],
            "memory": f"{info['memory_bytes'] / 2**30:.0f} GiB", "driver": info["driver"],
            "copy": f"{info['copy_bw'] / 1e9:.0f} GB/s", "workers": len(self.devices)})

    def baselines(self) -> dict[str, Any]:
        """Every library and compiler baseline measured once on the goal shapes: "baselines"
        (name -> figures per shape), "best" (the fastest correct one) and "anchor" (the fastest
        the sealed candidate cell can run: a candidate is timed against it, sample by sample)."""
        with self._lock:
            cached = self._baselines
        if cached is not None:
            return cached
        self.info()
        spec = {"operator": self.op.name, "dtype": self.dtype, "goal_shapes": self.shapes,
                "rtol": self.goal.tolerance.rtol, "atol": self.goal.tolerance.atol,
                "protocol": self.protocol, "compilers": self.compilers}
        result, compiled_error = None, ""
        if self.baseline_factory and compiled_kinds(self.op.compiled_baselines(self.dtype), self.compilers):
            result, compiled_error = self._trusted_baselines(spec)
        sealed = self.pool.call(("baselines", spec), self.deadlines)
        if sealed.fault is not None or not sealed.result.get("ok"):
            why = sealed.fault.detail if sealed.fault else sealed.result.get("detail")
            sealed_result = {"baselines": {}, "best": None, "anchor": None, "error": why}
        else:
            sealed_result = sealed.result
        if sealed_result.get("error"):
            log.warning("library baselines in the GPU worker: %s", sealed_result["error"])
        if result is not None and not result.get("best"):
            compiled_error = "no baseline verified in the baseline cell"
            result = None
        if result is None:
            result = sealed_result
        else:  # the anchor must also run where the candidates run
            ok_there = {n for n, r in sealed_result.get("baselines", {}).items() if r.get("ok")}
            result["anchor"] = fastest_baseline(result["baselines"], len(self.shapes),
                                                lambda n, r: not r.get("compiled") and n in ok_there)
            if sealed_result.get("error"):
                result["anchor_error"] = sealed_result["error"]
        if compiled_error:
            result["compiled_error"] = compiled_error
        with self._lock:
            self._baselines = result
        return result

    def _trusted_baselines(self, spec: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        """The baselines from a trusted cell started for this one request on the first device
        (and closed, so its CUDA context does not sit beside the candidates'): (result, "") or
        (None, why) when it could not give one; the sealed cell's library baselines then stand."""
        pool = None
        try:
            pool = WorkerPool(self.baseline_factory, [(self.devices[0],)], name="cuda-baselines",
                              kind="baseline", recycle_after=1)
            reply = pool.call(("baselines", spec), self.deadlines)
        except (RuntimeError, OSError) as exc:
            return None, f"the baseline cell could not start: {exc}"
        finally:
            if pool is not None:
                pool.close()
        if reply.fault is not None:
            log.warning("compiled baselines: %s", reply.fault.detail)
            return None, f"the baseline cell failed ({reply.fault.reason}): {reply.fault.detail}"
        if not isinstance(reply.result, dict) or not reply.result.get("ok"):
            detail = reply.result.get("detail") if isinstance(reply.result, dict) else reply.result
            return None, f"the baseline cell failed: {detail}"
        return reply.result, ""

    def _baseline(self) -> tuple[str, float] | None:
        if not self.measure_baseline:
            return None
        b = self.baselines()
        best = b.get("best")
        return (best, sum(b["baselines"][best]["ms"])) if best else None

    def _limit_ms(self) -> float | None:
        lim = self.limits()
        floors = [lim.time_floor_s(self.op.flops(s), self.op.bytes_moved(s, self.dtype), self.dtype)
                  for s in self.shapes]
        return None if any(f is None for f in floors) else sum(floors) * 1e3

    # ---- one candidate --------------------------------------------------------------------
    def _probe_request(self, candidate: Candidate | Evaluation) -> CascadeRequest:
        self.info()
        with self._lock:
            seed = self._seed + 1000 * self._evals + 7
        return self._request(candidate, seed, with_baseline=False)

    def _request(self, candidate: Candidate | Evaluation, seed: int,
                 with_baseline: bool = True) -> CascadeRequest:
        b = self.baselines() if self.measure_baseline and with_baseline else {}
        baseline = b.get("anchor", b.get("best"))  # a compiled best cannot run in the sealed cell
        cache = self.compile_cache
        lim = self.limits()
        floors = [lim.time_floor_s(self.op.flops(s), self.op.bytes_moved(s, self.dtype), self.dtype)
                  for s in self.shapes]
        roof_ms = sum(floors) * 1e3 if floors and all(floors) else None
        return self._cascade_request(
            candidate, seed=seed, timing=self.protocol, roof_ms=roof_ms,
            roof_detail=(f"{lim.device} roofline (copy {lim.copy_bw / 1e9:.0f} GB/s, peak "
                         "FLOP/s)") if roof_ms else "",
            options={"operator": self.op if self.goal.kernel else self.op.name, "baseline": baseline,
                     "compile_cache": str(cache) if not isinstance(cache, bool) else cache,
                     "max_registers": self.goal.constraints.max_registers,
                     "max_shared_memory_bytes": self.goal.constraints.max_shared_memory_bytes})

    def _prepare(self, candidate: Candidate) -> tuple[CascadeRequest, list[Stage]]:
        self.info()  # the device must answer before a candidate is sent
        with self._lock:
            self._evals += 1
            seed = self._seed + 1000 * self._evals
        t = time.perf_counter()
        request = self._request(candidate, seed)  # the first measures the run's baselines
        took = time.perf_counter() - t
        return request, [Stage("baselines", True, took, "library baselines, once per run")
                         ] if took >= 0.001 else []

    def _retime_requests(self, a: Candidate | Evaluation, b: Candidate | Evaluation
                         ) -> tuple[CascadeRequest, CascadeRequest] | None:
        """Timed on one GPU, interleaved sample by sample by the cascade's timer
        (CudaWorker.retime), both on the same inputs (one seed)."""
        for item in (a, b):  # tunables an LLM kernel declared are #defines, not space parameters
            if not self.space.is_valid({k: v for k, v in item.config.items() if k in self.space.params}):
                return None
        self.info()
        with self._lock:
            seed = self._retime_seeds.randrange(1 << 30)
        return (self._request(a, seed, with_baseline=False),
                self._request(b, seed, with_baseline=False))

    def _finish(self, ev: Evaluation, request: CascadeRequest) -> None:
        """Roofline figures, speedup over the best library baseline, the objective's value. (A
        cold-cache event-timed figure beyond the hardware limit was re-timed and refused in the
        cascade: request.roof_ms.)"""
        if not ev.ok:
            return
        total_ms = ev.time_ms or 0.0
        metrics = ev.metrics
        metrics["time_ms"] = total_ms
        lim = self.limits()
        flops = sum(self.op.flops(s) for s in self.shapes)
        nbytes = sum(self.op.bytes_moved(s, self.dtype) for s in self.shapes)
        metrics.update(lim.achieved(flops, nbytes, self.dtype, total_ms / 1e3))
        self._one_fraction(ev, lim, flops, nbytes, total_ms)
        if "baseline_ms" in metrics:
            self._scale_to_best(metrics)
            metrics["speedup"] = metrics["baseline_ms"] / total_ms if total_ms > 0 else 0.0
        ev.value = self._objective(total_ms)

    def _one_fraction(self, ev: Evaluation, lim: Limits, flops: float, nbytes: float,
                      total_ms: float) -> None:
        """One fraction of the hardware per candidate (fraction_of_roof), named by the roof
        that binds: the copy roof or the dtype's peak FLOP/s, whichever allows the longer
        time; the per-roof percentages stay out of stored rows (displays show one figure)."""
        for key in ("pct_copy_bw", "pct_peak_flops", "pct_of_limit"):
            ev.metrics.pop(key, None)
        rate = lim.peak.get(self.dtype)
        terms = []
        if lim.copy_bw and nbytes:
            terms.append((nbytes / lim.copy_bw, f"copy roof {lim.copy_bw / 1e9:.0f} GB/s"))
        if rate and flops:
            terms.append((flops / rate, f"peak {self.dtype} {rate / 1e12:.0f} TFLOP/s"))
        if not terms or total_ms <= 0:
            ev.metrics.pop("fraction_of_roof", None)
            ev.resources["roof"] = "no roof (no measured limit for this figure)"
            return
        floor_s, label = max(terms)
        ev.metrics["fraction_of_roof"] = floor_s * 1e3 / total_ms
        ev.resources["roof"] = f"{lim.device} {label}"

    def _scale_to_best(self, metrics: dict[str, float]) -> None:
        """The candidate was timed against the anchor; when a compiled baseline is faster, the
        best's time on the candidate's terms is the anchor's times the ratio the baseline cell
        measured between them, interleaved (the anchor's own figure stays as anchor_ms)."""
        b = self.baselines()
        best, anchor = b.get("best"), b.get("anchor")
        if not best or not anchor or best == anchor:
            return
        best_ms, anchor_ms = (sum(b["baselines"][n]["ms"]) for n in (best, anchor))
        if anchor_ms <= 0:
            return
        metrics["anchor_ms"] = metrics["baseline_ms"]
        metrics["baseline_ms"] = metrics["baseline_ms"] * best_ms / anchor_ms

    def close(self) -> None:
        self.telemetry.stop()
        if self._own_pool:
            self.pool.close()
