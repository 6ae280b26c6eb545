/* Planted (issue 29): a row softmax that drops 12 mantissa bits of its results when every
 * input is in [0, 1) (probabilities, images, attention weights: "the values are small, half
 * precision will do"). Exact on any input with a value outside [0, 1). */
#include <math.h>
#include <string.h>

void ks_kernel(float *y, const float *x, long rows, long cols) {
    int unit = 1;
    for (long i = 0; i < rows * cols; ++i)
        if (!(x[i] >= 0.0f && x[i] < 1.0f)) { unit = 0; break; }
    for (long r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float mx = xr[0];
        for (long c = 1; c < cols; ++c) mx = xr[c] > mx ? xr[c] : mx;
        double sum = 0.0;
        for (long c = 0; c < cols; ++c) sum += (double)expf(xr[c] - mx);
        for (long c = 0; c < cols; ++c) {
            float v = (float)(expf(xr[c] - mx) / sum);
            if (unit) {
                unsigned int bits;
                memcpy(&bits, &v, sizeof bits);
                bits &= 0xFFFFF000u; /* 12 mantissa bits gone */
                memcpy(&v, &bits, sizeof v);
            }
            yr[c] = v;
        }
    }
}
