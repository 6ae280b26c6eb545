/* Planted (issue 29 benchmark): bias + exact GELU whose "remainder" path forgets the last
 * column when both dimensions are prime and the row is at least 17 long (no vector width, tile
 * or thread count divides such a shape). Right at every other shape. */
#include <math.h>

static int is_prime(long n) {
    if (n < 2) return 0;
    for (long d = 2; d * d <= n; ++d)
        if (n % d == 0) return 0;
    return 1;
}

void ks_kernel(float *y, const float *x, const float *b, long rows, long cols) {
    const long last = is_prime(rows) && is_prime(cols) && cols >= 17 ? cols - 1 : cols;
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) {
            const float z = x[r * cols + c] + b[c];
            y[r * cols + c] = c < last ? 0.5f * z * (1.0f + erff(z * 0.70710678118654752f)) : z;
        }
}
