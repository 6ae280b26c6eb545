"""CudaEvaluator without a GPU.

Real here: goal checks, the worker processes (spawned through app.gpu.worker), THE cascade in
the worker with real NVRTC compiles under the compile deadline, resource limits, verification,
the CUDA timer's protocol, fault handling and the metrics computed from the worker's serialised
Evaluation. Only CuPy is a stand-in (tests/fake_cupy.py: NumPy arrays, kernels emulated in
Python, misbehaving by THREADS); tests/gpu runs the real one.
"""

from __future__ import annotations

import pytest

from app.core.evaluator import BackendUnavailable
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
from app.goal import Goal
from app.gpu.cascade import ENGINE_STAGES
from app.gpu.cuda.evaluator import CudaEvaluator
from app.gpu.cuda.telemetry import TelemetrySampler, nvml
from app.gpu.cuda.timing import Protocol
from app.gpu.worker import Deadlines

FAKE = "fake_cupy:fake_worker"
QUICK = Protocol(min_samples=5, max_samples=10, max_seconds=0.3, warmup=1, batch=2)
SHAPE = [64, 1024]


def goal(**kw) -> Goal:
    g = Goal(name="softmax test", operator="softmax", backend="cuda", dtype="bfloat16",
             shapes=[SHAPE])
    for k, v in kw.items():
        setattr(g, k, v)
    return g.validate()


@pytest.fixture
def evaluator(tmp_path):
    ev = CudaEvaluator(goal(), devices=[0], worker_factory=FAKE, protocol=QUICK,
                       deadlines=Deadlines(compile_s=60, run_s=5))
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
    except Exception:  # noqa: BLE001, S110 - no CuPy or no driver: no GPU, which this test needs
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
    assert ev.ok, (ev.detail, ev.log[-2000:])
    assert ev.value == pytest.approx(ev.time_ms) and ev.time_ms > 0
    nbytes = 2 * 2 * SHAPE[0] * SHAPE[1]
    assert ev.metrics["gbps"] == pytest.approx(nbytes / (ev.time_ms * 1e-3) / 1e9)
    # one fraction of the hardware, named by its roof
    assert ev.metrics["fraction_of_roof"] == pytest.approx(nbytes / (ev.time_ms * 1e-3) / 4.0e12)
    assert "copy roof 4000 GB/s" in ev.resources["roof"]
    assert not {"pct_copy_bw", "pct_peak_flops", "pct_of_limit"} & set(ev.metrics)
    assert ev.resources["registers"] > 0 and ev.resources["arch"] == "sm_90"
    assert [s.name for s in ev.stages if s.name not in ENGINE_STAGES] == [
        "static_check", "compile", "resources", "verify", "time", "reverify"]
    assert sum(s.seconds for s in ev.stages) == pytest.approx(ev.sim_seconds)
    assert evaluator.limit() == pytest.approx(nbytes / 4.0e12 * 1e3)
    assert evaluator.device().name == "NVIDIA H200"
    # no torch here: CuPy's composed baseline (bfloat16 widened and narrowed) is the one, timed
    # beside the candidate
    b = evaluator.baselines()
    assert b["best"] == b["anchor"] == "cupy:composed" and b["baselines"]["torch:softmax"]["ok"] is False
    assert ev.metrics["speedup"] == pytest.approx(ev.metrics["baseline_ms"] / ev.time_ms)


@pytest.mark.slow
def test_faults_cost_one_worker_and_the_run_continues(evaluator):
    bad = evaluator.evaluate(cand(64, tpr=32))
    assert not bad.ok and bad.reason == VERIFY_FAILED and bad.failing_case["shape"]
    crash = evaluator.evaluate(cand(128))
    assert crash.reason == RUNTIME_FAILED and "ILLEGAL_ADDRESS" in crash.detail
    hang = evaluator.evaluate(cand(1024, tpr=1024))
    assert hang.reason == TIMEOUT and "time stage" in hang.detail
    assert evaluator.evaluate(cand(256)).ok
    assert evaluator.pool.workers[0].restarts >= 2


@pytest.mark.slow
def test_rejections_before_any_launch(evaluator, tmp_path):
    outside = Candidate(config={"THREADS": 100, "TPR": 32, "VEC": 8, "FAST_EXP": 1}, key="x")
    assert evaluator.evaluate(outside).reason == INVALID
    broken = evaluator.evaluate(cand(256, source="this is not CUDA"))
    assert broken.reason == COMPILE_FAILED and "error" in broken.log
    strict = CudaEvaluator(goal(constraints=type(goal().constraints)(max_registers=16)), devices=[0],
                           worker_factory=FAKE)
    try:
        ev = strict.evaluate(cand(256))
        assert ev.reason == RESOURCE_LIMIT and "registers" in ev.detail
    finally:
        strict.close()


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


def test_nvrtc_runs_in_the_worker_under_the_compile_deadline(tmp_path):
    """A compile made to hang is killed at the compile deadline and comes back as a TIMEOUT
    naming the compile stage; the stages before it are recorded as done."""
    ev = CudaEvaluator(goal(), devices=[0], worker_factory="fake_cupy:slow_compile_worker",
                       measure_baseline=False,
                       deadlines=Deadlines(compile_s=2, run_s=30))
    try:
        hung = ev.evaluate(cand(256))
        assert hung.reason == TIMEOUT and "compile stage" in hung.detail, hung.detail
        assert [(s.name, s.ok) for s in hung.stages if s.name not in ENGINE_STAGES] == [
            ("static_check", True), ("compile", False)]
        assert 2 <= hung.stages[-1].seconds < 20
    finally:
        ev.close()


def test_a_failing_compile_in_the_worker_is_compile_failed_with_the_log(evaluator):
    broken = evaluator.evaluate(cand(256, source="__global__ void softmax( { this is not CUDA"))
    assert broken.reason == COMPILE_FAILED and "error" in broken.log
    assert [s.name for s in broken.stages if s.name not in ENGINE_STAGES] == ["static_check", "compile"]


@pytest.mark.slow
def test_a_compiled_best_baseline_is_measured_in_its_own_cell_and_anchors_the_speedup():
    """Compiled baselines (Triton, torch.compile) run in a trusted cell of kind "baseline",
    never in the sealed cell; the candidate is timed against the fastest baseline the sealed
    cell can run (the anchor), and its speedup is scaled to the compiled best by the ratio the
    baseline cell measured. Real cells and processes; only CuPy is the stand-in."""
    from fake_cupy import SLOW_LIBRARY_S

    ev = CudaEvaluator(goal(), devices=[0], worker_factory="fake_cupy:fake_worker_with_stand_in_baselines",
                       protocol=QUICK, deadlines=Deadlines(compile_s=60, run_s=30),
                       baseline_factory="fake_cupy:fake_baseline_worker")
    try:
        b = ev.baselines()
        assert b["cell"] == "baseline"
        assert (b["best"], b["anchor"]) == ("triton:fast", "cupy:slow")
        assert b["baselines"]["triton:fast"]["compiled"] and not b["baselines"]["cupy:slow"]["compiled"]
        slow, fast = (sum(b["baselines"][n]["ms"]) for n in ("cupy:slow", "triton:fast"))
        assert slow > fast + 0.8 * SLOW_LIBRARY_S * 1e3
        assert ev.baseline() == pytest.approx(fast)  # the target: beat the best, compiled or not
        c = ev.evaluate(cand(256))
        assert c.ok, (c.detail, c.log[-2000:])
        # the sealed cell timed the candidate beside the anchor, not the compiled best
        assert c.metrics["anchor_ms"] > SLOW_LIBRARY_S * 1e3 * 0.8
        assert c.metrics["baseline_ms"] == pytest.approx(c.metrics["anchor_ms"] * fast / slow)
        assert c.metrics["speedup"] == pytest.approx(c.metrics["baseline_ms"] / c.time_ms)
    finally:
        ev.close()


@pytest.mark.parametrize("cell,why", [("fake_failing_baseline_worker", "SIGSEGV"),
                                      ("fake_empty_baseline_worker", "no baseline verified")])
def test_without_the_baseline_cell_the_sealed_cells_baselines_stand(cell, why):
    """A baseline cell that dies, or in which nothing verifies, costs the compiled baselines
    only: the library ones are measured in the sealed cell, and the reason is kept."""
    ev = CudaEvaluator(goal(dtype="float32"), devices=[0], worker_factory=FAKE, protocol=QUICK,
                       deadlines=Deadlines(compile_s=60, run_s=30),
                       baseline_factory=f"fake_cupy:{cell}")
    try:
        b = ev.baselines()
        assert why in b["compiled_error"], b["compiled_error"]
        assert b["best"] == b["anchor"] == "cupy:composed"
        assert not any(r["compiled"] for r in b["baselines"].values())
    finally:
        ev.close()


def test_an_anchor_the_sealed_cell_cannot_run_is_not_used():
    """The trusted cell's library baseline ("cupy:slow") is unknown to the sealed cell (whose
    softmax baselines all fail here): no anchor then, the candidate is timed alone and still
    evaluates, without a speedup, rather than failing on a baseline it cannot run."""
    ev = CudaEvaluator(goal(), devices=[0], worker_factory=FAKE, protocol=QUICK,
                       deadlines=Deadlines(compile_s=60, run_s=30),
                       baseline_factory="fake_cupy:fake_baseline_worker")
    try:
        b = ev.baselines()
        assert b["cell"] == "baseline" and b["best"] == "triton:fast" and b["anchor"] is None
        c = ev.evaluate(cand(256))
        assert c.ok, c.detail
        assert "speedup" not in c.metrics and "anchor_ms" not in c.metrics
    finally:
        ev.close()
