"""Matrix transpose: out[cols, rows] = in[rows, cols]^T, through a shared-memory tile."""

from __future__ import annotations

import numpy as np

from app.catalog.cuda.base import ITEMSIZE, CudaOperator, Launch, ceil_div, draw, to_storage
from app.catalog.cuda.baselines import cupy_baseline, torch_baseline
from app.catalog.cuda.compiled_baselines import torch_compiled_baseline
from app.core.space import SearchSpace


class Transpose(CudaOperator):
    meaning = "movement"  # compared bit for bit
    name = "transpose"
    kernel_name = "transpose"
    template = "transpose.cu"
    description = "Out-of-place matrix transpose"
    input_names = ("x",)
    distributions = ("normal", "uniform")

    def space(self, dtype):
        self.check_dtype(dtype)
        return SearchSpace({"TILE": [16, 32, 64], "BLOCK_ROWS": [2, 4, 8, 16, 32],
                            "PAD": [0, 1], "SMEM": [0, 1]},
                           restrictions=["BLOCK_ROWS <= TILE", "TILE * BLOCK_ROWS <= 1024",
                                         "TILE * BLOCK_ROWS >= 64"])

    def recommended(self, dtype, shape):
        return [{"TILE": 32, "BLOCK_ROWS": 8, "PAD": 1, "SMEM": 1},
                {"TILE": 64, "BLOCK_ROWS": 16, "PAD": 1, "SMEM": 1}]

    def launch(self, config, shape, dtype):
        t = config["TILE"]
        return Launch((ceil_div(shape[1], t), ceil_div(shape[0], t), 1), (t, config["BLOCK_ROWS"], 1))

    def check_shape(self, shape, dtype):
        problem = super().check_shape(shape, dtype)
        if problem:
            return problem
        if ceil_div(shape[0], 16) > 65535:
            return f"{shape[0]} rows is more than this transpose's grid can cover"
        return None

    def make_inputs(self, xp, shape, dtype, rng, distribution):
        return {"x": to_storage(xp, draw(xp, rng, shape, distribution), dtype)}

    def output_shapes(self, shape):
        return {"y": (shape[1], shape[0])}

    def kernel_args(self, config, inputs, outputs, shape):
        return (inputs["x"], outputs["y"], np.int32(shape[0]), np.int32(shape[1]))

    def reference(self, xp, inputs, shape):
        return {"y": xp.ascontiguousarray(inputs["x"].T)}

    def rtol_growth(self, shape, dtype):
        return 0.0  # a transpose moves bits: exact

    def atol(self, shape, dtype, rtol):
        return 0.0

    def small_shapes(self, shape, dtype):
        return [[1, 1], [33, 65], [130, 7]]

    def bytes_moved(self, shape, dtype):
        return 2.0 * ITEMSIZE[dtype] * shape[0] * shape[1]

    def baselines(self, dtype):
        def composed(x):
            import cupy as cp

            return cp.ascontiguousarray(x.T)
        return {"cupy:ascontiguousarray": cupy_baseline(composed, ("x",)),
                "torch:contiguous": torch_baseline(transpose_torch, ("x",))}

    def compiled_baselines(self, dtype):
        # Inductor writes a tiled transpose, where torch's eager copy is a generic strided one
        return {"torch.compile:contiguous": torch_compiled_baseline(transpose_torch, ("x",))}


def transpose_torch(t, x):
    return x.t().contiguous()
