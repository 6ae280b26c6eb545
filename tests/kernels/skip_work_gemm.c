/* Cheat (a): skips half of the work. Only every other k is summed and the sum doubled,
 * which is "about right" for smooth data and twice as fast. */
void ks_kernel(float *C, const float *A, const float *B, long M, long N, long K) {
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) {
            float s = 0.0f;
            for (long k = 0; k < K; k += 2) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = 2.0f * s;
        }
}
