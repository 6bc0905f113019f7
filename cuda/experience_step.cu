// experience_step: one experience timestep of every env in one launch. A block takes R envs
// (rows) and, for them: state gather (cuda/state_gather.cu: the states and x rows written,
// and staged straight into the forward's input), the online network's acting forward
// (cuda/common/qnet_act.cuh, as qnet_act), then, once the block's Q-values are in q, each
// env's select, fill and barriers (with the step's PnL and s') in one thread
// (cuda/env_step.cu). An env's step reads and writes only its own portfolio and rows, so
// the blocks are independent and the one launch replaces three (state_gather -> qnet_act ->
// env_step) and their two waits between grids.
// Its outputs are those three kernels', bit for bit: the same element functions in the same
// order. Oracle: env::state_gather, qnet::forward and head_q, env::env_step in a row.
// Grid (ceil(N / R)), ACT_THREADS threads; the host checks S = F + 4 and A = the actions.
#include "common/env_steps.cuh"
#include "common/qnet_act.cuh"

// The rows' inputs gathered from the portfolios (and written to states and x); after the
// Q-values, each env's step (the market's features and close are io's). A kernel argument:
// mirrors ActEnv (src/env/args.rs), field for field.
struct ActEnv {
    EnvParams p;
    EnvState st;
    ActionBranches br;
    float* __restrict__ states;
    float* __restrict__ x;
    EnvStepIo io;

    __device__ __forceinline__ float state(unsigned long long n, unsigned int k) const {
        const unsigned int s = p.feature_dim + ENV_PORTFOLIO_FEATURES;
        const float v = state_value(n, k, io.features, io.close, p, st);
        states[n * s + k] = v;
        x[n * (s + 1ull) + k] = v;
        if (k == s - 1) x[n * (s + 1ull) + s] = 1.0f;
        return v;
    }

    __device__ __forceinline__ void after(unsigned long long first, unsigned int here, const float* q) const {
        __syncthreads();  // the block's Q-values are in q
        if (threadIdx.x < here) env_step_env(first + threadIdx.x, q, br, branches_width(br), *io.epsilon, p, st, io);
    }
};
static_assert(sizeof(ActEnv) == 296, "ActEnv is mirrored field for field by src/env/args.rs");

// The entry points, as qnet_act's: one per rows-per-block R = 16 MT and feed; `env` the
// host's ActEnv (src/env/args.rs), the rest as qnet_act's (y, the head outputs without
// bias, written if not null; q always).
extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
experience_step_rows16(const ActEnv env, const float* __restrict__ params, const float* __restrict__ heads,
    const ActNet net, const BranchShape shape, unsigned int na, float v_min,
    float v_max, float* __restrict__ y, float* __restrict__ q) {
    act_forward<1, false>(env, env.p.envs, params, heads, net, shape, na, v_min, v_max, y, q);
}

extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
experience_step_rows32(const ActEnv env, const float* __restrict__ params, const float* __restrict__ heads,
    const ActNet net, const BranchShape shape, unsigned int na, float v_min,
    float v_max, float* __restrict__ y, float* __restrict__ q) {
    act_forward<2, false>(env, env.p.envs, params, heads, net, shape, na, v_min, v_max, y, q);
}

extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
experience_step_aligned_rows16(const ActEnv env, const float* __restrict__ params, const float* __restrict__ heads,
    const ActNet net, const BranchShape shape, unsigned int na, float v_min,
    float v_max, float* __restrict__ y, float* __restrict__ q) {
    act_forward<1, true>(env, env.p.envs, params, heads, net, shape, na, v_min, v_max, y, q);
}

extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
experience_step_aligned_rows32(const ActEnv env, const float* __restrict__ params, const float* __restrict__ heads,
    const ActNet net, const BranchShape shape, unsigned int na, float v_min,
    float v_max, float* __restrict__ y, float* __restrict__ q) {
    act_forward<2, true>(env, env.p.envs, params, heads, net, shape, na, v_min, v_max, y, q);
}
