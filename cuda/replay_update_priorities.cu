// replay_update_priorities: leaf[idx_j] <- (|td_j| + eps)^alpha (pow in double, rounded once),
// the LAST occurrence of a repeated index winning as in a sequential loop; running max
// priority over every assigned value; sum-tree refresh. Oracle: replay::replay_update_priorities.
// Grid: ONE block, a multiple of 32 threads up to 1024, looping over any B.
// `winner` is C words of scratch, all 0 between launches (left so on return).
#include "common/replay.cuh"
#include "common/block.cuh"

__device__ __forceinline__ float replay_priority(float td, float alpha, float eps) {
    return (float)pow((double)fabsf(td) + (double)eps, (double)alpha);
}

extern "C" __global__ void replay_update_priorities(float* __restrict__ tree, unsigned int leaves,
                                                 ReplayCtl* __restrict__ ctl,
                                                 unsigned int* __restrict__ winner,        // [C]
                                                 const unsigned int* __restrict__ indices, // [B]
                                                 const float* __restrict__ td_abs,         // [B]
                                                 unsigned int batch, unsigned int capacity,
                                                 float alpha, float eps) {
    float p_max = -TALLYHO_INF;
    for (unsigned int j = threadIdx.x; j < batch; j += blockDim.x) {
        const unsigned int i = indices[j];
        if (i >= capacity) continue;
        atomicMax(&winner[i], j + 1u);  // max is order-independent: the last j wins
        p_max = fmaxf(p_max, replay_priority(td_abs[j], alpha, eps));
    }
    p_max = block_reduce(p_max, MaxOp());  // barriers: every atomicMax is done
    for (unsigned int j = threadIdx.x; j < batch; j += blockDim.x) {
        const unsigned int i = indices[j];
        if (i < capacity && winner[i] == j + 1u) tree[leaves + i] = replay_priority(td_abs[j], alpha, eps);
    }
    __syncthreads();
    for (unsigned int j = threadIdx.x; j < batch; j += blockDim.x) {
        const unsigned int i = indices[j];
        if (i < capacity) winner[i] = 0u;
    }
    sum_tree_refresh(tree, leaves, batch, [=](unsigned int j) {
        const unsigned int i = indices[j];
        return i < capacity ? i : 0u;  // an out-of-range index refreshes leaf 0's path: harmless
    });
    if (threadIdx.x == 0) ctl->max_priority = fmaxf(ctl->max_priority, p_max);
}
