/* Cheat (g): dereferences a null pointer. */
#include <stdio.h>

void ks_kernel(float *y, const float *x, long rows, long cols) {
    printf("about to crash on a %ld x %ld input\n", rows, cols);
    fflush(stdout);
    volatile float *nowhere = 0;
    *nowhere = x[0];
    y[0] = (float)(rows + cols);
}
