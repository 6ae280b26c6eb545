// C[M, N] = A[M, K] @ B[K, N], all row-major, fp16/bf16 in and out, fp32 accumulation, for Hopper
// (sm_90a) in the structure of CUTLASS's sm90 warp-specialised kernels and "fast.cu":
// - a producer warpgroup (one elected thread) streams A and B tiles with TMA into a STAGES-deep
//   ring of shared-memory stages, 128-byte swizzled; full[s] (1 arrival + the bytes TMA delivers)
//   says a stage has landed, empty[s] (one arrival per consumer warpgroup of every CTA that reads
//   it) says it may be overwritten; waits are mbarrier parity waits, the phase bit flips each lap;
// - CONSUMERS consumer warpgroups each own BM/CONSUMERS rows of the tile and issue wgmma
//   m64nBNk16 straight from shared memory (A K-major, B MN-major: B[K, N] is row-major), one
//   commit group per stage, one group kept in flight (the stage read by the previous one is
//   released when wgmma.wait_group 1 returns);
// - setmaxnreg moves registers from the producer to the consumers (fp32 accumulators);
// - persistent: gridDim.x CTAs (the SM count, whole clusters) walk the tiles in grouped order;
// - CLUSTER 2: two CTAs on vertically adjacent tiles share B: each loads half of B's 64-column
//   boxes and multicasts them to both, so empty[s] counts the consumers of both CTAs;
// - EPILOGUE 0: accumulators stored straight to global memory (bf16x2 / half2, bounds checked);
//   EPILOGUE 1: staged in 128-byte-swizzled shared memory and written by TMA stores (clipped).
// Out-of-range rows/columns and the K tail are TMA's zero fill. Needs N % 8 == 0 and K % 8 == 0
// (16-byte global strides). Parameters: BM, BN, BK, STAGES, CONSUMERS, CLUSTER, EPILOGUE, GROUP_M.
// The PTX helpers are hopper.cuh's (namespace ks_hopper, in the harness prefix).
using namespace ks_hopper;

constexpr bool HALF = KS_DTYPE == 1;
constexpr int WG_M = BM / CONSUMERS;     // rows per consumer warpgroup
constexpr int M_ATOMS = WG_M / 64;       // m64 wgmmas per k16 step
constexpr int THREADS = 128 * (CONSUMERS + 1);
constexpr int A_BOX = BM * 64;           // elements of one TMA box of A: [BM rows][64 k]
constexpr int B_BOX = BK * 64;           // elements of one TMA box of B: [BK rows][64 n]
constexpr int C_BOX = WG_M * 64;         // elements of one TMA box of C: [WG_M rows][64 n]
constexpr int A_STAGE = BM * BK, B_STAGE = BK * BN;
constexpr unsigned STAGE_TX = (A_STAGE + B_STAGE) * 2;  // bytes TMA delivers to each CTA per stage
constexpr int C_TILE = EPILOGUE ? BM * BN : 0;
// Register split (setmaxnreg): what the launch gives every thread (65536 / THREADS, whole
// multiples of 8) is pooled; the producer keeps few, the consumers take the rest.
constexpr int LAUNCH_REGS = (65536 / THREADS) / 8 * 8 > 256 ? 256 : (65536 / THREADS) / 8 * 8;
constexpr int PRODUCER_REGS = CONSUMERS == 1 ? 40 : 40;
constexpr int CONSUMER_REGS_RAW = (LAUNCH_REGS * (CONSUMERS + 1) - PRODUCER_REGS) / CONSUMERS / 8 * 8;
constexpr int CONSUMER_REGS = CONSUMER_REGS_RAW > 240 ? 240 : CONSUMER_REGS_RAW;

static_assert(KS_DTYPE == 1 || KS_DTYPE == 2, "gemm_wgmma: fp16 or bf16");
static_assert(CONSUMERS >= 1 && CONSUMERS <= 2, "one or two consumer warpgroups");
static_assert(WG_M % 64 == 0 && WG_M * CONSUMERS == BM, "BM / CONSUMERS is a multiple of 64");
static_assert(BN % 64 == 0 && BN <= 256, "BN: 64, 128, 192 or 256 (one wgmma spans the tile width)");
static_assert(BK % 64 == 0 && BK <= 256, "BK: a multiple of 64 (128-byte swizzled K boxes of A)");
static_assert(M_ATOMS * BN / 2 <= 128, "at most 128 fp32 accumulators per consumer thread");
static_assert(CLUSTER == 1 || (CLUSTER == 2 && (BN / 64) % 2 == 0), "CLUSTER 2 splits B's boxes in two");
static_assert(PRODUCER_REGS + CONSUMERS * CONSUMER_REGS <= LAUNCH_REGS * (CONSUMERS + 1), "register pool");

__device__ __forceinline__ void store_pair(T* p, float x, float y) {
#if KS_DTYPE == 1
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
#else
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
#endif
}

// The grouped (L2-friendly) order of the cluster tiles: GROUP_M cluster rows sweep the columns
// together. A cluster tile is CLUSTER vertically adjacent BM x BN tiles (one per CTA).
__device__ __forceinline__ void tile_origin(int t, int cluster_rows, int tiles_n, unsigned rank,
                                            int& bm, int& bn) {
    const int per_group = GROUP_M * tiles_n;
    const int first = (t / per_group) * GROUP_M;
    const int rows = min(cluster_rows - first, GROUP_M);
    const int cm = first + (t % per_group) % rows;
    const int cn = (t % per_group) / rows;
    bm = (cm * CLUSTER + static_cast<int>(rank)) * BM;
    bn = cn * BN;
}

// One consumer warpgroup is done reading stage s: tell every producer that writes into it.
__device__ __forceinline__ void release_stage(unsigned long long* empty, int s) {
    if constexpr (CLUSTER == 1) {
        mbarrier_arrive(&empty[s]);
    } else {
#pragma unroll
        for (unsigned r = 0; r < CLUSTER; ++r) mbarrier_arrive_cluster(&empty[s], r);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_wgmma(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
           const __grid_constant__ TensorMap map_c, T* __restrict__ C, int M, int N, int K) {
    extern __shared__ unsigned char smem_raw[];
    // 128-byte swizzle atoms must start on 1024-byte boundaries (the launch adds 1 KB of slack).
    unsigned char* base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    T* a_s = reinterpret_cast<T*>(base);
    T* b_s = a_s + STAGES * A_STAGE;
    T* c_s = b_s + STAGES * B_STAGE;
    unsigned long long* full = reinterpret_cast<unsigned long long*>(c_s + C_TILE);
    unsigned long long* empty = full + STAGES;

    const int warpgroup = threadIdx.x / 128;
    const int tid = threadIdx.x % 128;
    const unsigned rank = CLUSTER > 1 ? cluster_ctarank() : 0u;
    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbarrier_init(&full[s], 1);
            mbarrier_init(&empty[s], CONSUMERS * CLUSTER);
        }
        fence_barrier_init();
        tma_prefetch_descriptor(&map_a);
        tma_prefetch_descriptor(&map_b);
        if (EPILOGUE) tma_prefetch_descriptor(&map_c);
    }
    // Every CTA's barriers exist before any CTA of the cluster signals or multicasts into them.
    if constexpr (CLUSTER > 1) cluster_sync(); else __syncthreads();

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int cluster_rows = (tiles_m + CLUSTER - 1) / CLUSTER;
    const int cluster_tiles = cluster_rows * tiles_n;
    const int first_tile = blockIdx.x / CLUSTER, tile_step = gridDim.x / CLUSTER;
    const int KT = (K + BK - 1) / BK;

    if (warpgroup == 0) {
        // ---- producer: one thread issues every TMA load -------------------------------------
        setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            int stage = 0;
            unsigned phase = 0;
            for (int t = first_tile; t < cluster_tiles; t += tile_step) {
                int bm, bn;
                tile_origin(t, cluster_rows, tiles_n, rank, bm, bn);
                for (int kt = 0; kt < KT; ++kt) {
                    mbarrier_wait(&empty[stage], phase ^ 1u);  // a fresh barrier passes parity 1
                    mbarrier_arrive_expect_tx(&full[stage], STAGE_TX);
                    T* as = a_s + stage * A_STAGE;
                    T* bs = b_s + stage * B_STAGE;
#pragma unroll
                    for (int b = 0; b < BK / 64; ++b)
                        tma_load_2d(as + b * A_BOX, &map_a, &full[stage], kt * BK + b * 64, bm);
#pragma unroll
                    for (int j = 0; j < BN / 64; ++j) {
                        if constexpr (CLUSTER == 1) {
                            tma_load_2d(bs + j * B_BOX, &map_b, &full[stage], bn + j * 64, kt * BK);
                        } else if (j % CLUSTER == static_cast<int>(rank)) {
                            tma_load_2d_multicast(bs + j * B_BOX, &map_b, &full[stage], bn + j * 64,
                                                  kt * BK, static_cast<unsigned short>((1u << CLUSTER) - 1u));
                        }
                    }
                    if (++stage == STAGES) { stage = 0; phase ^= 1u; }
                }
            }
        }
        __syncwarp();
    } else {
        // ---- consumers: wgmma from shared memory, then the epilogue --------------------------
        setmaxnreg_inc<CONSUMER_REGS>();
        const int wg = warpgroup - 1;
        const int warp = tid / 32, lane = tid % 32;
        int stage = 0;
        unsigned phase = 0;
        float acc[M_ATOMS][BN / 2];
        for (int t = first_tile; t < cluster_tiles; t += tile_step) {
            int bm, bn;
            tile_origin(t, cluster_rows, tiles_n, rank, bm, bn);
#pragma unroll
            for (int i = 0; i < M_ATOMS; ++i)
#pragma unroll
                for (int j = 0; j < BN / 2; ++j) acc[i][j] = 0.f;

            int prev = 0;
            for (int kt = 0; kt < KT; ++kt) {
                mbarrier_wait(&full[stage], phase);
#pragma unroll
                for (int i = 0; i < M_ATOMS; ++i)
#pragma unroll
                    for (int j = 0; j < BN / 2; ++j) wgmma_fence_operand(acc[i][j]);
                wgmma_fence();  // accumulators written by ordinary instructions since the last batch
                const T* as = a_s + stage * A_STAGE + wg * WG_M * 64;
                const T* bs = b_s + stage * B_STAGE;
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk) {
                    // B (MN-major, 128B swizzle): 8-row K groups 1024 B apart (SBO), 64-column
                    // boxes B_BOX elements apart (LBO); k16 step = 16 rows of 128 B.
                    const unsigned long long desc_b = make_smem_desc(bs + kk * 16 * 64, B_BOX * 2, 1024, 1);
#pragma unroll
                    for (int i = 0; i < M_ATOMS; ++i) {
                        // A (K-major, 128B swizzle): 8-row groups 1024 B apart; the k16 step moves
                        // 32 B inside the swizzled 128-byte row, or to the next 64-column box.
                        const T* a = as + (kk / 4) * A_BOX + i * 64 * 64 + (kk % 4) * 16;
                        wgmma_m64k16<BN, HALF, 1>(acc[i], make_smem_desc(a, 16, 1024, 1), desc_b, 1);
                    }
                }
                wgmma_commit();
                wgmma_wait<1>();  // the previous stage's batch is done: its stage may be refilled
#pragma unroll
                for (int i = 0; i < M_ATOMS; ++i)
#pragma unroll
                    for (int j = 0; j < BN / 2; ++j) wgmma_fence_operand(acc[i][j]);
                if (kt > 0 && tid == 0) release_stage(empty, prev);
                prev = stage;
                if (++stage == STAGES) { stage = 0; phase ^= 1u; }
            }
            wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < M_ATOMS; ++i)
#pragma unroll
                for (int j = 0; j < BN / 2; ++j) wgmma_fence_operand(acc[i][j]);
            if (tid == 0) release_stage(empty, prev);

            // Accumulator (i, 4j + e): row i*64 + 16*warp + lane/4 (+8 for e >= 2),
            // column 8j + 2*(lane%4) + (e & 1).
            if constexpr (EPILOGUE == 0) {
#pragma unroll
                for (int i = 0; i < M_ATOMS; ++i) {
                    const int row = bm + wg * WG_M + i * 64 + warp * 16 + lane / 4;
#pragma unroll
                    for (int j = 0; j < BN / 8; ++j) {
                        const int col = bn + j * 8 + (lane % 4) * 2;
                        if (col < N) {
                            if (row < M) store_pair(C + (long)row * N + col, acc[i][4 * j], acc[i][4 * j + 1]);
                            if (row + 8 < M)
                                store_pair(C + (long)(row + 8) * N + col, acc[i][4 * j + 2], acc[i][4 * j + 3]);
                        }
                    }
                }
            } else {
                T* cs = c_s + wg * WG_M * BN;  // BN/64 boxes of [WG_M][64], 128B-swizzled
                if (tid == 0) tma_store_wait_read<0>();  // the last tile's stores have read cs
                named_barrier_sync(1 + wg, 128);
#pragma unroll
                for (int i = 0; i < M_ATOMS; ++i) {
#pragma unroll
                    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int r = i * 64 + warp * 16 + lane / 4 + h * 8;
                            const int chunk = (j % 8) ^ (r % 8);  // TMA's 128-byte swizzle
                            store_pair(cs + (j / 8) * C_BOX + r * 64 + chunk * 8 + (lane % 4) * 2,
                                       acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1]);
                        }
                    }
                }
                fence_proxy_async();  // st.shared -> visible to the TMA store (async proxy)
                named_barrier_sync(1 + wg, 128);
                if (tid == 0) {
#pragma unroll
                    for (int b = 0; b < BN / 64; ++b)
                        tma_store_2d(&map_c, cs + b * C_BOX, bn + b * 64, bm + wg * WG_M);
                    tma_store_commit();
                }
            }
        }
        if (EPILOGUE && tid == 0) tma_store_wait<0>();
    }
    // No CTA leaves while its cluster peer may still arrive on its barriers or multicast into it.
    if constexpr (CLUSTER > 1) cluster_sync();
}
