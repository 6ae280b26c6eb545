"""The fused bias + GELU baseline (one CuPy ElementwiseKernel instead of torch's add + gelu):
its kernel bodies compile with NVRTC for every dtype, and the bfloat16 narrowing rounds to
nearest even as the GPU's own conversion does. Running it needs a GPU (the GPU tests and the
GPU check time it against the catalog kernel); here the body is compiled in a kernel shaped
like CuPy's elementwise wrapper, and the bit arithmetic is replayed in numpy."""

from __future__ import annotations

import numpy as np
import pytest

from app.catalog.cuda import OPERATORS
from app.catalog.cuda.elementwise import FUSED_BODY, FUSED_TYPE
from app.gpu.cuda import nvrtc

WRAPPER = """#include <cuda_fp16.h>
typedef __half float16;
typedef unsigned short uint16;
typedef float float32;
extern "C" __global__ void fused(const {T}* xs, const {T}* bs, {T}* ys, int n, int cols) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        {T} x = xs[i];
        {T} b = bs[i % cols];
        {T} y;
        {BODY}
        ys[i] = y;
    }}
}}
"""


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_fused_body_compiles_for_every_dtype(dtype, tmp_path):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    source = WRAPPER.format(T=FUSED_TYPE[dtype], BODY=FUSED_BODY[dtype])
    built = nvrtc.compile_source(source, "fused", "sm_80", cache=tmp_path)
    assert built.resource().registers > 0 and not built.resource().spills
    assert "cupy:fused" in OPERATORS["bias_gelu"].baselines(dtype)


def _to_bf16_bits(f32: np.ndarray) -> np.ndarray:
    """The body's narrowing, replayed: u + 0x7fff + ((u >> 16) & 1), then the high half."""
    u = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_the_bfloat16_narrowing_rounds_to_nearest_even():
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(0, 3, 20000), rng.uniform(-1e4, 1e4, 2000)]).astype(np.float32)
    bits = _to_bf16_bits(values)
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    # nearest: no bf16 value is closer than the chosen one (ties are checked below)
    up = ((bits.astype(np.uint32) + 1) << 16).view(np.float32)
    down = ((bits.astype(np.uint32) - 1) << 16).view(np.float32)
    err = np.abs(back - values)
    assert (err <= np.abs(up - values)).all() and (err <= np.abs(down - values)).all()
    # ties go to the even mantissa: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7
    tie_even = np.array([1.0 + 2.0 ** -8], np.float32)
    tie_odd = np.array([1.0 + 3 * 2.0 ** -8], np.float32)
    assert (_to_bf16_bits(tie_even).astype(np.uint32) << 16).view(np.float32)[0] == 1.0
    assert (_to_bf16_bits(tie_odd).astype(np.uint32) << 16).view(np.float32)[0] == 1.0 + 2.0 ** -6


@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "layernorm"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_composed_row_baselines_verify_in_every_dtype_without_torch(name, dtype, monkeypatch):
    """CuPy's composed row baselines widen bfloat16 bits to float32 and narrow back with
    round-to-nearest-even, so a bfloat16 goal keeps a baseline when torch is missing or fails.
    NumPy stands in for CuPy (the same array API); the GPU tests run them on CuPy."""
    import sys

    from app.catalog.protocol import from_storage, to_storage
    from app.gpu.verify import compare, tolerance_for

    monkeypatch.setitem(sys.modules, "cupy", np)
    op = OPERATORS[name]
    shape = [7, 300]
    inputs = op.make_inputs(np, shape, dtype, np.random.default_rng(5), "normal")
    run, fetch = op.baselines(dtype)["cupy:composed"](inputs, shape, dtype)
    run()
    out = fetch()
    assert out["y"].dtype == inputs["x"].dtype
    assert compare(np, op, inputs, out, shape, dtype, tolerance_for(op, shape, dtype)) is None
    if dtype == "bfloat16":  # rounded exactly as the catalog stores bfloat16
        from app.catalog.cuda.baselines import narrow

        values = from_storage(np, out["y"], dtype).astype(np.float32) * np.float32(1.0 + 2.0 ** -9)
        assert np.array_equal(narrow(np, values, out["y"]), to_storage(np, values, dtype))


def test_the_cublas_gemm_ex_baseline_maps_row_major_onto_column_major():
    """gemmEx's arguments for a row-major C = A @ B, replayed with NumPy reading each buffer
    column-major with its leading dimension, as cuBLAS does. (Calling cuBLAS needs a GPU: the
    GPU tests verify the baseline itself against the float64 reference.)"""
    from app.catalog.cuda.baselines import row_major_gemm_ex

    rng = np.random.default_rng(9)
    m, n, k = 5, 7, 3
    buffers = {"a": rng.normal(size=(m, k)), "b": rng.normal(size=(k, n))}
    rows, cols, inner, first, ld_first, second, ld_second, ldc = row_major_gemm_ex(m, n, k)

    def column_major(flat, n_rows, n_cols, ld):  # element (i, j) at flat[i + j * ld]
        return np.array([[flat[i + j * ld] for j in range(n_cols)] for i in range(n_rows)])

    x = column_major(buffers[first].ravel(), rows, inner, ld_first)
    y = column_major(buffers[second].ravel(), inner, cols, ld_second)
    c_flat = np.zeros(m * n)
    product = x @ y
    for i in range(rows):
        for j in range(cols):
            c_flat[i + j * ldc] = product[i, j]
    assert np.allclose(c_flat.reshape(m, n), buffers["a"] @ buffers["b"])
    assert set(OPERATORS["gemm"].baselines("bfloat16")) >= {"cublas:gemmEx", "torch:matmul"}
