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

/* Each reduction keeps STAT_LANES partial sums (each lane its own chain, 2 AVX-512 or 4 AVX2
 * vectors of doubles for VEC <= 16): with one accumulator per sum (omp simd reduction) the
 * loop ran at the latency of a double add per VEC elements (bench/cpu_profile.md); more
 * lanes than that spill the 16 AVX2 registers. The squares are multiply-adds where the
 * machine has FMA (C11 mode does not contract a * b + c). */
#define STAT_LANES (VEC > 16 ? VEC : 16)
#if defined(__FMA__) || defined(__aarch64__)
#define SQ_ADD(s, v) fma(v, v, s)
#else
#define SQ_ADD(s, v) ((s) + (v) * (v))
#endif

static void layernorm_row(float *restrict y, const float *restrict x, const float *restrict w,
                          const float *restrict b, long n) {
    double ps[STAT_LANES], var;
    for (int a = 0; a < STAT_LANES; ++a) ps[a] = 0.0;
    long j = 0;
#if STATS == 1
    double pq[STAT_LANES];
    for (int a = 0; a < STAT_LANES; ++a) pq[a] = 0.0;
    for (; j + STAT_LANES <= n; j += STAT_LANES) {
#pragma omp simd simdlen(VEC)
        for (int a = 0; a < STAT_LANES; ++a) {
            const double v = x[j + a];
            ps[a] += v;
            pq[a] = SQ_ADD(pq[a], v);
        }
    }
    for (; j < n; ++j) {
        const double v = x[j];
        ps[0] += v;
        pq[0] = SQ_ADD(pq[0], v);
    }
    double sum = 0.0, sq = 0.0;
    for (int a = 0; a < STAT_LANES; ++a) { sum += ps[a]; sq += pq[a]; }
    const double mean = sum / (double)n;
    var = sq / (double)n - mean * mean;
    var = var > 0.0 ? var : 0.0;
#else
    for (; j + STAT_LANES <= n; j += STAT_LANES) {
#pragma omp simd simdlen(VEC)
        for (int a = 0; a < STAT_LANES; ++a) ps[a] += x[j + a];
    }
    for (; j < n; ++j) ps[0] += x[j];
    double sum = 0.0;
    for (int a = 0; a < STAT_LANES; ++a) sum += ps[a];
    const double mean = sum / (double)n;
    for (int a = 0; a < STAT_LANES; ++a) ps[a] = 0.0;
    for (j = 0; j + STAT_LANES <= n; j += STAT_LANES) {
#pragma omp simd simdlen(VEC)
        for (int a = 0; a < STAT_LANES; ++a) {
            const double d = (double)x[j + a] - mean;
            ps[a] = SQ_ADD(ps[a], d);
        }
    }
    for (; j < n; ++j) {
        const double d = (double)x[j] - mean;
        ps[0] = SQ_ADD(ps[0], d);
    }
    double sq = 0.0;
    for (int a = 0; a < STAT_LANES; ++a) sq += ps[a];
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
