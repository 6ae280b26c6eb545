"""app/catalog/cuda/kernels/hopper.cuh compiles with NVRTC for sm_90a (no GPU needed): a small
warp-specialised probe kernel calls every helper the header defines (TMA load + mbarrier handshake
between a producer and two consumer warpgroups, setmaxnreg, one wgmma), ptxas reports its
registers and no spills; plain sm_90 refuses it (issue 18)."""

from __future__ import annotations

import re

import pytest

from app.catalog.cuda.base import template_text
from app.gpu.cuda import nvrtc

pytest.importorskip("cupy_backends.cuda.libs.nvrtc")

HEADER = "hopper.cuh"

PROBE = r"""
#include <cuda_bf16.h>
using namespace ks_hopper;

extern "C" __global__ void __launch_bounds__(384, 1)
hopper_probe(const __grid_constant__ TensorMap map, float* out) {
    __shared__ alignas(1024) __nv_bfloat16 a_tile[64 * 16];
    __shared__ alignas(1024) __nv_bfloat16 b_tile[64 * 16];
    __shared__ unsigned long long full, empty;
    const int warpgroup = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        mbarrier_init(&full, 1);
        mbarrier_init(&empty, 256);
        fence_barrier_init();
        tma_prefetch_descriptor(&map);
        if (smem_addr(&full) % 8 != 0) out[0] = -1.f;   // mbarriers must be 8-byte aligned
    }
    __syncthreads();
    if (warpgroup == 0) {                      // producer: few registers, issues the TMA load
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            mbarrier_arrive_expect_tx(&full, sizeof(a_tile));
            tma_load_2d(a_tile, &map, &full, 0, blockIdx.x * 64);
        }
        mbarrier_wait(&empty, 0);
    } else {                                   // consumers: many registers, run the wgmma
        setmaxnreg_inc<232>();
        const int t = threadIdx.x - 128;
        for (int i = t; i < 64 * 16; i += 256) b_tile[i] = __float2bfloat16(out[i]);
        fence_proxy_async();                   // generic stores -> visible to wgmma's async proxy
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
        mbarrier_wait(&full, 0);
        float d[32];
        for (int i = 0; i < 32; ++i) d[i] = 0.f;
        for (int i = 0; i < 32; ++i) wgmma_fence_operand(d[i]);
        wgmma_fence();
        wgmma_m64n64k16_bf16(d, make_smem_desc(a_tile, 128, 256, 0),
                             make_smem_desc(b_tile, 128, 256, 0), 0);
        wgmma_commit();
        wgmma_wait<0>();
        for (int i = 0; i < 32; ++i) wgmma_fence_operand(d[i]);
        for (int i = 0; i < 32; ++i) out[(blockIdx.x * 256 + t) * 32 + i] = d[i];
        mbarrier_arrive(&empty);
        if (mbarrier_try_wait(&empty, 0)) out[t] += 1.f;
    }
    cluster_sync();
    if (threadIdx.x == 0) out[blockIdx.x] = static_cast<float>(cluster_ctarank());
}
"""


def probe_source() -> str:
    return template_text(HEADER) + PROBE


def helper_names(header: str) -> set[str]:
    return set(re.findall(r"__device__ __forceinline__ [\w:& ]+?\b(\w+)\(", header))


def test_the_probe_calls_every_helper_the_header_defines():
    names = helper_names(template_text(HEADER))
    assert {"mbarrier_init", "mbarrier_wait", "setmaxnreg_inc", "wgmma_commit",
            "wgmma_wait", "tma_load_2d"} <= names
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", PROBE))
    assert not missing, f"helpers the probe kernel does not exercise: {missing}"


def test_header_compiles_for_sm90a_without_spills(tmp_path):
    source = probe_source()
    assert nvrtc.target_arch("90", source) == "sm_90a"
    built = nvrtc.compile_source(source, "hopper_probe", "sm_90a", cache=tmp_path)
    res = built.resource()
    print(f"hopper_probe sm_90a: {res}")
    assert "for 'sm_90a'" in built.log
    assert res.registers > 0 and not res.spills, res
    assert res.registers <= 168                 # __launch_bounds__(384, 1): 65536 / 384


def test_plain_sm90_and_ampere_refuse_the_hopper_instructions(tmp_path):
    source = probe_source()
    with pytest.raises(nvrtc.CompileError):
        nvrtc.compile_source(source, "hopper_probe", "sm_90", cache=tmp_path)
    with pytest.raises(nvrtc.CompileError, match="9.0"):
        nvrtc.target_arch("80", source)
