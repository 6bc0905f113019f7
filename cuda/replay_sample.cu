// replay_sample: B stratified thresholds by Philox at ctl->sample_step over the total in tree[1],
// a sum-tree descent for each, importance weights (p_i / p_min)^-beta with beta from the
// step; then advances ctl->sample_step. Oracle: replay::replay_sample.
// Grid: ONE block, a multiple of 32 threads up to 1024, looping over any B.
#include "common/philox.cuh"
#include "common/replay.cuh"
#include "common/block.cuh"

extern "C" __global__ void replay_sample(const float* __restrict__ tree, unsigned int leaves,
                                      ReplayCtl* __restrict__ ctl,
                                      unsigned int key0, unsigned int key1,
                                      float beta0, float beta_inc,
                                      unsigned int batch,
                                      unsigned int* __restrict__ indices,  // [B]
                                      float* __restrict__ weights) {       // [B]
    const unsigned int step = ctl->sample_step;
    const float total = tree[1];
    const float seg = __fdiv_rn(total, (float)batch);
    const uint2 key = make_uint2(key0, key1);
    float p_min = TALLYHO_INF;
    for (unsigned int i = threadIdx.x; i < batch; i += blockDim.x) {
        const float u = philox_u01(philox_draw(key, i, step, PHILOX_STREAM_REPLAY_SAMPLE).x);
        const float t = __fmul_rn(__fadd_rn((float)i, u), seg);
        const unsigned int leaf = sum_tree_descend(tree, leaves, t);
        const float p = tree[leaves + leaf];
        indices[i] = leaf;
        weights[i] = p;  // the sampled priority, until p_min is known
        p_min = fminf(p_min, p);
    }
    p_min = block_reduce(p_min, MinOp());  // barriers: every thread has read ctl and its priorities
    const float beta = fminf(1.0f, __fmaf_rn((float)step, beta_inc, beta0));
    for (unsigned int i = threadIdx.x; i < batch; i += blockDim.x) {
        weights[i] = (float)pow((double)weights[i] / (double)p_min, -(double)beta);
    }
    if (threadIdx.x == 0) ctl->sample_step = step + 1u;
}
