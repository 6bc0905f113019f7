// action_select: epsilon-greedy per branch k of env n. With w = Philox(n, clock[n],
// ACTION_EXPLORE) and r = Philox(n, clock[n], ACTION_RANDOM): if u01(w_k) < epsilon the
// action is floor(r_k n_k / 2^32), else the argmax of the branch's Q-values (q [N x sum n_k],
// the expected value over atoms), the lowest index on ties, a NaN never winning.
// epsilon is read from device memory (a graph replays with the current value).
// Oracle: env::action_select. Grid: grid-stride over the N envs, any grid.
#include "common/env_steps.cuh"

extern "C" __global__ void action_select(const float* __restrict__ q, const ActionBranches br,
                                         const float* __restrict__ epsilon, const unsigned int* __restrict__ clock,
                                         unsigned int envs, unsigned int key0, unsigned int key1,
                                         int* __restrict__ actions) {
    const float eps = *epsilon;
    const uint2 key = make_uint2(key0, key1);
    unsigned int width = 0;
    for (unsigned int k = 0; k < br.count; ++k) width += br.n[k];
    ENV_FOR_EACH(n, envs) action_select_env(n, q, br, width, eps, clock, key, actions);
}
