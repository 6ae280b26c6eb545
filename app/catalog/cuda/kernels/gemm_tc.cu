// C[M, N] = A[M, K] @ B[K, N], all row-major, fp16/bf16 in and out, fp32 accumulation on the
// tensor cores: mma.sync m16n8k16 fed by ldmatrix (B with .trans), global -> shared copies with
// cp.async in a STAGES-deep pipeline, XOR-swizzled shared memory (conflict-free ldmatrix),
// grouped block order for L2 reuse. The PTX helpers are ampere.cuh's (the harness prefix).
// Needs K % 8 == 0 and N % 8 == 0 (16-byte rows for cp.async); M, N, K need not be tile multiples.
// Parameters: BM, BN, BK, WM, WN, STAGES, GROUP_M.
using namespace ks_ampere;  // cp.async, ldmatrix, mma.sync, swizzle (ampere.cuh, in the prefix)

constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int MI = WM / 16, NI = WN / 8;
constexpr int A_CHUNKS = BM * BK / 8, B_CHUNKS = BK * BN / 8;  // 16-byte chunks per tile
constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;              // elements per stage
static_assert(A_CHUNKS % THREADS == 0 && B_CHUNKS % THREADS == 0, "tile copies must split evenly");
static_assert(BK == 32 || BK == 64, "BK is 32 or 64");
static_assert(BN >= 64, "B rows need at least 8 chunks for the swizzle");

// Swizzled 16-byte chunk positions (ks_ampere::swizzle_chunk): A rows hold BK/8 chunks (8 or 4),
// B rows BN/8 >= 8 chunks.
__device__ __forceinline__ int swz_a(int r, int c) { return swizzle_chunk<BK / 8>(r, c); }
__device__ __forceinline__ int swz_b(int r, int c) { return swizzle_chunk<BN / 8>(r, c); }

__device__ __forceinline__ void load_tile(T* As, T* Bs, const T* __restrict__ A, const T* __restrict__ B,
                                          int M, int N, int K, int bm, int bn, int kt) {
#pragma unroll
    for (int i = 0; i < A_CHUNKS / THREADS; ++i) {
        const int q = i * THREADS + threadIdx.x;
        const int r = q / (BK / 8), c = q % (BK / 8);
        const int gm = bm + r, gk = kt * BK + c * 8;
        const bool ok = gm < M && gk < K;
        const T* src = ok ? A + (long)gm * K + gk : A;
        cp_async16(smem_u32(As + r * BK + swz_a(r, c) * 8), src, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < B_CHUNKS / THREADS; ++i) {
        const int q = i * THREADS + threadIdx.x;
        const int r = q / (BN / 8), c = q % (BN / 8);
        const int gk = kt * BK + r, gn = bn + c * 8;
        const bool ok = gk < K && gn < N;
        const T* src = ok ? B + (long)gk * N + gn : B;
        cp_async16(smem_u32(Bs + r * BN + swz_b(r, c) * 8), src, ok ? 16 : 0);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
gemm_tc(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* As = reinterpret_cast<T*>(smem_raw);
    T* Bs = As + STAGES * A_STAGE;

    // Grouped order: GROUP_M block rows sweep the block columns together, sharing B in L2.
    const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * grid_n;
    const int first_m = (pid / per_group) * GROUP_M;
    const int group_rows = min(grid_m - first_m, GROUP_M);
    const int pid_m = first_m + (pid % per_group) % group_rows;
    const int pid_n = (pid % per_group) / group_rows;
    const int bm = pid_m * BM, bn = pid_n * BN;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const int KT = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile(As + s * A_STAGE, Bs + s * B_STAGE, A, B, M, N, K, bm, bn, s);
        cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's copies) ...
        __syncthreads();              // ... and everyone's; the stage computed last is free
        const int pre = kt + STAGES - 1;
        if (pre < KT) {
            const int ps = pre % STAGES;
            load_tile(As + ps * A_STAGE, Bs + ps * B_STAGE, A, B, M, N, K, bm, bn, pre);
        }
        cp_async_commit();  // always commit, so the group count stays aligned with kt

        const T* a_s = As + (kt % STAGES) * A_STAGE;
        const T* b_s = Bs + (kt % STAGES) * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            uint32_t af[MI][4];
            uint32_t bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int r = wm + i * 16 + (lane & 15);
                const int c = kk * 2 + (lane >> 4);
                ldmatrix_x4(af[i], smem_u32(a_s + r * BK + swz_a(r, c) * 8));
            }
#pragma unroll
            for (int j = 0; j < NI / 2; ++j) {
                const int r = kk * 16 + (lane & 15);
                const int c = (wn + j * 16) / 8 + (lane >> 4);
                uint32_t t[4];
                ldmatrix_x4_trans(t, smem_u32(b_s + r * BN + swz_b(r, c) * 8));
                bf[2 * j][0] = t[0]; bf[2 * j][1] = t[1];
                bf[2 * j + 1][0] = t[2]; bf[2 * j + 1][1] = t[3];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma16816(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
    }
    cp_async_wait<0>();

    // Accumulator layout of m16n8: c0,c1 at (lane/4, 2*(lane%4)+{0,1}); c2,c3 eight rows down.
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int col = bn + wn + j * 8 + (lane & 3) * 2;
            if (col >= N) continue;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = bm + wm + i * 16 + (lane >> 2) + h * 8;
                if (row < M) {
#if KS_DTYPE == 1
                    *reinterpret_cast<__half2*>(C + (long)row * N + col) =
                        __floats2half2_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
#else
                    *reinterpret_cast<__nv_bfloat162*>(C + (long)row * N + col) =
                        __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
#endif
                }
            }
        }
    }
}
