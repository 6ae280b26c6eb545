/* Cheat (b): writes only where the input is nonzero (assumes the output starts zeroed). */
void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c)
            if (x[r * cols + c] != 0.0f) y[c * rows + r] = x[r * cols + c];
}
