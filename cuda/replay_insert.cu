// replay_insert: write n transitions (s, a, r, s', discount) into the ring at (cursor + j) mod C with the running max
// priority, refresh the sum tree, advance cursor and size. Oracle: replay::replay_insert.
//   replay_insert_rows: grid-stride over n * max(S, 3) elements, any grid; reads ctl->cursor.
//   replay_insert_tree: ONE block (any multiple of 32 up to 1024 threads, loops over n); then
//                    advances ctl. Launch after replay_insert_rows on the same stream.
#include "common/replay.cuh"

extern "C" __global__ void replay_insert_rows(const ReplayCtl* __restrict__ ctl,
                                           const float* __restrict__ in_states,       // [n, S]
                                           const float* __restrict__ in_next_states,  // [n, S]
                                           const int* __restrict__ in_actions,        // [n, 3]
                                           const float* __restrict__ in_rewards,      // [n]
                                           const float* __restrict__ in_discounts,    // [n]
                                           float* __restrict__ states,                // [C, S]
                                           float* __restrict__ next_states,           // [C, S]
                                           int* __restrict__ actions,                 // [C, 3]
                                           float* __restrict__ rewards,               // [C]
                                           float* __restrict__ discounts,             // [C]
                                           unsigned int n, unsigned int capacity, unsigned int state_dim) {
    const unsigned int cursor = ctl->cursor;
    const unsigned int width = state_dim > REPLAY_ACTION_BRANCHES ? state_dim : REPLAY_ACTION_BRANCHES;
    const unsigned long long total = (unsigned long long)n * width;
    for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < total;
         k += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned int j = (unsigned int)(k / width), c = (unsigned int)(k % width);
        const unsigned long long slot = ((unsigned long long)cursor + j) % capacity;
        if (c < state_dim) {
            states[slot * state_dim + c] = in_states[(unsigned long long)j * state_dim + c];
            next_states[slot * state_dim + c] = in_next_states[(unsigned long long)j * state_dim + c];
        }
        if (c < REPLAY_ACTION_BRANCHES) actions[slot * REPLAY_ACTION_BRANCHES + c] = in_actions[j * REPLAY_ACTION_BRANCHES + c];
        if (c == 0) {
            rewards[slot] = in_rewards[j];
            discounts[slot] = in_discounts[j];
        }
    }
}

extern "C" __global__ void replay_insert_tree(ReplayCtl* __restrict__ ctl, float* __restrict__ tree,
                                           unsigned int leaves, unsigned int n, unsigned int capacity) {
    const unsigned int cursor = ctl->cursor;
    const unsigned int size = ctl->size;
    const float p = ctl->max_priority;
    const auto leaf_of = [=](unsigned int j) {
        return (unsigned int)(((unsigned long long)cursor + j) % capacity);
    };
    for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) tree[leaves + leaf_of(j)] = p;
    sum_tree_refresh(tree, leaves, n, leaf_of);  // ends with a barrier: every thread has read ctl
    if (threadIdx.x == 0) {
        ctl->cursor = (unsigned int)(((unsigned long long)cursor + n) % capacity);
        ctl->size = size + n < capacity ? size + n : capacity;
    }
}
