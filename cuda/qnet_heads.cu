// qnet_heads: the heads' output layers as ONE dense matrix for the GEMMs. The value head's
// wv2 [vh x NA] and each branch's wa2_k [ah x n_k NA] are blocks of a block-diagonal
// [H x O] matrix (H = vh + K ah, O = NA (1 + sum n_k)); with the bias bo as row H it is the
// [(H + 1) x O] matrix that multiplies the heads' hidden activation with its ones column, so
// all heads' outputs and biases are one GEMM forward, and dW and d(hidden) are one GEMM each
// backward. The flat parameter buffer keeps the compact tensors (the oracle's layout); these
// kernels move between the two.
//   qnet_heads_scatter: dense[net] = the block-diagonal matrix of params[net], zeros off the
//                       blocks, for nets [0, nets); every element is written.
//   qnet_heads_gather:  the compact gradient (wv2, wa2_k, bo, contiguous from wv2's offset in
//                       the flat gradient) from the dense gradient [(H + 1) x O].
// Grid: grid-stride, any grid. Oracle: qnet::layout (positions), qnet::forward (the product).
#include "common/qnet.cuh"

struct HeadsDims {
    unsigned int vh, ah, na, nbranch, hidden, out;
};

// The compact position (relative to wv2's offset) of dense element (r, c), or -1 if off the
// blocks. Row `hidden` is bo. Blocks: value rows [0, vh) x columns [0, NA); branch k rows
// [vh + k ah, vh + (k + 1) ah) x columns [out[k + 1], out[k + 2]).
__device__ __forceinline__ long long heads_compact_index(const BranchShape& s, HeadsDims d, unsigned int r,
                                                         unsigned int c) {
    const unsigned long long value_len = (unsigned long long)d.vh * d.na;
    unsigned long long adv_len = 0;
    for (unsigned int k = 0; k < d.nbranch; ++k) adv_len += (unsigned long long)d.ah * s.n[k] * d.na;
    if (r == d.hidden) return (long long)(value_len + adv_len + c);
    if (r < d.vh) return c < d.na ? (long long)((unsigned long long)r * d.na + c) : -1;
    const unsigned int k = (r - d.vh) / d.ah, rr = (r - d.vh) % d.ah;
    if (c < s.out[k + 1] || c >= s.out[k + 2]) return -1;
    unsigned long long at = value_len;
    for (unsigned int j = 0; j < k; ++j) at += (unsigned long long)d.ah * s.n[j] * d.na;
    const unsigned int width = s.n[k] * d.na;
    return (long long)(at + (unsigned long long)rr * width + (c - s.out[k + 1]));
}

extern "C" __global__ void qnet_heads_scatter(const float* __restrict__ params, unsigned long long param_stride,
                                              unsigned long long wv2_offset, const unsigned int* __restrict__ branches,
                                              HeadsDims d, unsigned int nets, float* __restrict__ dense) {
    __shared__ BranchShape shape;
    if (threadIdx.x == 0) branch_shape(shape, branches, d.nbranch, d.na);
    __syncthreads();
    const unsigned long long per_net = (unsigned long long)(d.hidden + 1) * d.out, n = per_net * nets;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned long long net = i / per_net, e = i % per_net;
        const long long at = heads_compact_index(shape, d, (unsigned int)(e / d.out), (unsigned int)(e % d.out));
        dense[i] = at < 0 ? 0.0f : params[net * param_stride + wv2_offset + (unsigned long long)at];
    }
}

extern "C" __global__ void qnet_heads_gather(const float* __restrict__ dense_grad,
                                             const unsigned int* __restrict__ branches, HeadsDims d,
                                             float* __restrict__ compact) {
    __shared__ BranchShape shape;
    if (threadIdx.x == 0) branch_shape(shape, branches, d.nbranch, d.na);
    __syncthreads();
    const unsigned long long n = (unsigned long long)(d.hidden + 1) * d.out;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const long long at = heads_compact_index(shape, d, (unsigned int)(i / d.out), (unsigned int)(i % d.out));
        if (at >= 0) compact[at] = dense_grad[i];
    }
}
