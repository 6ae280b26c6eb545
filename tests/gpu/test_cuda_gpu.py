"""The cuda backend on a real GPU: every catalog family verifies and times, planted faulty
kernels (illegal memory access, hang, out of memory, skipped work) are recorded with their
reason and cost one worker process, and the run continues. Skipped without a GPU."""

from __future__ import annotations

import pytest

from app.catalog.cuda import OPERATORS
from app.core.types import OUT_OF_MEMORY, RUNTIME_FAILED, TIMEOUT, VERIFY_FAILED, Candidate
from app.goal import Goal
from app.gpu.cuda.evaluator import CudaEvaluator, make_pool
from app.gpu.cuda.timing import Protocol
from app.gpu.worker import Deadlines

QUICK = Protocol(min_samples=5, max_samples=20, max_seconds=0.5, warmup=1, batch=5)

FAMILIES = [("softmax", "bfloat16", [2048, 4096]), ("softmax", "float32", [1000, 1000]),
            ("rmsnorm", "float16", [2048, 4096]), ("layernorm", "bfloat16", [2048, 2048]),
            ("bias_gelu", "float32", [1024, 4096]), ("transpose", "float32", [2048, 4096]),
            ("gemm", "bfloat16", [1024, 1024, 1024]), ("gemm", "float16", [512, 768, 256]),
            ("gemm", "float32", [512, 512, 512]), ("gemm_mma", "bfloat16", [1024, 1024, 1024])]


@pytest.fixture(scope="module")
def shared_pool():
    """One GPU worker for the family tests: CuPy, the CUDA context and torch load once."""
    pool = make_pool([0])
    yield pool
    pool.close()


def make(name, dtype, shape, **kw) -> CudaEvaluator:
    goal = Goal(name=f"{name} gpu test", operator=name, backend="cuda", dtype=dtype,
                shapes=[shape], device=0).validate()
    kw.setdefault("protocol", QUICK)
    kw.setdefault("compilers", ())  # the compiled baselines have their own test
    return CudaEvaluator(goal, **kw)


def candidate(op, dtype, shape, i=0, source=None) -> Candidate:
    cfg = op.recommended(dtype, shape)[i]
    return Candidate(config=cfg, key=op.space(dtype).key(cfg), agent="test", source=source)


@pytest.mark.parametrize("name,dtype,shape", FAMILIES, ids=[f"{n}-{d}" for n, d, _ in FAMILIES])
def test_recommended_kernels_verify_and_time(name, dtype, shape, shared_pool):
    ev = make(name, dtype, shape, pool=shared_pool)
    op = ev.op  # as the device runs it: gemm on sm_90 is the wgmma + TMA template
    try:
        for i in range(len(op.recommended(dtype, shape))):
            result = ev.evaluate(candidate(op, dtype, shape, i))
            assert result.ok, f"{result.reason}: {result.detail}\n{result.log[-2000:]}"
            assert result.time_ms > 0 and result.metrics["gbps"] > 0
            assert result.stages[-1].name == "reverify"
        assert ev.baseline() is not None, ev.baselines()
    finally:
        ev.close()


def _sm90(ev: CudaEvaluator) -> bool:
    return str(ev.info().get("compute_capability", "")).replace(".", "") == "90"


def test_wgmma_configurations_verify_on_odd_shapes_in_diagnostic_order(shared_pool):
    """sm_90 only. The wgmma template's configurations, each isolating one more mechanism (a
    review's order): BN=64 (A's k-step alone), the base BN=256 (B's LBO/SBO), BM=256 (two M
    atoms per warpgroup), CLUSTER 2 (multicast, remote arrivals: a hang here is the empty
    barrier), the TMA-store epilogue (a wrong swizzle permutes 16-byte chunks); on shapes that
    are no multiple of any tile, where TMA zero-fills and the stores clip. All are evaluated and
    every failure is named, so one run says which mechanism is wrong."""
    shapes = [[72, 136, 40], [203, 264, 328]]
    ev = make("gemm", "bfloat16", shapes[0], pool=shared_pool)
    try:
        if not _sm90(ev):
            pytest.skip("the wgmma template runs on compute capability 9.0 only")
        base = {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "CONSUMERS": 2, "CLUSTER": 1,
                "EPILOGUE": 0, "GROUP_M": 8}
        order = [("BN=64", {**base, "BN": 64}), ("base", base), ("BM=256", {**base, "BM": 256, "BN": 128}),
                 ("CLUSTER=2", {**base, "CLUSTER": 2}), ("TMA store", {**base, "STAGES": 3, "EPILOGUE": 1})]
    finally:
        ev.close()
    failures = []
    for shape in shapes:
        ev = make("gemm", "bfloat16", shape, pool=shared_pool)
        try:
            for label, cfg in order:
                assert ev.space.is_valid(cfg), (label, cfg)
                r = ev.evaluate(Candidate(config=cfg, key=ev.space.key(cfg), agent="test"))
                if not r.ok:
                    failures.append(f"{label} on {shape}: {r.reason}: {r.detail[:300]}")
        finally:
            ev.close()
    assert not failures, "\n".join(failures)


def test_kda_recommended_configurations_verify_against_the_float64_reference(shared_pool):
    """The multi-kernel KDA forward (fixed-length and packed sequences, T no multiple of any
    chunk): every recommended configuration verifies by the per-head Frobenius tolerance."""
    failures = []
    for shape in ([1, 1000, 4, 128], [1, 700, 2, 128, 3]):
        ev = make("kda", "bfloat16", shape, pool=shared_pool)
        try:
            for cfg in ev.op.recommended("bfloat16", shape):
                if ev.op.static_check(cfg, shape, "bfloat16"):
                    continue
                r = ev.evaluate(Candidate(config=cfg, key=ev.space.key(cfg), agent="test"))
                if not r.ok:
                    failures.append(f"{cfg} on {shape}: {r.reason}: {r.detail[:300]}")
                else:
                    assert r.time_ms > 0
        finally:
            ev.close()
    assert not failures, "\n".join(failures)


SKIP_HALF = r"""
extern "C" __global__ void softmax(const T* __restrict__ x, T* __restrict__ y, int rows) {
    const long row = (long)blockIdx.x * (THREADS / TPR) + threadIdx.x / TPR;
    if (row >= rows / 2) return;  // "optimised": does half the rows
    for (int c = threadIdx.x % TPR; c < COLS; c += TPR) y[row * COLS + c] = from_f<T>(1.0f / COLS);
}
"""
ILLEGAL = r"""
extern "C" __global__ void softmax(const T* __restrict__ x, T* __restrict__ y, int rows) {
    y[(long)threadIdx.x * (1L << 36)] = x[0];
}
"""
HANG = r"""
extern "C" __global__ void softmax(const T* __restrict__ x, T* __restrict__ y, int rows) {
    volatile int spin = 1;
    while (spin) { __nanosleep(1000); }
}
"""


def test_compiled_baselines_build_verify_and_time_in_the_trusted_cell(shared_pool):
    """Triton's softmax (and torch.compile's, where it builds offline) in the baseline cell:
    verified against the float64 reference and timed beside the library baselines; a candidate
    is timed against the anchor and its speedup scaled to the best."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    ev = make("softmax", "bfloat16", [2048, 4096], pool=shared_pool,
              compilers=("triton", "torch.compile"), deadlines=Deadlines(compile_s=180, run_s=60))
    b = ev.baselines()
    assert not b.get("compiled_error"), b.get("compiled_error")
    triton = b["baselines"]["triton:softmax"]
    assert triton["compiled"] and triton["ok"] and triton["ms"][0] > 0, triton
    assert b["anchor"] and not b["baselines"][b["anchor"]]["compiled"]
    print({n: (r["ok"], r["ms"], r["error"][:100]) for n, r in b["baselines"].items()}, b["best"])
    op = OPERATORS["softmax"]
    c = ev.evaluate(candidate(op, "bfloat16", [2048, 4096]))
    assert c.ok, c.detail
    assert c.metrics["speedup"] == pytest.approx(c.metrics["baseline_ms"] / c.time_ms)


def test_planted_faults_are_recorded_and_the_run_continues():
    shape = [1024, 2048]
    op = OPERATORS["softmax"]
    ev = make("softmax", "float32", shape, deadlines=Deadlines(compile_s=60, run_s=10),
              measure_baseline=False)
    try:
        skipped = ev.evaluate(candidate(op, "float32", shape, source=SKIP_HALF))
        assert skipped.reason == VERIFY_FAILED and skipped.failing_case is not None, skipped.detail
        crash = ev.evaluate(candidate(op, "float32", shape, source=ILLEGAL))
        assert crash.reason == RUNTIME_FAILED and "illegal" in crash.detail.lower(), crash.detail
        good = ev.evaluate(candidate(op, "float32", shape))
        assert good.ok, good.detail  # a fresh worker after the poisoned context
        assert ev.pool.workers[0].restarts >= 1
    finally:
        ev.close()


def test_out_of_memory_is_recorded():
    shape = [1 << 21, 1 << 16]  # 512 GiB of fp32 inputs
    ev = make("softmax", "float32", shape, measure_baseline=False)
    try:
        cfg = {"THREADS": 1024, "TPR": 1024, "VEC": 4, "FAST_EXP": 1}
        result = ev.evaluate(Candidate(config=cfg, key="oom", agent="test"))
        assert result.reason == OUT_OF_MEMORY, f"{result.reason}: {result.detail}"
    finally:
        ev.close()


def test_timing_protocol_and_copy_bandwidth():
    import cupy as cp

    from app.gpu.cuda import telemetry
    from app.gpu.cuda.roofline import measure_copy_bandwidth
    from app.gpu.cuda.timing import Timer

    bw = measure_copy_bandwidth(nbytes=256 << 20, repeats=5)
    assert 1e11 < bw < 2e13
    parts = measure_copy_bandwidth.parts  # the roof is the better of memcpy and a vector kernel
    assert not measure_copy_bandwidth.error, measure_copy_bandwidth.error
    assert set(parts) == {"memcpy", "vector_kernel"} and bw == max(parts.values()), parts
    assert abs(measure_copy_bandwidth.spot_check() - bw) / bw < 0.25
    l2 = cp.cuda.Device().attributes["L2CacheSize"]
    timer = Timer(l2, telemetry.throttle_mask_fn(0))
    assert timer.flush_bytes >= 2 * l2
    a = cp.ones(64 << 20, dtype=cp.float32)
    b = cp.empty_like(a)
    small = cp.ones(256, dtype=cp.float32)
    m = timer.measure({"copy": lambda: cp.copyto(b, a), "tiny": lambda: small.fill(2.0)},
                      Protocol(max_samples=30, max_seconds=2.0, graph_below_ms=0.02),
                      graphable=("tiny",))
    assert m.mode["copy"] == "events" and m.mode["tiny"].startswith("graph")
    st = m.stats["copy"]
    assert st.n >= 5 and st.p10 <= st.median <= st.p90
    achieved = 2 * a.nbytes / (st.median / 1e3)
    assert achieved < 1.2 * bw  # cold L2: cannot beat the copy roof by much
    if telemetry.nvml()[0] is not None:  # the SM clock is recorded for every kept batch
        assert m.batch_sm_clock_mhz and all(c > 0 for c in m.batch_sm_clock_mhz)
        assert "sw_power_cap" not in m.throttle_seen
    reading = telemetry.read(0)
    assert reading.get("sm_clock_mhz", 0) > 0 or telemetry.nvml()[0] is None


def test_zz_a_hanging_kernel_times_out_and_the_run_continues():
    """Last in the file (and run last by scripts/gpu-check): a hang may leave the GPU wedged."""
    shape = [1024, 2048]
    op = OPERATORS["softmax"]
    ev = make("softmax", "float32", shape, deadlines=Deadlines(compile_s=60, run_s=10),
              measure_baseline=False)
    try:
        hang = ev.evaluate(candidate(op, "float32", shape, source=HANG))
        assert hang.reason == TIMEOUT, hang.detail
        again = ev.evaluate(candidate(op, "float32", shape))
        assert again.ok, again.detail
        assert ev.pool.workers[0].restarts >= 1
    finally:
        ev.close()
