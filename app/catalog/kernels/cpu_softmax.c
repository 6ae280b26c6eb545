/* Row softmax fp32: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
 * Tunables (-D): VEC simd length; ACC independent accumulators for the max and sum reductions;
 * ONLINE 1 = one pass computing max and sum together (rescaling), 0 = separate max pass;
 * CHUNK rows per OpenMP work item; THREADS OpenMP threads; EXP_IMPL 0 = libm expf,
 * 1 = an inlined polynomial exp (Cephes expf, about 1 ulp) that the compiler can vectorise. */
#include <math.h>
#include <stddef.h>

#ifndef VEC
#define VEC 8
#endif
#ifndef ACC
#define ACC 4
#endif
#ifndef ONLINE
#define ONLINE 0
#endif
#ifndef CHUNK
#define CHUNK 4
#endif
#ifndef THREADS
#define THREADS 1
#endif
#ifndef EXP_IMPL
#define EXP_IMPL 0
#endif

#if EXP_IMPL
/* exp(x) for x <= 0 (arguments here are x - max): range reduction by ln 2, degree-5
 * polynomial (Cephes expf, about 1 ulp), scale by 2^n built from the exponent bits. Branch
 * free so that it vectorises: the clamp to -87 (results below 1.7e-38, well inside any
 * tolerance) is an unsigned min on the bit pattern, which orders non-positive floats by
 * magnitude (and sends -inf and NaN to the clamp too). */
static inline float ks_exp(float x) {
    union { float f; unsigned int u; } in = { .f = x };
    in.u = in.u < 0xC2AE0000u ? in.u : 0xC2AE0000u; /* 0xC2AE0000 is -87.0f */
    x = in.f;
    const int ni = (int)(x * 1.44269504088896341f - 0.5f); /* round(x / ln 2), x <= 0 */
    const float n = (float)ni;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    union { int i; float f; } scale = { .i = (ni + 127) << 23 };
    return y * scale.f;
}
#else
#define ks_exp expf
#endif

static void softmax_row(float *restrict y, const float *restrict x, long n) {
    float mx[ACC], sm[ACC];
    for (int a = 0; a < ACC; ++a) { mx[a] = -INFINITY; sm[a] = 0.0f; }
    (void)sm;
    long j = 0;
#if ONLINE
    for (; j + ACC <= n; j += ACC)
        for (int a = 0; a < ACC; ++a) {
            const float v = x[j + a];
            if (v > mx[a]) { sm[a] = sm[a] * ks_exp(mx[a] - v) + 1.0f; mx[a] = v; }
            else sm[a] += ks_exp(v - mx[a]);
        }
    for (; j < n; ++j) {
        const float v = x[j];
        if (v > mx[0]) { sm[0] = sm[0] * ks_exp(mx[0] - v) + 1.0f; mx[0] = v; }
        else sm[0] += ks_exp(v - mx[0]);
    }
    float m = mx[0];
    for (int a = 1; a < ACC; ++a) m = mx[a] > m ? mx[a] : m;
    float s = 0.0f;
    for (int a = 0; a < ACC; ++a) s += (mx[a] == -INFINITY) ? 0.0f : sm[a] * ks_exp(mx[a] - m);
#else
    (void)j;
    float m = -INFINITY;
#pragma omp simd simdlen(VEC) reduction(max : m)
    for (long k = 0; k < n; ++k) m = x[k] > m ? x[k] : m;
    float s = 0.0f;
#pragma omp simd simdlen(VEC) reduction(+ : s)
    for (long k = 0; k < n; ++k) { const float e = ks_exp(x[k] - m); y[k] = e; s += e; }
#endif
    const float inv = 1.0f / s;
#if ONLINE
#pragma omp simd simdlen(VEC)
    for (long k = 0; k < n; ++k) y[k] = ks_exp(x[k] - m) * inv;
#else
#pragma omp simd simdlen(VEC)
    for (long k = 0; k < n; ++k) y[k] *= inv;
#endif
}

void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
#pragma omp parallel for num_threads(THREADS) schedule(static, CHUNK)
    for (long r = 0; r < rows; ++r) softmax_row(y + r * cols, x + r * cols, cols);
}
