// action_select: epsilon-greedy per branch k of env n. With w = Philox(n, clock[n],
// ACTION_EXPLORE) and r = Philox(n, clock[n], ACTION_RANDOM): if u01(w_k) < epsilon the
// action is floor(r_k n_k / 2^32), else the argmax of the branch's Q-values (q [N x sum n_k],
// the expected value over atoms), the lowest index on ties, a NaN never winning.
// epsilon is read from device memory (a graph replays with the current value).
// Oracle: env::action_select. Grid: grid-stride over the N envs, any grid.
#include "common/env.cuh"

#define ACTION_MAX_BRANCHES 4  // one Philox word per branch

struct ActionBranches {
    unsigned int count;
    unsigned int n[ACTION_MAX_BRANCHES];
};

__device__ __forceinline__ unsigned int word(uint4 w, unsigned int k) {
    return k == 0 ? w.x : (k == 1 ? w.y : (k == 2 ? w.z : w.w));
}

extern "C" __global__ void action_select(const float* __restrict__ q, const ActionBranches br,
                                         const float* __restrict__ epsilon, const unsigned int* __restrict__ clock,
                                         unsigned int envs, unsigned int key0, unsigned int key1,
                                         int* __restrict__ actions) {
    const float eps = *epsilon;
    const uint2 key = make_uint2(key0, key1);
    unsigned int width = 0;
    for (unsigned int k = 0; k < br.count; ++k) width += br.n[k];
    ENV_FOR_EACH(n, envs) {
        const uint4 w = philox_draw(key, (unsigned int)n, clock[n], PHILOX_STREAM_ACTION_EXPLORE);
        const uint4 r = philox_draw(key, (unsigned int)n, clock[n], PHILOX_STREAM_ACTION_RANDOM);
        const float* row = q + n * width;
        for (unsigned int k = 0; k < br.count; ++k) {
            const unsigned int nk = br.n[k];
            unsigned int a = 0;
            if (philox_u01(word(w, k)) < eps) {
                a = (unsigned int)(((unsigned long long)word(r, k) * nk) >> 32);
            } else {
                // The best value kept in a register, so the loads do not wait on each other
                // (the same comparisons as row[j] > row[a]: a NaN at 0 keeps 0, later ones lose).
                float best = row[0];
#pragma unroll 4
                for (unsigned int j = 1; j < nk; ++j) {
                    const float v = row[j];
                    if (v > best) best = v, a = j;
                }
            }
            actions[n * br.count + k] = (int)a;
            row += nk;
        }
    }
}
