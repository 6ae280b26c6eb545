/* A tiled transpose that forgets the remainder tiles: right whenever both dimensions are
 * multiples of TILE (every goal shape below), wrong at any other shape. */
#ifndef TILE
#define TILE 32
#endif

void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (long r0 = 0; r0 + TILE <= rows; r0 += TILE)
        for (long c0 = 0; c0 + TILE <= cols; c0 += TILE)
            for (long r = r0; r < r0 + TILE; ++r)
                for (long c = c0; c < c0 + TILE; ++c) y[c * rows + r] = x[r * cols + c];
}
