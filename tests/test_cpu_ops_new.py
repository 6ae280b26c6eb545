"""The CPU LayerNorm and fused bias + GELU operators: their templates compile, pass the source
checks and verify through the real evaluator (every distribution and edge shape the cascade
draws), each tunable branch verifies, the C references agree with float64, and the numpy
baselines compute the same function."""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

from app.catalog import get_operator
from app.catalog.cpu.operator import REFERENCE_SOURCE, kernel_source
from app.core.types import Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, CpuSettings, compile_library, find_compiler, toolchain
from app.gpu.timing import TimingSettings
from app.gpu.verify import CheckCase, make_inputs
from app.gpu.worker import Deadlines

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

FAST = CpuSettings(
    timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
    baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
    deadlines=Deadlines(compile_s=60.0, run_s=5.0), flush_bytes=0, memory_limit_bytes=1 << 30)
SHAPES = {"layernorm": [19, 203], "bias_gelu": [13, 77]}
BRANCHES = {"layernorm": [{"STATS": s, "VEC": v} for s, v in itertools.product([0, 1], [4, 16])],
            "bias_gelu": [{"ERF_IMPL": e, "VEC": v} for e, v in itertools.product([0, 1], [4, 16])]}


def relative_error(op, inputs, got) -> float:
    x64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    ref = op.reference64(x64)
    return float(np.max(np.abs(got - ref) / (op.scale64(x64, ref) + 1e-30)))


@pytest.mark.parametrize("operator", sorted(SHAPES))
@pytest.mark.slow
def test_every_branch_verifies_through_the_evaluator(operator):
    goal = Goal(name=f"test {operator}", backend="cpu", operator=operator, shapes=[SHAPES[operator]])
    with CpuEvaluator(goal, settings=FAST) as ev:
        threads = ev.space.params["THREADS"][-1]
        results = [ev.evaluate(Candidate(config={**b, "CHUNK": 4, "THREADS": threads}, key=f"b{i}"))
                   for i, b in enumerate(BRANCHES[operator])]
        baselines = ev.baselines()
    for r in results:
        assert r.ok, (r.config, r.reason, r.detail, r.log[-500:])
        assert r.metrics["gbs"] > 0
    assert baselines["numpy_ms"] > 0 and baselines["c_reference_ms"] > 0


@pytest.mark.parametrize("operator", sorted(SHAPES))
def test_c_reference_and_numpy_baseline_compute_the_operator(tmp_path, operator):
    op = get_operator("cpu", operator)
    lib = tmp_path / "ref.so"
    ok, log = compile_library(kernel_source(REFERENCE_SOURCE), {}, lib, toolchain(), 120)
    assert ok, log
    fn = getattr(ctypes.CDLL(str(lib)), op.reference_symbol)
    shape = (37, 515)
    n_inputs = len(op.input_shapes(shape))
    fn.argtypes = [ctypes.c_void_p] * (1 + n_inputs) + [ctypes.c_long] * 2
    for distribution in op.distributions:
        inputs = make_inputs(np, op, CheckCase(list(shape), distribution, 5), "float32")
        out = np.full(op.output_shape(shape), np.nan, np.float32)
        fn(out.ctypes.data, *(inputs[k].ctypes.data for k in op.input_shapes(shape)), *shape)
        assert relative_error(op, inputs, out) < 1e-5 * op.growth(shape), distribution
        if distribution == "normal":  # numpy's fp32 means are not exact on constant rows
            np_out = np.full_like(out, np.nan)
            op.numpy_baseline(inputs, np_out)
            assert relative_error(op, inputs, np_out) < 1e-5 * op.growth(shape)


def test_layernorm_of_a_constant_row_is_exactly_the_bias(tmp_path):
    lib = tmp_path / "ln.so"
    ok, log = compile_library(kernel_source("cpu_layernorm.c"), {"STATS": 1, "THREADS": 1}, lib,
                              toolchain(), 120)
    assert ok, log
    fn = ctypes.CDLL(str(lib)).ks_kernel
    fn.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 2
    x = np.full((3, 1000), 0.1, np.float32)
    w = np.linspace(0.5, 1.5, 1000).astype(np.float32)
    b = np.linspace(-1, 1, 1000).astype(np.float32)
    y = np.empty_like(x)
    fn(y.ctypes.data, x.ctypes.data, w.ctypes.data, b.ctypes.data, 3, 1000)
    assert np.array_equal(y, np.broadcast_to(b, y.shape))


def test_the_inlined_erf_is_accurate_across_the_range(tmp_path):
    """bias_gelu with ERF_IMPL=1 against float64 erf, from deep negative to large positive z."""
    op = get_operator("cpu", "bias_gelu")
    lib = tmp_path / "gelu.so"
    ok, log = compile_library(kernel_source("cpu_bias_gelu.c"), {"ERF_IMPL": 1, "THREADS": 1},
                              lib, toolchain(), 120)
    assert ok, log
    fn = ctypes.CDLL(str(lib)).ks_kernel
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2
    x = np.linspace(-30, 30, 100_001, dtype=np.float32).reshape(1, -1)
    b = np.zeros(x.shape[1], np.float32)
    y = np.empty_like(x)
    fn(y.ctypes.data, x.ctypes.data, b.ctypes.data, 1, x.shape[1])
    assert relative_error(op, {"x": x, "b": b}, y) < 1e-5
