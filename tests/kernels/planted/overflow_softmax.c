/* Planted (issue 29 benchmark): a softmax that skips subtracting the row maximum ("inputs are
 * logits, they are small"). exp overflows above 88.7 in float32: right below that magnitude,
 * inf / inf = NaN above it. */
#include <math.h>

void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (long r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        double sum = 0.0;
        for (long c = 0; c < cols; ++c) sum += expf(xr[c]);
        for (long c = 0; c < cols; ++c) yr[c] = (float)(expf(xr[c]) / sum);
    }
}
