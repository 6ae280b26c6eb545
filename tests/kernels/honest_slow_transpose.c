/* An honest transpose that does its work a hundred times (the next correct kernel, far slower
 * than any cheat that does it once, however loaded the machine). The stores go through a
 * volatile pointer, so the compiler cannot fold the rounds into one. */
void ks_kernel(float *y, const float *x, long rows, long cols) {
    volatile float *out = y;
    for (int rep = 0; rep < 100; ++rep)
        for (long r = 0; r < rows; ++r)
            for (long c = 0; c < cols; ++c) out[c * rows + r] = x[r * cols + c];
}
