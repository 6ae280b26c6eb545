"""CUDA catalog logic that runs without a GPU: references, bfloat16 storage, spaces, launch
geometry, edge shapes, roofline counts, tolerances."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.catalog import known_operators
from app.catalog.cuda import OPERATORS
from app.catalog.cuda.base import ceil_div, from_storage, largest_dividing_vec, to_storage
from app.catalog.protocol import Operator
from app.gpu.verify import tolerance_for


def test_registered_for_the_cuda_backend():
    ops = known_operators("cuda")
    assert {"softmax", "rmsnorm", "layernorm", "gemm", "transpose", "bias_gelu"} <= set(ops)


def test_bfloat16_storage_rounds_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.0e38, 1e-30], dtype=np.float64)
    bits = to_storage(np, x, "bfloat16")
    assert bits.dtype == np.uint16
    back = from_storage(np, bits, "bfloat16")
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0); 1 + 3*2^-8 ties up
    assert back[0] == 1.0 and back[1] == 1.0 and back[2] == 1.015625
    assert back[3] == -2.5
    rng = np.random.default_rng(0)
    v = rng.standard_normal(10000)
    rel = np.abs(from_storage(np, to_storage(np, v, "bfloat16"), "bfloat16") - v) / np.abs(v)
    assert rel.max() <= 2.0 ** -8 + 1e-12


def test_softmax_reference_is_stable_and_normalised():
    op = OPERATORS["softmax"]
    rng = np.random.default_rng(1)
    x = op.make_inputs(np, [7, 300], "float32", rng, "wide")
    y = op.reference(np, {"x": from_storage(np, x["x"], "float32")}, [7, 300])["y"]
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-12)
    shifted = op.reference(np, {"x": from_storage(np, x["x"], "float32") + 1000.0}, [7, 300])["y"]
    np.testing.assert_allclose(shifted, y, rtol=1e-9)


def test_norm_references():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 64)) * 3 + 2
    ln = OPERATORS["layernorm"].reference(np, {"x": x, "w": np.ones(64), "b": np.zeros(64)}, [5, 64])["y"]
    np.testing.assert_allclose(ln.mean(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(ln.var(axis=1), 1.0, rtol=1e-3)
    rms = OPERATORS["rmsnorm"].reference(np, {"x": x, "w": np.full(64, 2.0)}, [5, 64])["y"]
    np.testing.assert_allclose(np.sqrt((rms ** 2).mean(axis=1)), 2.0, rtol=1e-5)


def test_gemm_transpose_gelu_references():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    np.testing.assert_allclose(OPERATORS["gemm"].reference(np, {"a": a, "b": b}, [4, 5, 3])["c"], a @ b)
    x = rng.standard_normal((3, 4))
    assert OPERATORS["transpose"].reference(np, {"x": x}, [3, 4])["y"].shape == (4, 3)
    z = np.array([[-3.0, 0.0, 1.0]])
    y = OPERATORS["bias_gelu"].reference(np, {"x": z, "b": np.zeros(3)}, [1, 3])["y"]
    expected = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in (-3.0, 0.0, 1.0)]
    np.testing.assert_allclose(y[0], expected, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_recommended_configs_are_valid_and_launch_covers_the_shape(name):
    op = OPERATORS[name]
    shape = [4096, 4096, 4096] if name.startswith("gemm") else [4096, 4096]
    for dtype in op.dtypes:
        space = op.space(dtype)
        for cfg in op.recommended(dtype, shape):
            assert space.is_valid(cfg), (dtype, cfg)
            assert op.static_check(cfg, shape, dtype) is None
            launch = op.launch(cfg, shape, dtype)
            if name in ("softmax", "rmsnorm", "layernorm"):
                assert launch.grid[0] * (cfg["THREADS"] // cfg["TPR"]) >= shape[0]
            if name == "transpose":
                assert launch.grid[0] * cfg["TILE"] >= shape[1] and launch.grid[1] * cfg["TILE"] >= shape[0]
            if name.startswith("gemm") and dtype != "float32":
                tiles = ceil_div(shape[0], cfg["BM"]) * ceil_div(shape[1], cfg["BN"])
                assert launch.grid[0] == tiles and launch.shared_bytes <= 232448


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_edge_shapes_are_runnable_and_differ_from_the_goal(name):
    op = OPERATORS[name]
    shape = [4096, 4096, 4096] if name.startswith("gemm") else [4096, 4096]
    for dtype in op.dtypes:
        edges = op.edge_shapes([shape], dtype, op.space(dtype).params)
        assert edges and all(e != shape for e in edges)
        for e in edges:
            assert op.check_shape(e, dtype) is None, (dtype, e)


def test_row_static_check_refuses_rows_that_cannot_fit_in_registers():
    op = OPERATORS["softmax"]
    cfg = {"THREADS": 256, "TPR": 32, "VEC": 4, "FAST_EXP": 1}
    assert op.static_check(cfg, [8, 1024], "float32") is None
    problem = op.static_check(cfg, [8, 65536], "float32")
    assert problem and "registers" in problem


def test_row_vector_width_follows_the_row_length():
    assert largest_dividing_vec(4096, 8) == 8
    assert largest_dividing_vec(4092, 8) == 4
    assert largest_dividing_vec(999, 8) == 1
    op = OPERATORS["rmsnorm"]
    src = op.render({"THREADS": 128, "TPR": 32, "VEC": 8}, [10, 1002], "float16")
    assert "#define VEC 2" in src and "#define COLS 1002" in src and "#define KS_DTYPE 1" in src


def test_gemm_shape_rules():
    op = OPERATORS["gemm"]
    assert op.check_shape([4096, 4096], "bfloat16")
    assert "multiples of 8" in op.check_shape([64, 100, 64], "bfloat16")
    assert op.check_shape([64, 100, 63], "float32") is None


def test_roofline_counts():
    assert OPERATORS["softmax"].bytes_moved([1024, 1024], "bfloat16") == 2 * 2 * 1024 * 1024
    assert OPERATORS["rmsnorm"].bytes_moved([1024, 1024], "float32") == 4 * (2 * 1024 * 1024 + 1024)
    assert OPERATORS["gemm"].flops([10, 20, 30]) == 2 * 10 * 20 * 30
    assert not OPERATORS["gemm"].memory_bound and OPERATORS["transpose"].memory_bound


def test_tolerances_reject_a_zero_output():
    """Whatever the tolerance, an all-zero result must fail against real outputs."""
    rng = np.random.default_rng(4)
    for name, shape in (("softmax", [4, 4096]), ("gemm", [32, 32, 4096]), ("rmsnorm", [4, 512])):
        op = OPERATORS[name]
        for dtype in op.dtypes:
            inputs = op.make_inputs(np, shape, dtype, rng, "normal")
            ref = op.reference(np, {k: from_storage(np, v, dtype) for k, v in inputs.items()}, shape)
            tol = tolerance_for(op, shape, dtype)  # the one table, scaled by the operator
            rtol, atol = tol.rtol, tol.atol
            for out in ref.values():
                bad = ~(np.abs(out) <= atol + rtol * np.abs(out) + 0 * out)  # zero: error == |ref|
                assert bad.mean() > 0.9, (name, dtype)
                rounded = from_storage(np, to_storage(np, out, dtype), dtype)
                assert np.all(np.abs(rounded - out) <= atol + rtol * np.abs(out)), (name, dtype)


def test_every_operator_implements_the_catalog_protocol():
    from app.catalog.cpu import OPERATORS as CPU_OPS

    for op in [*OPERATORS.values(), *CPU_OPS.values()]:
        assert isinstance(op, Operator), op.name
        dtype = op.dtypes[0]
        assert op.entry(dtype) in op.template_source(dtype), op.name
        assert op.language in ("c", "cuda") and op.distributions[0] == "normal"


def test_bundled_cuda_goals_load_and_fit_the_catalog():
    from pathlib import Path

    from app.goal import Goal

    files = sorted((Path(__file__).resolve().parent.parent / "resources" / "goals").glob("cuda_*.toml"))
    assert len(files) >= 6
    for f in files:
        goal = Goal.load(f).validate()
        op = OPERATORS[goal.operator]
        for shape in goal.shapes:
            assert op.check_shape(shape, goal.dtype) is None, f
            assert op.recommended(goal.dtype, shape), f


def test_llm_kernel_spec_reads_the_operator_protocol():
    """The CUDA spec holds the real template source (not its file name) and the space's names."""
    from app.goal import Goal
    from app.llm.spec import kernel_spec

    goal = Goal(name="s", operator="softmax", backend="cuda", dtype="bfloat16", shapes=[[64, 1024]])
    spec = kernel_spec(goal)
    assert spec.language == "cuda" and spec.entry == "softmax"
    assert "__global__" in spec.template and spec.signature().startswith("extern")
    assert set(spec.params) == set(OPERATORS["softmax"].space("bfloat16").params)
    cpu = kernel_spec(Goal(name="c", operator="gemm", backend="cpu", shapes=[[64, 64, 64]]))
    assert cpu.language == "c" and cpu.entry == "ks_kernel" and "THREADS" in cpu.params


def test_gemm_mma_keeps_the_mma_sync_template_on_hopper():
    """On an H100/H200 `gemm` searches only wgmma configurations; `gemm_mma` is the mma.sync
    template there too, so a GEMM still has a kernel if every wgmma one fails verification."""
    hopper, mma = OPERATORS["gemm"].for_device("90"), OPERATORS["gemm_mma"].for_device("90")
    assert hopper.kernel_for("bfloat16") == "gemm_wgmma"
    assert mma.kernel_for("bfloat16") == "gemm_tc" and mma.name == "gemm_mma"
    assert set(mma.space("bfloat16").params) == set(OPERATORS["gemm"].space("bfloat16").params)


def test_the_gpu_bench_headline_takes_the_faster_correct_gemm_template():
    import importlib.util

    from project_paths import ROOT

    spec = importlib.util.spec_from_file_location("gpu_kernels", ROOT / "bench" / "gpu_kernels.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = [{"kernel": "gemm", "dtype": "bfloat16", "template": "gemm_wgmma", "error": "no correct candidate"},
            {"kernel": "gemm_mma", "dtype": "bfloat16", "template": "gemm_tc", "time_ms": 2.0, "baseline_ms": 1.5}]
    assert bench.summary_line(rows).endswith("GEMM bf16 75.0% of cuBLAS (gemm_tc)")
    rows[0].update(time_ms=1.6, baseline_ms=1.5)
    assert bench.summary_line(rows).endswith("GEMM bf16 93.8% of cuBLAS (gemm_wgmma)")
