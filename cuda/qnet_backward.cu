// qnet_backward: the elementwise stage between the Q-network's backward GEMMs.
// Oracle: qnet::backward_from_head_grad (relu_backward).
//   qnet_relu_backward: d (rows x width) = a > 0 ? d : 0, the mask from the layer's stored
//                       activation a (rows x (width + 1), the last column the ones column).
// Grid: grid-stride over the elements, any grid.

extern "C" __global__ void qnet_relu_backward(float* __restrict__ d, const float* __restrict__ a,
                                              unsigned long long rows, unsigned int width) {
    const unsigned long long n = rows * width;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned long long r = i / width, c = i % width;
        if (!(a[r * (width + 1ull) + c] > 0.0f)) d[i] = 0.0f;
    }
}
