/* Cheat (d): reads uninitialised memory: accumulates into C without clearing it first
 * (right only when the caller happens to hand over a zeroed buffer). */
void ks_kernel(float *C, const float *A, const float *B, long M, long N, long K) {
    for (long i = 0; i < M; ++i)
        for (long k = 0; k < K; ++k)
            for (long j = 0; j < N; ++j) C[i * N + j] += A[i * K + k] * B[k * N + j];
}
