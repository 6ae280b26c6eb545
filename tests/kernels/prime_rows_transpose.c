/* A transpose that is wrong only when the number of rows is one of a few primes (23, 29, 31,
 * 37): right on every goal shape, every edge shape and every distribution the verifier draws
 * for a [64, 96] goal, so it passes verification; the adversary's prime shapes find it. */
void ks_kernel(float *y, const float *x, long rows, long cols) {
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
    if (rows == 23 || rows == 29 || rows == 31 || rows == 37)
        y[0] = y[0] * 0.5f + 1.0f;
}
