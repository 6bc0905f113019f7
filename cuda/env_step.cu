// env_step: the environment's step after the Q-forward as one launch: for each env n, its
// action select, fill and barriers (cuda/common/env_steps.cuh, the bodies of action_select,
// fill_step and barriers, whose comments specify them), in that order, in one thread. Each
// of the three kernels alone is a few memory latencies long (3.5-4.5 us even at N = 256);
// one launch pays the launch and the graph node once. Its outputs are those of the three
// kernels, bit for bit. Oracle: env::action_select, env::fill_step, env::barriers in a row
// (env::env_step). Grid: grid-stride over the N envs, any grid.
#include "common/env_steps.cuh"

extern "C" __global__ void env_step(const float* __restrict__ q, const ActionBranches br,
                                    const float* __restrict__ epsilon, const float* __restrict__ bid,
                                    const float* __restrict__ ask, const float* __restrict__ volatility,
                                    const float* __restrict__ high, const float* __restrict__ low, const EnvParams p,
                                    const EnvState st, int* actions, int* __restrict__ filled,
                                    float* __restrict__ fill_price, float* __restrict__ reward,
                                    float* __restrict__ done, int* __restrict__ reason) {
    const float eps = *epsilon;
    const uint2 key = make_uint2(p.key0, p.key1);
    unsigned int width = 0;
    for (unsigned int k = 0; k < br.count; ++k) width += br.n[k];
    ENV_FOR_EACH(n, p.envs) {
        action_select_env(n, q, br, width, eps, st.clock, key, actions);
        fill_step_env(n, bid, ask, volatility, p, st, actions, filled, fill_price);
        barriers_env(n, bid, ask, high, low, p, st, reward, done, reason);
    }
}
