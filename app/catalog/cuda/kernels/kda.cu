// KDA forward (chunked gated delta rule, per-channel decay; fla's chunk_kda): four kernels the
// harness runs in order (app.catalog.cuda.kda). Per chunk of BT tokens, Gc = cumsum of g:
//   kda_gate_cumsum  Gc                                                            [stage 1]
//   kda_wy           A_ij = beta_i k_i.exp(Gc_i-Gc_j)k_j (j<i); (I+A)w = beta exp(Gc)k,
//                    (I+A)u = beta v by forward substitution (UT/WY)                [stage 2]
//   kda_state        per sequence, chunk by chunk: delta = u - wS, S stored (hs),
//                    S <- exp(Gc_n)S + (exp(Gc_n-Gc_j)k_j)^T delta                  [stage 3]
//   kda_output       o = scale((exp(Gc)q)S + Aqk delta), Aqk_ij = q_i.exp(Gc_i-Gc_j)k_j, j<=i [4]
// FUSE_GATE: stage 1 inside kda_wy; FUSE_OUTPUT: stage 4 inside kda_state (no hs).
// q,k,g,w,u,gc [tokens,HEADS,KD]; v,dv,o [tokens,HEADS,VD]; beta [tokens,HEADS]; h0 (bf16),
// ht (fp32) [N,HEADS,KD,VD]; hs [chunks,HEADS,KD,VD]. chunks[c] = {first token, length,
// sequence, 0}, seqs[s] = {first chunk, count, first token, 0}. fp32 accumulation; exponents
// are always <= 0 (no overflow); shared rows padded by one float (no bank conflicts).

constexpr int KP = KD + 1;          // padded row of a [BT][KD] shared buffer
constexpr int VP = VD + 1;
constexpr int TP = VT + 1;
constexpr int AP = BT + 1;

__device__ __forceinline__ long tok_off(long tok, int h, int width) {
    return (tok * HEADS + h) * (long)width;
}

// ---- stage 1 ----
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

// ---- stage 2 ----
// shared: ks [BT][KP], gs [BT][KP], us [BT][VP], A [BT][AP], bs [BT] (floats)
extern "C" __global__ void __launch_bounds__(NT, 1)
kda_wy(const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ g,
       const T* __restrict__ beta, float* __restrict__ gc, T* __restrict__ w, T* __restrict__ u,
       const int* __restrict__ chunks) {
    extern __shared__ float smem[];
    float* ks = smem;
    float* gs = ks + BT * KP;
    float* us = gs + BT * KP;
    float* A = us + BT * VP;
    float* bs = A + BT * AP;
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
    for (int d = tid; d < KD; d += NT) {  // stage 1 fused: one thread per key channel
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

    // A_ij = beta_i sum_d k_i,d k_j,d exp(G_i,d - G_j,d), j < i
    for (int e = tid; e < BT * BT; e += NT) {
        const int i = e / BT, j = e % BT;
        float a = 0.f;
        if (j < i && i < n) {
            const float* ki = ks + i * KP;
            const float* kj = ks + j * KP;
            const float* gi = gs + i * KP;
            const float* gj = gs + j * KP;
#pragma unroll 8
            for (int d = 0; d < KD; ++d) a += ki[d] * kj[d] * __expf(gi[d] - gj[d]);
            a *= bs[i];
        }
        A[i * AP + j] = a;
    }
    __syncthreads();

    // forward substitution, a column per thread: w overwrites ks, u overwrites us
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

// ---- stage 4 body (also fused into stage 3) ----
// qb, kb, gb: q, k, Gc rows (>= n zero); S [KD][VT], dl [BT][TP]: columns v0.. (qb overwritten)
__device__ __forceinline__ void chunk_output(float* qb, const float* kb, const float* gb, float* Aqk,
                                             const float* S, const float* dl, int n, long tok0, int h,
                                             int v0, float scale, T* __restrict__ o) {
    const int tid = threadIdx.x;
    for (int e = tid; e < BT * BT; e += NT) {
        const int i = e / BT, j = e % BT;
        float a = 0.f;
        if (j <= i && i < n) {
            const float* qi = qb + i * KP;
            const float* kj = kb + j * KP;
            const float* gi = gb + i * KP;
            const float* gj = gb + j * KP;
#pragma unroll 8
            for (int d = 0; d < KD; ++d) a += qi[d] * kj[d] * __expf(gi[d] - gj[d]);
        }
        Aqk[i * AP + j] = a;
    }
    __syncthreads();
    for (int e = tid; e < BT * KD; e += NT) {
        const int i = e / KD, d = e % KD;
        qb[i * KP + d] *= __expf(gb[i * KP + d]);
    }
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

__device__ __forceinline__ void load_rows(float* dst, const T* __restrict__ src, long tok0, int h, int n) {
    for (int e = threadIdx.x; e < BT * KD; e += NT) {
        const int i = e / KD, d = e % KD;
        dst[i * KP + d] = i < n ? to_f(src[tok_off(tok0 + i, h, KD) + d]) : 0.f;
    }
}

__device__ __forceinline__ void load_rows(float* dst, const float* __restrict__ src, long tok0, int h, int n) {
    for (int e = threadIdx.x; e < BT * KD; e += NT) {
        const int i = e / KD, d = e % KD;
        dst[i * KP + d] = i < n ? src[tok_off(tok0 + i, h, KD) + d] : 0.f;
    }
}

// ---- stage 3 ----
// shared: S [KD][VT], buf [BT][KP], dl [BT][TP], glast [KD] (+ kb, gb, Aqk when fused)
extern "C" __global__ void __launch_bounds__(NT, 1)
kda_state(const T* __restrict__ q, const T* __restrict__ k, const float* __restrict__ gc,
          const T* __restrict__ w, const T* __restrict__ u, const T* __restrict__ h0,
          T* __restrict__ hs, T* __restrict__ dv, T* __restrict__ o, float* __restrict__ ht,
          const int* __restrict__ seqs, const int* __restrict__ chunks, float scale) {
    extern __shared__ float smem[];
    float* S = smem;
    float* buf = S + KD * VT;
    float* dl = buf + BT * KP;
    float* glast = dl + BT * TP;
#if FUSE_OUTPUT
    float* kb = glast + KD;
    float* gb = kb + BT * KP;
    float* Aqk = gb + BT * KP;
#endif
    const int s = blockIdx.x, h = blockIdx.y, v0 = blockIdx.z * VT, tid = threadIdx.x;
    const int first = seqs[4 * s], count = seqs[4 * s + 1];
    const long state_at = ((long)s * HEADS + h) * KD * VD;

    for (int e = tid; e < KD * VT; e += NT) {
        const int d = e / VT, vv = e % VT;
        S[e] = to_f(h0[state_at + (long)d * VD + v0 + vv]);
    }
    __syncthreads();
    for (int c = first; c < first + count; ++c) {
        const long tok0 = chunks[4 * c];
        const int n = chunks[4 * c + 1];
#if !FUSE_OUTPUT
        const long chunk_at = ((long)c * HEADS + h) * KD * VD;
        for (int e = tid; e < KD * VT; e += NT) {
            const int d = e / VT, vv = e % VT;
            hs[chunk_at + (long)d * VD + v0 + vv] = from_f<T>(S[e]);
        }
#endif
        load_rows(buf, w, tok0, h, n);
        for (int d = tid; d < KD; d += NT) glast[d] = gc[tok_off(tok0 + n - 1, h, KD) + d];
        __syncthreads();
        // delta = u - w S (fp32 here, bf16 in dv)
        for (int e = tid; e < BT * VT; e += NT) {
            const int i = e / VT, vv = e % VT;
            float acc = 0.f;
            if (i < n) {
                const float* wi = buf + i * KP;
#pragma unroll 8
                for (int d = 0; d < KD; ++d) acc += wi[d] * S[d * VT + vv];
                const long at = tok_off(tok0 + i, h, VD) + v0 + vv;
                acc = to_f(u[at]) - acc;
                dv[at] = from_f<T>(acc);
            }
            dl[i * TP + vv] = acc;
        }
        __syncthreads();
#if FUSE_OUTPUT
        load_rows(buf, q, tok0, h, n);
        load_rows(kb, k, tok0, h, n);
        load_rows(gb, gc, tok0, h, n);
        __syncthreads();
        chunk_output(buf, kb, gb, Aqk, S, dl, n, tok0, h, v0, scale, o);
        __syncthreads();
#endif
        // decayed keys exp(G_n - G_i) k_i into buf
        for (int e = tid; e < BT * KD; e += NT) {
            const int i = e / KD, d = e % KD;
            float x = 0.f;
            if (i < n) {
                const long at = tok_off(tok0 + i, h, KD) + d;
                x = to_f(k[at]) * __expf(glast[d] - gc[at]);
            }
            buf[i * KP + d] = x;
        }
        __syncthreads();
        for (int e = tid; e < KD * VT; e += NT) {
            const int d = e / VT, vv = e % VT;
            float acc = __expf(glast[d]) * S[e];
            for (int i = 0; i < n; ++i) acc += buf[i * KP + d] * dl[i * TP + vv];
            S[e] = acc;
        }
        __syncthreads();
    }
    for (int e = tid; e < KD * VT; e += NT) {
        const int d = e / VT, vv = e % VT;
        ht[state_at + (long)d * VD + v0 + vv] = S[e];
    }
}

// ---- stage 4 ----
// shared: qb, kb, gb [BT][KP], Aqk [BT][AP], S [KD][VT], dl [BT][TP]
extern "C" __global__ void __launch_bounds__(NT, 1)
kda_output(const T* __restrict__ q, const T* __restrict__ k, const float* __restrict__ gc,
           const T* __restrict__ hs, const T* __restrict__ dv, T* __restrict__ o,
           const int* __restrict__ chunks, float scale) {
    extern __shared__ float smem[];
    float* qb = smem;
    float* kb = qb + BT * KP;
    float* gb = kb + BT * KP;
    float* Aqk = gb + BT * KP;
    float* S = Aqk + BT * AP;
    float* dl = S + KD * VT;
    const int c = blockIdx.x, h = blockIdx.y, v0 = blockIdx.z * VT, tid = threadIdx.x;
    const long tok0 = chunks[4 * c];
    const int n = chunks[4 * c + 1];
    const long chunk_at = ((long)c * HEADS + h) * KD * VD;
    load_rows(qb, q, tok0, h, n);
    load_rows(kb, k, tok0, h, n);
    load_rows(gb, gc, tok0, h, n);
    for (int e = tid; e < KD * VT; e += NT) {
        const int d = e / VT, vv = e % VT;
        S[e] = to_f(hs[chunk_at + (long)d * VD + v0 + vv]);
    }
    for (int e = tid; e < BT * VT; e += NT) {
        const int i = e / VT, vv = e % VT;
        dl[i * TP + vv] = i < n ? to_f(dv[tok_off(tok0 + i, h, VD) + v0 + vv]) : 0.f;
    }
    __syncthreads();
    chunk_output(qb, kb, gb, Aqk, S, dl, n, tok0, h, v0, scale, o);
}
