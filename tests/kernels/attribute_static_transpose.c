/* Cheat (b): a result cache in file-scope statics, the attribute after the declarator (a
   regex looking for "static <type> name;" misses it). */
#include <stdlib.h>
#include <string.h>

static const float *last_x __attribute__((used)) = 0;
static float *cache __attribute__((aligned(64)));

void ks_kernel(float *y, const float *x, long rows, long cols) {
    const long n = rows * cols;
    if (x == last_x && cache) { memcpy(y, cache, (size_t)n * sizeof(float)); return; }
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
    free(cache);
    cache = malloc((size_t)n * sizeof(float));
    memcpy(cache, y, (size_t)n * sizeof(float));
    last_x = x;
}
