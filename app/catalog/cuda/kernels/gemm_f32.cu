// C[M, N] = A[M, K] @ B[K, N] in fp32 on the CUDA cores: BM x BN block tile staged through
// shared memory BK at a time, each thread computing a TM x TN register tile.
// Parameters: BM, BN, BK, TM, TN.
constexpr int THREADS = (BM / TM) * (BN / TN);

extern "C" __global__ void __launch_bounds__(THREADS)
gemm_f32(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
         int M, int N, int K) {
    __shared__ float As[BK][BM + 4];  // A stored k-major so a thread reads TM consecutive rows
    __shared__ float Bs[BK][BN];
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int q = threadIdx.x; q < BM * BK; q += THREADS) {
            const int r = q / BK, c = q % BK;
            const int gm = bm + r, gk = k0 + c;
            As[c][r] = (gm < M && gk < K) ? A[(long)gm * K + gk] : 0.f;
        }
        for (int q = threadIdx.x; q < BK * BN; q += THREADS) {
            const int r = q / BN, c = q % BN;
            const int gk = k0 + r, gn = bn + c;
            Bs[r][c] = (gk < K && gn < N) ? B[(long)gk * N + gn] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = bm + ty * TM + i;
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = bn + tx * TN + j;
            if (col < N) C[(long)row * N + col] = acc[i][j];
        }
    }
}
