// optimizer_grad_norm: global L2 norm of the flat gradient as a deterministic two-stage reduction
// in double, then the clip scale min(1, max_norm / (norm + 1e-6)), the Adam step counter
// advanced and the step's bias corrections 1 - beta^t, all in the device control block
// OptCtl. One launch: block b sums its grid-stride share into partial[b] (a fixed tree over
// the block); the block that finishes last sums the partials in index order, whichever
// block that is, so every launch gives the same bits. Oracle: qnet::grad_norm,
// qnet::clip_grads, qnet::adam_step (the corrections).
// Grid: any number of 256-thread blocks, `partial` one double per block, `done` a zero
// word (the last block returns it to zero).
#include "common/optimizer.cuh"
#include "common/block.cuh"
#include "common/grid.cuh"

extern "C" __global__ void optimizer_grad_norm(const float* __restrict__ g, unsigned long long n,
                                          double* __restrict__ partial, unsigned int* __restrict__ done,
                                          float max_norm, float beta1, float beta2, OptCtl* __restrict__ ctl) {
    __shared__ double s[256];
    double acc = 0.0;
    for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += gridDim.x * 256ull) {
        const double x = (double)g[i];
        acc += x * x;
    }
    const double block_total = block_sum_fixed(acc, s, 256);
    if (threadIdx.x == 0) partial[blockIdx.x] = block_total;
    if (!last_block_done(done)) return;

    acc = 0.0;
    for (unsigned int b = threadIdx.x; b < gridDim.x; b += 256) acc += __ldcg(partial + b);
    const double total = block_sum_fixed(acc, s, 256);
    if (threadIdx.x == 0) {
        const double norm = sqrt(total);
        const unsigned int step = ctl->step + 1u;
        const double t = (double)step;
        ctl->norm = (float)norm;
        ctl->scale = fmin(1.0, (double)max_norm / (norm + 1e-6));
        ctl->step = step;
        ctl->bias1 = 1.0 - pow((double)beta1, t);
        ctl->bias2 = 1.0 - pow((double)beta2, t);
    }
}
