/* An honest transpose that does its work ten times (the next correct kernel, slower than
 * any cheat that does it once). */
void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (int rep = 0; rep < 10; ++rep)
        for (long r = 0; r < rows; ++r)
            for (long c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
}
