/* Fused bias + exact GELU fp32: y[r, c] = 0.5 z (1 + erf(z / sqrt 2)), z = x[r, c] + b[c].
 * Tunables (-D): VEC simd length; ERF_IMPL 0 = libm erff, 1 = an inlined branch-free erf
 * (Abramowitz-Stegun 7.1.26, absolute error below 1.5e-7, with a polynomial exp) that the
 * compiler can vectorise, 2 = an inlined rational erf on [-4, 4] (no exp; absolute error
 * about 3e-7 near |erf| = 1); CHUNK rows per OpenMP work item; THREADS OpenMP threads. */
#include <math.h>
#include <stddef.h>

#ifndef VEC
#define VEC 8
#endif
#ifndef ERF_IMPL
#define ERF_IMPL 1
#endif
#ifndef CHUNK
#define CHUNK 4
#endif
#ifndef THREADS
#define THREADS 1
#endif

/* C11 mode compiles a * b + c as a multiply and a dependent add (-ffp-contract=off): the
 * multiply-adds of the polynomials are written as fmaf where the machine has FMA (profile in
 * bench/cpu_profile.md: the chain of 3-cycle operations, not the arithmetic, set the speed) */
#if defined(__FMA__) || defined(__aarch64__)
#define MADD(a, b, c) fmaf(a, b, c)
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

#if ERF_IMPL == 1
/* exp(x) for x <= 0: range reduction by ln 2, Cephes expf polynomial, 2^n from the exponent
 * bits; arguments below -87 are clamped (an unsigned min on the bit pattern of x <= 0).
 * n = round(x / ln 2) is read from the low bits of x / ln 2 + 1.5 * 2^23, and the polynomial
 * is evaluated in Estrin's scheme (a chain of 4 multiply-adds instead of 7). */
static inline float ks_exp_neg(float x) {
    union { float f; unsigned int u; } in = { .f = x };
    in.u = in.u < 0xC2AE0000u ? in.u : 0xC2AE0000u; /* 0xC2AE0000 is -87.0f */
    x = in.f;
    union { float f; int i; } t = { .f = MADD(x, 1.44269504088896341f, 12582912.0f) };
    const float n = t.f - 12582912.0f;
    const float r = MADD(n, 2.12194440e-4f, MADD(n, -0.693359375f, x));
    const float r2 = r * r;
    const float a = MADD(1.6666665459e-1f, r, 5.0000001201e-1f);
    const float b = MADD(8.3334519073e-3f, r, 4.1665795894e-2f);
    const float c = MADD(1.9875691500e-4f, r, 1.3981999507e-3f);
    const float p = MADD(MADD(c, r2, b), r2, a);
    const float e = MADD(p, r2, r) + 1.0f;
    union { int i; float f; } scale = { .i = (t.i - 0x4B400000 + 127) << 23 };
    return e * scale.f;
}

static inline float ks_erf(float x) {
    const float a = fabsf(x);
    const float t = 1.0f / MADD(0.3275911f, a, 1.0f);
    const float t2 = t * t;
    /* ((((a5 t + a4) t + a3) t + a2) t + a1) t, Estrin's scheme */
    const float q = MADD(MADD(1.061405429f, t, -1.453152027f), t2, MADD(1.421413741f, t, -0.284496736f));
    const float p = MADD(q, t2, 0.254829592f * t);
    const float e = MADD(-p, ks_exp_neg(-a * a), 1.0f);
    return copysignf(e, x);
}
#elif ERF_IMPL == 2
/* erf(x) = x P(x^2) / Q(x^2) on x clamped to [-4, 4] (beyond it erf is +-1 in fp32): the
 * rational minimax fit of Eigen's and XLA's float erf (P degree 6 and Q degree 4 in x^2, a few
 * ulp). One division and 13 multiply-adds, no exp: about half the operations of
 * ERF_IMPL 1, whose exp alone cost as much as the rest (bench/cpu_profile.md). */
static inline float ks_erf(float x) {
    /* the clamp as an unsigned min on the bit pattern of |x| (float comparisons left the
     * AVX2 build scalar: "control flow in loop") */
    union { float f; unsigned int u; } a = { .f = fabsf(x) };
    a.u = a.u < 0x40800000u ? a.u : 0x40800000u; /* 0x40800000 is 4.0f */
    x = copysignf(a.f, x);
    const float x2 = x * x;
    float p = MADD(x2, -2.72614225801306e-10f, 2.77068142495902e-08f);
    p = MADD(x2, p, -2.10102402082508e-06f);
    p = MADD(x2, p, -5.69250639462346e-05f);
    p = MADD(x2, p, -7.34990630326855e-04f);
    p = MADD(x2, p, -2.95459980854025e-03f);
    p = MADD(x2, p, -1.60960333262415e-02f);
    float q = MADD(x2, -1.45660718464996e-05f, -2.13374055278905e-04f);
    q = MADD(x2, q, -1.68282697438203e-03f);
    q = MADD(x2, q, -7.37332916720468e-03f);
    q = MADD(x2, q, -1.42647390514189e-02f);
    return x * p / q;
}
#else
#define ks_erf erff
#endif

void ks_kernel(float *restrict y, const float *restrict x, const float *restrict b,
               long rows, long cols) {
#pragma omp parallel for num_threads(THREADS) schedule(static, CHUNK)
    for (long r = 0; r < rows; ++r) {
        const float *restrict xr = x + r * cols;
        float *restrict yr = y + r * cols;
#pragma omp simd simdlen(VEC)
        for (long c = 0; c < cols; ++c) {
            const float z = xr[c] + b[c];
            yr[c] = 0.5f * z * (1.0f + ks_erf(z * 0.70710678118654752f));
        }
    }
}
