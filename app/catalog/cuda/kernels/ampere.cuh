// Ampere-era (sm_80+) device helpers for KernelSwarm's tensor-core kernels, in inline PTX (mma.h
// does not build under NVRTC): cp.async global -> shared copies with commit/wait groups,
// ldmatrix (plain and .trans), mma.sync m16n8k16 with fp32 accumulation (fp16 or bf16 inputs,
// chosen by KS_DTYPE), and the XOR swizzle that keeps ldmatrix free of bank conflicts.
// Part of the harness prefix of the templates that use it (gemm_tc.cu): inlined after common.cuh,
// so LLM rewrites call these helpers instead of repeating them. Names live in namespace ks_ampere,
// so a kernel's own helpers of the same name never collide with them.
#include <cuda/std/cstdint>

namespace ks_ampere {

// A shared-memory pointer as the 32-bit address PTX's .shared state space expects.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy global -> shared; src_bytes < 16 zero-fills the rest (0: all zeros,
// the way out-of-range tiles are padded).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most kPending of this thread's committed groups are still in flight.
template <int kPending> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Four 8x8 b16 matrices from shared memory (lane i gives the row address of matrix i / 8).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// c[16x8] += a[16x16] * b[16x8], fp32 accumulators; a row-major, b column-major fragments.
// fp16 inputs when KS_DTYPE == 1, bf16 otherwise.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if KS_DTYPE == 1
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#endif
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Physical 16-byte chunk of logical chunk c in row r of a shared tile whose rows hold
// kChunks 16-byte chunks: with 8 or more chunks per row XOR the low three bits with r mod 8; with
// 4 (two rows share a 128-byte line) XOR with (r / 2) mod 4. Eight consecutive rows at one
// logical chunk then hit eight different 16-byte bank groups (conflict-free ldmatrix).
template <int kChunks> __device__ __forceinline__ int swizzle_chunk(int r, int c) {
    static_assert(kChunks == 4 || kChunks >= 8, "swizzle_chunk: 4 or at least 8 chunks per row");
    return kChunks >= 8 ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
}

}  // namespace ks_ampere
