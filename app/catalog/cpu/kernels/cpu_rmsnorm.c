/* RMSNorm fp32: y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + EPS) * w.
 * Tunables (-D): VEC simd length; ACC independent vectors of partial sums; ACC_DOUBLE 1 = accumulate the
 * squares in double; CHUNK rows per OpenMP work item; THREADS OpenMP threads. */
#include <math.h>
#include <stddef.h>

#ifndef VEC
#define VEC 8
#endif
#ifndef ACC
#define ACC 4
#endif
#ifndef ACC_DOUBLE
#define ACC_DOUBLE 0
#endif
#ifndef CHUNK
#define CHUNK 4
#endif
#ifndef THREADS
#define THREADS 1
#endif
#ifndef EPS
#define EPS 1e-6f
#endif

#if ACC_DOUBLE
typedef double acc_t;
#else
typedef float acc_t;
#endif

void ks_kernel(float *restrict y, const float *restrict x, const float *restrict w,
               long rows, long cols) {
#pragma omp parallel for num_threads(THREADS) schedule(static, CHUNK)
    for (long r = 0; r < rows; ++r) {
        const float *restrict xr = x + r * cols;
        float *restrict yr = y + r * cols;
        /* ACC vectors of VEC partial sums: each lane its own chain, so the loop vectorizes
         * without reassociating (ACC scalar sums left it one element per cycle). The square
         * stays a separate multiply (not fmaf): it is off the chain, which is then a 3-cycle
         * add instead of a 4-cycle FMA (measured: fmaf cost VEC=4 ACC=1 a third of its
         * in-core speed; bench/cpu_profile.md) */
        acc_t part[ACC * VEC];
        for (int a = 0; a < ACC * VEC; ++a) part[a] = 0;
        long j = 0;
        for (; j + ACC * VEC <= cols; j += ACC * VEC) {
#pragma omp simd
            for (int a = 0; a < ACC * VEC; ++a) part[a] += (acc_t)xr[j + a] * (acc_t)xr[j + a];
        }
        for (; j < cols; ++j) part[0] += (acc_t)xr[j] * (acc_t)xr[j];
        acc_t ss = 0;
        for (int a = 0; a < ACC * VEC; ++a) ss += part[a];
        const float scale = (float)(1.0 / sqrt((double)ss / (double)cols + (double)EPS));
#pragma omp simd simdlen(VEC)
        for (long k = 0; k < cols; ++k) yr[k] = xr[k] * scale * w[k];
    }
}
