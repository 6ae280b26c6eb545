"""What runs inside a GPU worker process (one per GPU, spawned by app.gpu.worker.WorkerPool).

Requests are plain dicts: "info" (device properties and measured copy bandwidth), "baselines"
(time the operator's library baselines) and "evaluate" (verify, time, re-verify one compiled
candidate). Inputs are drawn on the device with CuPy's generator and checked against a float64
reference computed on the device, so large shapes cost no host time. A CUDA error other than an
allocation failure poisons this process's context: the reply says `restart` and the pool
replaces the process.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from app.catalog import get_operator
from app.catalog.cuda.base import (
    CudaOperator,
    Launch,
    from_storage,
    nan_bits,
    storage_dtype,
    to_storage,
)
from app.gpu.cuda import telemetry
from app.gpu.cuda.roofline import cached_copy_bandwidth, device_key, measure_copy_bandwidth
from app.gpu.cuda.timing import Protocol, Timer
from app.core.types import OUT_OF_MEMORY, RUNTIME_FAILED, VERIFY_FAILED

GUARD = 256  # canary elements on each side of every output
CANARY16 = 0x7FA5  # NaN payloads no kernel computes by accident
CANARY32 = 0x7FA5A5A5

Progress = Callable[[str], None]


def make_handler(device_index: int) -> CudaWorker:
    return CudaWorker(device_index)


class GuardedOutput:
    """A device output pre-filled with NaN between two runs of canary elements."""

    def __init__(self, cp: Any, shape: tuple[int, ...], dtype: str) -> None:
        self.cp, self.shape, self.dtype = cp, tuple(shape), dtype
        self.size = int(np.prod(shape))
        self.store = storage_dtype(dtype)
        bits = cp.uint16 if self.store.itemsize == 2 else cp.uint32
        self.buffer = cp.empty(self.size + 2 * GUARD, dtype=self.store)
        self.bits = self.buffer.view(bits)
        self.canary = CANARY16 if self.store.itemsize == 2 else CANARY32
        self.reset()

    def reset(self) -> None:
        self.bits[:GUARD] = self.canary
        self.bits[GUARD + self.size:] = self.canary
        self.view.fill(nan_bits(self.dtype))

    def fill(self, values: Any) -> None:
        self.view[...] = values

    @property
    def view(self) -> Any:
        return self.buffer[GUARD:GUARD + self.size].reshape(self.shape)

    def guards_intact(self) -> bool:
        return bool((self.bits[:GUARD] == self.canary).all()) and \
            bool((self.bits[GUARD + self.size:] == self.canary).all())


class CudaWorker:
    def __init__(self, device_index: int) -> None:
        import cupy as cp

        self.cp = cp
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
            "memory_bytes": int(props["totalGlobalMem"]),
            "driver": ident.get("driver") or str(cp.cuda.runtime.driverGetVersion()),
            "runtime": str(cp.cuda.runtime.runtimeGetVersion()),
            "uuid": ident.get("uuid", ""),
            "cupy": cp.__version__,
        }
        self.timer = Timer(self.info["l2_bytes"], telemetry.throttle_mask_fn(device_index))
        self.modules: dict[str, Any] = {}

    # ---- dispatch -----------------------------------------------------------------------
    def __call__(self, request: dict[str, Any], progress: Progress) -> dict[str, Any]:
        cp = self.cp
        try:
            kind = request["kind"]
            if kind == "info":
                return self.device_info(request)
            if kind == "baselines":
                return self.baselines(request, progress)
            if kind == "evaluate":
                return self.evaluate(request, progress)
            raise ValueError(f"unknown request kind {kind!r}")
        except cp.cuda.memory.OutOfMemoryError as exc:
            self._release()
            return {"ok": False, "reason": OUT_OF_MEMORY, "detail": f"device memory exhausted: {exc}",
                    "restart": False}
        except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as exc:
            text = str(exc)
            reason = OUT_OF_MEMORY if "OUT_OF_MEMORY" in text.upper() or "MEMORYALLOCATION" in text.upper() \
                else RUNTIME_FAILED
            # Sticky launch errors (illegal address, misaligned access, trap) poison this context.
            return {"ok": False, "reason": reason, "detail": f"CUDA error: {text}", "restart": True,
                    "log": traceback.format_exc()}

    def _release(self) -> None:
        try:
            self.cp.get_default_memory_pool().free_all_blocks()
        except Exception:
            pass

    # ---- info ---------------------------------------------------------------------------
    def device_info(self, request: dict[str, Any]) -> dict[str, Any]:
        key = device_key(self.info["name"], self.info["driver"], self.info["uuid"])
        bw, cached = cached_copy_bandwidth(key, measure_copy_bandwidth, refresh=request.get("refresh", False))
        self._release()
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
        return fn

    def launcher(self, op: CudaOperator, config: dict, shape: list[int], dtype: str, build: dict,
                 inputs: dict, outputs: dict[str, GuardedOutput]) -> Callable[[], None]:
        launch = Launch(tuple(build["grid"]), tuple(build["block"]), build["shared_bytes"])
        fn = self.function(build["cubin"], build["kernel"], launch)
        args = op.kernel_args(config, inputs, {k: v.view for k, v in outputs.items()}, shape)

        def run() -> None:
            fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)

        return run

    # ---- verification -------------------------------------------------------------------
    def make_case(self, op: CudaOperator, case: dict, dtype: str) -> tuple[dict, dict[str, GuardedOutput]]:
        cp = self.cp
        rng = cp.random.default_rng(int(case["seed"]))
        inputs = op.make_inputs(cp, list(case["shape"]), dtype, rng, case["distribution"])
        outputs = {k: GuardedOutput(cp, s, dtype) for k, s in op.output_shapes(list(case["shape"])).items()}
        return inputs, outputs

    def compare(self, op: CudaOperator, inputs: dict, outputs: dict[str, Any], shape: list[int],
                dtype: str, tol: tuple[float, float]) -> str | None:
        """None when every output matches the float64 reference within tolerance."""
        cp = self.cp
        rtol, atol = tol
        x64 = {k: from_storage(cp, v, dtype) for k, v in inputs.items()}
        ref = op.reference(cp, x64, shape)
        for name, expected in ref.items():
            got = from_storage(cp, outputs[name], dtype)
            finite = cp.isfinite(expected)
            nan = int((cp.isnan(got) & finite).sum())
            if nan:
                return (f"{nan} of {got.size} outputs of {name!r} are NaN (never written, or invalid "
                        f"arithmetic)")
            inf = int((cp.isinf(got) & finite).sum())
            if inf:
                return f"{inf} of {got.size} outputs of {name!r} are infinite where the reference is finite"
            err = cp.abs(got - expected)
            bad = ~(err <= atol + rtol * cp.abs(expected)) & finite
            n_bad = int(bad.sum())
            if n_bad:
                flat = int(cp.argmax(cp.where(bad, err, -1.0)))
                idx = tuple(int(i) for i in np.unravel_index(flat, got.shape))
                return (f"{n_bad} of {got.size} outputs of {name!r} outside tolerance (rtol {rtol:.1e}, "
                        f"atol {atol:.1e}); worst at {idx}: got {float(got[idx])!r}, expected "
                        f"{float(expected[idx])!r}")
        return None

    def check_once(self, op: CudaOperator, request: dict, case: dict) -> tuple[str | None, bool]:
        """Run one case on fresh inputs into fresh NaN-filled outputs: (problem, memory_corrupted)."""
        cp = self.cp
        dtype, config, shape = request["dtype"], request["config"], list(case["shape"])
        build = request["builds"][_shape_key(shape)]
        inputs, outputs = self.make_case(op, case, dtype)
        saved = {k: v.copy() for k, v in inputs.items()}
        self.launcher(op, config, shape, dtype, build, inputs, outputs)()
        cp.cuda.Device().synchronize()
        problem = self._post_checks(op, inputs, saved, outputs, shape, request)
        return problem

    def _post_checks(self, op, inputs, saved, outputs, shape, request) -> tuple[str | None, bool]:
        cp = self.cp
        for name, out in outputs.items():
            if not out.guards_intact():
                return f"wrote outside output {name!r} (guard canaries overwritten)", True
        for name, before in saved.items():
            if not bool(cp.array_equal(before.view(_bits(cp, before)), inputs[name].view(_bits(cp, before)))):
                return f"wrote into input {name!r}", True
        tol = tuple(request["tolerances"][_shape_key(shape)])
        return self.compare(op, inputs, {k: v.view for k, v in outputs.items()}, shape,
                            request["dtype"], tol), False

    def determinism(self, op: CudaOperator, request: dict, case: dict) -> str | None:
        """Two runs on the same input, the second into garbage instead of NaN, agree bit for bit."""
        cp = self.cp
        dtype, config, shape = request["dtype"], request["config"], list(case["shape"])
        build = request["builds"][_shape_key(shape)]
        inputs, first = self.make_case(op, case, dtype)
        self.launcher(op, config, shape, dtype, build, inputs, first)()
        second = {k: GuardedOutput(cp, v.shape, dtype) for k, v in first.items()}
        for out in second.values():
            garbage = cp.random.default_rng(int(case["seed"]) + 1).uniform(-1e3, 1e3, out.shape)
            out.fill(to_storage(cp, garbage, dtype))
        self.launcher(op, config, shape, dtype, build, inputs, second)()
        cp.cuda.Device().synchronize()
        for name in first:
            a, b = first[name].view, second[name].view
            bits = _bits(cp, a)
            differ = int((a.view(bits) != b.view(bits)).sum())
            if differ:
                return f"not deterministic: {differ} of {a.size} outputs of {name!r} differ between two runs"
        return None

    # ---- baselines ----------------------------------------------------------------------
    def baselines(self, request: dict, progress: Progress) -> dict[str, Any]:
        cp = self.cp
        op: CudaOperator = get_operator("cuda", request["operator"])
        dtype = request["dtype"]
        protocol = Protocol(**request.get("protocol", {}))
        progress("baselines")
        results: dict[str, dict[str, Any]] = {}
        for name, make in op.baselines(dtype).items():
            results[name] = {"ok": True, "ms": [], "p10": [], "p90": [], "n": [], "error": ""}
        for shape in request["goal_shapes"]:
            case = {"shape": shape, "distribution": "normal", "seed": 12345}
            inputs, _ = self.make_case(op, case, dtype)
            runs: dict[str, Callable[[], Any]] = {}
            for name, make in op.baselines(dtype).items():
                if not results[name]["ok"]:
                    continue
                try:
                    run, fetch = make(inputs, shape, dtype)
                    run()
                    cp.cuda.Device().synchronize()
                    problem = self.compare(op, inputs, fetch(), shape, dtype,
                                           tuple(request["tolerances"][_shape_key(shape)]))
                except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError):
                    raise
                except Exception as exc:  # library missing or op unsupported for this dtype
                    problem = f"{type(exc).__name__}: {exc}"
                if problem:
                    results[name].update(ok=False, error=problem)
                else:
                    runs[name] = run
            if runs:
                m = self.timer.measure(runs, protocol)
                for name, st in m.stats.items():
                    r = results[name]
                    r["ms"].append(st.median)
                    r["p10"].append(st.p10)
                    r["p90"].append(st.p90)
                    r["n"].append(st.n)
                    r["mode"] = m.mode[name]
            del inputs
            self._release()
        usable = {n: sum(r["ms"]) for n, r in results.items()
                  if r["ok"] and len(r["ms"]) == len(request["goal_shapes"])}
        best = min(usable, key=usable.get) if usable else None
        return {"ok": True, "baselines": results, "best": best}

    # ---- the evaluation -----------------------------------------------------------------
    def evaluate(self, request: dict, progress: Progress) -> dict[str, Any]:
        cp = self.cp
        op: CudaOperator = get_operator("cuda", request["operator"])
        dtype, config = request["dtype"], request["config"]
        stages: list[tuple[str, bool, float, str]] = []

        def fail(stage: str, t0: float, reason: str, detail: str, case: dict | None = None,
                 check: str = "verify", restart: bool = False) -> dict[str, Any]:
            stages.append((stage, False, time.perf_counter() - t0, detail))
            failing = None
            if case is not None:
                failing = {**case, "operator": op.name, "dtype": dtype, "check": check, "problem": detail}
            return {"ok": False, "reason": reason, "detail": detail, "failing_case": failing,
                    "stages": stages, "restart": restart}

        progress("verify")
        t0 = time.perf_counter()
        for case in request["cases"]:
            problem, corrupted = self.check_once(op, request, case)
            if problem:
                return fail("verify", t0, VERIFY_FAILED, problem, case, restart=corrupted)
        if op.deterministic and request["cases"]:
            case = request["cases"][0]
            problem = self.determinism(op, request, case)
            if problem:
                return fail("verify", t0, VERIFY_FAILED, problem, case, check="determinism")
        stages.append(("verify", True, time.perf_counter() - t0, f"{len(request['cases'])} cases"))
        self._release()

        progress("time")
        t0 = time.perf_counter()
        protocol = Protocol(**request.get("protocol", {}))
        timed: list[dict[str, Any]] = []
        kept: list[tuple[list[int], dict, dict, dict]] = []
        for i, shape in enumerate(request["goal_shapes"]):
            case = {"shape": shape, "distribution": "normal", "seed": int(request["seed"]) + 7919 * (i + 1),
                    "origin": "timing"}
            inputs, outputs = self.make_case(op, case, dtype)
            fns: dict[str, Callable[[], Any]] = {
                "candidate": self.launcher(op, config, shape, dtype, request["builds"][_shape_key(shape)],
                                           inputs, outputs)}
            if request.get("baseline"):
                run, _ = op.baselines(dtype)[request["baseline"]](inputs, shape, dtype)
                fns["baseline"] = run
            m = self.timer.measure(fns, protocol)
            timed.append({"shape": shape, "stats": {k: v.to_dict() for k, v in m.stats.items()},
                          "samples": m.samples["candidate"], "mode": m.mode, "cache": m.cache,
                          "stop_reason": m.stop_reason, "discarded_throttled": m.discarded_throttled,
                          "throttle_seen": m.throttle_seen})
            kept.append((shape, case, inputs, outputs))
        stages.append(("time", True, time.perf_counter() - t0, ""))

        # Re-verify in the very buffers that were timed, with fresh values at the same addresses.
        progress("reverify")
        t0 = time.perf_counter()
        for shape, case, inputs, outputs in kept:
            fresh_case = {**case, "seed": case["seed"] + 1, "origin": "reverify"}
            fresh, _ = self.make_case(op, fresh_case, dtype)
            for k in inputs:
                inputs[k][...] = fresh[k]
            for out in outputs.values():
                out.reset()
            saved = {k: v.copy() for k, v in inputs.items()}
            self.launcher(op, config, shape, dtype, request["builds"][_shape_key(shape)], inputs, outputs)()
            cp.cuda.Device().synchronize()
            problem, corrupted = self._post_checks(op, inputs, saved, outputs, shape, request)
            if problem:
                return fail("reverify", t0, VERIFY_FAILED, f"after timing: {problem}", fresh_case,
                            check="reverify", restart=corrupted)
        stages.append(("reverify", True, time.perf_counter() - t0, ""))
        del kept
        self._release()
        return {"ok": True, "stages": stages, "timed": timed, "restart": False}


def _shape_key(shape: list[int]) -> str:
    return "x".join(str(int(d)) for d in shape)


def _bits(cp: Any, arr: Any) -> Any:
    return {1: cp.uint8, 2: cp.uint16, 4: cp.uint32, 8: cp.uint64}[arr.dtype.itemsize]
