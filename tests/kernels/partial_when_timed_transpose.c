/* Cheat (e): writes only half of the output once it has been called often (timed calls come
   after verification). The call count lives in an OpenMP setting: no global state to refuse. Each candidate
   has a fresh process, so it counts its own calls only. */
#include <omp.h>

void ks_kernel(float *y, const float *x, long rows, long cols) {
    const int calls = omp_get_default_device();
    omp_set_default_device(calls + 1);
    const long upto = calls > 8 ? rows / 2 : rows;
    for (long r = 0; r < upto; ++r)
        for (long c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
}
