// KDA forward (fla's chunk_kda: gated delta rule, per-channel decay), kernels in launch order.
// Per chunk of BT tokens, Gc = cumsum g. 1 kda_gate_cumsum: Gc. 2 kda_wy: (I+A)w = beta exp(Gc)k,
// (I+A)u = beta v (forward substitution), A_ij = beta_i k_i.exp(Gc_i-Gc_j)k_j (j<i). 3 kda_state,
// per sequence, chunk by chunk: delta = u - wS, hs = S, S <- exp(Gc_n)S + (exp(Gc_n-Gc_j)k_j)^T delta.
// 4 kda_output: o = scale((exp(Gc)q)S + Aqk delta), Aqk_ij = q_i.exp(Gc_i-Gc_j)k_j (j<=i).
// FUSE_GATE: 1 in 2; FUSE_OUTPUT: 4 in 3 (no hs). q,k,g,w,u,gc [tokens,HEADS,KD]; v,dv,o
// [tokens,HEADS,VD]; beta [tokens,HEADS]; h0 (T), ht (fp32) [N,HEADS,KD,VD]; hs [chunks,HEADS,KD,VD];
// chunks[c] = {first token, length, sequence, 0}, seqs[s] = {first chunk, count, first token, 0}.
// fp32 math; exponents <= 0; fp32 rows padded by a float (no bank conflicts); arrays 16 B aligned.

constexpr int KP = KD + 1, VP = VD + 1, TP = VT + 1, AP = BT + 1;

__device__ __forceinline__ long tok_off(long tok, int h, int width) { return (tok * HEADS + h) * (long)width; }
// element e of the [KD][VT] tile at column v0 of state m (h0, ht: sequence m; hs: chunk m)
__device__ __forceinline__ long st_off(long m, int h, int v0, int e) {
    return (m * HEADS + h) * KD * VD + (long)(e / VT) * VD + v0 + e % VT;
}

extern "C" __global__ void __launch_bounds__(KD)
kda_gate_cumsum(const T* __restrict__ g, float* __restrict__ gc, const int* __restrict__ chunks) {
    const int c = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    const long tok0 = chunks[4 * c];
    const int n = chunks[4 * c + 1];
    float acc = 0.f;
    for (int i = 0; i < n; ++i) {
        const long at = tok_off(tok0 + i, h, KD) + d;
        acc += to_f(g[at]);
        gc[at] = acc;
    }
}

// ---- 2 ---- shared: ks [BT][KP], gs [BT][KP], us [BT][VP], A [BT][AP], bs [BT] (floats)
extern "C" __global__ void __launch_bounds__(NT, 1)
kda_wy(const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ g,
       const T* __restrict__ beta, float* __restrict__ gc, T* __restrict__ w, T* __restrict__ u,
       const int* __restrict__ chunks) {
    extern __shared__ float smem[];
    float *ks = smem, *gs = ks + BT * KP, *us = gs + BT * KP, *A = us + BT * VP, *bs = A + BT * AP;
    const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const long tok0 = chunks[4 * c];
    const int n = chunks[4 * c + 1];

    for (int e = tid; e < BT * KD; e += NT) {
        const int i = e / KD, d = e % KD;
        const bool in = i < n;
        ks[i * KP + d] = in ? to_f(k[tok_off(tok0 + i, h, KD) + d]) : 0.f;
#if !FUSE_GATE
        gs[i * KP + d] = in ? gc[tok_off(tok0 + i, h, KD) + d] : 0.f;
#endif
    }
    for (int e = tid; e < BT * VD; e += NT) {
        const int i = e / VD, d = e % VD;
        us[i * VP + d] = i < n ? to_f(v[tok_off(tok0 + i, h, VD) + d]) : 0.f;
    }
    for (int i = tid; i < BT; i += NT) bs[i] = i < n ? to_f(beta[(tok0 + i) * HEADS + h]) : 0.f;
#if FUSE_GATE
    for (int d = tid; d < KD; d += NT) {  // 1 fused: a thread per key channel
        float acc = 0.f;
        for (int i = 0; i < BT; ++i) {
            if (i < n) {
                const long at = tok_off(tok0 + i, h, KD) + d;
                acc += to_f(g[at]);
                gc[at] = acc;
            }
            gs[i * KP + d] = i < n ? acc : 0.f;
        }
    }
#endif
    __syncthreads();

    for (int e = tid; e < BT * BT; e += NT) {
        const int i = e / BT, j = e % BT;
        float a = 0.f;
        if (j < i && i < n) {
            const float *ki = ks + i * KP, *kj = ks + j * KP, *gi = gs + i * KP, *gj = gs + j * KP;
#pragma unroll 8
            for (int d = 0; d < KD; ++d) a += ki[d] * kj[d] * __expf(gi[d] - gj[d]);
            a *= bs[i];
        }
        A[i * AP + j] = a;
    }
    __syncthreads();

    // forward substitution, a column per thread: w over ks, u over us
    for (int col = tid; col < KD + VD; col += NT) {
        const bool is_w = col < KD;
        const int d = is_w ? col : col - KD;
        float* x = is_w ? ks + d : us + d;
        const int stride = is_w ? KP : VP;
        for (int i = 0; i < n; ++i) {
            float r = bs[i] * x[i * stride];
            if (is_w) r *= __expf(gs[i * KP + d]);
            for (int j = 0; j < i; ++j) r -= A[i * AP + j] * x[j * stride];
            x[i * stride] = r;
            if (is_w) w[tok_off(tok0 + i, h, KD) + d] = from_f<T>(r);
            else u[tok_off(tok0 + i, h, VD) + d] = from_f<T>(r);
        }
    }
}

// 4's body (also in 3): qb, kb, gb: q, k, Gc rows (>= n zero, qb overwritten); S, dl: columns v0..
__device__ __forceinline__ void chunk_output(float* qb, const float* kb, const float* gb, float* Aqk, const float* S,
    const float* dl, int n, long tok0, int h, int v0, float scale, T* __restrict__ o) {
    const int tid = threadIdx.x;
    for (int e = tid; e < BT * BT; e += NT) {
        const int i = e / BT, j = e % BT;
        float a = 0.f;
        if (j <= i && i < n) {
            const float *qi = qb + i * KP, *kj = kb + j * KP, *gi = gb + i * KP, *gj = gb + j * KP;
#pragma unroll 8
            for (int d = 0; d < KD; ++d) a += qi[d] * kj[d] * __expf(gi[d] - gj[d]);
        }
        Aqk[i * AP + j] = a;
    }
    __syncthreads();
    for (int e = tid; e < BT * KD; e += NT) qb[e / KD * KP + e % KD] *= __expf(gb[e / KD * KP + e % KD]);
    __syncthreads();
    for (int e = tid; e < n * VT; e += NT) {
        const int i = e / VT, vv = e % VT;
        const float* qi = qb + i * KP;
        float acc = 0.f;
#pragma unroll 8
        for (int d = 0; d < KD; ++d) acc += qi[d] * S[d * VT + vv];
        for (int j = 0; j <= i; ++j) acc += Aqk[i * AP + j] * dl[j * TP + vv];
        o[tok_off(tok0 + i, h, VD) + v0 + vv] = from_f<T>(scale * acc);
    }
}

template <typename E>
__device__ __forceinline__ void load_rows(float* dst, const E* __restrict__ src, long tok0, int h, int n) {
    for (int e = threadIdx.x; e < BT * KD; e += NT) {
        const int i = e / KD, d = e % KD;
        dst[i * KP + d] = i < n ? to_f(src[tok_off(tok0 + i, h, KD) + d]) : 0.f;
    }
}

// cp.async columns col0..+W of rows tok0.. (row width wd) into dst [BT][W]; rows >= n: zeros
template <int W, typename E>
__device__ __forceinline__ void stage_rows(void* dst, const E* __restrict__ src, long tok0, int h, int wd, int col0,
    int n) {
    constexpr int V = 16 / sizeof(E), CH = W / V;
    for (int e = threadIdx.x; e < BT * CH; e += NT) {
        const int i = e / CH, c = e % CH;
        ks_ampere::cp_async16(ks_ampere::smem_u32((E*)dst + i * W + c * V),
            src + tok_off(tok0 + (i < n ? i : 0), h, wd) + col0 + c * V, i < n ? 16 : 0);
    }
}

// ---- 3 ---- shared: STAGES x {w, k (T), gc (fp32) [BT][KD], u [BT][VT] (T) (+ q (T) if fused)},
// S [KD][VT], dl [BT][TP], glast [KD] (+ qb, kb, gb [BT][KP], Aqk [BT][AP] if fused). cp.async
// fills chunk j's stage (a commit group per chunk, empty past the last) while j-STAGES+1.. run.
constexpr int TB = sizeof(T) * BT * KD;  // bytes of a [BT][KD] T tile; offsets; a stage
constexpr int OG = 2 * TB, OU = OG + 4 * BT * KD, OQ = OU + sizeof(T) * BT * VT, STG = OQ + FUSE_OUTPUT * TB;
extern "C" __global__ void __launch_bounds__(NT, 1)
kda_state(const T* __restrict__ q, const T* __restrict__ k, const float* __restrict__ gc, const T* __restrict__ w,
    const T* __restrict__ u, const T* __restrict__ h0, T* __restrict__ hs, T* __restrict__ dv, T* __restrict__ o,
    float* __restrict__ ht, const int* __restrict__ seqs, const int* __restrict__ chunks, float scale) {
    extern __shared__ __align__(16) unsigned char ring[];
    float *S = (float*)(ring + STAGES * STG), *dl = S + KD * VT, *glast = dl + BT * TP;
#if FUSE_OUTPUT
    float *qb = glast + KD, *kb = qb + BT * KP, *gb = kb + BT * KP, *Aqk = gb + BT * KP;
#endif
    const int s = blockIdx.x, h = blockIdx.y, v0 = blockIdx.z * VT, tid = threadIdx.x;
    const int first = seqs[4 * s], count = seqs[4 * s + 1];
    auto issue = [&](int j) {
        if (j < count) {
            unsigned char* st = ring + j % STAGES * STG;
            const long t0 = chunks[4 * (first + j)];
            const int n = chunks[4 * (first + j) + 1];
            stage_rows<KD>(st, w, t0, h, KD, 0, n);
            stage_rows<KD>(st + TB, k, t0, h, KD, 0, n);
            stage_rows<KD>(st + OG, gc, t0, h, KD, 0, n);
            stage_rows<VT>(st + OU, u, t0, h, VD, v0, n);
            if (FUSE_OUTPUT) stage_rows<KD>(st + OQ, q, t0, h, KD, 0, n);
        }
        ks_ampere::cp_async_commit();
    };

    for (int e = tid; e < KD * VT; e += NT) S[e] = to_f(h0[st_off(s, h, v0, e)]);
    for (int j = 0; j < STAGES - 1; ++j) issue(j);
    for (int j = 0; j < count; ++j) {
        const int c = first + j;
        const long tok0 = chunks[4 * c];
        const int n = chunks[4 * c + 1];
        issue(j + STAGES - 1);  // into chunk j-1's stage: free, the loop ends in a barrier
#if !FUSE_OUTPUT
        for (int e = tid; e < KD * VT; e += NT) hs[st_off(c, h, v0, e)] = from_f<T>(S[e]);  // own S elements
#endif
        ks_ampere::cp_async_wait<STAGES - 1>();  // chunk j's group has landed
        __syncthreads();
        unsigned char* st = ring + j % STAGES * STG;
        const T* ks = (const T*)(st + TB);
        float* gs = (float*)(st + OG);
        for (int d = tid; d < KD; d += NT) glast[d] = gs[(n - 1) * KD + d];
        // delta = u - w S (fp32 here, bf16 in dv)
        for (int e = tid; e < BT * VT; e += NT) {
            const int i = e / VT, vv = e % VT;
            float acc = 0.f;
            if (i < n) {
                const T* wi = (const T*)st + i * KD;
#pragma unroll 8
                for (int d = 0; d < KD; ++d) acc += to_f(wi[d]) * S[d * VT + vv];
                acc = to_f(((const T*)(st + OU))[e]) - acc;
                dv[tok_off(tok0 + i, h, VD) + v0 + vv] = from_f<T>(acc);
            }
            dl[i * TP + vv] = acc;
        }
        __syncthreads();
#if FUSE_OUTPUT
        for (int e = tid; e < BT * KD; e += NT) {
            const int at = e / KD * KP + e % KD;
            qb[at] = to_f(((const T*)(st + OQ))[e]);
            kb[at] = to_f(ks[e]);
            gb[at] = gs[e];
        }
        __syncthreads();
        chunk_output(qb, kb, gb, Aqk, S, dl, n, tok0, h, v0, scale, o);
        __syncthreads();
#endif
        // gs <- decayed keys exp(G_n - G_i) k_i
        for (int e = tid; e < BT * KD; e += NT) gs[e] = to_f(ks[e]) * __expf(glast[e % KD] - gs[e]);
        __syncthreads();
        for (int e = tid; e < KD * VT; e += NT) {
            const int d = e / VT, vv = e % VT;
            float acc = __expf(glast[d]) * S[e];
            for (int i = 0; i < n; ++i) acc += gs[i * KD + d] * dl[i * TP + vv];
            S[e] = acc;
        }
        __syncthreads();
    }
    for (int e = tid; e < KD * VT; e += NT) ht[st_off(s, h, v0, e)] = S[e];
}

// ---- 4 ---- shared: qb, kb, gb [BT][KP], Aqk [BT][AP], S [KD][VT], dl [BT][TP]
extern "C" __global__ void __launch_bounds__(NT, 1)
kda_output(const T* __restrict__ q, const T* __restrict__ k, const float* __restrict__ gc, const T* __restrict__ hs,
    const T* __restrict__ dv, T* __restrict__ o, const int* __restrict__ chunks, float scale) {
    extern __shared__ float smem[];
    float *qb = smem, *kb = qb + BT * KP, *gb = kb + BT * KP, *Aqk = gb + BT * KP, *S = Aqk + BT * AP;
    float* dl = S + KD * VT;
    const int c = blockIdx.x, h = blockIdx.y, v0 = blockIdx.z * VT, tid = threadIdx.x;
    const long tok0 = chunks[4 * c];
    const int n = chunks[4 * c + 1];
    load_rows(qb, q, tok0, h, n);
    load_rows(kb, k, tok0, h, n);
    load_rows(gb, gc, tok0, h, n);
    for (int e = tid; e < KD * VT; e += NT) S[e] = to_f(hs[st_off(c, h, v0, e)]);
    for (int e = tid; e < BT * VT; e += NT) {
        const int i = e / VT, vv = e % VT;
        dl[i * TP + vv] = i < n ? to_f(dv[tok_off(tok0 + i, h, VD) + v0 + vv]) : 0.f;
    }
    __syncthreads();
    chunk_output(qb, kb, gb, Aqk, S, dl, n, tok0, h, v0, scale, o);
}
