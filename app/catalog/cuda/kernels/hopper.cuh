// Hopper (sm_90a) device helpers for KernelSwarm's CUDA kernels, in inline PTX: mbarriers, fences,
// register reallocation (setmaxnreg), the wgmma fence/commit/wait protocol and one wgmma shape,
// the shared-memory matrix descriptor wgmma reads, TMA tile loads and cluster barriers.
// Inlined into a kernel's source by whoever uses it (as common.cuh is), so the hashed source is
// the source that runs. Hopper only: compile for sm_90a (plain sm_90 rejects wgmma/setmaxnreg,
// and the harness's target_arch picks sm_90a as soon as a source contains them, this header
// included). Names live in namespace ks_hopper so they never collide with a template's own
// helpers (gemm_tc.cu has smem_u32 etc.). No <cstdint> under NVRTC: plain unsigned types.
#pragma once

namespace ks_hopper {

// A shared-memory pointer as the 32-bit address PTX's .shared state space expects.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ---- mbarrier (a 64-bit word in shared memory; phases flip when the count and tx bytes drain) --
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals)
                 : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA) and the other CTAs of a cluster.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ unsigned long long mbarrier_arrive(unsigned long long* bar) {
    unsigned long long state;
    asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n" : "=l"(state) : "r"(smem_addr(bar))
                 : "memory");
    return state;
}
// The producer's arrival that also announces how many bytes TMA will deliver to this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// True once the phase with this parity has completed (one bounded hardware wait, no spin).
__device__ __forceinline__ bool mbarrier_try_wait(unsigned long long* bar, unsigned parity) {
    unsigned done;
    asm volatile("{\n .reg .pred p;\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
    return done != 0;
}
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
    while (!mbarrier_try_wait(bar, parity)) {
    }
}

// ---- fences --------------------------------------------------------------------------------
// Generic-proxy writes to shared memory (st.shared) made visible to the async proxy (wgmma, TMA
// store) before they read them.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- register reallocation between warpgroups (needs __launch_bounds__(N, 1) to take effect) --
template <int kRegs> __device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs> __device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- wgmma protocol: fence before the first wgmma that reads registers/shared memory written
// since, commit the batch as a group, wait until at most kPending groups are in flight -----------
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across the asynchronous wgmma.
__device__ __forceinline__ void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Shared-memory matrix descriptor (PTX ISA "matrix descriptor format"): start address, leading
// and stride byte offsets (all in 16-byte units, 14 bits each) and the swizzle mode
// (0 none, 1 128B, 2 64B, 3 32B) in bits 62-63.
__device__ __forceinline__ unsigned long long make_smem_desc(const void* tile, unsigned lead_bytes,
                                                             unsigned stride_bytes, unsigned swizzle) {
    unsigned long long desc = 0;
    desc |= static_cast<unsigned long long>((smem_addr(tile) & 0x3FFFF) >> 4);
    desc |= static_cast<unsigned long long>((lead_bytes & 0x3FFFF) >> 4) << 16;
    desc |= static_cast<unsigned long long>((stride_bytes & 0x3FFFF) >> 4) << 32;
    desc |= static_cast<unsigned long long>(swizzle & 0x3) << 62;
    return desc;
}

// D[64x64] (+)= A[64x16] * B[16x64], bf16 inputs from shared memory, fp32 accumulators (32 per
// thread of the warpgroup). accumulate = 0 overwrites D. A and B K-major (no transpose).
__device__ __forceinline__ void wgmma_m64n64k16_bf16(float (&d)[32], unsigned long long desc_a,
                                                     unsigned long long desc_b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16\n"
        " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
        "  %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},\n"
        " %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// ---- TMA (descriptors made on the host with cuTensorMapEncodeTiled, passed by value as a
// `const __grid_constant__ CUtensorMap` kernel argument; cuda.h is unavailable under NVRTC) -----
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

__device__ __forceinline__ void tma_prefetch_descriptor(const TensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map))
                 : "memory");
}
// Loads the 2-D box at (x = inner coordinate, y) into shared memory; completion is counted as
// transaction bytes on `bar` (arm it with mbarrier_arrive_expect_tx).
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, unsigned long long* bar,
                                            int x, int y) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];\n"
        ::"r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)),
          "r"(x), "r"(y)
        : "memory");
}

// ---- clusters ------------------------------------------------------------------------------
__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}

}  // namespace ks_hopper
