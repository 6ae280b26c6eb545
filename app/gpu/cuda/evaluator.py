"""CudaEvaluator: the cuda backend behind app.core.evaluator.Evaluator.

In this process: static checks, NVRTC compile (cached on disk), resource limits, all decided
before anything touches the GPU. Launches happen only in GPU worker processes (one per visible
GPU, or the goal's pinned device) through app.gpu.worker.WorkerPool: a crash, a hang or a
sticky CUDA error costs one worker process, which is replaced, and the run continues.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

from app.catalog import get_operator
from app.catalog.cuda.base import CudaOperator
from app.goal import Goal
from app.core.evaluator import BackendUnavailable, DeviceInfo, Evaluator
from app.gpu.cuda import nvrtc
from app.gpu.cuda.roofline import Limits, peak_flops
from app.gpu.cuda.telemetry import TelemetrySampler
from app.gpu.cuda.timing import Protocol
from app.gpu.cuda.worker import _shape_key
from app.gpu.worker import Deadlines, WorkerPool
from app.core.space import SearchSpace
from app.core.types import (
    COMPILE_FAILED,
    INVALID,
    RESOURCE_LIMIT,
    STATIC_CHECK,
    VERIFY_FAILED,
    Candidate,
    Evaluation,
    Stage,
)

log = logging.getLogger(__name__)
WORKER_FACTORY = "app.gpu.cuda.worker:make_handler"
IMPOSSIBLE_FRACTION = 1.10  # faster than 110% of the roofline: the measurement cannot be right


def visible_devices(pinned: int | None = None) -> list[int]:
    """Indices of the GPUs this process may use; BackendUnavailable with a plain reason if none."""
    try:
        import cupy  # noqa: F401
        from cupy.cuda import runtime
    except Exception as exc:
        raise BackendUnavailable(f"the cuda backend needs CuPy ({exc}); install cupy-cuda12x, "
                                 "or choose the 'cpu' or 'replay' backend") from None
    try:
        count = runtime.getDeviceCount()
    except Exception as exc:
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


class CudaEvaluator(Evaluator):
    def __init__(self, goal: Goal, validation_cases: list[dict] | tuple = (), *, bus: Any = None,
                 run_id: int | None = None, protocol: Protocol | None = None,
                 deadlines: Deadlines | None = None, compile_cache: Any = True,
                 measure_baseline: bool = True, telemetry_interval_s: float = 1.0,
                 devices: list[int] | None = None, worker_factory: str = WORKER_FACTORY,
                 pool: WorkerPool | None = None) -> None:
        op = get_operator("cuda", goal.operator)
        op.check_dtype(goal.dtype)
        for shape in goal.shapes:
            problem = op.check_shape(list(shape), goal.dtype)
            if problem:
                raise ValueError(f"shapes: {problem}")
        if goal.objective.metric not in ("time", "throughput"):
            raise ValueError(f"objective.metric: the cuda backend measures time and throughput, "
                             f"not {goal.objective.metric!r}")
        self.goal = goal
        self.op: CudaOperator = op
        self.dtype = goal.dtype
        self.shapes = [list(s) for s in goal.shapes]
        base = op.space(goal.dtype)
        self.space = SearchSpace(base.params, restrictions=base.restrictions + list(goal.constraints.restrictions))
        self.validation_cases = [dict(c) for c in validation_cases]
        self.protocol = protocol or Protocol()
        self.deadlines = deadlines or Deadlines(compile_s=120.0, run_s=90.0)
        self.compile_cache = compile_cache
        self.measure_baseline = measure_baseline
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

    # ---- device and limits ----------------------------------------------------------------
    def attach_bus(self, bus: Any, run_id: int | None = None) -> None:
        """Publish telemetry on `bus` from now on (the session makes the bus after the evaluator)."""
        self.telemetry.bus, self.telemetry.run_id = bus, run_id
        self.telemetry.start()

    def info(self) -> dict[str, Any]:
        with self._lock:
            if self._info is None:
                reply = self.pool.call({"kind": "info"}, self.deadlines)
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

    def arch(self, source: str = "") -> str:
        return nvrtc.target_arch(self.info()["compute_capability"], source)

    def device(self) -> DeviceInfo:
        try:
            info = self.info()
        except BackendUnavailable as exc:
            return DeviceInfo(kind="cuda", name="unavailable", details={"reason": str(exc)})
        return DeviceInfo(kind="cuda", name=info["name"], details={
            "cc": info["compute_capability"], "SMs": info["sms"],
            "memory": f"{info['memory_bytes'] / 2**30:.0f} GiB", "driver": info["driver"],
            "copy": f"{info['copy_bw'] / 1e9:.0f} GB/s", "workers": len(self.devices)})

    def _tolerances(self, shapes: list[list[int]]) -> dict[str, tuple[float, float]]:
        out = {}
        for s in shapes:
            rtol, atol = self.op.tolerance(self.dtype, s)
            if self.goal.tolerance.rtol is not None:
                rtol = self.goal.tolerance.rtol
            if self.goal.tolerance.atol is not None:
                atol = self.goal.tolerance.atol
            out[_shape_key(s)] = (rtol, atol)
        return out

    def baselines(self) -> dict[str, Any]:
        """Every library baseline measured once on the goal shapes, and the best one."""
        with self._lock:
            cached = self._baselines
        if cached is not None:
            return cached
        self.info()
        reply = self.pool.call({"kind": "baselines", "operator": self.op.name, "dtype": self.dtype,
                                "goal_shapes": self.shapes, "tolerances": self._tolerances(self.shapes),
                                "protocol": vars(self.protocol)}, self.deadlines)
        if reply.fault is not None or not reply.result.get("ok"):
            why = reply.fault.detail if reply.fault else reply.result.get("detail")
            result = {"baselines": {}, "best": None, "error": why}
        else:
            result = reply.result
        with self._lock:
            self._baselines = result
        return result

    def _objective(self, total_ms: float) -> float:
        if self.goal.objective.metric == "throughput":
            if self.op.memory_bound or not self.op.flops(self.shapes[0]):
                return sum(self.op.bytes_moved(s, self.dtype) for s in self.shapes) / (total_ms / 1e3) / 1e9
            return sum(self.op.flops(s) for s in self.shapes) / (total_ms / 1e3) / 1e9
        return total_ms

    def baseline(self) -> float | None:
        if not self.measure_baseline:
            return None
        b = self.baselines()
        if not b.get("best"):
            return None
        return self._objective(sum(b["baselines"][b["best"]]["ms"]))

    def limit(self) -> float | None:
        lim = self.limits()
        floors = [lim.time_floor_s(self.op.flops(s), self.op.bytes_moved(s, self.dtype), self.dtype)
                  for s in self.shapes]
        if any(f is None for f in floors):
            return None
        return self._objective(sum(floors) * 1e3)

    # ---- one candidate --------------------------------------------------------------------
    def plan_cases(self) -> list[dict[str, Any]]:
        """Validation cases first (they failed before), each goal shape with two distributions,
        then the operator's edge shapes; fresh seeds for every evaluation."""
        rng = random.Random(self._seed + self._evals)
        cases: list[dict[str, Any]] = []
        for c in self.validation_cases:
            shape = [int(d) for d in c.get("shape", [])]
            if shape and not self.op.check_shape(shape, self.dtype) and \
                    c.get("dtype", self.dtype) == self.dtype:
                dist = c.get("distribution", "normal")
                cases.append({"shape": shape, "distribution": dist if dist in self.op.distributions else "normal",
                              "seed": int(c.get("seed", 0)), "origin": "validation"})
        dists = list(self.op.distributions)
        for shape in self.shapes:
            for dist in ("normal", rng.choice(dists[1:] or dists)):
                cases.append({"shape": shape, "distribution": dist, "seed": rng.randrange(1 << 31),
                              "origin": "goal"})
        for shape in self.op.edge_shapes(self.shapes[0], self.dtype):
            if not self.op.check_shape(shape, self.dtype):
                cases.append({"shape": shape, "distribution": rng.choice(dists),
                              "seed": rng.randrange(1 << 31), "origin": "edge"})
        return cases

    def recheck(self, candidate: Candidate) -> Evaluation:
        return self.evaluate(candidate)  # verification runs the stored cases first

    def evaluate(self, candidate: Candidate) -> Evaluation:
        t_start = time.perf_counter()
        base = dict(key=candidate.key, config=dict(candidate.config), agent=candidate.agent,
                    source=candidate.source, parent_key=candidate.parent_key)
        stages: list[Stage] = []

        def failed(reason: str, detail: str, log_text: str = "", **extra: Any) -> Evaluation:
            return Evaluation(ok=False, reason=reason, detail=detail, log=log_text, stages=stages,
                              sim_seconds=time.perf_counter() - t_start, **base, **extra)

        config = candidate.config
        if not self.space.is_valid(config):
            return failed(INVALID, "configuration is outside the search space or breaks a restriction")
        with self._lock:
            self._evals += 1
        cases = self.plan_cases()
        shapes: list[list[int]] = []
        for s in self.shapes + [c["shape"] for c in cases]:
            if s not in shapes:
                shapes.append(s)

        t0 = time.perf_counter()
        for s in shapes:
            problem = self.op.static_check(config, s, self.dtype)
            if problem:
                stages.append(Stage("static_check", False, time.perf_counter() - t0, problem))
                return failed(STATIC_CHECK, f"shape {s}: {problem}")
        stages.append(Stage("static_check", True, time.perf_counter() - t0))

        info = self.info()
        t0 = time.perf_counter()
        builds: dict[str, dict[str, Any]] = {}
        resources: dict[str, Any] = {}
        compile_log = ""
        try:
            for s in shapes:
                source = self.op.render(config, s, self.dtype, candidate.source)
                arch = nvrtc.target_arch(info["compute_capability"], source)
                kernel = self.op.kernel_for(self.dtype)
                built = nvrtc.compile_source(source, kernel, arch, cache=self.compile_cache)
                launch = self.op.launch(config, s, self.dtype)
                builds[_shape_key(s)] = {"cubin": built.cubin_path, "kernel": kernel, "grid": launch.grid,
                                         "block": launch.block, "shared_bytes": launch.shared_bytes,
                                         "key": built.key, "res": built.resource(kernel), "arch": arch}
                if s == self.shapes[0]:
                    compile_log = built.log
        except nvrtc.CompileError as exc:
            stages.append(Stage("compile", False, time.perf_counter() - t0, str(exc)))
            return failed(COMPILE_FAILED, str(exc), exc.log)
        stages.append(Stage("compile", True, time.perf_counter() - t0))

        t0 = time.perf_counter()
        first = builds[_shape_key(self.shapes[0])]
        res = first["res"]
        resources = {"registers": res.registers, "spill_stores": res.spill_stores,
                     "spill_loads": res.spill_loads, "stack_bytes": res.stack_bytes,
                     "static_shared_bytes": res.shared_bytes, "dynamic_shared_bytes": first["shared_bytes"],
                     "threads_per_block": first["block"][0] * first["block"][1] * first["block"][2],
                     "arch": first["arch"], "artifact_key": first["key"]}
        for key, b in builds.items():
            r = b["res"]
            threads = b["block"][0] * b["block"][1] * b["block"][2]
            problem = nvrtc.check_limits(
                r, dynamic_shared=b["shared_bytes"], max_registers=self.goal.constraints.max_registers,
                max_shared=self.goal.constraints.max_shared_memory_bytes,
                device_shared_limit=info["shared_per_block_optin"])
            if problem is None and threads > 1024:
                problem = f"{threads} threads per block; the device allows 1024"
            if problem is None and r.registers * threads > info["regs_per_block"]:
                problem = (f"{r.registers} registers x {threads} threads exceeds the "
                           f"{info['regs_per_block']} registers a block may use")
            if problem:
                stages.append(Stage("resources", False, time.perf_counter() - t0, problem))
                return failed(RESOURCE_LIMIT, f"shape {key}: {problem}", resources=resources)
        stages.append(Stage("resources", True, time.perf_counter() - t0))

        baseline_name = None
        if self.measure_baseline:
            baseline_name = self.baselines().get("best")
        request = {"kind": "evaluate", "operator": self.op.name, "dtype": self.dtype, "config": dict(config),
                   "builds": {k: {kk: vv for kk, vv in b.items() if kk != "res"} for k, b in builds.items()},
                   "cases": cases, "goal_shapes": self.shapes, "tolerances": self._tolerances(shapes),
                   "protocol": vars(self.protocol), "baseline": baseline_name,
                   "seed": self._seed + 1000 * self._evals}
        reply = self.pool.call(request, self.deadlines)
        if reply.fault is not None:
            f = reply.fault
            for name, secs in f.completed:
                stages.append(Stage(name, True, secs))
            stages.append(Stage(f.stage, False, f.stage_seconds, f.detail))
            return failed(f.reason, f.detail, "\n".join(x for x in (compile_log, f.log) if x),
                          resources=resources)
        result = reply.result
        for name, ok, secs, detail in result.get("stages", []):
            stages.append(Stage(name, ok, secs, detail))
        if not result.get("ok"):
            return failed(result.get("reason", VERIFY_FAILED), result.get("detail", ""),
                          "\n".join(x for x in (compile_log, result.get("log", "")) if x),
                          resources=resources, failing_case=result.get("failing_case"))
        return self._finish(result, base, stages, resources, compile_log, t_start)

    def _finish(self, result: dict[str, Any], base: dict[str, Any], stages: list[Stage],
                resources: dict[str, Any], compile_log: str, t_start: float) -> Evaluation:
        timed = result["timed"]
        cand = [t["stats"]["candidate"] for t in timed]
        total_ms = sum(c["median"] for c in cand)
        metrics: dict[str, float] = {
            "time_ms": total_ms, "samples": float(sum(c["n"] for c in cand)),
            "rel_ci": max(c["rel_ci"] for c in cand),
            "throttled_discarded": float(sum(t["discarded_throttled"] for t in timed)),
        }
        lim = self.limits()
        flops = sum(self.op.flops(t["shape"]) for t in timed)
        nbytes = sum(self.op.bytes_moved(t["shape"], self.dtype) for t in timed)
        metrics.update(lim.achieved(flops, nbytes, self.dtype, total_ms / 1e3))
        if all("baseline" in t["stats"] for t in timed) and timed:
            b_ms = sum(t["stats"]["baseline"]["median"] for t in timed)
            metrics["baseline_ms"] = b_ms
            metrics["speedup"] = b_ms / total_ms if total_ms > 0 else 0.0
        cold_events = all(t["cache"] == "cold" and t["mode"]["candidate"] == "events" for t in timed)
        ev = Evaluation(
            ok=True, value=self._objective(total_ms), time_ms=total_ms,
            samples_ms=list(timed[0]["samples"]),
            p10_ms=sum(c["p10"] for c in cand), p90_ms=sum(c["p90"] for c in cand),
            stages=stages, resources=resources, metrics=metrics, log=compile_log,
            sim_seconds=time.perf_counter() - t_start, **base)
        resources["timing_mode"] = timed[0]["mode"]["candidate"]
        resources["cache"] = timed[0]["cache"]
        if cold_events and metrics.get("pct_of_limit", 0.0) > 100.0 * IMPOSSIBLE_FRACTION:
            ev.ok, ev.value, ev.reason = False, None, VERIFY_FAILED
            ev.detail = (f"measured {metrics['pct_of_limit']:.0f}% of the hardware limit: faster than "
                         "physically possible, so the kernel skipped work or the timing is wrong")
        return ev

    def close(self) -> None:
        self.telemetry.stop()
        if self._own_pool:
            self.pool.close()
