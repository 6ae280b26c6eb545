/* Row softmax fp32: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
 * Tunables (-D): VEC simd length; ACC independent accumulators for the max and sum reductions
 * (ONLINE 0: ACC vectors of VEC partial maxima and sums, each lane its own chain; ONLINE 1: ACC
 * scalar chains); ONLINE 1 = one pass computing max and sum together (rescaling), 0 = separate
 * max pass; CHUNK rows per OpenMP work item; THREADS OpenMP threads; EXP_IMPL 0 = libm expf,
 * 1 = an inlined polynomial exp (Cephes expf, about 1 ulp) that the compiler can vectorise.
 *
 * Profile (bench/cpu_profile.md): C11 mode compiles a * b + c as a multiply and a dependent add
 * (-ffp-contract=off), so the exp polynomial was a chain of 14 dependent 3-cycle operations;
 * the multiply-adds are written as fmaf where the machine has FMA (one rounding less, same
 * accuracy bound). The max and sum reductions had one vector accumulator whatever ACC said. */
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

#if defined(__FMA__) || defined(__aarch64__)
#define MADD(a, b, c) fmaf(a, b, c)
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

#if EXP_IMPL
/* exp(x) for x <= 0 (arguments here are x - max): range reduction by ln 2, degree-5
 * polynomial (Cephes expf, about 1 ulp), scale by 2^n built from the exponent bits. Branch
 * free so that it vectorises: the clamp to -87 (results below 1.7e-38, well inside any
 * tolerance) is an unsigned min on the bit pattern, which orders non-positive floats by
 * magnitude (and sends -inf and NaN to the clamp too). n = round(x / ln 2) is read from the
 * low bits of x / ln 2 + 1.5 * 2^23 (no float-int conversions), and the polynomial is
 * evaluated in Estrin's scheme: a dependency chain of 4 multiply-adds instead of 7, so that
 * more vectors are in flight (the chain's length, not the arithmetic, set the speed). */
static inline float ks_exp(float x) {
    union { float f; unsigned int u; } in = { .f = x };
    in.u = in.u < 0xC2AE0000u ? in.u : 0xC2AE0000u; /* 0xC2AE0000 is -87.0f */
    x = in.f;
    union { float f; int i; } t = { .f = MADD(x, 1.44269504088896341f, 12582912.0f) };
    const float n = t.f - 12582912.0f; /* round(x / ln 2) */
    const float r = MADD(n, 2.12194440e-4f, MADD(n, -0.693359375f, x));
    const float r2 = r * r;
    const float a = MADD(1.6666665459e-1f, r, 5.0000001201e-1f);
    const float b = MADD(8.3334519073e-3f, r, 4.1665795894e-2f);
    const float c = MADD(1.9875691500e-4f, r, 1.3981999507e-3f);
    const float p = MADD(MADD(c, r2, b), r2, a);
    const float y = MADD(p, r2, r) + 1.0f;
    union { int i; float f; } scale = { .i = (t.i - 0x4B400000 + 127) << 23 };
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
            else sm[a] += v == -INFINITY ? 0.0f : ks_exp(v - mx[a]); /* masked: never -inf - -inf */
        }
    for (; j < n; ++j) {
        const float v = x[j];
        if (v > mx[0]) { sm[0] = sm[0] * ks_exp(mx[0] - v) + 1.0f; mx[0] = v; }
        else sm[0] += v == -INFINITY ? 0.0f : ks_exp(v - mx[0]);
    }
    float m = mx[0];
    for (int a = 1; a < ACC; ++a) m = mx[a] > m ? mx[a] : m;
    float s = 0.0f;
    for (int a = 0; a < ACC; ++a) s += (mx[a] == -INFINITY) ? 0.0f : sm[a] * ks_exp(mx[a] - m);
#else
    /* ACC vectors of VEC lanes: each lane its own chain (vmaxps and vaddps are 2-3 cycles) */
    float pm[ACC * VEC], ps[ACC * VEC];
    for (int a = 0; a < ACC * VEC; ++a) { pm[a] = -INFINITY; ps[a] = 0.0f; }
    (void)mx; (void)sm;
    for (; j + ACC * VEC <= n; j += ACC * VEC) {
#pragma omp simd simdlen(VEC)
        for (int a = 0; a < ACC * VEC; ++a) pm[a] = x[j + a] > pm[a] ? x[j + a] : pm[a];
    }
    for (; j < n; ++j) pm[0] = x[j] > pm[0] ? x[j] : pm[0];
    float m = pm[0];
    for (int a = 1; a < ACC * VEC; ++a) m = pm[a] > m ? pm[a] : m;
    j = 0;
    for (; j + ACC * VEC <= n; j += ACC * VEC) {
#pragma omp simd simdlen(VEC)
        for (int a = 0; a < ACC * VEC; ++a) {
            const float e = ks_exp(x[j + a] - m);
            y[j + a] = e;
            ps[a] += e;
        }
    }
    for (; j < n; ++j) { const float e = ks_exp(x[j] - m); y[j] = e; ps[0] += e; }
    float s = 0.0f;
    for (int a = 0; a < ACC * VEC; ++a) s += ps[a];
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
