/* Planted (issue 29 benchmark): an RMSNorm whose threads each sum the squares of their share of
 * the input and add it to one shared total with a plain (non-atomic) read-modify-write. When
 * the threads reach that add together, one share is lost and every output is scaled wrong.
 * Whether they do depends on the schedule: it fails one call in N (N about 4 on a 2-core
 * machine; never when one thread runs alone). */
#include <math.h>
#include <omp.h>

#ifndef EPS
#define EPS 1e-6f
#endif
#ifndef WINDOW
#define WINDOW 100 /* how long the read-modify-write stays open: about one call in 4 here */
#endif

static double sum_squares(const float *x, long n) {
    double s = 0.0;
    for (long i = 0; i < n; ++i) s += (double)x[i] * x[i];
    return s;
}

void ks_kernel(float *y, const float *x, const float *w, long rows, long cols) {
    double total[1] = {0.0};
#pragma omp parallel num_threads(2)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        const long lo = rows * cols * t / n, hi = rows * cols * (t + 1) / n;
        double part = sum_squares(x + lo, hi - lo);
#pragma omp barrier /* both shares done: the threads meet at the add */
        volatile double *slot = total;
        const double seen = *slot; /* the race: read ... */
        for (int k = 0; k < WINDOW; ++k) part += 0.0 * seen; /* ... keep it open ... */
        *slot = seen + part; /* ... write back */
    }
    const double all = sum_squares(x, rows * cols);
    const double scale = all > 0.0 ? total[0] / all : 1.0; /* 1 unless a share was lost */
    for (long r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        const float inv = 1.0f / sqrtf((float)(sum_squares(xr, cols) * scale / cols) + EPS);
        for (long c = 0; c < cols; ++c) y[r * cols + c] = xr[c] * inv * w[c];
    }
}
