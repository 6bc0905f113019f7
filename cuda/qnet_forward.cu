// qnet_forward: the elementwise stages around the Q-network's forward GEMMs. Each layer
// with one input is a GEMM of an activation that carries a ones column with the layer's
// [w; b] matrix, so the bias rides in the GEMM; these kernels write the ones columns.
// Oracle: qnet::forward (h1, h2, heads_hidden).
//   qnet_stage_input: x (2B x (S + 1)) = [s | 1] in rows [0, B), [s' | 1] in rows [B, 2B).
//   qnet_relu:        a (rows x (width + 1)): a = a > 0 ? a : 0 in the first `width`
//                     columns (NaN becomes 0, as the oracle's relu), 1 in the last.
// Grid: grid-stride over the elements, any grid.

extern "C" __global__ void qnet_stage_input(const float* __restrict__ s, const float* __restrict__ s2,
                                            float* __restrict__ x, unsigned int batch, unsigned int dim) {
    const unsigned long long ld = dim + 1ull, n = 2ull * batch * ld;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned long long r = i / ld, c = i % ld;
        float v = 1.0f;
        if (c < dim) v = r < batch ? s[r * dim + c] : s2[(r - batch) * dim + c];
        x[i] = v;
    }
}

extern "C" __global__ void qnet_relu(float* __restrict__ a, unsigned long long rows, unsigned int width) {
    const unsigned long long ld = width + 1ull, n = rows * ld;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const float v = a[i];
        a[i] = i % ld == width ? 1.0f : (v > 0.0f ? v : 0.0f);
    }
}
