// 2-D convolution (correlation) on the GPU, written for KernelSwarm with the tunable parameters
// of the recorded convolution space. Each thread computes tile_size_x x tile_size_y outputs;
// use_shmem stages the block's input window in shared memory (use_padding adds a column against
// bank conflicts), read_only reads global memory through the read-only cache, use_cmem reads the
// filter through the uniform read-only path. out is h x w; image is (h+fh-1) x (w+fw-1).

#define border_w (filter_width - 1)
#define border_h (filter_height - 1)
#if read_only
#define LOAD(p) __ldg(p)
#else
#define LOAD(p) (*(p))
#endif
#if use_cmem
#define FILTER(i) __ldg(&filter[i])
#else
#define FILTER(i) filter[i]
#endif

__global__ void convolution(float *out, const float *__restrict__ image,
                            const float *__restrict__ filter, int w, int h)
{
    const int iw = w + border_w;
    const int x0 = blockIdx.x * block_size_x * tile_size_x;
    const int y0 = blockIdx.y * block_size_y * tile_size_y;
    float acc[tile_size_y][tile_size_x];
#pragma unroll
    for (int ty = 0; ty < tile_size_y; ty++)
#pragma unroll
        for (int tx = 0; tx < tile_size_x; tx++) acc[ty][tx] = 0.0f;
#if use_shmem
    const int sw = block_size_x * tile_size_x + border_w;
    const int sh_rows = block_size_y * tile_size_y + border_h;
    __shared__ float window[block_size_y * tile_size_y + border_h][block_size_x * tile_size_x + border_w + use_padding];
    for (int r = threadIdx.y; r < sh_rows; r += block_size_y)
        for (int c = threadIdx.x; c < sw; c += block_size_x) {
            const int gy = y0 + r, gx = x0 + c;
            window[r][c] = (gy < h + border_h && gx < iw) ? LOAD(&image[(long)gy * iw + gx]) : 0.0f;
        }
    __syncthreads();
#endif
    for (int fy = 0; fy < filter_height; fy++)
        for (int fx = 0; fx < filter_width; fx++) {
            const float f = FILTER(fy * filter_width + fx);
#pragma unroll
            for (int ty = 0; ty < tile_size_y; ty++)
#pragma unroll
                for (int tx = 0; tx < tile_size_x; tx++) {
                    const int ly = threadIdx.y + ty * block_size_y, lx = threadIdx.x + tx * block_size_x;
#if use_shmem
                    acc[ty][tx] += window[ly + fy][lx + fx] * f;
#else
                    const int gy = y0 + ly + fy, gx = x0 + lx + fx;
                    if (gy < h + border_h && gx < iw) acc[ty][tx] += LOAD(&image[(long)gy * iw + gx]) * f;
#endif
                }
        }
#pragma unroll
    for (int ty = 0; ty < tile_size_y; ty++)
#pragma unroll
        for (int tx = 0; tx < tile_size_x; tx++) {
            const int y = y0 + threadIdx.y + ty * block_size_y, x = x0 + threadIdx.x + tx * block_size_x;
            if (y < h && x < w) out[(long)y * w + x] = acc[ty][tx];
        }
}
