// LayerNorm: y = (x - mean) / sqrt(var + EPS) * w + b over each row. Two passes over the row
// held in registers (mean, then the variance of centred values: no cancellation).
// Parameters: COLS (compile time), THREADS, TPR, VEC.
constexpr int NVEC = COLS / VEC;
constexpr int ITEMS = (NVEC + TPR - 1) / TPR;
constexpr int RPB = THREADS / TPR;
constexpr bool EXACT = (ITEMS * TPR == NVEC);

extern "C" __global__ void __launch_bounds__(THREADS)
layernorm(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
          T* __restrict__ y, int rows) {
    __shared__ float red[RPB * (TPR > 32 ? TPR / 32 : 1)];
    const int lane = threadIdx.x % TPR;
    const long row = (long)blockIdx.x * RPB + threadIdx.x / TPR;
    const bool active = row < rows;
    const Vec<VEC>* xr = reinterpret_cast<const Vec<VEC>*>(x + row * COLS);
    const Vec<VEC>* wv = reinterpret_cast<const Vec<VEC>*>(w);
    const Vec<VEC>* bv = reinterpret_cast<const Vec<VEC>*>(b);
    Vec<VEC>* yr = reinterpret_cast<Vec<VEC>*>(y + row * COLS);

    float v[ITEMS][VEC];
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = i * TPR + lane;
        if (active && (EXACT || idx < NVEC)) {
            Vec<VEC> r = xr[idx];
#pragma unroll
            for (int j = 0; j < VEC; ++j) { v[i][j] = to_f(r.v[j]); s += v[i][j]; }
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[i][j] = 0.f;
        }
    }
    const float mean = row_reduce<TPR, RPB, false>(s, red) / (float)COLS;
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = i * TPR + lane;
        if (EXACT || idx < NVEC) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) { const float d = v[i][j] - mean; q += d * d; }
        }
    }
    const float rstd = rsqrtf(row_reduce<TPR, RPB, false>(q, red) / (float)COLS + EPS);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = i * TPR + lane;
        if (active && (EXACT || idx < NVEC)) {
            Vec<VEC> wr = wv[idx], br = bv[idx];
            Vec<VEC> o;
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                o.v[j] = from_f<T>((v[i][j] - mean) * rstd * to_f(wr.v[j]) + to_f(br.v[j]));
            yr[idx] = o;
        }
    }
}
