"""app/catalog/cuda/kernels/hopper.cuh compiles with NVRTC for sm_90a (no GPU needed): a small
warp-specialised probe kernel calls every helper the header defines (TMA load, multicast and
store + mbarrier handshake between a producer and two consumer warpgroups, remote arrivals,
named barriers, setmaxnreg, the wgmma shapes N = 64..256 in bf16 and fp16, B K- and MN-major),
ptxas reports its registers and no spills; plain sm_90 refuses it."""

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
        // every wgmma shape and both operand types / B majors, by name and through the dispatcher
        const unsigned long long da = make_smem_desc(a_tile, 16, 1024, 1);
        const unsigned long long db = make_smem_desc(b_tile, 8192, 1024, 1);
        float w[128];
        for (int i = 0; i < 128; ++i) w[i] = 0.f;
        wgmma_fence();
        wgmma_m64n64k16<false, 1>(*reinterpret_cast<float(*)[32]>(w), da, db, 1);
        wgmma_m64n128k16<true, 0>(*reinterpret_cast<float(*)[64]>(w), da, db, 1);
        wgmma_m64n192k16<false, 1>(*reinterpret_cast<float(*)[96]>(w), da, db, 1);
        wgmma_m64n256k16<true, 1>(w, da, db, 1);
        wgmma_m64k16<256, false, 1>(w, da, db, 0);
        wgmma_commit();
        wgmma_wait<0>();
        for (int i = 0; i < 128; ++i) wgmma_fence_operand(w[i]);
        for (int i = 0; i < 128; ++i) out[(blockIdx.x * 256 + t) * 128 + i] += w[i];
        named_barrier_sync(2, 256);
        if (t == 0) {                          // the epilogue's TMA store of the A tile
            fence_proxy_async();
            tma_store_2d(&map, a_tile, 0, blockIdx.x * 64);
            tma_store_commit();
            tma_store_wait_read<0>();
            tma_store_wait<0>();
        }
    }
    if (warpgroup == 0 && threadIdx.x == 0) {  // a cluster peer's view: multicast load, remote arrival
        mbarrier_arrive_expect_tx(&full, sizeof(b_tile));
        tma_load_2d_multicast(b_tile, &map, &full, 64, blockIdx.x * 64, 0x3);
        mbarrier_arrive_cluster(&empty, cluster_ctarank() ^ 1u);
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
