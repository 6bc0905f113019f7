// optimizer_adam: Adam with bias correction (Kingma and Ba 2015; PyTorch Adam, no weight decay) on
// the flat parameters, the gradient scaled by the clip scale; the step's clip scale and bias
// corrections read from the device control block (written by optimizer_grad_norm, which advanced
// the step). Arithmetic in double, each stored value rounded once to float.
// Oracle: qnet::adam_step after qnet::clip_grads.
// The mirror: parameters [mirror_from, mirror_from + mirror_count) also go to
// mirror[mirror_index[i - mirror_from]] (the online network's dense head matrix, so no
// qnet_head_matrix_scatter launch follows; qnet_head_matrix.cu); mirror_count 0 for none.
// Grid: grid-stride over n, any grid.
#include "common/optimizer.cuh"

extern "C" __global__ void optimizer_adam(float* __restrict__ p, const float* __restrict__ g,
                                     float* __restrict__ m, float* __restrict__ v, unsigned long long n,
                                     const OptCtl* __restrict__ ctl, float lr, float beta1, float beta2,
                                     float eps, const unsigned int* __restrict__ mirror_index,
                                     unsigned long long mirror_from, unsigned long long mirror_count,
                                     float* __restrict__ mirror) {
    const double b1 = beta1, b2 = beta2;
    const double scale = ctl->scale, bc1 = ctl->bias1, bc2 = ctl->bias2;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const double gi = (double)g[i] * scale;
        const double mi = b1 * (double)m[i] + (1.0 - b1) * gi;
        const double vi = b2 * (double)v[i] + (1.0 - b2) * gi * gi;
        m[i] = (float)mi;
        v[i] = (float)vi;
        const float pi = (float)((double)p[i] - (double)lr * (mi / bc1) / (sqrt(vi / bc2) + (double)eps));
        p[i] = pi;
        if (i - mirror_from < mirror_count) mirror[mirror_index[i - mirror_from]] = pi;
    }
}
