// qnet_backward: the elementwise stage between the Q-network's backward GEMMs.
// Oracle: qnet::backward_from_head_grad (relu_backward).
//   qnet_relu_backward: d (rows x width) = a > 0 ? d : 0, the mask from the layer's stored
//                       activation a (rows x (width + 1), the last column the ones column).
// One warp per row at a time, warps grid-stride over the rows: any grid of whole warps.

extern "C" __global__ void qnet_relu_backward(float* __restrict__ d, const float* __restrict__ a,
                                              unsigned long long rows, unsigned int width) {
    const unsigned int lane = threadIdx.x % 32;
    const unsigned long long warps = (unsigned long long)gridDim.x * blockDim.x / 32;
    for (unsigned long long r = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
        float* dr = d + r * width;
        const float* ar = a + r * (width + 1ull);
        for (unsigned int c = lane; c < width; c += 32)
            if (!(ar[c] > 0.0f)) dr[c] = 0.0f;
    }
}
