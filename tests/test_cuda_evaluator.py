"""CudaEvaluator without a GPU.

Real here: goal checks, NVRTC compiles, resource limits, the worker processes (spawned through
app.gpu.worker), fault handling and the metrics computed from a worker's reply. The GPU side of
the worker cannot run on this machine, so `FakeGpu` stands in for app.gpu.cuda.worker.CudaWorker
and answers with canned device facts and timings; tests/gpu runs the real one.
"""

from __future__ import annotations

import os
import time

import pytest

from app.goal import Goal
from app.core.evaluator import BackendUnavailable
from app.gpu.cuda.evaluator import CudaEvaluator
from app.gpu.cuda.telemetry import TelemetrySampler, nvml
from app.gpu.cuda.timing import Protocol
from app.gpu.worker import Deadlines
from app.core.events import EventBus
from app.core.types import (
    COMPILE_FAILED,
    INVALID,
    RESOURCE_LIMIT,
    RUNTIME_FAILED,
    TIMEOUT,
    VERIFY_FAILED,
    Candidate,
)

H200 = {"ok": True, "name": "NVIDIA H200", "compute_capability": "90", "sms": 132,
        "l2_bytes": 50 << 20, "shared_per_block_optin": 232448, "regs_per_block": 65536,
        "memory_bytes": 141 << 30, "driver": "570.00", "uuid": "GPU-fake", "copy_bw": 4.0e12}


class FakeGpu:
    """Stands in for CudaWorker in the worker process (see the module docstring)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, request, progress):
        if request["kind"] == "info":
            return dict(H200, index=self.index)
        if request["kind"] == "baselines":
            return {"ok": True, "best": "torch:softmax",
                    "baselines": {"torch:softmax": {"ok": True, "ms": [0.05]}}}
        threads = request["config"]["THREADS"]
        progress("verify")
        for build in request["builds"].values():  # the parent compiled real cubins
            assert os.path.getsize(build["cubin"]) > 0
        if threads == 64:
            case = request["cases"][0]
            return {"ok": False, "reason": VERIFY_FAILED, "detail": "3 of 9 outputs outside tolerance",
                    "failing_case": {**case, "check": "verify"}, "restart": False,
                    "stages": [("verify", False, 0.01, "bad")]}
        if threads == 128:
            return {"ok": False, "reason": RUNTIME_FAILED, "restart": True,
                    "detail": "CUDA error: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access"}
        if threads == 1024:
            progress("time")
            time.sleep(30)
        progress("time")
        stats = {"candidate": {"median": 0.04, "p10": 0.039, "p90": 0.041, "n": 20, "rel_ci": 0.003,
                               "min": 0.039},
                 "baseline": {"median": 0.05, "p10": 0.05, "p90": 0.05, "n": 20, "rel_ci": 0.002,
                              "min": 0.05}}
        return {"ok": True, "restart": False, "stages": [("verify", True, 0.1, ""), ("time", True, 0.2, ""),
                                                          ("reverify", True, 0.05, "")],
                "timed": [{"shape": s, "stats": stats, "samples": [0.04] * 20, "mode": {"candidate": "events"},
                           "cache": "cold", "stop_reason": "converged", "discarded_throttled": 0,
                           "throttle_seen": []} for s in request["goal_shapes"]]}


def goal(**kw) -> Goal:
    g = Goal(name="softmax test", operator="softmax", backend="cuda", dtype="bfloat16",
             shapes=[[4096, 4096]])
    for k, v in kw.items():
        setattr(g, k, v)
    return g.validate()


@pytest.fixture
def evaluator(tmp_path):
    ev = CudaEvaluator(goal(), devices=[0], worker_factory="test_cuda_evaluator:FakeGpu",
                       compile_cache=tmp_path / "nvrtc", deadlines=Deadlines(compile_s=60, run_s=3))
    yield ev
    ev.close()


def cand(threads: int, tpr: int = 64, source: str | None = None) -> Candidate:
    cfg = {"THREADS": threads, "TPR": min(tpr, threads), "VEC": 8, "FAST_EXP": 1}
    return Candidate(config=cfg, key=f"k{threads}-{tpr}", agent="test", source=source)


def test_no_gpu_gives_a_plain_message():
    try:
        import cupy  # noqa: F401
        from cupy.cuda import runtime

        if runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except ImportError:
        pass
    except Exception:
        pass
    with pytest.raises(BackendUnavailable, match="cpu' or 'replay'"):
        CudaEvaluator(goal())


def test_goal_problems_name_the_field():
    with pytest.raises(ValueError, match="dtypes"):
        CudaEvaluator(goal(operator="gemm", dtype="int32", shapes=[[64, 64, 64]]), devices=[0])
    with pytest.raises(ValueError, match="shapes: gemm takes"):
        CudaEvaluator(goal(operator="gemm", shapes=[[64, 64]]), devices=[0])
    g = goal()
    g.objective.metric = "energy"
    with pytest.raises(ValueError, match="objective.metric"):
        CudaEvaluator(g, devices=[0])


def test_a_good_candidate_gets_time_bandwidth_and_speedup(evaluator):
    ev = evaluator.evaluate(cand(256))
    assert ev.ok, ev.detail
    assert ev.value == pytest.approx(0.04) and ev.time_ms == pytest.approx(0.04)
    nbytes = 2 * 2 * 4096 * 4096
    assert ev.metrics["gbps"] == pytest.approx(nbytes / 0.04e-3 / 1e9)
    assert ev.metrics["pct_copy_bw"] == pytest.approx(100 * nbytes / 0.04e-3 / 4.0e12)
    assert ev.metrics["speedup"] == pytest.approx(1.25)
    assert ev.resources["registers"] > 0 and ev.resources["arch"] == "sm_90"
    assert [s.name for s in ev.stages] == ["static_check", "compile", "resources", "verify", "time", "reverify"]
    assert evaluator.baseline() == pytest.approx(0.05)
    assert evaluator.limit() == pytest.approx(nbytes / 4.0e12 * 1e3)
    assert evaluator.device().name == "NVIDIA H200"


def test_faults_cost_one_worker_and_the_run_continues(evaluator):
    bad = evaluator.evaluate(cand(64, tpr=32))
    assert not bad.ok and bad.reason == VERIFY_FAILED and bad.failing_case["shape"]
    crash = evaluator.evaluate(cand(128))
    assert crash.reason == RUNTIME_FAILED and "ILLEGAL_ADDRESS" in crash.detail
    hang = evaluator.evaluate(cand(1024))
    assert hang.reason == TIMEOUT and "time" in hang.detail
    assert evaluator.evaluate(cand(256)).ok
    assert evaluator.pool.workers[0].restarts >= 2


def test_rejections_before_any_launch(evaluator, tmp_path):
    outside = Candidate(config={"THREADS": 100, "TPR": 32, "VEC": 8, "FAST_EXP": 1}, key="x")
    assert evaluator.evaluate(outside).reason == INVALID
    broken = evaluator.evaluate(cand(256, source="this is not CUDA"))
    assert broken.reason == COMPILE_FAILED and "error" in broken.log
    strict = CudaEvaluator(goal(constraints=type(goal().constraints)(max_registers=16)), devices=[0],
                           worker_factory="test_cuda_evaluator:FakeGpu", compile_cache=tmp_path / "c2")
    try:
        ev = strict.evaluate(cand(256))
        assert ev.reason == RESOURCE_LIMIT and "registers" in ev.detail
    finally:
        strict.close()


def test_validation_cases_are_checked_first(tmp_path):
    case = {"shape": [5, 4096], "distribution": "wide", "seed": 99, "dtype": "bfloat16"}
    ev = CudaEvaluator(goal(), [case], devices=[0], worker_factory="test_cuda_evaluator:FakeGpu",
                       compile_cache=tmp_path / "c3", protocol=Protocol(max_samples=20))
    try:
        cases = ev.plan_cases()
        assert cases[0] == {"shape": [5, 4096], "distribution": "wide", "seed": 99, "origin": "validation"}
        assert {c["origin"] for c in cases} == {"validation", "goal", "edge"}
    finally:
        ev.close()


def test_telemetry_without_nvml_says_so_and_keeps_working():
    module, why = nvml()
    if module is not None:
        pytest.skip("NVML works here")
    assert "NVML" in why
    bus = EventBus()
    seen = []
    bus.subscribe(seen.append)
    sampler = TelemetrySampler([0], bus=bus, interval_s=0.01).start()
    assert not sampler.available and sampler.sample_once() == {}
    sampler.stop()
    assert seen == []
