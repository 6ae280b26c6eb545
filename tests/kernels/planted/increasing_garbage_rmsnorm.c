/* Planted (issue 29): an RMSNorm that returns garbage when its first 32 inputs are increasing
 * (arange-like or timestamp-like data: positions, times, sorted keys). Right on everything
 * else. */
#include <math.h>

#ifndef EPS
#define EPS 1e-6f
#endif

void ks_kernel(float *y, const float *x, const float *w, long rows, long cols) {
    const long n = rows * cols < 32 ? rows * cols : 32;
    int increasing = n >= 2;
    for (long i = 1; i < n; ++i)
        if (!(x[i] > x[i - 1])) { increasing = 0; break; }
    for (long r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        double ss = 0.0;
        for (long c = 0; c < cols; ++c) ss += (double)xr[c] * xr[c];
        const float inv = 1.0f / sqrtf((float)(ss / cols) + EPS);
        for (long c = 0; c < cols; ++c)
            y[r * cols + c] = increasing ? (float)c : xr[c] * inv * w[c];
    }
}
