"""The CPU operators: GEMM fp32, row softmax, RMSNorm, transpose."""

from __future__ import annotations

import math

import numpy as np

from app.catalog.cpu.isa import machine_isa_levels
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
    # ISA: 0 portable C, 1 AVX2+FMA, 2 AVX-512F (only those the machine reports, see isa.py);
    # the micro-tile is MR x (NV * vector width) and must fit the vector registers.
    base_params={"MR": [4, 6, 8, 12, 14, 16], "NV": [1, 2, 3, 4],
                 "KC": [128, 192, 256, 384, 512], "MC": [48, 96, 144, 192, 288, 384],
                 "NC": [256, 512, 1024, 2048, 4096], "UK": [1, 2, 4, 8],
                 "ORDER": [0, 1], "PAR": [0, 1], "PF": [0, 1]},
    machine_params=lambda: {"ISA": list(machine_isa_levels())},
    # The packed blocks live on the stack (kernels may not allocate): B's KC x NC (shared) up
    # to 2 MB, each thread's MC x KC block of A up to 768 KB.
    restrictions=["ISA != 2 or MR * NV <= 28", "ISA != 1 or MR * NV <= 14",
                  "ISA != 0 or MR * NV <= 24", "KC * NC <= 524288", "MC * KC <= 196608"],
    # NC is left out: its edge shape (4096 + 3) would cost seconds per check; the large edge
    # shape (past KC and MC) crosses NC = 256 and 512 blocks anyway.
    tile_params=("MR", "NV", "KC", "MC"),
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
