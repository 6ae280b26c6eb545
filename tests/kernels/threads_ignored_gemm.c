/* THREADS restriction, issue 28: the goal allows one thread (THREADS == 1) and the kernel
 * declares it, but starts one per core anyway. */
void ks_kernel(float *C, const float *A, const float *B, long M, long N, long K) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) {
            float s = 0.0f;
            for (long k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}
