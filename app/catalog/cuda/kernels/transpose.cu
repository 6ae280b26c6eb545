// Transpose: out[c, r] = in[r, c] for in of shape rows x cols.
// A TILE x TILE tile goes through shared memory (PAD 1 avoids bank conflicts) so that both the
// read and the write are coalesced; SMEM 0 is the direct, uncoalesced-write version.
// Parameters: TILE, BLOCK_ROWS, PAD, SMEM.
extern "C" __global__ void __launch_bounds__(TILE * BLOCK_ROWS)
transpose(const T* __restrict__ in, T* __restrict__ out, int rows, int cols) {
    const int c0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
#if SMEM
    __shared__ T tile[TILE][TILE + PAD];
#pragma unroll
    for (int i = threadIdx.y; i < TILE; i += BLOCK_ROWS) {
        const int r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[i][threadIdx.x] = in[(long)r * cols + c];
    }
    __syncthreads();
#pragma unroll
    for (int i = threadIdx.y; i < TILE; i += BLOCK_ROWS) {
        const int c = c0 + i, r = r0 + threadIdx.x;
        if (r < rows && c < cols) out[(long)c * rows + r] = tile[threadIdx.x][i];
    }
#else
#pragma unroll
    for (int i = threadIdx.y; i < TILE; i += BLOCK_ROWS) {
        const int r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) out[(long)c * rows + r] = in[(long)r * cols + c];
    }
#endif
}
