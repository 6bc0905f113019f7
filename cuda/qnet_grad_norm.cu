// qnet_grad_norm: global L2 norm of the flat gradient as a deterministic two-stage reduction
// in double, then the clip scale min(1, max_norm / (norm + 1e-6)) and the Adam step counter
// advanced, all in the device control block OptCtl. Oracle: qnet::grad_norm, qnet::clip_grads.
//   qnet_grad_norm_partial:  any grid of 256-thread blocks; block b writes partial[b]
//                            (grid-stride sum per thread, then a fixed tree over the block).
//   qnet_grad_norm_finalize: ONE block of 256 threads over `blocks` partials.
#include "common/qnet.cuh"

__device__ __forceinline__ double block_sum_256(double v) {
    __shared__ double s[256];
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int stride = 128; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    return s[0];
}

extern "C" __global__ void qnet_grad_norm_partial(const float* __restrict__ g, unsigned long long n,
                                                  double* __restrict__ partial) {
    double acc = 0.0;
    for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += gridDim.x * 256ull) {
        const double x = (double)g[i];
        acc += x * x;
    }
    const double total = block_sum_256(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

extern "C" __global__ void qnet_grad_norm_finalize(const double* __restrict__ partial, unsigned int blocks,
                                                   float max_norm, OptCtl* __restrict__ ctl) {
    double acc = 0.0;
    for (unsigned int b = threadIdx.x; b < blocks; b += 256) acc += partial[b];
    const double total = block_sum_256(acc);
    if (threadIdx.x == 0) {
        const double norm = sqrt(total);
        const double scale = fmin(1.0, (double)max_norm / (norm + 1e-6));
        ctl->norm = (float)norm;
        ctl->scale = scale;
        ctl->step += 1u;
    }
}
