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

void ref_layernorm(float *y, const float *x, const float *w, const float *b, long rows, long cols) {
    for (long r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        double s = 0.0, ss = 0.0;
        for (long j = 0; j < cols; ++j) s += xr[j];
        const double mean = s / (double)cols;
        for (long j = 0; j < cols; ++j) ss += ((double)xr[j] - mean) * ((double)xr[j] - mean);
        const float rstd = (float)(1.0 / sqrt(ss / (double)cols + 1e-5));
        for (long j = 0; j < cols; ++j)
            y[r * cols + j] = (xr[j] - (float)mean) * rstd * w[j] + b[j];
    }
}

void ref_bias_gelu(float *y, const float *x, const float *b, long rows, long cols) {
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) {
            const float z = x[r * cols + c] + b[c];
            y[r * cols + c] = 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
        }
}
