/* Cheat (e): writes past the end of the output (a "harmless" padding store). */
void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
    for (long p = 0; p < 4; ++p) y[rows * cols + p] = 0.0f;
}
