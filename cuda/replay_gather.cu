// replay_gather: the transitions at indices[0..B] into the batch buffers, in batch order.
// Grid-stride over B * max(S, 3) elements, any grid. Oracle: replay::replay_gather.
#include "common/replay.cuh"

extern "C" __global__ void replay_gather(const unsigned int* __restrict__ indices,  // [B]
                                      const float* __restrict__ states,          // [C, S]
                                      const float* __restrict__ next_states,     // [C, S]
                                      const int* __restrict__ actions,           // [C, 3]
                                      const float* __restrict__ rewards,         // [C]
                                      const float* __restrict__ discounts,       // [C]
                                      float* __restrict__ out_states,            // [B, S]
                                      float* __restrict__ out_next_states,       // [B, S]
                                      int* __restrict__ out_actions,             // [B, 3]
                                      float* __restrict__ out_rewards,           // [B]
                                      float* __restrict__ out_discounts,         // [B]
                                      unsigned int batch, unsigned int state_dim) {
    const unsigned int width = state_dim > REPLAY_ACTION_BRANCHES ? state_dim : REPLAY_ACTION_BRANCHES;
    const unsigned long long total = (unsigned long long)batch * width;
    for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < total;
         k += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned int j = (unsigned int)(k / width), c = (unsigned int)(k % width);
        const unsigned long long i = indices[j];
        if (c < state_dim) {
            out_states[(unsigned long long)j * state_dim + c] = states[i * state_dim + c];
            out_next_states[(unsigned long long)j * state_dim + c] = next_states[i * state_dim + c];
        }
        if (c < REPLAY_ACTION_BRANCHES) out_actions[j * REPLAY_ACTION_BRANCHES + c] = actions[i * REPLAY_ACTION_BRANCHES + c];
        if (c == 0) {
            out_rewards[j] = rewards[i];
            out_discounts[j] = discounts[i];
        }
    }
}
