"""Fused bias + GELU over [rows, cols]: y = gelu(x + b[col]), exact (erf) GELU."""

from __future__ import annotations

import math

import numpy as np

from app.catalog.cuda.base import (
    ITEMSIZE,
    CudaOperator,
    Launch,
    ceil_div,
    draw,
    largest_dividing_vec,
    to_storage,
)
from app.catalog.cuda.baselines import cupy_baseline, cupy_supports, torch_baseline
from app.catalog.cuda.compiled_baselines import torch_compiled_baseline, triton_baseline
from app.core.space import SearchSpace


class BiasGelu(CudaOperator):
    meaning = "activation"
    family_args = ("x",)
    name = "bias_gelu"
    kernel_name = "bias_gelu"
    template = "bias_gelu.cu"
    description = "Fused bias add + exact GELU: y = gelu(x + b), b broadcast over rows"
    input_names = ("x", "b")
    distributions = ("normal", "uniform", "wide")

    def space(self, dtype):
        self.check_dtype(dtype)
        return SearchSpace({"THREADS": [64, 128, 256, 512, 1024],
                            "VEC": [1, 2, 4] if dtype == "float32" else [1, 2, 4, 8],
                            "ITEMS": [1, 2, 4, 8]})

    def recommended(self, dtype, shape):
        return [{"THREADS": 256, "VEC": 4 if dtype == "float32" else 8, "ITEMS": 4}]

    def defines(self, config, shape, dtype):
        return {**config, "VEC": largest_dividing_vec(shape[1], config["VEC"]), "COLS": shape[1]}

    def launch(self, config, shape, dtype):
        vec = largest_dividing_vec(shape[1], config["VEC"])
        nvec = shape[0] * shape[1] // vec
        return Launch((ceil_div(nvec, config["THREADS"] * config["ITEMS"]), 1, 1), (config["THREADS"], 1, 1))

    def static_check(self, config, shape, dtype):
        vec = largest_dividing_vec(shape[1], config["VEC"])
        if ceil_div(shape[0] * shape[1] // vec, config["THREADS"] * config["ITEMS"]) >= 2**31:
            return "grid too large"
        return None

    def make_inputs(self, xp, shape, dtype, rng, distribution):
        return {"x": to_storage(xp, draw(xp, rng, shape, distribution), dtype),
                "b": to_storage(xp, rng.uniform(-1, 1, (shape[1],)), dtype)}

    def kernel_args(self, config, inputs, outputs, shape):
        vec = largest_dividing_vec(shape[1], config["VEC"])
        return (inputs["x"], inputs["b"], outputs["y"], np.int64(shape[0] * shape[1] // vec))

    def reference(self, xp, inputs, shape):
        z = inputs["x"] + inputs["b"]
        erf = _erf(xp)
        return {"y": 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))}

    def atol(self, shape, dtype, rtol):
        return rtol * 1e-2

    def small_shapes(self, shape, dtype):
        cols = shape[1]
        return [[3, cols], [7, cols - 8 if cols > 8 else cols], [5, cols - 1 if cols > 1 else cols]]

    def flops(self, shape):
        return 10.0 * shape[0] * shape[1]

    def bytes_moved(self, shape, dtype):
        return ITEMSIZE[dtype] * (2 * shape[0] * shape[1] + shape[1])

    def baselines(self, dtype):
        # one fused library kernel (CuPy's ElementwiseKernel, compiled in-process by NVRTC, so
        # it also runs in the sealed worker), where torch's gelu(x + b) is two
        out = {"cupy:fused": cupy_baseline(fused_bias_gelu(dtype), ("x", "b"))}
        if cupy_supports(dtype):
            def composed(x, b):
                import cupy as cp
                from cupyx.scipy.special import erf

                z = x.astype(cp.float32) + b.astype(cp.float32)
                return (0.5 * z * (1.0 + erf(z * 0.7071067811865476))).astype(x.dtype)
            out["cupy:composed"] = cupy_baseline(composed, ("x", "b"))
        out["torch:gelu"] = torch_baseline(bias_gelu_torch, ("x", "b"))
        return out

    def compiled_baselines(self, dtype):
        return {"triton:bias_gelu": triton_baseline("bias_gelu", ("x", "b")),
                "torch.compile:gelu": torch_compiled_baseline(bias_gelu_torch, ("x", "b"))}


def bias_gelu_torch(t, x, b):
    return t.nn.functional.gelu(x + b)


# The body of a fused bias + GELU as one CuPy ElementwiseKernel: b (cols,) broadcasts over the
# rows of x; fp32 math. bfloat16 arrays are uint16 bits to CuPy: widened by a shift, narrowed
# with round-to-nearest-even (the same rounding as __float2bfloat16_rn for finite values).
GELU_F32 = "0.5f * z * (1.0f + erff(z * 0.70710678118654752f))"
FUSED_BODY = {
    "float32": f"float z = x + b; y = {GELU_F32};",
    "float16": f"float z = (float)x + (float)b; y = (float16)({GELU_F32});",
    "bfloat16": ("float z = __uint_as_float(((unsigned int)x) << 16) "
                 "+ __uint_as_float(((unsigned int)b) << 16); "
                 f"unsigned int u = __float_as_uint({GELU_F32}); "
                 "y = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);"),
}
FUSED_TYPE = {"float32": "float32", "float16": "float16", "bfloat16": "uint16"}


def fused_bias_gelu(dtype: str):
    """compute(x, b) -> y with one fused CuPy kernel (built on first use, on the GPU)."""
    kernel = None

    def compute(x, b):
        nonlocal kernel
        if kernel is None:
            import cupy as cp

            t = FUSED_TYPE[dtype]
            kernel = cp.ElementwiseKernel(f"{t} x, {t} b", f"{t} y", FUSED_BODY[dtype],
                                          f"ks_baseline_bias_gelu_{dtype}")
        return kernel(x, b)

    return compute


def _erf(xp):
    if xp is np:
        try:
            from scipy.special import erf  # type: ignore

            return erf
        except ImportError:
            return np.vectorize(math.erf, otypes=[np.float64])
    from cupyx.scipy.special import erf

    return erf
