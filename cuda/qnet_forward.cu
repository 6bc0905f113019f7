// qnet_forward: the elementwise stages around the Q-network's forward GEMMs. Each layer
// with one input is a GEMM of an activation that carries a ones column with the layer's
// [w; b] matrix, so the bias rides in the GEMM; these kernels write the ones columns.
// Oracle: qnet::forward (h1, h2, heads_hidden).
//   qnet_stage_input: x (2B x (S + 1)) = [s | 1] in rows [0, B), [s' | 1] in rows [B, 2B).
//   qnet_relu:        a (rows x (width + 1)): a = a > 0 ? a : 0 in the first `width`
//                     columns (NaN becomes 0, as the oracle's relu), 1 in the last.
// One warp per row at a time (lanes along the row, so no index division), warps
// grid-stride over the rows: any grid of whole warps.

extern "C" __global__ void qnet_stage_input(const float* __restrict__ s, const float* __restrict__ s2,
                                            float* __restrict__ x, unsigned int batch, unsigned int dim) {
    const unsigned int lane = threadIdx.x % 32;
    const unsigned long long rows = 2ull * batch, warps = (unsigned long long)gridDim.x * blockDim.x / 32;
    for (unsigned long long r = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
        const float* src = r < batch ? s + r * dim : s2 + (r - batch) * dim;
        float* row = x + r * (dim + 1ull);
        for (unsigned int c = lane; c < dim; c += 32) row[c] = src[c];
        if (lane == 0) row[dim] = 1.0f;
    }
}

extern "C" __global__ void qnet_relu(float* __restrict__ a, unsigned long long rows, unsigned int width) {
    const unsigned int lane = threadIdx.x % 32;
    const unsigned long long warps = (unsigned long long)gridDim.x * blockDim.x / 32;
    for (unsigned long long r = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
        float* row = a + r * (width + 1ull);
        for (unsigned int c = lane; c < width; c += 32) {
            const float v = row[c];
            row[c] = v > 0.0f ? v : 0.0f;
        }
        if (lane == 0) row[width] = 1.0f;
    }
}
