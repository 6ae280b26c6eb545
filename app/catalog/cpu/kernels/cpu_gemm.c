/* GEMM fp32, row-major: C[M,N] = A[M,K] @ B[K,N], built like BLIS/OpenBLAS.
 *
 * Loops (outer to inner): jc over N by NC, pc over K by KC (B[pc.., jc..] packed into NR-wide
 * panels, shared by the threads), ic over M by MC (A packed into MR-tall panels), then jr/ir
 * over the micro-tiles; the MR x NR micro-kernel keeps the C tile in vector registers and does
 * one broadcast of A and NV vector loads of B per k step. Packing pads the edges with zeros, so
 * the micro-kernel always computes full tiles; edge tiles are stored through a small buffer.
 *
 * Tunables (-D):
 *   ISA     0 portable C (GCC vector extension), 1 AVX2+FMA, 2 AVX-512F (the catalog offers only
 *           what the machine reports; a mismatch with the compiler target is a compile error)
 *   MR      rows of the micro-tile (broadcasts of A per k)
 *   NV      vectors per row of the micro-tile: NR = NV * vector width
 *   KC MC NC  cache blocking (MC is rounded up to a multiple of MR, NC to a multiple of NR)
 *   UK      unroll of the k loop in the micro-kernel
 *   ORDER   0: jr outer, ir inner (B micro-panel in L1); 1: ir outer, jr inner
 *   PAR     0: threads split the rows of C evenly (whole MR panels), each packing its own A
 *           blocks; 1: they split the jr panels of one shared packed A block
 *   PF      1: prefetch the C tile before the k loop
 *   SHARE_B 1: the threads pack B once into a shared block (a barrier per KC step);
 *           0: (PAR 0 only) each thread packs its own copy, and no thread ever waits for
 *           another (a descheduled thread on a busy machine then stalls no one)
 *   THREADS OpenMP threads
 * The host harness (fixed) calls ks_kernel with the signature below. */
#include <stddef.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef ISA
#define ISA 0
#endif
#ifndef MR
#define MR 6
#endif
#ifndef NV
#define NV 2
#endif
#ifndef KC
#define KC 256
#endif
#ifndef MC
#define MC 96
#endif
#ifndef NC
#define NC 2048
#endif
#ifndef UK
#define UK 4
#endif
#ifndef ORDER
#define ORDER 0
#endif
#ifndef PAR
#define PAR 0
#endif
#ifndef PF
#define PF 1
#endif
#ifndef SHARE_B
#define SHARE_B 1
#endif
#ifndef THREADS
#define THREADS 1
#endif
#if PAR == 1 && SHARE_B == 0
#error "PAR=1 shares the packed blocks: it needs SHARE_B=1"
#endif

#if ISA == 2
#if !defined(__AVX512F__)
#error "ISA=2 needs AVX-512F, which the compiler target lacks"
#endif
#define VW 16
typedef __m512 vec;
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_load_ps(p)
#define VLOADU(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_store_ps((p), (v))
#define VSTOREU(p, v) _mm512_storeu_ps((p), (v))
#define VBCAST(p) _mm512_set1_ps(*(p))
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VADD(a, b) _mm512_add_ps((a), (b))
#elif ISA == 1
#if !defined(__AVX2__) || !defined(__FMA__)
#error "ISA=1 needs AVX2 and FMA, which the compiler target lacks"
#endif
#define VW 8
typedef __m256 vec;
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_load_ps(p)
#define VLOADU(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_store_ps((p), (v))
#define VSTOREU(p, v) _mm256_storeu_ps((p), (v))
#define VBCAST(p) _mm256_broadcast_ss(p)
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VADD(a, b) _mm256_add_ps((a), (b))
#else
/* portable: the compiler's generic vectors, lowered to whatever the target has */
#define VW 4
typedef float vec __attribute__((vector_size(16)));
static inline vec v_load(const float *p) { vec v; memcpy(&v, p, sizeof v); return v; }
static inline void v_store(float *p, vec v) { memcpy(p, &v, sizeof v); }
#define VZERO() ((vec){0.0f, 0.0f, 0.0f, 0.0f})
#define VLOAD(p) v_load(p)
#define VLOADU(p) v_load(p)
#define VSTORE(p, v) v_store((p), (v))
#define VSTOREU(p, v) v_store((p), (v))
#define VBCAST(p) ((vec){0.0f, 0.0f, 0.0f, 0.0f} + *(p))
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VADD(a, b) ((a) + (b))
#endif

#define NR (NV * VW)
#define MCR (((MC) + MR - 1) / MR * MR)
#define NCR (((NC) + NR - 1) / NR * NR)

static inline long ks_min(long a, long b) { return a < b ? a : b; }

/* A[rows, kc] (leading dimension lda) -> MR-tall panels, k-major inside a panel, zero padded */
static void pack_a_panel(float *restrict dst, const float *restrict a, long lda, long rows, long kc) {
    for (long k = 0; k < kc; ++k) {
        for (long i = 0; i < rows; ++i) dst[k * MR + i] = a[i * lda + k];
        for (long i = rows; i < MR; ++i) dst[k * MR + i] = 0.0f;
    }
}

/* B[kc, cols] (leading dimension ldb) -> one NR-wide panel, row-major inside, zero padded */
static void pack_b_panel(float *restrict dst, const float *restrict b, long ldb, long cols, long kc) {
    if (cols == NR) {
        for (long k = 0; k < kc; ++k) memcpy(dst + k * NR, b + k * ldb, NR * sizeof(float));
        return;
    }
    for (long k = 0; k < kc; ++k) {
        for (long j = 0; j < cols; ++j) dst[k * NR + j] = b[k * ldb + j];
        for (long j = cols; j < NR; ++j) dst[k * NR + j] = 0.0f;
    }
}

/* one k step of the micro-kernel: NV loads of B, MR broadcasts of A, MR * NV FMAs */
static inline __attribute__((always_inline)) void ks_step(vec acc[MR][NV], const float *restrict a,
                                                          const float *restrict b) {
    vec bv[NV];
    #pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = VLOAD(b + v * VW);
    #pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
        const vec ai = VBCAST(a + i);
        #pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[i][v] = VFMA(ai, bv[v], acc[i][v]);
    }
}

/* C[rows, cols] (= or +=) packed A panel x packed B panel over kc */
static inline void micro_kernel(long kc, const float *restrict a, const float *restrict b,
                                float *restrict c, long ldc, int accumulate, long rows, long cols) {
    vec acc[MR][NV];
#if PF && ISA > 0
    #pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
        if (i < rows) {
            _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * ldc + NR - 1), _MM_HINT_T0);
        }
    }
#endif
    #pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
        #pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[i][v] = VZERO();
    }
    long k = 0;
    for (; k + UK <= kc; k += UK) {
        #pragma GCC unroll 16
        for (int u = 0; u < UK; ++u) {
            ks_step(acc, a, b);
            a += MR;
            b += NR;
        }
    }
    for (; k < kc; ++k) {
        ks_step(acc, a, b);
        a += MR;
        b += NR;
    }
    if (rows == MR && cols == NR) {
        #pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) {
            #pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) {
                float *p = c + i * ldc + v * VW;
                VSTOREU(p, accumulate ? VADD(acc[i][v], VLOADU(p)) : acc[i][v]);
            }
        }
        return;
    }
    float tile[MR * NR] __attribute__((aligned(64)));
    #pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
        #pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) VSTORE(tile + i * NR + v * VW, acc[i][v]);
    }
    for (long i = 0; i < rows; ++i)
        for (long j = 0; j < cols; ++j)
            c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i * NR + j] : tile[i * NR + j];
}

/* one MC x NC block of C from packed A (mc x kc) and packed B (kc x nc) */
static void macro_kernel(long mc, long nc, long kc, const float *restrict ap,
                         const float *restrict bp, float *restrict c, long ldc, int accumulate,
                         long jr_begin, long jr_end) {
#if ORDER == 0
    for (long jr = jr_begin; jr < jr_end; jr += NR)
        for (long ir = 0; ir < mc; ir += MR)
#else
    for (long ir = 0; ir < mc; ir += MR)
        for (long jr = jr_begin; jr < jr_end; jr += NR)
#endif
            micro_kernel(kc, ap + ir * kc, bp + jr * kc, c + ir * ldc + jr, ldc, accumulate,
                         ks_min(MR, mc - ir), ks_min(NR, nc - jr));
}

void ks_kernel(float *restrict C, const float *restrict A, const float *restrict B,
               long M, long N, long K) {
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        for (long i = 0; i < M; ++i) memset(C + i * N, 0, (size_t)N * sizeof(float));
        return;
    }
    /* scratch on the stack (the space keeps KC * NC and MC * KC within a few MB): the packed B
     * block is shared by the threads, the packed A block is per thread (PAR 0) or shared */
#if SHARE_B
    _Alignas(64) float bp[KC * NCR];
#endif
#if PAR == 1
    _Alignas(64) float ap_shared[MCR * KC];
#endif
#pragma omp parallel num_threads(THREADS)
    {
#if !SHARE_B
        _Alignas(64) float bp[KC * NCR];
#endif
#if PAR == 0
        _Alignas(64) float ap[MCR * KC];
        /* an even split of the MR panels of C's rows (MC blocks would leave a thread idle) */
#ifdef _OPENMP
        const long team = omp_get_num_threads(), me = omp_get_thread_num();
#else
        const long team = 1, me = 0;
#endif
        const long panels = (M + MR - 1) / MR;
        const long row_begin = ks_min(panels * me / team * MR, M);
        const long row_end = ks_min(panels * (me + 1) / team * MR, M);
#else
        float *ap = ap_shared;
#endif
        for (long jc = 0; jc < N; jc += NCR) {
            const long nc = ks_min(NCR, N - jc);
            for (long pc = 0; pc < K; pc += KC) {
                const long kc = ks_min(KC, K - pc);
                const int accumulate = pc > 0;
#if SHARE_B
#pragma omp for schedule(static)
                for (long jp = 0; jp < nc; jp += NR)
                    pack_b_panel(bp + jp * kc, B + pc * N + jc + jp, N, ks_min(NR, nc - jp), kc);
#else
                if (row_begin < row_end)
                    for (long jp = 0; jp < nc; jp += NR)
                        pack_b_panel(bp + jp * kc, B + pc * N + jc + jp, N, ks_min(NR, nc - jp), kc);
#endif
#if PAR == 0
                for (long ic = row_begin; ic < row_end; ic += MCR) {
                    const long mc = ks_min(MCR, row_end - ic);
                    for (long ip = 0; ip < mc; ip += MR)
                        pack_a_panel(ap + ip * kc, A + (ic + ip) * K + pc, K, ks_min(MR, mc - ip), kc);
                    macro_kernel(mc, nc, kc, ap, bp, C + ic * N + jc, N, accumulate, 0, nc);
                }
#if SHARE_B
#pragma omp barrier
#endif
#else
                for (long ic = 0; ic < M; ic += MCR) {
                    const long mc = ks_min(MCR, M - ic);
#pragma omp for schedule(static)
                    for (long ip = 0; ip < mc; ip += MR)
                        pack_a_panel(ap + ip * kc, A + (ic + ip) * K + pc, K, ks_min(MR, mc - ip), kc);
#pragma omp for schedule(static)
                    for (long jp = 0; jp < nc; jp += NR)
                        macro_kernel(mc, nc, kc, ap, bp, C + ic * N + jc, N, accumulate, jp,
                                     ks_min(jp + NR, nc));
                }
#endif
            }
        }
    }
}
