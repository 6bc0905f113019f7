// transition_assemble: n-step transitions, one per env per step. Thread e takes env e's step
// t (its push count c, folded into [0, 2n), read from device memory): it writes
// (s, a, r, s', reason) into ring slot c mod n; then, when c >= n - 1, it assembles the window
// starting at step t - n + 1 (slot (c + 1) mod n) into row e of the output transitions:
// k = steps up to the first episode end (reason != 0), capped at n; s, a of the first step,
// s' of the last; G = r_j, then G = r_m + gamma G back to the first (each op rounded, no
// FMA); discount 0 if the last step's reason is terminal (1 take-profit, 2 stop-loss), else
// gamma^k as k rounded products of 1.0f by gamma. Last, the count advances (n from 2n).
// Nothing per step is a kernel argument: the launch is captured once and replayed.
// Oracle: transition::transition_assemble. Grid-stride over N envs, any grid.
// Ring layout, slot-major: states / next_states [n, N, S], actions [n, N, 3], rewards and
// reasons [n, N]; outputs: states / next_states [N, S], actions [N, 3], rewards and
// discounts [N].
#include "common/replay.cuh"

#define TRANSITION_TAKE_PROFIT 1
#define TRANSITION_STOP_LOSS 2

extern "C" __global__ void transition_assemble(const float* __restrict__ in_states,       // [N, S]
                                               const int* __restrict__ in_actions,        // [N, 3]
                                               const float* __restrict__ in_rewards,      // [N]
                                               const float* __restrict__ in_next_states,  // [N, S]
                                               const int* __restrict__ in_reasons,        // [N]
                                               float* __restrict__ ring_states,            // [n, N, S]
                                               float* __restrict__ ring_next_states,       // [n, N, S]
                                               int* __restrict__ ring_actions,             // [n, N, 3]
                                               float* __restrict__ ring_rewards,           // [n, N]
                                               int* __restrict__ ring_reasons,             // [n, N]
                                               unsigned int* __restrict__ counts,          // [N]
                                               float* __restrict__ out_states,             // [N, S]
                                               float* __restrict__ out_next_states,        // [N, S]
                                               int* __restrict__ out_actions,              // [N, 3]
                                               float* __restrict__ out_rewards,            // [N]
                                               float* __restrict__ out_discounts,          // [N]
                                               unsigned int envs, unsigned int state_dim, unsigned int n,
                                               float gamma) {
    const unsigned int S = state_dim, A = REPLAY_ACTION_BRANCHES;
    for (unsigned int e = blockIdx.x * blockDim.x + threadIdx.x; e < envs; e += gridDim.x * blockDim.x) {
        const unsigned int c = counts[e];
        const unsigned long long row = (unsigned long long)(c % n) * envs + e;
        for (unsigned int x = 0; x < S; ++x) {
            ring_states[row * S + x] = in_states[(unsigned long long)e * S + x];
            ring_next_states[row * S + x] = in_next_states[(unsigned long long)e * S + x];
        }
        for (unsigned int b = 0; b < A; ++b) ring_actions[row * A + b] = in_actions[(unsigned long long)e * A + b];
        ring_rewards[row] = in_rewards[e];
        ring_reasons[row] = in_reasons[e];
        if (c + 1u >= n) {
            // Step i + m of the window is at slot (c + 1 + m) mod n.
            const auto slot = [=](unsigned int m) { return (unsigned long long)((c + 1u + m) % n) * envs + e; };
            unsigned int k = 1;
            while (k < n && ring_reasons[slot(k - 1)] == 0) ++k;
            const unsigned long long first = slot(0), last = slot(k - 1);
            float g = ring_rewards[last];
            for (unsigned int m = k - 1; m-- > 0;) g = __fadd_rn(ring_rewards[slot(m)], __fmul_rn(gamma, g));
            const int reason = ring_reasons[last];
            float d = 0.0f;
            if (reason != TRANSITION_TAKE_PROFIT && reason != TRANSITION_STOP_LOSS) {
                d = 1.0f;
                for (unsigned int m = 0; m < k; ++m) d = __fmul_rn(d, gamma);
            }
            for (unsigned int x = 0; x < S; ++x) {
                out_states[(unsigned long long)e * S + x] = ring_states[first * S + x];
                out_next_states[(unsigned long long)e * S + x] = ring_next_states[last * S + x];
            }
            for (unsigned int b = 0; b < A; ++b) out_actions[(unsigned long long)e * A + b] = ring_actions[first * A + b];
            out_rewards[e] = g;
            out_discounts[e] = d;
        }
        counts[e] = c + 1u >= 2u * n ? n : c + 1u;
    }
}
