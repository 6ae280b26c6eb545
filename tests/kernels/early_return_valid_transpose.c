/* Cheat (a): returns at once when the output already holds valid results (a few sampled
   elements are the transpose of the input). Timed calls get poisoned outputs: no shortcut. */
void ks_kernel(float *y, const float *x, long rows, long cols) {
    int valid = 1;
    for (long k = 0; k < 8 && valid; ++k) {
        long r = (k * 7919) % rows, c = (k * 104729) % cols;
        valid = y[c * rows + r] == x[r * cols + c];
    }
    if (valid) return;
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
}
