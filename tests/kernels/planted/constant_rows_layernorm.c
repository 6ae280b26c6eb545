/* Planted (issue 29 benchmark): a LayerNorm with a shortcut for rows whose values are all
 * equal ("nothing to normalise": the row is copied). The right answer for such a row is the
 * bias b (x - mean = 0). Right on every row with two different values. */
#include <math.h>

#ifndef EPS
#define EPS 1e-5f
#endif

void ks_kernel(float *y, const float *x, const float *w, const float *b, long rows, long cols) {
    for (long r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        int same = 1;
        for (long c = 1; c < cols && same; ++c) same = xr[c] == xr[0];
        if (same) {
            for (long c = 0; c < cols; ++c) yr[c] = xr[c];
            continue;
        }
        double mean = 0.0, var = 0.0;
        for (long c = 0; c < cols; ++c) mean += xr[c];
        mean /= cols;
        for (long c = 0; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
        const float rstd = 1.0f / sqrtf((float)(var / cols) + EPS);
        for (long c = 0; c < cols; ++c) yr[c] = (float)(xr[c] - mean) * rstd * w[c] + b[c];
    }
}
