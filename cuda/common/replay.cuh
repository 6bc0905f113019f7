// Prioritized replay: control block and sum tree, shared by the replay_* kernels.
// Spec: oracle/src/replay.rs. Tree of 2L floats, root at node 1, leaf i at node L + i,
// every internal node = left + right (float, in that order).
#pragma once

#define REPLAY_ACTION_BRANCHES 3

// Mirrors oracle::replay::ReplayCtl (repr(C)): advanced only by kernels.
struct ReplayCtl {
    unsigned int cursor;
    unsigned int size;
    unsigned int sample_step;
    float max_priority;
};
static_assert(sizeof(ReplayCtl) == 16, "ReplayCtl is read as 4 words by src/replay.rs ctl_words");

// Refresh the ancestors of `count` leaves, one level per barrier, from the bottom up.
// `leaf_of(j)` names the j-th touched leaf. Two threads whose leaves share an ancestor write
// the same value to it from the same children, so duplicates are harmless. One block only.
template <typename LeafOf>
__device__ void sum_tree_refresh(float* tree, unsigned int leaves, unsigned int count, LeafOf leaf_of) {
    const unsigned int levels = 31u - __clz(leaves);  // log2(leaves), leaves a power of two
    for (unsigned int k = 1; k <= levels; ++k) {
        __syncthreads();  // the level below is final
        for (unsigned int j = threadIdx.x; j < count; j += blockDim.x) {
            const unsigned int n = (leaves + leaf_of(j)) >> k;
            tree[n] = __fadd_rn(tree[2 * n], tree[2 * n + 1]);
        }
    }
    __syncthreads();
}

// Descend to the leaf whose prefix interval holds t (oracle sum_tree_descend).
__device__ __forceinline__ unsigned int sum_tree_descend(const float* tree, unsigned int leaves, float t) {
    unsigned int node = 1;
    while (node < leaves) {
        const float left = tree[2 * node];
        const float right = tree[2 * node + 1];
        if (t < left || right <= 0.0f) {
            node = 2 * node;
        } else {
            t = __fsub_rn(t, left);
            node = 2 * node + 1;
        }
    }
    return node - leaves;
}

