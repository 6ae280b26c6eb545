/* 2-D convolution (correlation) of an image with a small filter, written for KernelSwarm.
 * out is h x w; image is (h + FH - 1) x (w + FW - 1), already padded. Tunables:
 * TILE_X, TILE_Y: the block of outputs one loop iteration computes; THREADS: OpenMP threads. */
#include <omp.h>

void conv2d(float *out, const float *image, const float *filter, int w, int h)
{
    const int iw = w + FW - 1;
    #pragma omp parallel for num_threads(THREADS) schedule(static)
    for (int ty = 0; ty < h; ty += TILE_Y) {
        for (int tx = 0; tx < w; tx += TILE_X) {
            const int ymax = ty + TILE_Y < h ? ty + TILE_Y : h;
            const int xmax = tx + TILE_X < w ? tx + TILE_X : w;
            for (int y = ty; y < ymax; y++) {
                float acc[TILE_X];
                for (int i = 0; i < TILE_X; i++) acc[i] = 0.0f;
                for (int fy = 0; fy < FH; fy++) {
                    const float *row = image + (long)(y + fy) * iw;
                    for (int fx = 0; fx < FW; fx++) {
                        const float f = filter[fy * FW + fx];
                        for (int x = tx; x < xmax; x++) acc[x - tx] += row[x + fx] * f;
                    }
                }
                for (int x = tx; x < xmax; x++) out[(long)y * w + x] = acc[x - tx];
            }
        }
    }
}
