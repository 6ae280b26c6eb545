// Shared helpers for KernelSwarm's CUDA templates (template parameters are kCamel so that
// the configuration's #defines, all upper case, never collide with them). Inlined into each kernel's source by the
// catalog (so the source that is hashed is the source that runs). KS_DTYPE: 0 float, 1 half,
// 2 bfloat16.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef CUDART_INF_F
#define CUDART_INF_F __int_as_float(0x7f800000)
#endif

#if KS_DTYPE == 0
typedef float T;
#elif KS_DTYPE == 1
typedef __half T;
#else
typedef __nv_bfloat16 T;
#endif

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename U> __device__ __forceinline__ U from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// N elements of T moved as one aligned access (up to 16 bytes: ld.global.v4).
template <int N> struct alignas(sizeof(T) * N) Vec { T v[N]; };

template <int WIDTH> __device__ __forceinline__ float group_max(float v) {
#pragma unroll
    for (int o = WIDTH / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <int WIDTH> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
    for (int o = WIDTH / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Reduce across the TPR threads that share a row. Above one warp, partial results go through
// shared memory (red: RPB * WPR floats); every thread of the block must call it.
template <int kTpr, int kRpb, bool kMax>
__device__ __forceinline__ float row_reduce(float v, float* red) {
    constexpr int W = kTpr < 32 ? kTpr : 32;
    v = kMax ? group_max<W>(v) : group_sum<W>(v);
    if constexpr (kTpr > 32) {
        constexpr int kWpr = kTpr / 32;
        const int local_row = threadIdx.x / kTpr;
        const int warp_in_row = (threadIdx.x % kTpr) / 32;
        if ((threadIdx.x & 31) == 0) red[local_row * kWpr + warp_in_row] = v;
        __syncthreads();
        v = red[local_row * kWpr];
#pragma unroll
        for (int w = 1; w < kWpr; ++w) v = kMax ? fmaxf(v, red[local_row * kWpr + w]) : v + red[local_row * kWpr + w];
        __syncthreads();  // red may be reused by the next reduction
    }
    return v;
}
