// qnet_head_matrix: the heads' output layers as ONE dense matrix for the GEMMs. The value head's
// wv2 [vh x NA] and each branch's wa2_k [ah x n_k NA] are the blocks of a block-diagonal
// [H x O] matrix (H = vh + K ah, O = NA (1 + sum n_k)), with the bias bo as row H: the
// [(H + 1) x O] matrix that the heads' hidden activation with its ones column multiplies.
// Backward, dW (bias row included) and d(hidden) are then one GEMM each; forward, each
// head's GEMM reads its block in place. The flat parameter buffer keeps the compact tensors
// (the oracle's layout, wv2, wa2_0.., bo contiguous from wv2's offset); `index[e]` is the
// dense position of compact element e (built on the host from the layout). Off-block
// entries are zero from allocation and never written.
//   qnet_head_matrix_scatter: dense[net][index[e]] = params[net][wv2 + e] for nets [0, nets).
//   qnet_head_matrix_gather:  compact[e] = dense_grad[index[e]].
// Grid: grid-stride over the elements, any grid. Oracle: qnet::layout (positions),
// qnet::head_outputs (the product).

extern "C" __global__ void qnet_head_matrix_scatter(const float* __restrict__ params, unsigned long long param_stride,
                                              unsigned long long wv2_offset, const unsigned int* __restrict__ index,
                                              unsigned int count, unsigned long long dense_stride, unsigned int nets,
                                              float* __restrict__ dense) {
    const unsigned long long n = (unsigned long long)count * nets;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned int net = (unsigned int)(i / count), e = (unsigned int)(i % count);
        dense[net * dense_stride + index[e]] = params[net * param_stride + wv2_offset + e];
    }
}

extern "C" __global__ void qnet_head_matrix_gather(const float* __restrict__ dense_grad, const unsigned int* __restrict__ index,
                                             unsigned int count, float* __restrict__ compact) {
    for (unsigned int e = blockIdx.x * blockDim.x + threadIdx.x; e < count; e += gridDim.x * blockDim.x)
        compact[e] = dense_grad[index[e]];
}
