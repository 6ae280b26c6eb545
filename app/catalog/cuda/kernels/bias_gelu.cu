// Fused bias + GELU (exact, erf form): y[r, c] = gelu(x[r, c] + b[c]).
// Each thread handles ITEMS vectors of VEC elements, spaced THREADS vectors apart (coalesced).
// Parameters: COLS (compile time), THREADS, VEC, ITEMS.
constexpr int VPR = COLS / VEC;  // vectors per row

__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }

extern "C" __global__ void __launch_bounds__(THREADS)
bias_gelu(const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ y, long nvec) {
    const Vec<VEC>* xv = reinterpret_cast<const Vec<VEC>*>(x);
    const Vec<VEC>* bv = reinterpret_cast<const Vec<VEC>*>(b);
    Vec<VEC>* yv = reinterpret_cast<Vec<VEC>*>(y);
    const long base = (long)blockIdx.x * THREADS * ITEMS + threadIdx.x;
    Vec<VEC> r[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {  // all loads first: ITEMS requests in flight per thread
        const long idx = base + (long)i * THREADS;
        if (idx < nvec) r[i] = xv[idx];
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long idx = base + (long)i * THREADS;
        if (idx < nvec) {
            Vec<VEC> bb = bv[idx % VPR];
            Vec<VEC> o;
#pragma unroll
            for (int j = 0; j < VEC; ++j) o.v[j] = from_f<T>(gelu(to_f(r[i].v[j]) + to_f(bb.v[j])));
            yv[idx] = o;
        }
    }
}
