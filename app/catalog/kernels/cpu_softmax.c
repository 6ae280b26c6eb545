/* Row softmax fp32: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
 * Tunables (-D): VEC simd length; ACC independent accumulators for the max and sum reductions;
 * ONLINE 1 = one pass computing max and sum together (rescaling), 0 = separate max pass;
 * CHUNK rows per OpenMP work item; THREADS OpenMP threads. */
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

static void softmax_row(float *restrict y, const float *restrict x, long n) {
    float mx[ACC], sm[ACC];
    for (int a = 0; a < ACC; ++a) { mx[a] = -INFINITY; sm[a] = 0.0f; }
    (void)sm;
    long j = 0;
#if ONLINE
    for (; j + ACC <= n; j += ACC)
        for (int a = 0; a < ACC; ++a) {
            const float v = x[j + a];
            if (v > mx[a]) { sm[a] = sm[a] * expf(mx[a] - v) + 1.0f; mx[a] = v; }
            else sm[a] += expf(v - mx[a]);
        }
    for (; j < n; ++j) {
        const float v = x[j];
        if (v > mx[0]) { sm[0] = sm[0] * expf(mx[0] - v) + 1.0f; mx[0] = v; }
        else sm[0] += expf(v - mx[0]);
    }
    float m = mx[0];
    for (int a = 1; a < ACC; ++a) m = mx[a] > m ? mx[a] : m;
    float s = 0.0f;
    for (int a = 0; a < ACC; ++a) s += (mx[a] == -INFINITY) ? 0.0f : sm[a] * expf(mx[a] - m);
#else
    for (; j + ACC <= n; j += ACC)
        for (int a = 0; a < ACC; ++a) mx[a] = x[j + a] > mx[a] ? x[j + a] : mx[a];
    for (; j < n; ++j) mx[0] = x[j] > mx[0] ? x[j] : mx[0];
    float m = mx[0];
    for (int a = 1; a < ACC; ++a) m = mx[a] > m ? mx[a] : m;
    float s = 0.0f;
#pragma omp simd simdlen(VEC) reduction(+ : s)
    for (long k = 0; k < n; ++k) { const float e = expf(x[k] - m); y[k] = e; s += e; }
#endif
    const float inv = 1.0f / s;
#if ONLINE
#pragma omp simd simdlen(VEC)
    for (long k = 0; k < n; ++k) y[k] = expf(x[k] - m) * inv;
#else
#pragma omp simd simdlen(VEC)
    for (long k = 0; k < n; ++k) y[k] *= inv;
#endif
}

void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
#pragma omp parallel for num_threads(THREADS) schedule(static, CHUNK)
    for (long r = 0; r < rows; ++r) softmax_row(y + r * cols, x + r * cols, cols);
}
