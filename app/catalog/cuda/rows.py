"""Row-wise operators over [rows, cols]: softmax, RMSNorm, LayerNorm.

One template family: TPR threads per row (part of a warp, a warp, or several warps), VEC
elements per 16-byte-or-narrower access, the row cached in registers so it is read once.
The row length is a compile-time constant (the candidate is specialised per shape)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from app.catalog.cuda.base import (
    Config,
    CudaOperator,
    Launch,
    ceil_div,
    draw,
    largest_dividing_vec,
    to_storage,
)
from app.catalog.cuda.baselines import cupy_baseline, narrow, torch_baseline, widen
from app.catalog.cuda.compiled_baselines import torch_compiled_baseline, triton_baseline
from app.core.space import SearchSpace

MAX_VALUES_PER_THREAD = 128  # beyond this the cached row spills out of registers
# the range each per-column parameter is drawn from (x is drawn from the case's distribution)
COLUMN_PARAMS = {"w": (0.5, 1.5), "b": (-0.5, 0.5)}


class RowOperator(CudaOperator):
    family_args = ("x",)
    shape_doc = "[rows, cols]"
    extra_params: ClassVar[dict[str, list[Any]]] = {}
    eps: float | None = None  # the norms' epsilon, a #define of their kernel

    def space(self, dtype: str) -> SearchSpace:
        self.check_dtype(dtype)
        params = {
            "THREADS": [64, 128, 256, 512, 1024],
            "TPR": [8, 16, 32, 64, 128, 256, 512, 1024],
            "VEC": [1, 2, 4] if dtype == "float32" else [1, 2, 4, 8],
            **self.extra_params,
        }
        return SearchSpace(params, restrictions=["TPR <= THREADS"])

    def recommended(self, dtype: str, shape: list[int]) -> list[Config]:
        cols = shape[1]
        vec = 4 if dtype == "float32" else 8
        out = []
        for tpr in (32, 128, 256, 512, 1024):
            if ceil_div(cols, tpr * vec) * vec <= 32:  # <= 32 cached values per thread
                out.append({"THREADS": max(256, tpr), "TPR": tpr, "VEC": vec,
                            **{k: v[-1] for k, v in self.extra_params.items()}})
        return out[:2] or [{"THREADS": 1024, "TPR": 1024, "VEC": vec,
                            **{k: v[-1] for k, v in self.extra_params.items()}}]

    def static_check(self, config: Config, shape: list[int], dtype: str) -> str | None:
        cols = shape[1]
        vec = largest_dividing_vec(cols, config["VEC"])
        per_thread = ceil_div(ceil_div(cols, vec), config["TPR"]) * vec
        if per_thread > MAX_VALUES_PER_THREAD:
            return (f"a row of {cols} needs {per_thread} cached values per thread with TPR "
                    f"{config['TPR']}; at most {MAX_VALUES_PER_THREAD} fit in registers")
        return None

    def defines(self, config: Config, shape: list[int], dtype: str) -> dict[str, Any]:
        d = dict(config)
        d["VEC"] = largest_dividing_vec(shape[1], config["VEC"])
        d["COLS"] = shape[1]
        if self.eps is not None:
            d["EPS"] = f"{self.eps}f"
        return d

    def make_inputs(self, xp, shape, dtype, rng, distribution):
        return {"x": to_storage(xp, draw(xp, rng, shape, distribution), dtype),
                **{n: to_storage(xp, rng.uniform(*COLUMN_PARAMS[n], (shape[1],)), dtype)
                   for n in self.input_names[1:]}}

    def kernel_args(self, config, inputs, outputs, shape):
        return (*(inputs[n] for n in self.input_names), outputs["y"], np.int32(shape[0]))

    def launch(self, config: Config, shape: list[int], dtype: str) -> Launch:
        rows_per_block = config["THREADS"] // config["TPR"]
        return Launch((ceil_div(shape[0], rows_per_block), 1, 1), (config["THREADS"], 1, 1))

    def small_shapes(self, shape: list[int], dtype: str) -> list[list[int]]:
        cols = shape[1]
        # Same or shorter rows (the kernel is specialised per row length): a partial last
        # vector group, an odd length (scalar path) and a row count that fills no block.
        return [[3, cols], [37, cols - 8 if cols > 8 else cols], [5, cols - 1 if cols > 1 else cols]]

    def bytes_moved(self, shape: list[int], dtype: str) -> float:
        from app.catalog.cuda.base import ITEMSIZE

        rows, cols = shape
        return ITEMSIZE[dtype] * (2 * rows * cols + cols * (len(self.input_names) - 1))


class Softmax(RowOperator):
    meaning = "softmax"
    name = "softmax"
    kernel_name = "softmax"
    template = "softmax.cu"
    description = "Row softmax over the last axis (numerically stable: subtracts the row max)"
    input_names = ("x",)
    distributions = ("normal", "uniform", "offset", "wide")
    extra_params: ClassVar[dict[str, list[Any]]] = {"FAST_EXP": [0, 1]}

    def reference(self, xp, inputs, shape):
        x = inputs["x"]
        e = xp.exp(x - x.max(axis=1, keepdims=True))
        return {"y": e / e.sum(axis=1, keepdims=True)}

    def atol(self, shape, dtype, rtol):
        return 1e-3 / shape[1]  # outputs average 1/cols

    def flops(self, shape):
        return 5.0 * shape[0] * shape[1]

    def baselines(self, dtype):
        out = {}

        def composed(x):
            import cupy as cp

            xf = widen(cp, x)
            e = cp.exp(xf - xf.max(axis=1, keepdims=True))
            return narrow(cp, e / e.sum(axis=1, keepdims=True), x)
        out["cupy:composed"] = cupy_baseline(composed, ("x",))
        out["torch:softmax"] = torch_baseline(softmax_torch, ("x",))
        return out

    def compiled_baselines(self, dtype):
        return {"triton:softmax": triton_baseline("softmax", ("x",)),
                "torch.compile:softmax": torch_compiled_baseline(softmax_torch, ("x",))}


def softmax_torch(t, x):
    return t.softmax(x, dim=-1)


class RMSNorm(RowOperator):
    meaning = "norm"
    name = "rmsnorm"
    kernel_name = "rmsnorm"
    template = "rmsnorm.cu"
    description = "RMSNorm over the last axis with a learned scale w[cols], eps 1e-6"
    input_names = ("x", "w")
    eps = 1e-6

    def reference(self, xp, inputs, shape):
        x, w = inputs["x"], inputs["w"]
        return {"y": x / xp.sqrt((x * x).mean(axis=1, keepdims=True) + self.eps) * w}

    def atol(self, shape, dtype, rtol):
        return rtol * 1e-2  # outputs are O(1)

    def flops(self, shape):
        return 4.0 * shape[0] * shape[1]

    def baselines(self, dtype):
        eps = self.eps
        out = {}

        def composed(x, w):
            import cupy as cp

            xf = widen(cp, x)
            r = cp.sqrt((xf * xf).mean(axis=1, keepdims=True) + eps)
            return narrow(cp, xf / r * widen(cp, w), x)
        out["cupy:composed"] = cupy_baseline(composed, ("x", "w"))

        out["torch:rms_norm"] = torch_baseline(self.torch_rms, ("x", "w"))
        return out

    def torch_rms(self, t, x, w):
        f = getattr(t.nn.functional, "rms_norm", None)
        if f is not None:
            return f(x, (x.shape[-1],), w, self.eps)
        xf = x.float()
        return (xf * t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * w.float()).to(x.dtype)

    def compiled_baselines(self, dtype):
        return {"triton:rms_norm": triton_baseline("rmsnorm", ("x", "w"), self.eps),
                "torch.compile:rms_norm": torch_compiled_baseline(self.torch_rms, ("x", "w"))}


class LayerNorm(RowOperator):
    meaning = "norm"
    name = "layernorm"
    kernel_name = "layernorm"
    template = "layernorm.cu"
    description = "LayerNorm over the last axis with scale w and bias b, eps 1e-5"
    input_names = ("x", "w", "b")
    distributions = ("normal", "uniform", "offset")
    eps = 1e-5

    def reference(self, xp, inputs, shape):
        x, w, b = inputs["x"], inputs["w"], inputs["b"]
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        return {"y": (x - mean) / xp.sqrt(var + self.eps) * w + b}

    def atol(self, shape, dtype, rtol):
        return rtol * 1e-1

    def flops(self, shape):
        return 7.0 * shape[0] * shape[1]

    def baselines(self, dtype):
        eps = self.eps
        out = {}

        def composed(x, w, b):
            import cupy as cp

            xf = widen(cp, x)
            mean = xf.mean(axis=1, keepdims=True)
            var = ((xf - mean) ** 2).mean(axis=1, keepdims=True)
            return narrow(cp, (xf - mean) / cp.sqrt(var + eps) * widen(cp, w) + widen(cp, b), x)
        out["cupy:composed"] = cupy_baseline(composed, ("x", "w", "b"))
        out["torch:layer_norm"] = torch_baseline(self.torch_layer_norm, ("x", "w", "b"))
        return out

    def torch_layer_norm(self, t, x, w, b):
        return t.nn.functional.layer_norm(x, (x.shape[-1],), w, b, self.eps)

    def compiled_baselines(self, dtype):
        return {"triton:layer_norm": triton_baseline("layernorm", ("x", "w", "b"), self.eps),
                "torch.compile:layer_norm": torch_compiled_baseline(self.torch_layer_norm,
                                                                    ("x", "w", "b"))}
