// Row softmax: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
// One group of TPR threads per row (a warp or part of one for short rows, several warps for
// long ones); the row is cached in registers, so x is read once and y written once.
// Parameters: COLS (compile time), THREADS, TPR, VEC, FAST_EXP.
constexpr int NVEC = COLS / VEC;
constexpr int ITEMS = (NVEC + TPR - 1) / TPR;
constexpr int RPB = THREADS / TPR;
constexpr bool EXACT = (ITEMS * TPR == NVEC);

__device__ __forceinline__ float ks_exp(float x) {
#if FAST_EXP
    return __expf(x);
#else
    return expf(x);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
softmax(const T* __restrict__ x, T* __restrict__ y, int rows) {
    __shared__ float red[RPB * (TPR > 32 ? TPR / 32 : 1)];
    const int lane = threadIdx.x % TPR;
    const long row = (long)blockIdx.x * RPB + threadIdx.x / TPR;
    const bool active = row < rows;
    const Vec<VEC>* xr = reinterpret_cast<const Vec<VEC>*>(x + row * COLS);
    Vec<VEC>* yr = reinterpret_cast<Vec<VEC>*>(y + row * COLS);

    float v[ITEMS][VEC];
    float m = -CUDART_INF_F;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = i * TPR + lane;
        if (active && (EXACT || idx < NVEC)) {
            Vec<VEC> r = xr[idx];
#pragma unroll
            for (int j = 0; j < VEC; ++j) { v[i][j] = to_f(r.v[j]); m = fmaxf(m, v[i][j]); }
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[i][j] = -CUDART_INF_F;
        }
    }
    m = row_reduce<TPR, RPB, true>(m, red);
    if (!active) m = 0.f;  // keeps exp() finite in rows past the end; they write nothing
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
#pragma unroll
        for (int j = 0; j < VEC; ++j) { v[i][j] = ks_exp(v[i][j] - m); s += v[i][j]; }
    s = row_reduce<TPR, RPB, false>(s, red);
    const float inv = 1.f / s;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = i * TPR + lane;
        if (active && (EXACT || idx < NVEC)) {
            Vec<VEC> o;
#pragma unroll
            for (int j = 0; j < VEC; ++j) o.v[j] = from_f<T>(v[i][j] * inv);
            yr[idx] = o;
        }
    }
}
