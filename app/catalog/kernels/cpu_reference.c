/* Plain C reference loops: the baseline every CPU candidate is compared against.
 * One straightforward loop nest per operator, no blocking, no threads. */
#include <math.h>
#include <stddef.h>

void ref_gemm(float *C, const float *A, const float *B, long M, long N, long K) {
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) {
            float s = 0.0f;
            for (long k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}

void ref_softmax(float *y, const float *x, long rows, long cols) {
    for (long r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY, s = 0.0f;
        for (long j = 0; j < cols; ++j) m = xr[j] > m ? xr[j] : m;
        for (long j = 0; j < cols; ++j) { yr[j] = expf(xr[j] - m); s += yr[j]; }
        for (long j = 0; j < cols; ++j) yr[j] /= s;
    }
}

void ref_rmsnorm(float *y, const float *x, const float *w, long rows, long cols) {
    for (long r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float ss = 0.0f;
        for (long j = 0; j < cols; ++j) ss += xr[j] * xr[j];
        const float scale = 1.0f / sqrtf(ss / (float)cols + 1e-6f);
        for (long j = 0; j < cols; ++j) y[r * cols + j] = xr[j] * scale * w[j];
    }
}

void ref_transpose(float *y, const float *x, long rows, long cols) {
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
}
