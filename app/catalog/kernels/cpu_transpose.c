/* Transpose fp32: y[c, r] = x[r, c] for x of shape [rows, cols].
 * Tunables (-D): TILE square tile edge; WRITE_MAJOR 1 = inner loop walks the output
 * contiguously, 0 = walks the input contiguously; VEC simd length of the inner loop;
 * THREADS OpenMP threads. */
#include <stddef.h>

#ifndef TILE
#define TILE 32
#endif
#ifndef WRITE_MAJOR
#define WRITE_MAJOR 0
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef THREADS
#define THREADS 1
#endif

static inline long ks_min(long a, long b) { return a < b ? a : b; }

void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
    const long rb = (rows + TILE - 1) / TILE, cb = (cols + TILE - 1) / TILE;
#pragma omp parallel for num_threads(THREADS) schedule(static)
    for (long t = 0; t < rb * cb; ++t) {
        const long r0 = (t / cb) * TILE, c0 = (t % cb) * TILE;
        const long r1 = ks_min(r0 + TILE, rows), c1 = ks_min(c0 + TILE, cols);
#if WRITE_MAJOR
        for (long c = c0; c < c1; ++c)
#pragma omp simd simdlen(VEC)
            for (long r = r0; r < r1; ++r) y[c * rows + r] = x[r * cols + c];
#else
        for (long r = r0; r < r1; ++r)
#pragma omp simd simdlen(VEC)
            for (long c = c0; c < c1; ++c) y[c * rows + r] = x[r * cols + c];
#endif
    }
}
