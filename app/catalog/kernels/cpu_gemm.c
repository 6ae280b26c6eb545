/* GEMM fp32, row-major: C[M,N] = A[M,K] @ B[K,N].
 * Tunables (-D): BM, BN, BK block sizes; UM rows of C updated together (register blocking);
 * VEC simd length of the inner j loop; LOOP_ORDER 0 = i-k-j inside a block, 1 = k-i-j;
 * THREADS OpenMP threads. The host harness (fixed) calls ks_kernel with the signature below. */
#include <stddef.h>

#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 128
#endif
#ifndef UM
#define UM 4
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef LOOP_ORDER
#define LOOP_ORDER 0
#endif
#ifndef THREADS
#define THREADS 1
#endif

static inline long ks_min(long a, long b) { return a < b ? a : b; }

/* rows [i, i+UM) of the block, k in [k0, k1), j in [j0, j1) */
static inline void micro_rows(float *restrict C, const float *restrict A, const float *restrict B,
                              long i, long rows, long N, long K, long j0, long j1, long k0, long k1) {
    if (rows == UM) {
        for (long k = k0; k < k1; ++k) {
            float a[UM];
            for (int u = 0; u < UM; ++u) a[u] = A[(i + u) * K + k];
            const float *restrict b = B + k * N;
            for (int u = 0; u < UM; ++u) {
                float *restrict c = C + (i + u) * N;
                const float au = a[u];
#pragma omp simd simdlen(VEC)
                for (long j = j0; j < j1; ++j) c[j] += au * b[j];
            }
        }
    } else {
        for (long r = 0; r < rows; ++r) {
            float *restrict c = C + (i + r) * N;
            for (long k = k0; k < k1; ++k) {
                const float a = A[(i + r) * K + k];
                const float *restrict b = B + k * N;
#pragma omp simd simdlen(VEC)
                for (long j = j0; j < j1; ++j) c[j] += a * b[j];
            }
        }
    }
}

void ks_kernel(float *restrict C, const float *restrict A, const float *restrict B,
               long M, long N, long K) {
    const long mb = (M + BM - 1) / BM, nb = (N + BN - 1) / BN;
#pragma omp parallel for num_threads(THREADS) schedule(static)
    for (long blk = 0; blk < mb * nb; ++blk) {
        const long i0 = (blk / nb) * BM, j0 = (blk % nb) * BN;
        const long i1 = ks_min(i0 + BM, M), j1 = ks_min(j0 + BN, N);
        for (long i = i0; i < i1; ++i)
            for (long j = j0; j < j1; ++j) C[i * N + j] = 0.0f;
        for (long k0 = 0; k0 < K; k0 += BK) {
            const long k1 = ks_min(k0 + BK, K);
#if LOOP_ORDER == 0
            for (long i = i0; i < i1; i += UM)
                micro_rows(C, A, B, i, ks_min(UM, i1 - i), N, K, j0, j1, k0, k1);
#else
            for (long kk = k0; kk < k1; kk += 8) {
                const long kend = ks_min(kk + 8, k1);
                for (long i = i0; i < i1; i += UM)
                    micro_rows(C, A, B, i, ks_min(UM, i1 - i), N, K, j0, j1, kk, kend);
            }
#endif
        }
    }
}
