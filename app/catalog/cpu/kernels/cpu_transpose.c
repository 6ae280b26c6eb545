/* Transpose fp32: y[c, r] = x[r, c] for x of shape [rows, cols].
 * Tunables (-D): TILE cache-tile edge: a TILE x TILE block of x is transposed before the next;
 * VEC micro-tile edge: a VEC x VEC block is loaded as VEC row vectors, transposed in registers
 * and stored as VEC row vectors of y (4: SSE, 8: AVX, 16: AVX-512; the same block in plain C
 * where the machine lacks the instruction set; min(VEC, TILE) when TILE is smaller);
 * WRITE_MAJOR 1 = the micro-tiles of a tile go down the rows of x (along each output row, so
 * the output is written contiguously), 0 = along the rows of x (the input is read
 * contiguously); THREADS OpenMP threads over the tiles.
 *
 * Why a register transpose: element by element, a tile reads one float of each of TILE rows
 * of x per step; with a power-of-two row stride those rows share one L1 set (8 ways), so above
 * 8 rows every read missed the L1 (cachegrind: 1.07 L1 misses per element, ideal 0.125).
 * A 16 x 16 block reads and writes whole 64-byte lines, once. */
#include <stddef.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

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

#define MB (VEC < TILE ? VEC : TILE) /* micro-tile edge */

static inline long ks_min(long a, long b) { return a < b ? a : b; }

/* y[j * ldy + i] = x[i * ldx + j] for i, j < MB */
static inline void micro(float *restrict y, const float *restrict x, long ldx, long ldy) {
#if MB == 16 && defined(__AVX512F__)
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(x + i * ldx);
    for (int i = 0; i < 16; i += 2) { /* interleave pairs of rows */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* 4 x 4 blocks inside each 128-bit lane */
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) { /* 128-bit lanes across rows 4 apart */
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; ++i) { /* and 8 apart */
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
    for (int k = 0; k < 16; ++k) _mm512_storeu_ps(y + k * ldy, r[k]); /* r[k]: column k */
#elif MB == 8 && defined(__AVX__)
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + i * ldx);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    }
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(y + k * ldy, t[k]); /* t[k]: column k */
#elif MB == 4 && defined(__SSE__)
    __m128 r0 = _mm_loadu_ps(x), r1 = _mm_loadu_ps(x + ldx);
    __m128 r2 = _mm_loadu_ps(x + 2 * ldx), r3 = _mm_loadu_ps(x + 3 * ldx);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(y, r0);
    _mm_storeu_ps(y + ldy, r1);
    _mm_storeu_ps(y + 2 * ldy, r2);
    _mm_storeu_ps(y + 3 * ldy, r3);
#else
    for (int j = 0; j < MB; ++j)
        for (int i = 0; i < MB; ++i) y[j * ldy + i] = x[i * ldx + j];
#endif
}

/* the part of a tile that whole micro-tiles do not cover, element by element */
static void edges(float *restrict y, const float *restrict x, long rows, long cols, long r0,
                  long r1, long c0, long c1, long rm, long cm) {
    for (long r = r0; r < r1; ++r)
        for (long c = (r < rm ? cm : c0); c < c1; ++c) y[c * rows + r] = x[r * cols + c];
}

#ifndef TILE_PREFETCH
#define TILE_PREFETCH 1
#endif
/* the lines of the next tile that the micro-tile at offset (dr, dc) will need: x rows
 * nr + dr.. at column nc + dc, y rows nc + dc.. at column nr + dr (for writing) */
static inline void prefetch_next(float *y, const float *x, long rows, long cols, long nr,
                                 long nc, long dr, long dc, long n_r, long n_c) {
#if TILE_PREFETCH
    if (dc % 16 == 0)
        for (long i = 0; i < MB && nr + dr + i < n_r; ++i)
            __builtin_prefetch(x + (nr + dr + i) * cols + nc + dc, 0, 3);
    if (dr % 16 == 0)
        for (long i = 0; i < MB && nc + dc + i < n_c; ++i)
            __builtin_prefetch(y + (nc + dc + i) * rows + nr + dr, 1, 3);
#else
    (void)y; (void)x; (void)rows; (void)cols; (void)nr; (void)nc; (void)dr; (void)dc;
    (void)n_r; (void)n_c;
#endif
}

void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
    const long rb = (rows + TILE - 1) / TILE, cb = (cols + TILE - 1) / TILE;
#pragma omp parallel for num_threads(THREADS) schedule(static)
    for (long t = 0; t < rb * cb; ++t) {
        const long r0 = (t / cb) * TILE, c0 = (t % cb) * TILE;
        const long r1 = ks_min(r0 + TILE, rows), c1 = ks_min(c0 + TILE, cols);
        const long tn = t + 1 < rb * cb ? t + 1 : t;
        const long nr = (tn / cb) * TILE, nc = (tn % cb) * TILE;
        /* whole micro-tiles cover [r0, rm) x [c0, cm) */
        const long rm = r0 + (r1 - r0) / MB * MB, cm = c0 + (c1 - c0) / MB * MB;
#if WRITE_MAJOR
        for (long c = c0; c < cm; c += MB)
            for (long r = r0; r < rm; r += MB) {
                prefetch_next(y, x, rows, cols, nr, nc, r - r0, c - c0, rows, cols);
                micro(y + c * rows + r, x + r * cols + c, cols, rows);
            }
#else
        for (long r = r0; r < rm; r += MB)
            for (long c = c0; c < cm; c += MB) {
                prefetch_next(y, x, rows, cols, nr, nc, r - r0, c - c0, rows, cols);
                micro(y + c * rows + r, x + r * cols + c, cols, rows);
            }
#endif
        if (rm < r1 || cm < c1) edges(y, x, rows, cols, r0, r1, c0, c1, rm, cm);
    }
}
