/* Allocates and touches far more memory than a transpose needs. */
#include <stdlib.h>
#include <string.h>

void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (int i = 0; i < 64; ++i) {
        char *p = malloc(64L << 20);
        if (p) memset(p, 1, 64L << 20);
    }
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
}
