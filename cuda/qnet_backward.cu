// qnet_backward: the elementwise stage between the Q-network's backward GEMMs.
// Oracle: qnet::backward_from_head_grad (relu_backward).
//   qnet_relu_backward: d (rows x width) = a > 0 ? d : 0, the mask from the layer's stored
//                       activation a (rows x (width + 1), the last column the ones column).
// One thread per element, grid-stride (any grid); an element's row and column come from a
// 32-bit division whenever the matrix has fewer than 2^32 elements (common/index.cuh: a
// 64-bit one costs several times more).
#include "common/index.cuh"

extern "C" __global__ void qnet_relu_backward(float* __restrict__ d, const float* __restrict__ a,
                                              unsigned long long rows, unsigned int width) {
    const unsigned long long n = rows * width;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const RowCol e = row_col(i, width, n);
        if (!(a[e.r * (width + 1ull) + e.c] > 0.0f)) d[i] = 0.0f;
    }
}
