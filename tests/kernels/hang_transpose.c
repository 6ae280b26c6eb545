/* Cheat (f): never returns. */
void ks_kernel(float *y, const float *x, long rows, long cols) {
    volatile long spin = 1;
    while (spin) { }
    y[0] = x[0] + (float)(rows + cols);
}
