/* Point-in-polygon (even-odd rule) for many points, written for KernelSwarm.
 * inside[i] = 1 when point i lies inside the polygon, else 0. Tunables: CHUNK (points tested
 * together), ORDER (0: edges in the outer loop, 1: points in the outer loop), THREADS. Every
 * variant computes the same float expression per point and edge, so results are exact. */
#include <omp.h>

static inline int crosses(float px, float py, float xj, float yj, float xk, float yk)
{
    return ((yk > py) != (yj > py)) && (px < (xj - xk) * (py - yk) / (yj - yk) + xk);
}

void pnpoly(float *inside, const float *points, const float *vertices, int n, int nv)
{
    #pragma omp parallel for num_threads(THREADS) schedule(static)
    for (int start = 0; start < n; start += CHUNK) {
        const int count = start + CHUNK <= n ? CHUNK : n - start;
        int odd[CHUNK];
        for (int c = 0; c < CHUNK; c++) odd[c] = 0;
#if ORDER == 0
        for (int j = nv - 1, k = 0; k < nv; j = k++)
            for (int c = 0; c < count; c++)
                odd[c] ^= crosses(points[2 * (start + c)], points[2 * (start + c) + 1],
                                  vertices[2 * j], vertices[2 * j + 1], vertices[2 * k], vertices[2 * k + 1]);
#else
        for (int c = 0; c < count; c++)
            for (int j = nv - 1, k = 0; k < nv; j = k++)
                odd[c] ^= crosses(points[2 * (start + c)], points[2 * (start + c) + 1],
                                  vertices[2 * j], vertices[2 * j + 1], vertices[2 * k], vertices[2 * k + 1]);
#endif
        for (int c = 0; c < count; c++) inside[start + c] = (float)odd[c];
    }
}
