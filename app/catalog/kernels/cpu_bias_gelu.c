/* Fused bias + exact GELU fp32: y[r, c] = 0.5 z (1 + erf(z / sqrt 2)), z = x[r, c] + b[c].
 * Tunables (-D): VEC simd length; ERF_IMPL 0 = libm erff, 1 = an inlined branch-free erf
 * (Abramowitz-Stegun 7.1.26, absolute error below 1.5e-7, with a polynomial exp) that the
 * compiler can vectorise; CHUNK rows per OpenMP work item; THREADS OpenMP threads. */
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

#if ERF_IMPL
/* exp(x) for x <= 0: range reduction by ln 2, Cephes expf polynomial, 2^n from the exponent
 * bits; arguments below -87 are clamped (an unsigned min on the bit pattern of x <= 0). */
static inline float ks_exp_neg(float x) {
    union { float f; unsigned int u; } in = { .f = x };
    in.u = in.u < 0xC2AE0000u ? in.u : 0xC2AE0000u; /* 0xC2AE0000 is -87.0f */
    x = in.f;
    const int ni = (int)(x * 1.44269504088896341f - 0.5f);
    const float n = (float)ni;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e = p * r * r + r + 1.0f;
    union { int i; float f; } scale = { .i = (ni + 127) << 23 };
    return e * scale.f;
}

static inline float ks_erf(float x) {
    const float a = fabsf(x);
    const float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    const float e = 1.0f - p * t * ks_exp_neg(-a * a);
    return copysignf(e, x);
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
