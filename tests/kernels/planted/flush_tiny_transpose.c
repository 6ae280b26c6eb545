/* Planted (issue 29): a transpose that flushes values below 1e-30 in magnitude to zero, as a
 * kernel built with flush-to-zero (or one that "cleans up" tiny values) would. Right on every
 * input without denormals or tiny values; a transpose must copy every bit. */
#include <math.h>

void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) {
            const float v = x[r * cols + c];
            y[c * rows + r] = fabsf(v) < 1e-30f ? 0.0f : v;
        }
}
