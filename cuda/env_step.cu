// env_step: the environment's step after the Q-forward as one launch: for each env n, its
// action select, fill and barriers (cuda/common/env_steps.cuh, the bodies of action_select,
// fill_step and barriers, whose comments specify them), in that order, in one thread. Each
// of the three kernels alone is a few memory latencies long (3.5-4.5 us even at N = 256);
// one launch pays the launch and the graph node once. Its outputs are those of the three
// kernels, bit for bit. Oracle: env::action_select, env::fill_step, env::barriers in a row
// (env::env_step). Grid: grid-stride over the N envs, any grid. Launched programmatically
// (runtime::Programmatic): it waits for the kernel ahead before its first read.
#include "common/env_steps.cuh"
#include "common/grid.cuh"

extern "C" __global__ void env_step(const float* __restrict__ q, const ActionBranches br,
                                    const float* __restrict__ epsilon, const float* __restrict__ features,
                                    const float* __restrict__ close, const float* __restrict__ bid,
                                    const float* __restrict__ ask, const float* __restrict__ volatility,
                                    const float* __restrict__ high, const float* __restrict__ low, const EnvParams p,
                                    const EnvState st, int* actions, int* __restrict__ filled,
                                    float* __restrict__ fill_price, float* __restrict__ net_before,
                                    float* __restrict__ pnl, float* __restrict__ next_states,
                                    float* __restrict__ done, int* __restrict__ reason) {
    grid_wait_for_prior();  // launched programmatically after the Q-forward
    const EnvStepIo io{epsilon, features, close,     bid,        ask, volatility,  high, low,
                       actions, filled,   fill_price, net_before, pnl, next_states, done, reason};
    const float eps = *epsilon;
    const unsigned int width = branches_width(br);
    ENV_FOR_EACH(n, p.envs) env_step_env(n, q, br, width, eps, p, st, io);
}
