// qnet_forward: the Q-network forward's first layer. The layers after it are cuBLASLt
// products of an activation that carries a ones column with the layer's [w; b] matrix, so
// the bias rides in the product, with the ReLU in its epilogue. Oracle: qnet::forward (h1).
//   qnet_first_layer: a1 = relu([x | 1] [w1; b1]) with its ones column, for `nets`
//                     networks (grid (rows, nets)): the first layer's few inputs (S + 1)
//                     make it a short dot product per output, one thread each in float FMA
//                     order k = 0..S, where a GEMM launch (often split over K, so two
//                     kernels) and a ReLU launch would cost three. It stages its own input
//                     rows: the update's x = [s | 1] in rows [0, B), [s' | 1] in rows
//                     [B, 2B), which it also writes out for the backward's weight gradient
//                     (a launch of its own before, 2.7 us at B = 256), or acting's x as
//                     state_gather wrote it.

// Grid (ceil(rows / QNET_FIRST_ROWS), nets), any block size; dynamic shared memory:
// QNET_FIRST_ROWS (S + 1) floats (the block's input rows). Each thread keeps one column of
// [w1; b1] in flight across the block's rows, so a block reads the layer once for
// QNET_FIRST_ROWS rows. Input row r (shared by the networks): its first S values at
// s + r in_ld for r < split, else at s2 + (r - split) in_ld, then the ones column; x, if not
// null, receives the rows as staged (rows x (S + 1), written by network 0's blocks);
// w1: net n's [w1; b1] ((S + 1) x h1, row-major) at n * param_stride; a1: nets x rows x (h1 + 1).
#define QNET_FIRST_ROWS 8

extern "C" __global__ void qnet_first_layer(const float* __restrict__ s, const float* __restrict__ s2,
                                            unsigned long long split, unsigned int in_ld, unsigned int dim,
                                            unsigned long long rows, const float* __restrict__ w1,
                                            unsigned long long param_stride, unsigned int h1, float* __restrict__ a1,
                                            float* __restrict__ x) {
    extern __shared__ float x_rows[];
    const unsigned long long r0 = (unsigned long long)blockIdx.x * QNET_FIRST_ROWS, net = blockIdx.y;
    const unsigned int ld = dim + 1, here = (unsigned int)min((unsigned long long)QNET_FIRST_ROWS, rows - r0);
    for (unsigned int e = threadIdx.x; e < here * ld; e += blockDim.x) {
        const unsigned int r = e / ld, c = e - r * ld;
        const unsigned long long row = r0 + r;
        const float* in = row < split ? s + row * in_ld : s2 + (row - split) * in_ld;
        const float v = c < dim ? in[c] : 1.0f;
        x_rows[e] = v;
        if (x != nullptr && net == 0) x[r0 * ld + e] = v;
    }
    __syncthreads();
    const float* w = w1 + net * param_stride;
    float* out = a1 + (net * rows + r0) * (h1 + 1ull);
    for (unsigned int c = threadIdx.x; c < h1; c += blockDim.x) {
        float acc[QNET_FIRST_ROWS];
#pragma unroll
        for (unsigned int r = 0; r < QNET_FIRST_ROWS; ++r) acc[r] = 0.0f;
        // Unrolled so that eight loads of w are in flight at once: one k at a time, each
        // iteration waited a memory latency for its weight.
#pragma unroll 8
        for (unsigned int k = 0; k < ld; ++k) {
            const float wk = w[(unsigned long long)k * h1 + c];
#pragma unroll
            for (unsigned int r = 0; r < QNET_FIRST_ROWS; ++r)
                if (r < here) acc[r] = __fmaf_rn(x_rows[r * ld + k], wk, acc[r]);
        }
#pragma unroll
        for (unsigned int r = 0; r < QNET_FIRST_ROWS; ++r)
            if (r < here) out[r * (h1 + 1ull) + c] = acc[r] > 0.0f ? acc[r] : 0.0f;
    }
    if (threadIdx.x < here) out[threadIdx.x * (h1 + 1ull) + h1] = 1.0f;
}
