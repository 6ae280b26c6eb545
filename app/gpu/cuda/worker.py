"""What runs inside a GPU worker process (one per GPU, spawned by app.gpu.worker.WorkerPool).

Requests: ("info", refresh) device properties and measured copy bandwidth; ("baselines", spec)
times the operator's library baselines; ("retime", CascadeRequest, CascadeRequest) times two
verified kernels again, interleaved in one measurement (CudaWorker.retime: the lesson book's
close calls); ("evaluate", CascadeRequest) runs THE cascade
(app.gpu.cascade) with the CUDA hooks below: NVRTC compile in this process (under the
watchdog's compile deadline), ptxas resources against the device and the goal, module load,
verification on the device (app.gpu.verify with xp = CuPy), the CUDA timer
(app.gpu.cuda.timing), re-verification. The reply is a serialised Evaluation, as for every
backend. A CUDA error other than an allocation failure poisons this process's context: the
reply says `restart` and the pool replaces the process.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

import app.gpu.cuda.reference_kernel  # noqa: F401 - registers the CUDA reference runner (custom goals)
from app.catalog import get_operator
from app.catalog.cuda.base import CudaOperator, Launch, Step
from app.catalog.cuda.compiled_baselines import COMPILERS, compiled_kinds
from app.core.types import (
    COMPILE_FAILED,
    OUT_OF_MEMORY,
    RESOURCE_LIMIT,
    RUNTIME_FAILED,
    STATIC_CHECK,
    VERIFY_FAILED,
)
from app.gpu.cascade import Built, CascadeRequest, StageFailed, TimerResult, run_cascade
from app.gpu.cuda import nvrtc, telemetry
from app.gpu.cuda.cubin_symbols import object_sizes
from app.gpu.cuda.launch import DriverKernel, needs_driver
from app.gpu.cuda.occupancy import device_limits, occupancy, occupancy_problem
from app.gpu.cuda.roofline import cached_copy_bandwidth, device_key, measure_copy_bandwidth
from app.gpu.cuda.timing import Protocol, Timer
from app.gpu.timed_slots import TimedSlots
from app.gpu.timing import TimingStats, add_shape_figures
from app.gpu.verify import CheckCase, GuardedOutput, compare, make_inputs, tolerance_for

Progress = Callable[[str], None]
MAX_THREADS_PER_BLOCK = 1024


def make_handler(device_index: int) -> CudaWorker:
    return CudaWorker(device_index)


def make_baseline_handler(device_index: int) -> CudaWorker:
    """The trusted baseline cell's handler (sandbox kind "baseline"): it runs no candidate, only
    library and compiler baselines, Triton's and torch.compile's included, which compile by
    starting ptxas and a C compiler."""
    return CudaWorker(device_index, compiled_baselines=True)


def fastest_baseline(results: dict[str, dict[str, Any]], shapes: int,
                     keep: Callable[[str, dict[str, Any]], bool] = lambda name, r: True) -> str | None:
    """The fastest baseline (time summed over the shapes) that was correct on all `shapes` and
    that `keep(name, figures)` accepts; None where there is none."""
    times = {n: sum(r["ms"]) for n, r in results.items()
             if r.get("ok") and len(r["ms"]) == shapes and keep(n, r)}
    return min(times, key=times.get) if times else None


def shape_key(shape: Any) -> str:
    return "x".join(str(int(d)) for d in shape)


class CudaKernelBackend:
    """The cascade's CUDA hooks (app.gpu.cascade.CascadeBackend) for one request. A CUDA
    candidate is specialised per shape (compile-time sizes), so it is built once per shape."""

    def __init__(self, worker: CudaWorker, op: CudaOperator, request: CascadeRequest) -> None:
        self.worker, self.op, self.request = worker, op, request
        self.xp = worker.cp
        self.dtype = request.dtype
        self.options = request.options

    def static_check(self, source: str, config: dict[str, Any], shapes: list[list[int]]) -> list[str]:
        if managed_variables(source):
            return [("declares a __managed__ variable (memory that outlives the call); kernels may "
                    "only use their arguments and shared memory")]
        for s in shapes:
            problem = self.op.static_check(config, s, self.dtype)
            if problem:
                return [f"shape {s}: {problem}"]
        return []

    def build(self, source: str, config: dict[str, Any], shapes: list[list[int]]) -> Built:
        cc = self.worker.info["compute_capability"]
        kernel = self.op.kernel_for(self.dtype)
        builds: dict[str, dict[str, Any]] = {}
        try:
            for s in shapes:
                rendered = self.op.render(config, s, self.dtype, source)
                arch = nvrtc.target_arch(cc, rendered)
                built = self.worker.compile(rendered, kernel, arch,
                                            cache=self.options.get("compile_cache", True))
                steps = pipeline_steps(self.op, config, s, self.dtype)
                missing = sorted({st.kernel for st in steps} - set(built.resources))
                if missing:  # a multi-kernel operator: every step's entry is in the one module
                    raise nvrtc.CompileError(f"kernel {missing[0]!r} not found in the compiled module "
                                             f"(found: {', '.join(built.resources)})", built.log)
                builds[shape_key(s)] = {"built": built, "launch": steps[0].launch, "steps": steps,
                                        "arch": arch, "shape": list(s)}
        except nvrtc.CompileError as exc:
            raise StageFailed(COMPILE_FAILED, str(exc), log=exc.log) from None
        first = builds[shape_key(shapes[0])]["built"]
        return Built(builds, first.key, cached=all(b["built"].cached for b in builds.values()),
                     log=first.log)

    def check_resources(self, built: Built, config: dict[str, Any]) -> dict[str, Any]:
        info = self.worker.info
        kernel = self.op.kernel_for(self.dtype)
        builds: dict[str, dict[str, Any]] = built.artifact
        first = next(iter(builds.values()))
        res, launch = first["built"].resource(kernel), first["launch"]
        resources = {"registers": res.registers, "spill_stores": res.spill_stores,
                     "spill_loads": res.spill_loads, "stack_bytes": res.stack_bytes,
                     "static_shared_bytes": res.shared_bytes, "dynamic_shared_bytes": launch.shared_bytes,
                     "threads_per_block": _threads(launch), "arch": first["arch"],
                     "artifact_key": first["built"].key}
        limits = device_limits(info)
        if len(first["steps"]) > 1:  # a pipeline: every kernel's resources, in launch order
            resources["kernels"] = "; ".join(
                f"{st.kernel}: {first['built'].resource(st.kernel).registers} regs, "
                f"{first['built'].resource(st.kernel).spill_stores} B spills, "
                f"{first['built'].resource(st.kernel).shared_bytes + st.launch.shared_bytes} B smem"
                for st in first["steps"])
        checks = [(key, b, st, i == 0 and j == 0) for i, (key, b) in enumerate(builds.items())
                  for j, st in enumerate(b["steps"])]
        for key, b, step, head in checks:
            kernel = step.kernel
            b = {**b, "launch": step.launch}
            r, threads = b["built"].resource(kernel), _threads(b["launch"])
            occ = occupancy(r.registers, threads, r.shared_bytes, b["launch"].shared_bytes, limits)
            if head:  # theoretical occupancy, for the prompt (hardware feedback) and the views
                resources.update(occupancy=round(occ.occupancy, 4),
                                 active_warps_per_sm=occ.active_warps_per_sm,
                                 occupancy_limit=occ.limit)
            problem = nvrtc.check_limits(
                r, dynamic_shared=b["launch"].shared_bytes,
                max_registers=self.options.get("max_registers"),
                max_shared=self.options.get("max_shared_memory_bytes"),
                device_shared_limit=info["shared_per_block_optin"])
            if problem is None and r.gmem_bytes > 0 and self.request.source is not None:
                allowed = self._template_gmem(config, b["shape"])
                if r.gmem_bytes > allowed:
                    problem = global_memory_problem(r.gmem_bytes, allowed)
            if problem is None and threads > MAX_THREADS_PER_BLOCK:
                problem = f"{threads} threads per block; the device allows {MAX_THREADS_PER_BLOCK}"
            if problem is None and r.registers * threads > info["regs_per_block"]:
                problem = (f"{r.registers} registers x {threads} threads exceeds the "
                           f"{info['regs_per_block']} registers a block may use")
            if problem is None:  # what the launch would refuse: per-warp register allocation, ...
                problem = occupancy_problem(occ, limits)
            if problem:
                where = f" kernel {kernel}" if len(b["steps"]) > 1 else ""
                raise StageFailed(RESOURCE_LIMIT, f"shape {key}{where}: {problem}")
        return resources

    def _template_gmem(self, config: dict[str, Any], shape: list[int]) -> int:
        """The global memory the operator's own template keeps for this shape (its namespace-
        scope constexpr constants): what a rewrite may keep; anything more is state."""
        kernel = self.op.kernel_for(self.dtype)
        rendered = self.op.render(config, shape, self.dtype, None)
        arch = nvrtc.target_arch(self.worker.info["compute_capability"], rendered)
        try:
            built = self.worker.compile(rendered, kernel, arch,
                                        cache=self.options.get("compile_cache", True))
        except nvrtc.CompileError:
            return 0
        return built.resource(kernel).gmem_bytes

    def load(self, built: Built) -> Callable[..., None]:
        fns = {key: [(self.worker.function(b["built"].cubin_path, st.kernel, st.launch), st.launch)
                     for st in b["steps"]]
               for key, b in built.artifact.items()}
        self._fns = fns
        self._cubins = {key: b["built"].cubin_path for key, b in built.artifact.items()}
        cp = self.xp

        def run(inputs: dict[str, Any], outputs: dict[str, GuardedOutput], shape: tuple[int, ...]) -> None:
            self.launcher(inputs, outputs, shape)()
            cp.cuda.Device().synchronize()  # a launch error surfaces in the stage that caused it

        return run

    def launcher(self, inputs: dict[str, Any], outputs: dict[str, GuardedOutput],
                 shape: tuple[int, ...]) -> Callable[[], None]:
        fns = self._fns[shape_key(shape)]
        views = {k: v.view for k, v in outputs.items()}
        if len(fns) > 1 or self.op.workspaces(self.request.config, list(shape), self.dtype):
            return self._pipeline(fns, inputs, views, shape)
        fn, launch = fns[0]
        args = self.op.kernel_args(self.request.config, inputs, views, list(shape))
        # your own kernel (app.catalog.custom): in/out arrays start from their inputs, and
        # __constant__ arrays are copied to their symbols, every launch
        prelude = self.op.launch_prelude(inputs, views)
        constants = None
        if getattr(self.op, "has_constants", False):
            cubin = self._cubins[shape_key(shape)]
            constants = self.op.constant_copy(self.xp, self.worker.modules[cubin], inputs,
                                              object_sizes(cubin))

        def launch_once() -> None:
            if prelude is not None:
                prelude()
            if constants is not None:
                constants()
            fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)

        return launch_once

    def _pipeline(self, fns: list[tuple[Any, Launch]], inputs: dict[str, Any], views: dict[str, Any],
                  shape: tuple[int, ...]) -> Callable[[], None]:
        """A multi-kernel operator's call: its workspaces allocated now (outside any timed
        region; NaN/-1 poisoned, or filled from the operator's host tables), then every step
        launched in order on one stream: the whole pipeline is one timed call."""
        cp, config = self.xp, self.request.config
        spaces = {}
        for name, ws in self.op.workspaces(config, list(shape), self.dtype).items():
            if ws.init is not None:
                spaces[name] = cp.asarray(np.ascontiguousarray(ws.init, dtype=ws.dtype))
                continue
            arr = cp.empty(tuple(int(d) for d in ws.shape), dtype=ws.dtype)
            arr.fill(np.nan if np.dtype(ws.dtype).kind == "f" else
                     (np.iinfo(ws.dtype).max if np.dtype(ws.dtype).kind == "u" else -1))
            spaces[name] = arr
        calls = [(fn, launch, self.op.step_args(config, i, inputs, views, spaces, list(shape)))
                 for i, (fn, launch) in enumerate(fns)]

        def launch_all() -> None:
            for fn, launch, args in calls:
                fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)

        launch_all.workspaces = spaces  # for tests and tools: what the steps passed between them
        return launch_all

    def timing_calls(self, runner: Any, inputs: dict[str, Any], outputs: dict[str, GuardedOutput],
                     shape: tuple[int, ...]) -> dict[str, Callable[[], None]]:
        calls = {"candidate": self.launcher(inputs, outputs, shape)}
        baseline = self.options.get("baseline")
        if baseline:
            run, _ = self.op.baselines(self.dtype)[baseline](inputs, list(shape), self.dtype)
            calls["baseline"] = run
        return calls

    def timer(self, calls: dict[str, Callable[[], None]], settings: Protocol | None,
              before: Callable[[str], None] | None = None) -> TimerResult:
        m = self.worker.timer.measure(calls, settings or Protocol(), before=before)
        stats = {n: TimingStats(samples_ms=list(m.samples[n]), median_ms=st.median, p10_ms=st.p10,
                                p90_ms=st.p90) for n, st in m.stats.items()}
        return TimerResult(stats, metrics={"rel_ci": m.stats["candidate"].rel_ci,
                                           "throttled_discarded": float(m.discarded_throttled)},
                           resources={"timing_mode": m.mode["candidate"], "cache": m.cache,
                                      "stop_reason": m.stop_reason},
                           # graph replays and warm caches are not held to the DRAM roof
                           comparable_to_roof=m.mode["candidate"] == "events" and m.cache == "cold")

    def fault(self, exc: BaseException) -> StageFailed | None:
        cp = self.xp
        if isinstance(exc, cp.cuda.memory.OutOfMemoryError):
            self.release()
            return StageFailed(OUT_OF_MEMORY, f"device memory exhausted: {exc}")
        if isinstance(exc, (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError)):
            text = str(exc)
            reason = OUT_OF_MEMORY if "OUT_OF_MEMORY" in text.upper() or "MEMORYALLOCATION" in text.upper() \
                else RUNTIME_FAILED
            # Sticky launch errors (illegal address, misaligned access, trap) poison this context.
            return StageFailed(reason, f"CUDA error: {text}", log=traceback.format_exc(), restart=True)
        return None

    def measure_roof(self, check: Any) -> dict[str, float] | None:
        return None  # the cached copy roofline stands (it is spot-checked per process)

    def release(self) -> None:
        self.worker.release()


_SPLICE = re.compile(r"\\\r?\n")
_MANAGED = re.compile(r"\b__managed__\b")


def managed_variables(source: str) -> bool:
    """Whether the candidate's code (comments gone, backslash-newline splices joined) declares
    a __managed__ variable. A macro that hides one still leaves gmem for ptxas to report."""
    return bool(_MANAGED.search(nvrtc.code_only(_SPLICE.sub("", source))))


def global_memory_problem(gmem_bytes: int, allowed: int = 0) -> str:
    return (f"keeps {gmem_bytes} bytes of global device memory (ptxas 'bytes gmem'; the "
            f"operator's template keeps {allowed}): __device__, __managed__ or namespace-scope "
            "variables are state that survives between calls; kernels may only use their "
            "arguments, shared memory and the template's constants")


def pipeline_steps(op: CudaOperator, config: dict[str, Any], shape: list[int], dtype: str) -> list[Step]:
    """The kernels an operator's call runs (one, unless the operator has several steps)."""
    return list(op.steps(config, shape, dtype))


def device_operator(op: CudaOperator | str, info: dict[str, Any]) -> CudaOperator:
    """The operator (a catalog name or your own kernel's operator) as it runs on this GPU (Gemm:
    the wgmma template on compute capability 9.0)."""
    if isinstance(op, str):
        op = get_operator("cuda", op)
    return op.for_device(info["compute_capability"])


def _threads(launch: Launch) -> int:
    return launch.block[0] * launch.block[1] * launch.block[2]


# cudaDeviceProp names (CuPy's getDeviceProperties keys) -> the worker's info keys; the last two
# exist from CUDA 11 on. A device that does not report one gets app.gpu.cuda.occupancy's table.
SM_PROPS = {"maxThreadsPerMultiProcessor": "max_threads_per_sm",
            "maxThreadsPerBlock": "max_threads_per_block", "warpSize": "warp_size",
            "regsPerMultiprocessor": "regs_per_sm", "sharedMemPerMultiprocessor": "shared_per_sm",
            "sharedMemPerBlock": "shared_per_block",
            "maxBlocksPerMultiProcessor": "max_blocks_per_sm",
            "reservedSharedMemPerBlock": "reserved_shared_per_block"}


def sm_limits(props: dict[str, Any]) -> dict[str, int]:
    """The per-SM limits occupancy is computed against, as the device reports them."""
    return {key: int(props[name]) for name, key in SM_PROPS.items() if props.get(name) is not None}


class CudaWorker:
    def __init__(self, device_index: int, compiled_baselines: bool = False) -> None:
        import cupy as cp

        self.cp = cp
        self.compiled_baselines = compiled_baselines  # only in the trusted baseline cell
        self.index = device_index
        cp.cuda.Device(device_index).use()
        props = cp.cuda.runtime.getDeviceProperties(device_index)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        ident = telemetry.device_identity(device_index)
        self.info: dict[str, Any] = {
            "index": device_index,
            "name": name,
            "compute_capability": f"{props['major']}{props['minor']}",
            "sms": int(props["multiProcessorCount"]),
            "l2_bytes": int(props["l2CacheSize"]),
            "shared_per_block_optin": int(props.get("sharedMemPerBlockOptin", props["sharedMemPerBlock"])),
            "regs_per_block": int(props["regsPerBlock"]),
            **sm_limits(props),
            "memory_bytes": int(props["totalGlobalMem"]),
            "driver": ident.get("driver") or str(cp.cuda.runtime.driverGetVersion()),
            "runtime": str(cp.cuda.runtime.runtimeGetVersion()),
            "uuid": ident.get("uuid", ""),
            "cupy": cp.__version__,
        }
        self.timer = Timer(self.info["l2_bytes"], telemetry.throttle_mask_fn(device_index))
        self.modules: dict[str, Any] = {}
        self.compile = nvrtc.compile_source  # replaceable: tests make it hang or fail

    # ---- dispatch -----------------------------------------------------------------------
    def __call__(self, request: tuple, progress: Progress) -> dict[str, Any]:
        kind = request[0]
        if self.compiled_baselines and kind not in ("info", "baselines"):
            # the unsealed baseline cell never runs a candidate, whoever asks
            return {"ok": False, "reason": RUNTIME_FAILED, "restart": False,
                    "detail": f"the baseline cell serves baselines only, not {kind!r}"}
        if kind == "evaluate":
            req: CascadeRequest = request[1]
            op = device_operator(req.options["operator"], self.info)
            evaluation, restart = run_cascade(req, op, CudaKernelBackend(self, op, req), progress)
            return {"evaluation": evaluation.to_dict(), "restart": restart}
        cp = self.cp
        try:
            if kind == "info":
                return self.device_info(bool(request[1]) if len(request) > 1 else False)
            if kind == "baselines":
                return self.baselines(request[1], progress)
            if kind == "retime":
                return self.retime(request[1], request[2], progress)
            raise ValueError(f"unknown request kind {kind!r}")
        except cp.cuda.memory.OutOfMemoryError as exc:
            self.release()
            return {"ok": False, "reason": OUT_OF_MEMORY, "detail": f"device memory exhausted: {exc}",
                    "restart": False}
        except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as exc:
            return {"ok": False, "reason": RUNTIME_FAILED, "detail": f"CUDA error: {exc}", "restart": True,
                    "log": traceback.format_exc()}

    def release(self) -> None:
        try:
            self.cp.get_default_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001, S110 - best effort; a broken context restarts the worker
            pass

    # ---- info ---------------------------------------------------------------------------
    def device_info(self, refresh: bool = False) -> dict[str, Any]:
        key = device_key(self.info["name"], self.info["driver"], self.info["uuid"])
        bw, cached = cached_copy_bandwidth(key, measure_copy_bandwidth, refresh=refresh)
        self.release()
        return {"ok": True, **self.info, "copy_bw": bw, "copy_bw_cached": cached}

    # ---- kernels ------------------------------------------------------------------------
    def function(self, cubin_path: str, kernel: str, launch: Launch) -> Any:
        cp = self.cp
        mod = self.modules.get(cubin_path)
        if mod is None:
            mod = cp.cuda.function.Module()
            with open(cubin_path, "rb") as fh:
                mod.load(fh.read())
            self.modules[cubin_path] = mod
        fn = mod.get_function(kernel)
        if launch.shared_bytes > 48 * 1024:
            cp.cuda.driver.funcSetAttribute(
                fn.ptr, cp.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.shared_bytes)
        if needs_driver(launch):  # clusters, persistent grids, tensor maps: cuLaunchKernelEx
            return DriverKernel(fn, launch, self.info["sms"])
        return fn

    # ---- baselines ----------------------------------------------------------------------
    def baselines(self, spec: dict[str, Any], progress: Progress) -> dict[str, Any]:
        """Every library baseline of the operator verified (app.gpu.verify.compare) and timed
        interleaved on the goal shapes; in the trusted baseline cell the compiled ones too
        (Triton, torch.compile: each compiles on its first call, under the compile deadline).
        spec: operator, dtype, goal_shapes, protocol, rtol, atol. "best" is the fastest
        correct one; "anchor" the fastest a sealed candidate cell can run too, the one a
        candidate is timed against sample by sample."""
        cp = self.cp
        op: CudaOperator = get_operator("cuda", spec["operator"])
        dtype = spec["dtype"]
        protocol = spec.get("protocol") or Protocol()
        progress("baselines")
        library = op.baselines(dtype)
        compiled = compiled_kinds(op.compiled_baselines(dtype), spec.get("compilers", COMPILERS)
                                  ) if self.compiled_baselines else {}
        makers = {**library, **compiled}
        results: dict[str, dict[str, Any]] = {
            name: {"ok": True, "ms": [], "p10": [], "p90": [], "n": [], "error": "",
                   "compiled": name in compiled} for name in makers}
        for shape in spec["goal_shapes"]:
            inputs = make_inputs(cp, op, CheckCase(list(shape), "normal", 12345), dtype)
            tol = tolerance_for(op, shape, dtype, spec.get("rtol"), spec.get("atol"))
            runs: dict[str, Callable[[], Any]] = {}
            for name, make in makers.items():
                if not results[name]["ok"]:
                    continue
                progress("compile" if name in compiled else "baselines")
                try:
                    run, fetch = make(inputs, shape, dtype)
                    run()
                    cp.cuda.Device().synchronize()
                    problem = compare(cp, op, inputs, fetch(), shape, dtype, tol)
                except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError):
                    raise
                except Exception as exc:  # noqa: BLE001 - library missing or op unsupported for this dtype
                    problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                if problem:
                    results[name].update(ok=False, error=problem)
                else:
                    runs[name] = run
            progress("baselines")
            if runs:
                m = self.timer.measure(runs, protocol)
                for name, st in m.stats.items():
                    for key, value in (("ms", st.median), ("p10", st.p10), ("p90", st.p90), ("n", st.n)):
                        results[name][key].append(value)
                    results[name]["mode"] = m.mode[name]
            del inputs
            self.release()
        shapes = len(spec["goal_shapes"])
        # the anchor: the fastest a sealed cell can run too (not compiled)
        return {"ok": True, "baselines": results, "best": fastest_baseline(results, shapes),
                "anchor": fastest_baseline(results, shapes, lambda name, r: not r["compiled"])}

    # ---- re-timing two kernels ------------------------------------------------------------
    def retime(self, first: CascadeRequest, second: CascadeRequest, progress: Progress) -> dict[str, Any]:
        """Two verified kernels (an LLM rewrite and the kernel it started from) timed again in
        one measurement, on `first`'s goal shapes, by the cascade's timer: interleaved sample by
        sample (as a candidate and its baseline are), CUDA events, L2 flushed before each
        sample. Each kernel times on its own timed slots (app.gpu.timed_slots) drawn from the
        same seed, so both see the same inputs, perturbed the same way; outputs are poisoned
        before every call and checked after the measurement. Each kernel passes the static
        check, build (normally from the compile cache) and resources as in the cascade before
        it is launched; it is not verified again here: a wrong one fails the check of its timed
        outputs. {"ok": True, "a": first's, "b": second's figures: median_ms, p10_ms, p90_ms
        summed over the shapes, samples (the fewest of any shape)}, or {"ok": False, ...}."""
        op = device_operator(first.options["operator"], self.info)
        backends = {"a": CudaKernelBackend(self, op, first), "b": CudaKernelBackend(self, op, second)}
        for label, backend in backends.items():
            try:
                self._load_for_timing(backend, progress)
            except StageFailed as exc:
                return {"ok": False, "reason": exc.reason, "detail": f"kernel {label}: {exc.detail}",
                        "restart": exc.restart}
        protocol = first.timing or Protocol()
        try:
            return {"ok": True, **self._time_pair(op, backends, first, protocol, progress)}
        except StageFailed as exc:
            return {"ok": False, "reason": exc.reason, "detail": exc.detail, "restart": exc.restart}
        finally:
            self.release()

    def _time_pair(self, op: CudaOperator, backends: dict[str, CudaKernelBackend],
                   request: CascadeRequest, protocol: Protocol,
                   progress: Progress) -> dict[str, dict[str, float]]:
        """Both loaded kernels timed interleaved on each goal shape of `request`; their figures
        summed over the shapes (raises StageFailed when a timed output was wrong)."""
        figures: dict[str, dict[str, float]] = {
            label: {"median_ms": 0.0, "p10_ms": 0.0, "p90_ms": 0.0, "samples": 0} for label in backends}
        rng = np.random.default_rng(request.seed + 7)
        for shape in request.goal_shapes:
            shape_t = tuple(int(d) for d in shape)
            seed = int(rng.integers(2**31))
            progress("time")
            slots = {label: TimedSlots(self.cp, op, shape_t, request.dtype, seed,
                                       lambda i, o, b=backend, s=shape_t: {"candidate": b.launcher(i, o, s)})
                     for label, backend in backends.items()}
            calls = {label: sl.calls()["candidate"] for label, sl in slots.items()}
            m = self.timer.measure(calls, protocol, graphable=tuple(calls),
                                   before=lambda label, sl=slots: sl[label].before("candidate"))
            tol = tolerance_for(op, shape_t, request.dtype, request.rtol, request.atol)
            for label, sl in slots.items():
                problem = sl.check(tol)
                if problem:
                    raise StageFailed(VERIFY_FAILED, f"outputs of a timed call of kernel {label} "
                                      f"were wrong: {problem} (shape {list(shape_t)})")
            for label, st in m.stats.items():
                add_shape_figures(figures[label], st.median, st.p10, st.p90, st.n)
            del slots, calls
            self.release()
        return figures

    def _load_for_timing(self, backend: CudaKernelBackend, progress: Progress) -> None:
        """The cascade's static check, build and resources for the goal's shapes, then load
        (raises StageFailed)."""
        r = backend.request
        source = r.source if r.source is not None else r.template
        progress("static_check")
        problems = backend.static_check(source, r.config, r.goal_shapes)
        if problems:
            raise StageFailed(STATIC_CHECK, "; ".join(problems))
        progress("compile")
        built = backend.build(source, r.config, r.goal_shapes)
        progress("resources")
        backend.check_resources(built, r.config)
        backend.load(built)
