/* LayerNorm fp32: y[r, :] = (x[r, :] - mean) / sqrt(var + EPS) * w + b, over each row.
 * Statistics accumulate in double (the mean of a constant row is then exact, so its output is
 * exactly b). Tunables (-D): VEC simd length; STATS 0 = two passes (mean, then centered sum of
 * squares), 1 = one pass (sum and sum of squares together: one read of the row less);
 * CHUNK rows per OpenMP work item; THREADS OpenMP threads. */
#include <math.h>
#include <stddef.h>

#ifndef VEC
#define VEC 8
#endif
#ifndef STATS
#define STATS 1
#endif
#ifndef CHUNK
#define CHUNK 4
#endif
#ifndef THREADS
#define THREADS 1
#endif
#ifndef EPS
#define EPS 1e-5
#endif

static void layernorm_row(float *restrict y, const float *restrict x, const float *restrict w,
                          const float *restrict b, long n) {
    double sum = 0.0, var;
#if STATS == 1
    double sq = 0.0;
#pragma omp simd simdlen(VEC) reduction(+ : sum, sq)
    for (long k = 0; k < n; ++k) {
        const double v = x[k];
        sum += v;
        sq += v * v;
    }
    const double mean = sum / (double)n;
    var = sq / (double)n - mean * mean;
    var = var > 0.0 ? var : 0.0;
#else
#pragma omp simd simdlen(VEC) reduction(+ : sum)
    for (long k = 0; k < n; ++k) sum += x[k];
    const double mean = sum / (double)n;
    double sq = 0.0;
#pragma omp simd simdlen(VEC) reduction(+ : sq)
    for (long k = 0; k < n; ++k) {
        const double d = (double)x[k] - mean;
        sq += d * d;
    }
    var = sq / (double)n;
#endif
    const float m = (float)mean;
    const float rstd = (float)(1.0 / sqrt(var + EPS));
#pragma omp simd simdlen(VEC)
    for (long k = 0; k < n; ++k) y[k] = (x[k] - m) * rstd * w[k] + b[k];
}

void ks_kernel(float *restrict y, const float *restrict x, const float *restrict w,
               const float *restrict b, long rows, long cols) {
#pragma omp parallel for num_threads(THREADS) schedule(static, CHUNK)
    for (long r = 0; r < rows; ++r) layernorm_row(y + r * cols, x + r * cols, w, b, cols);
}
