"""GEMM C[M, N] = A[M, K] @ B[K, N], row-major. float16/bfloat16 run on the tensor cores with fp32
accumulation: on Hopper (compute capability 9.0) the wgmma + TMA template (gemm_wgmma.cu:
warp-specialised producer/consumers, mbarrier ring, persistent, optional 2-CTA cluster with B
multicast), elsewhere the Ampere template (gemm_tc.cu: mma.sync + ldmatrix + cp.async);
`Gemm.for_device` picks by compute capability. float32 runs on the CUDA cores."""

from __future__ import annotations

import math

import numpy as np

from app.catalog.cuda.base import (
    ITEMSIZE,
    CudaOperator,
    Launch,
    TensorMapArg,
    ceil_div,
    draw,
    to_storage,
)
from app.catalog.cuda.baselines import cublas_gemm_ex, cupy_baseline, cupy_supports, torch_baseline
from app.core.space import SearchSpace

SHARED_LIMIT_SM90 = 232448  # 227 KB opt-in per block on Hopper; smaller devices reject at launch


class Gemm(CudaOperator):
    meaning = "matmul"
    name = "gemm"
    kernel_name = "gemm_tc"
    template = "gemm_tc.cu"
    description = "Matrix product C = A @ B (fp16/bf16 on tensor cores with fp32 accumulation, or fp32)"
    shape_doc = "[M, N, K]"
    input_names = ("a", "b")
    output_names = ("c",)
    distributions = ("normal", "uniform")
    device_specific = True

    tc_header = "ampere.cuh"  # the device helpers of the fp16/bf16 template (kernels/*.cuh)

    def template_for(self, dtype):
        return "gemm_f32.cu" if dtype == "float32" else self.template

    def headers_for(self, dtype):
        return () if dtype == "float32" else (self.tc_header,)

    def for_device(self, compute_capability):
        """sm_90 (H100/H200): the wgmma + TMA template; any other GPU: this (Ampere) one.
        Only 9.0 exactly: wgmma needs sm_90a, which Blackwell (10.x, 12.x) does not run."""
        return HOPPER_GEMM if _is_sm90(compute_capability) else self

    def kernel_for(self, dtype):
        return "gemm_f32" if dtype == "float32" else self.kernel_name

    @property
    def memory_bound(self):
        return False

    def space(self, dtype):
        self.check_dtype(dtype)
        if dtype == "float32":
            return SearchSpace(
                {"BM": [32, 64, 128], "BN": [32, 64, 128], "BK": [8, 16, 32], "TM": [2, 4, 8], "TN": [2, 4, 8]},
                restrictions=["(BM // TM) * (BN // TN) >= 64", "(BM // TM) * (BN // TN) <= 1024",
                              "(BK * (BM + 4) + BK * BN) * 4 <= 49152"])
        warps = "(BM // WM) * (BN // WN)"
        return SearchSpace(
            {"BM": [64, 128, 256], "BN": [64, 128, 256], "BK": [32, 64], "WM": [32, 64, 128],
             "WN": [32, 64], "STAGES": [2, 3, 4, 5], "GROUP_M": [1, 8]},
            restrictions=["BM % WM == 0", "BN % WN == 0", f"{warps} >= 2", f"{warps} <= 16",
                          "WM * WN <= 4096",
                          f"STAGES * (BM * BK + BK * BN) * 2 <= {SHARED_LIMIT_SM90}",
                          f"(BM * BK // 8) % ({warps} * 32) == 0",
                          f"(BK * BN // 8) % ({warps} * 32) == 0"])

    def recommended(self, dtype, shape):
        if dtype == "float32":
            return [{"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8},
                    {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4}]
        return [{"BM": 128, "BN": 256, "BK": 32, "WM": 64, "WN": 64, "STAGES": 3, "GROUP_M": 8},
                {"BM": 128, "BN": 128, "BK": 32, "WM": 64, "WN": 64, "STAGES": 4, "GROUP_M": 8},
                {"BM": 128, "BN": 128, "BK": 64, "WM": 64, "WN": 32, "STAGES": 3, "GROUP_M": 8}]

    def check_shape(self, shape, dtype):
        if len(shape) != 3:
            return f"gemm takes shapes [M, N, K], got {shape}"
        if dtype != "float32" and (shape[1] % 8 or shape[2] % 8):
            return f"fp16/bf16 gemm needs N and K multiples of 8 (16-byte rows), got N={shape[1]} K={shape[2]}"
        return None

    def threads(self, config, dtype):
        if dtype == "float32":
            return (config["BM"] // config["TM"]) * (config["BN"] // config["TN"])
        return (config["BM"] // config["WM"]) * (config["BN"] // config["WN"]) * 32

    def launch(self, config, shape, dtype):
        m, n, _ = shape
        if dtype == "float32":
            return Launch((ceil_div(n, config["BN"]), ceil_div(m, config["BM"]), 1),
                          (self.threads(config, dtype), 1, 1))
        smem = config["STAGES"] * (config["BM"] * config["BK"] + config["BK"] * config["BN"]) * 2
        return Launch((ceil_div(m, config["BM"]) * ceil_div(n, config["BN"]), 1, 1),
                      (self.threads(config, dtype), 1, 1), shared_bytes=smem)

    def static_check(self, config, shape, dtype):
        if dtype == "float32" and ceil_div(shape[0], config["BM"]) > 65535:
            return f"M={shape[0]} needs more than 65535 block rows with BM={config['BM']}"
        return None

    def make_inputs(self, xp, shape, dtype, rng, distribution):
        m, n, k = shape
        return {"a": to_storage(xp, draw(xp, rng, (m, k), distribution), dtype),
                "b": to_storage(xp, draw(xp, rng, (k, n), distribution), dtype)}

    def output_shapes(self, shape):
        return {"c": (shape[0], shape[1])}

    def kernel_args(self, config, inputs, outputs, shape):
        m, n, k = shape
        return (inputs["a"], inputs["b"], outputs["c"], np.int32(m), np.int32(n), np.int32(k))

    def reference(self, xp, inputs, shape):
        return {"c": inputs["a"] @ inputs["b"]}

    def atol(self, shape, dtype, rtol):
        k = shape[2]
        if dtype == "float32":
            return 2e-6 * k
        return 1e-3 * math.sqrt(k)  # outputs have magnitude ~ sqrt(K)

    def input_shapes(self, shape):
        m, n, k = shape
        return {"a": (m, k), "b": (k, n)}

    def small_shapes(self, shape, dtype):
        if dtype == "float32":
            return [[1, 1, 1], [33, 65, 17], [130, 70, 129]]
        return [[1, 8, 8], [72, 136, 40], [203, 264, 328]]

    def flops(self, shape):
        m, n, k = shape
        return 2.0 * m * n * k

    def bytes_moved(self, shape, dtype):
        m, n, k = shape
        return ITEMSIZE[dtype] * (m * k + k * n + m * n)

    def baselines(self, dtype):
        out = {}
        if cupy_supports(dtype):
            def matmul(a, b):
                import cupy as cp

                return cp.matmul(a, b)
            out["cublas:cupy.matmul"] = cupy_baseline(matmul, ("a", "b"), "c")
        if dtype in ("float16", "bfloat16"):
            out["cublas:gemmEx"] = cublas_gemm_ex(dtype)
        out["torch:matmul"] = torch_baseline(lambda t, a, b: t.matmul(a, b), ("a", "b"), "c")
        return out


def _is_sm90(compute_capability):
    return str(compute_capability).replace("sm_", "").replace(".", "").rstrip("a") == "90"


WGMMA_PARAMS = {"BM": [64, 128, 256], "BN": [64, 128, 192, 256], "BK": [64, 128],
                "STAGES": [2, 3, 4, 5, 6, 7, 8], "CONSUMERS": [1, 2], "CLUSTER": [1, 2],
                "EPILOGUE": [0, 1], "GROUP_M": [1, 8, 16]}


def wgmma_shared_bytes(config):
    """Dynamic shared memory of gemm_wgmma.cu: the stage ring, the epilogue tile (EPILOGUE 1),
    the full/empty mbarriers and 1 KB of slack to align the ring on 1024 bytes (128B swizzle)."""
    c = config
    ring = c["STAGES"] * (c["BM"] * c["BK"] + c["BK"] * c["BN"]) * 2
    return ring + (c["BM"] * c["BN"] * 2 if c["EPILOGUE"] else 0) + 16 * c["STAGES"] + 1024


class HopperGemm(Gemm):
    """The same operator on Hopper: fp16/bf16 through gemm_wgmma.cu (sm_90a), float32 as before.
    Restrictions mirror the template's static_asserts and the 227 KB shared-memory limit."""

    kernel_name = "gemm_wgmma"
    template = "gemm_wgmma.cu"
    tc_header = "hopper.cuh"

    def for_device(self, compute_capability):
        return self if _is_sm90(compute_capability) else GEMM

    def space(self, dtype):
        self.check_dtype(dtype)
        if dtype == "float32":
            return super().space(dtype)
        smem = ("STAGES * (BM * BK + BK * BN) * 2 + EPILOGUE * BM * BN * 2 + 16 * STAGES + 1024 "
                f"<= {SHARED_LIMIT_SM90}")
        return SearchSpace(dict(WGMMA_PARAMS), restrictions=[
            "BM % (64 * CONSUMERS) == 0",
            "(BM // CONSUMERS // 64) * BN // 2 <= 128",  # fp32 accumulators per consumer thread
            "CLUSTER == 1 or (BN // 64) % 2 == 0",       # the cluster pair splits B's 64-column boxes
            smem])

    def recommended(self, dtype, shape):
        if dtype == "float32":
            return super().recommended(dtype, shape)
        base = {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "CONSUMERS": 2, "CLUSTER": 1,
                "EPILOGUE": 0, "GROUP_M": 8}
        return [base,
                {**base, "CLUSTER": 2},
                {**base, "STAGES": 3, "EPILOGUE": 1},
                {**base, "BN": 128, "STAGES": 6},
                {**base, "BM": 256, "BN": 128}]

    def threads(self, config, dtype):
        if dtype == "float32":
            return super().threads(config, dtype)
        return 128 * (config["CONSUMERS"] + 1)

    def launch(self, config, shape, dtype):
        if dtype == "float32":
            return super().launch(config, shape, dtype)
        m, n, _ = shape
        cluster = config["CLUSTER"]
        tiles = ceil_div(ceil_div(m, config["BM"]), cluster) * cluster * ceil_div(n, config["BN"])
        return Launch((tiles, 1, 1), (self.threads(config, dtype), 1, 1),
                      shared_bytes=wgmma_shared_bytes(config), cluster=(cluster, 1, 1), persistent=True)

    def kernel_args(self, config, inputs, outputs, shape):
        if "EPILOGUE" not in config:  # float32 (the CUDA-core template)
            return super().kernel_args(config, inputs, outputs, shape)
        m, n, k = shape
        a, b, c = inputs["a"], inputs["b"], outputs["c"]
        dtype = "float16" if a.dtype == np.float16 else "bfloat16"  # bf16 is stored as uint16 bits
        wg_m = config["BM"] // config["CONSUMERS"]
        return (TensorMapArg(a, (64, config["BM"]), dtype),
                TensorMapArg(b, (64, config["BK"]), dtype),
                TensorMapArg(c, (64, wg_m), dtype),
                c, np.int32(m), np.int32(n), np.int32(k))


class MmaSyncGemm(Gemm):
    """The Ampere (mma.sync + cp.async) template on every GPU, Hopper included: the fallback
    when the wgmma template fails on a Hopper GPU (its configurations are verified like any
    other; `gemm` on sm_90 searches only wgmma ones), and the reference the wgmma template is
    measured against in the GPU benchmark."""

    name = "gemm_mma"
    device_specific = False
    description = ("Matrix product C = A @ B on the mma.sync template on every GPU (gemm picks "
                   "wgmma + TMA on sm_90)")

    def for_device(self, compute_capability):
        return self


GEMM = Gemm()
HOPPER_GEMM = HopperGemm()
