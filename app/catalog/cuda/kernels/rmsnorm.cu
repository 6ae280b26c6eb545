// RMSNorm: y[r, c] = x[r, c] / sqrt(mean(x[r, :]^2) + EPS) * w[c].
// TPR threads per row, the row cached in registers (x read once, y written once).
// Parameters: COLS (compile time), THREADS, TPR, VEC.
constexpr int NVEC = COLS / VEC;
constexpr int ITEMS = (NVEC + TPR - 1) / TPR;
constexpr int RPB = THREADS / TPR;
constexpr bool EXACT = (ITEMS * TPR == NVEC);

extern "C" __global__ void __launch_bounds__(THREADS)
rmsnorm(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int rows) {
    __shared__ float red[RPB * (TPR > 32 ? TPR / 32 : 1)];
    const int lane = threadIdx.x % TPR;
    const long row = (long)blockIdx.x * RPB + threadIdx.x / TPR;
    const bool active = row < rows;
    const Vec<VEC>* xr = reinterpret_cast<const Vec<VEC>*>(x + row * COLS);
    const Vec<VEC>* wv = reinterpret_cast<const Vec<VEC>*>(w);
    Vec<VEC>* yr = reinterpret_cast<Vec<VEC>*>(y + row * COLS);

    float v[ITEMS][VEC];
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = i * TPR + lane;
        if (active && (EXACT || idx < NVEC)) {
            Vec<VEC> r = xr[idx];
#pragma unroll
            for (int j = 0; j < VEC; ++j) { v[i][j] = to_f(r.v[j]); ss += v[i][j] * v[i][j]; }
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[i][j] = 0.f;
        }
    }
    ss = row_reduce<TPR, RPB, false>(ss, red);
    const float scale = rsqrtf(ss / (float)COLS + EPS);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = i * TPR + lane;
        if (active && (EXACT || idx < NVEC)) {
            Vec<VEC> wr = wv[idx];
            Vec<VEC> o;
#pragma unroll
            for (int j = 0; j < VEC; ++j) o.v[j] = from_f<T>(v[i][j] * scale * to_f(wr.v[j]));
            yr[idx] = o;
        }
    }
}
