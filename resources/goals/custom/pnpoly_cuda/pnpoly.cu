// Point-in-polygon (even-odd rule) on the GPU, written for KernelSwarm with the tunable
// parameters of the recorded pnpoly space: block_size_x threads per block, tile_size points per
// thread, between_method (how "the edge spans the point's y" is tested) and use_method (how the
// crossing flips the result). Every variant computes the same float expression per point and
// edge, so the result is exact.

__device__ __forceinline__ int spans(float py, float yj, float yk)
{
#if between_method == 0
    return (yk > py) != (yj > py);
#elif between_method == 1
    return (int)(yk > py) ^ (int)(yj > py);
#elif between_method == 2
    return ((int)(yk > py) + (int)(yj > py)) == 1;
#else
    return ((yk > py) && !(yj > py)) || (!(yk > py) && (yj > py));
#endif
}

__global__ void __launch_bounds__(block_size_x) pnpoly(float *inside, const float2 *points,
                                                       const float2 *vertices, int n, int nv)
{
    const int first = blockIdx.x * block_size_x * tile_size + threadIdx.x;
    int odd[tile_size];
    float2 p[tile_size];
#pragma unroll
    for (int t = 0; t < tile_size; t++) {
        odd[t] = 0;
        const int i = first + t * block_size_x;
        p[t] = i < n ? points[i] : make_float2(0.0f, 0.0f);
    }
    for (int j = nv - 1, k = 0; k < nv; j = k++) {
        const float2 vj = vertices[j], vk = vertices[k];
#pragma unroll
        for (int t = 0; t < tile_size; t++) {
            const int c = spans(p[t].y, vj.y, vk.y) &&
                          (p[t].x < (vj.x - vk.x) * (p[t].y - vk.y) / (vj.y - vk.y) + vk.x);
#if use_method == 0
            if (c) odd[t] = !odd[t];
#elif use_method == 1
            odd[t] ^= c;
#else
            odd[t] += c;  // a count; its parity is the answer
#endif
        }
    }
#pragma unroll
    for (int t = 0; t < tile_size; t++) {
        const int i = first + t * block_size_x;
        if (i < n) inside[i] = (float)(odd[t] & 1);
    }
}
