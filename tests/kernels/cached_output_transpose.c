/* Cheat (c): returns the output of a previous call when it sees the same input pointer. */
#include <stdlib.h>
#include <string.h>

static const float *last_x;
static long last_n;
static float *cache;

void ks_kernel(float *y, const float *x, long rows, long cols) {
    const long n = rows * cols;
    if (x == last_x && n == last_n && cache) {
        memcpy(y, cache, (size_t)n * sizeof(float));
        return;
    }
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
    free(cache);
    cache = malloc((size_t)n * sizeof(float));
    memcpy(cache, y, (size_t)n * sizeof(float));
    last_x = x;
    last_n = n;
}
