"""The CPU operators: GEMM fp32, row softmax, RMSNorm, LayerNorm, fused bias + GELU, transpose."""

from __future__ import annotations

import math

import numpy as np

from app.catalog.cpu.isa import machine_isa_levels
from app.catalog.cpu.operator import CpuOperator

F32_MAX = float(np.finfo(np.float32).max)
RMS_EPS = 1e-6  # matches EPS in cpu_rmsnorm.c and ref_rmsnorm
LN_EPS = 1e-5  # matches EPS in cpu_layernorm.c and ref_layernorm (and the CUDA LayerNorm)


# What every [rows, cols] operator below shares: two dimensions, passed to the kernel as they
# are, the input named x; the row-wise ones also read the rows of x into an output of its shape.
_MATRIX = {"shape_help": "[rows, cols]", "ndim": 2, "call_dims": lambda s: (s[0], s[1]),
           "shape_of": lambda x: x["x"].shape, "memory_bound": True}
_ROWS = {**_MATRIX, "family_args": ("x",), "output_shape": lambda s: (s[0], s[1])}

# ---- GEMM: C[M, N] = A[M, K] @ B[K, N] ------------------------------------------------------
def _gemm_numpy(x, out):
    np.matmul(x["A"], x["B"], out=out)


GEMM = CpuOperator(
    meaning="matmul",
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
    threaded_baseline=True,
    flops=lambda s: 2.0 * s[0] * s[1] * s[2],
    bytes_per_shape=lambda s: 4.0 * (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]),
    memory_bound=False,
    # ISA: 0 portable C, 1 AVX2+FMA, 2 AVX-512F (only those the machine reports, see isa.py);
    # the micro-tile is MR x (NV * vector width) and must fit the vector registers.
    base_params={"MR": [4, 6, 8, 12, 14, 16], "NV": [1, 2, 3, 4],
                 "KC": [128, 192, 256, 384, 512], "MC": [48, 96, 144, 192, 288, 384],
                 "NC": [256, 512, 1024, 2048, 4096], "UK": [1, 2, 4, 8],
                 "ORDER": [0, 1], "PAR": [0, 1], "PF": [0, 1], "SHARE_B": [0, 1]},
    machine_params=lambda: {"ISA": list(machine_isa_levels())},
    # The packed blocks live on the stack (kernels may not allocate): B's KC x NC (shared) up
    # to 2 MB, each thread's MC x KC block of A up to 768 KB.
    restrictions=["ISA != 2 or MR * NV <= 28", "ISA != 1 or MR * NV <= 14",
                  "ISA != 0 or MR * NV <= 24", "KC * NC <= 524288", "MC * KC <= 196608",
                  "PAR == 0 or SHARE_B == 1"],
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
    with np.errstate(invalid="ignore"):  # a masked (-inf) entry's output is exactly 0
        return np.where(np.isfinite(v), ref * (4.0 + np.abs(v - v.max(axis=1, keepdims=True))),
                        0.0)


def _softmax_numpy(x, out):
    v = x["x"]
    np.subtract(v, v.max(axis=1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)


SOFTMAX = CpuOperator(
    meaning="softmax",
    name="softmax",
    description="fp32 softmax over each row of a [rows, cols] matrix",
    kernel_file="cpu_softmax.c",
    default_shape=[4096, 1024],
    reference_symbol="ref_softmax",
    input_shapes=lambda s: {"x": (s[0], s[1])},
    reference64=_softmax64,
    scale64=_softmax_scale,
    numpy_baseline=_softmax_numpy,
    flops=lambda s: 5.0 * s[0] * s[1],
    bytes_per_shape=lambda s: 8.0 * s[0] * s[1],
    base_params={"VEC": [4, 8, 16], "ACC": [1, 2, 4, 8], "ONLINE": [0, 1],
                 "CHUNK": [1, 4, 16, 64], "EXP_IMPL": [0, 1]},
    tile_params=("VEC", "ACC", "CHUNK"),
    near_limit_magnitude=lambda s: F32_MAX / 2,
    growth=lambda s: max(1.0, math.sqrt(s[1]) / 16),
    **_ROWS,
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
    meaning="norm",
    name="rmsnorm",
    description="fp32 RMSNorm of each row of [rows, cols] with a per-column weight",
    kernel_file="cpu_rmsnorm.c",
    default_shape=[4096, 1024],
    reference_symbol="ref_rmsnorm",
    input_shapes=lambda s: {"x": (s[0], s[1]), "w": (s[1],)},
    reference64=_rmsnorm64,
    scale64=lambda x, ref: np.abs(ref) + np.abs(x["w"]) * 1e-3,
    numpy_baseline=_rmsnorm_numpy,
    flops=lambda s: 4.0 * s[0] * s[1],
    bytes_per_shape=lambda s: 8.0 * s[0] * s[1] + 4.0 * s[1],
    base_params={"VEC": [4, 8, 16], "ACC": [1, 2, 4, 8, 16], "ACC_DOUBLE": [0, 1],
                 "CHUNK": [1, 4, 16, 64]},
    tile_params=("VEC", "ACC", "CHUNK"),
    # The sum of squares of a row stays below the fp32 limit.
    near_limit_magnitude=lambda s: math.sqrt(F32_MAX / s[1]) / 4,
    growth=lambda s: max(1.0, math.sqrt(s[1]) / 16),
    **_ROWS,
)


# ---- LayerNorm over the last axis, with a weight and a bias per column ----------------------
def _layernorm64(x):
    v = x["x"]
    mean = v.mean(axis=1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=1, keepdims=True)
    return (v - mean) / np.sqrt(var + LN_EPS) * x["w"] + x["b"]


def _layernorm_numpy(x, out):
    v = x["x"]
    mean = v.mean(axis=1, keepdims=True)
    np.subtract(v, mean, out=out)
    var = np.mean(out * out, axis=1, keepdims=True)
    out *= 1.0 / np.sqrt(var + np.float32(LN_EPS))
    out *= x["w"]
    out += x["b"]


LAYERNORM = CpuOperator(
    meaning="norm",
    name="layernorm",
    description="fp32 LayerNorm of each row of [rows, cols] with per-column weight and bias, eps 1e-5",
    kernel_file="cpu_layernorm.c",
    default_shape=[4096, 1024],
    reference_symbol="ref_layernorm",
    input_shapes=lambda s: {"x": (s[0], s[1]), "w": (s[1],), "b": (s[1],)},
    reference64=_layernorm64,
    # (x - mean) * rstd is O(1) per element; its fp32 error scales with |w|, not with |y|
    # (y can be near zero where the bias cancels it).
    scale64=lambda x, ref: np.abs(ref) + np.abs(x["w"]) + np.abs(x["b"]),
    numpy_baseline=_layernorm_numpy,
    flops=lambda s: 7.0 * s[0] * s[1],
    bytes_per_shape=lambda s: 8.0 * s[0] * s[1] + 8.0 * s[1],
    base_params={"VEC": [4, 8, 16], "STATS": [0, 1], "CHUNK": [1, 4, 16, 64]},
    tile_params=("VEC", "CHUNK"),
    # The sum of squares of a row stays below the fp32 limit.
    near_limit_magnitude=lambda s: math.sqrt(F32_MAX / s[1]) / 4,
    growth=lambda s: max(1.0, math.sqrt(s[1]) / 16),
    **_ROWS,
)


# ---- fused bias + exact GELU: y = gelu(x + b[col]) over [rows, cols] --------------------------
def _erf(values, out=None):
    try:
        from scipy.special import erf
    except ImportError:  # scipy is optional: the slow exact fallback
        result = np.vectorize(math.erf, otypes=[values.dtype])(values)
        if out is None:
            return result
        out[...] = result
        return out
    return erf(values, out=out)


def _bias_gelu64(x):
    z = x["x"] + x["b"]
    return 0.5 * z * (1.0 + _erf(z / math.sqrt(2.0)))


def _bias_gelu_numpy(x, out):
    z = x["x"] + x["b"]
    np.multiply(z, np.float32(1.0 / math.sqrt(2.0)), out=out)
    _erf(out, out=out)
    out += 1.0
    out *= z
    out *= 0.5


BIAS_GELU = CpuOperator(
    meaning="activation",
    name="bias_gelu",
    description="fp32 fused bias add + exact (erf) GELU over [rows, cols], bias per column",
    kernel_file="cpu_bias_gelu.c",
    default_shape=[4096, 1024],
    reference_symbol="ref_bias_gelu",
    input_shapes=lambda s: {"x": (s[0], s[1]), "b": (s[1],)},
    reference64=_bias_gelu64,
    # 1 + erf(z) in fp32 carries an absolute error of a few ulp(1) whatever erf's accuracy, so
    # y = 0.5 z (1 + erf) is off by up to about 0.5 |z| * 1e-7 where it is tiny (z << 0).
    scale64=lambda x, ref: np.abs(ref) + 0.05 * np.abs(x["x"] + x["b"]),
    numpy_baseline=_bias_gelu_numpy,
    flops=lambda s: 10.0 * s[0] * s[1],
    bytes_per_shape=lambda s: 8.0 * s[0] * s[1] + 4.0 * s[1],
    # ERF_IMPL 2: a rational erf without exp, about half the operations of 1 (bench/cpu_profile.md)
    base_params={"VEC": [4, 8, 16], "ERF_IMPL": [0, 1, 2], "CHUNK": [1, 4, 16, 64]},
    tile_params=("VEC", "CHUNK"),
    near_limit_magnitude=lambda s: F32_MAX / 4,
    **_ROWS,
)


# ---- transpose [rows, cols] -> [cols, rows] --------------------------------------------------
def _transpose_numpy(x, out):
    np.copyto(out, x["x"].T)


TRANSPOSE = CpuOperator(
    meaning="movement",  # compared bit for bit
    name="transpose",
    description="fp32 out-of-place transpose of a [rows, cols] matrix",
    kernel_file="cpu_transpose.c",
    default_shape=[2048, 2048],
    reference_symbol="ref_transpose",
    input_shapes=lambda s: {"x": (s[0], s[1])},
    output_shape=lambda s: (s[1], s[0]),
    reference64=lambda x: np.ascontiguousarray(x["x"].T),
    scale64=lambda x, ref: np.abs(ref),
    numpy_baseline=_transpose_numpy,
    flops=lambda s: 0.0,
    bytes_per_shape=lambda s: 8.0 * s[0] * s[1],
    base_params={"TILE": [4, 8, 16, 32, 64, 128], "WRITE_MAJOR": [0, 1], "VEC": [4, 8, 16]},
    tile_params=("TILE", "VEC"),
    near_limit_magnitude=lambda s: F32_MAX / 2,
    **_MATRIX,
)

OPERATORS = {op.name: op for op in (GEMM, SOFTMAX, RMSNORM, LAYERNORM, BIAS_GELU, TRANSPOSE)}
