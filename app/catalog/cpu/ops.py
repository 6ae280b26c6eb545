"""The CPU operators: GEMM fp32, row softmax, RMSNorm, transpose."""

from __future__ import annotations

import math

import numpy as np

from app.catalog.cpu.operator import CpuOperator

F32_MAX = float(np.finfo(np.float32).max)
RMS_EPS = 1e-6  # matches EPS in cpu_rmsnorm.c and ref_rmsnorm


# ---- GEMM: C[M, N] = A[M, K] @ B[K, N] ------------------------------------------------------
def _gemm_numpy(x, out):
    np.matmul(x["A"], x["B"], out=out)


GEMM = CpuOperator(
    name="gemm",
    description="fp32 matrix multiply C = A @ B, row-major",
    shape_help="[M, N, K]",
    ndim=3,
    kernel_file="cpu_gemm.c",
    default_shape=[512, 512, 512],
    reference_symbol="ref_gemm",
    input_shapes=lambda s: {"A": (s[0], s[2]), "B": (s[2], s[1])},
    output_shape=lambda s: (s[0], s[1]),
    call_dims=lambda s: (s[0], s[1], s[2]),
    shape_of=lambda x: (x["A"].shape[0], x["B"].shape[1], x["A"].shape[1]),
    reference64=lambda x: x["A"] @ x["B"],
    # Rounding error of a dot product scales with sum |a||b|, not with the result.
    scale64=lambda x, ref: np.abs(x["A"]) @ np.abs(x["B"]),
    numpy_baseline=_gemm_numpy,
    flops=lambda s: 2.0 * s[0] * s[1] * s[2],
    bytes_per_shape=lambda s: 4.0 * (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]),
    throughput_unit="GFLOP/s",
    base_params={"BM": [16, 32, 64, 128], "BN": [32, 64, 128, 256], "BK": [32, 64, 128, 256],
                 "UM": [1, 2, 4, 8], "VEC": [4, 8, 16], "LOOP_ORDER": [0, 1]},
    restrictions=["BM % UM == 0", "BN % VEC == 0"],
    tile_params=("BM", "BN", "BK", "UM", "VEC"),
    # Products near the limit, but a K-long sum of them stays finite.
    near_limit_magnitude=lambda s: math.sqrt(F32_MAX / s[2]) / 16,
    growth=lambda s: max(1.0, math.sqrt(s[2]) / 8),
)


# ---- row softmax over the last axis of [rows, cols] -----------------------------------------
def _softmax64(x):
    v = x["x"]
    e = np.exp(v - v.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _softmax_scale(x, ref):
    # exp(x - max) in fp32 carries an error proportional to |x - max| (rounding of the argument).
    v = x["x"]
    return ref * (4.0 + np.abs(v - v.max(axis=1, keepdims=True)))


def _softmax_numpy(x, out):
    v = x["x"]
    np.subtract(v, v.max(axis=1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)


SOFTMAX = CpuOperator(
    name="softmax",
    description="fp32 softmax over each row of a [rows, cols] matrix",
    shape_help="[rows, cols]",
    ndim=2,
    kernel_file="cpu_softmax.c",
    default_shape=[4096, 1024],
    reference_symbol="ref_softmax",
    input_shapes=lambda s: {"x": (s[0], s[1])},
    output_shape=lambda s: (s[0], s[1]),
    call_dims=lambda s: (s[0], s[1]),
    shape_of=lambda x: x["x"].shape,
    reference64=_softmax64,
    scale64=_softmax_scale,
    numpy_baseline=_softmax_numpy,
    flops=lambda s: 5.0 * s[0] * s[1],
    bytes_per_shape=lambda s: 8.0 * s[0] * s[1],
    throughput_unit="GB/s",
    base_params={"VEC": [4, 8, 16], "ACC": [1, 2, 4, 8], "ONLINE": [0, 1],
                 "CHUNK": [1, 4, 16, 64], "EXP_IMPL": [0, 1]},
    tile_params=("VEC", "ACC", "CHUNK"),
    near_limit_magnitude=lambda s: F32_MAX / 2,
    growth=lambda s: max(1.0, math.sqrt(s[1]) / 16),
)


# ---- RMSNorm over the last axis, with a weight per column ------------------------------------
def _rmsnorm64(x):
    v = x["x"]
    return v / np.sqrt(np.mean(v * v, axis=1, keepdims=True) + RMS_EPS) * x["w"]


def _rmsnorm_numpy(x, out):
    v = x["x"]
    ms = np.mean(v * v, axis=1, keepdims=True)
    np.multiply(v, 1.0 / np.sqrt(ms + np.float32(RMS_EPS)), out=out)
    out *= x["w"]


RMSNORM = CpuOperator(
    name="rmsnorm",
    description="fp32 RMSNorm of each row of [rows, cols] with a per-column weight",
    shape_help="[rows, cols]",
    ndim=2,
    kernel_file="cpu_rmsnorm.c",
    default_shape=[4096, 1024],
    reference_symbol="ref_rmsnorm",
    input_shapes=lambda s: {"x": (s[0], s[1]), "w": (s[1],)},
    output_shape=lambda s: (s[0], s[1]),
    call_dims=lambda s: (s[0], s[1]),
    shape_of=lambda x: x["x"].shape,
    reference64=_rmsnorm64,
    scale64=lambda x, ref: np.abs(ref) + np.abs(x["w"]) * 1e-3,
    numpy_baseline=_rmsnorm_numpy,
    flops=lambda s: 4.0 * s[0] * s[1],
    bytes_per_shape=lambda s: 8.0 * s[0] * s[1] + 4.0 * s[1],
    throughput_unit="GB/s",
    base_params={"VEC": [4, 8, 16], "ACC": [1, 2, 4, 8, 16], "ACC_DOUBLE": [0, 1],
                 "CHUNK": [1, 4, 16, 64]},
    tile_params=("VEC", "ACC", "CHUNK"),
    # The sum of squares of a row stays below the fp32 limit.
    near_limit_magnitude=lambda s: math.sqrt(F32_MAX / s[1]) / 4,
    growth=lambda s: max(1.0, math.sqrt(s[1]) / 16),
)


# ---- transpose [rows, cols] -> [cols, rows] --------------------------------------------------
def _transpose_numpy(x, out):
    np.copyto(out, x["x"].T)


TRANSPOSE = CpuOperator(
    name="transpose",
    description="fp32 out-of-place transpose of a [rows, cols] matrix",
    shape_help="[rows, cols]",
    ndim=2,
    kernel_file="cpu_transpose.c",
    default_shape=[2048, 2048],
    reference_symbol="ref_transpose",
    input_shapes=lambda s: {"x": (s[0], s[1])},
    output_shape=lambda s: (s[1], s[0]),
    call_dims=lambda s: (s[0], s[1]),
    shape_of=lambda x: x["x"].shape,
    reference64=lambda x: np.ascontiguousarray(x["x"].T),
    scale64=lambda x, ref: np.abs(ref),
    numpy_baseline=_transpose_numpy,
    flops=lambda s: 0.0,
    bytes_per_shape=lambda s: 8.0 * s[0] * s[1],
    throughput_unit="GB/s",
    base_params={"TILE": [4, 8, 16, 32, 64, 128], "WRITE_MAJOR": [0, 1], "VEC": [4, 8, 16]},
    tile_params=("TILE", "VEC"),
    near_limit_magnitude=lambda s: F32_MAX / 2,
)

OPERATORS = {op.name: op for op in (GEMM, SOFTMAX, RMSNORM, TRANSPOSE)}
