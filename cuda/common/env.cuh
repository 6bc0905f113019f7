// The backtest environment's constants and portfolio state (mirrors src/env/args.rs and the
// oracle's env::EnvConfig / EnvState). All float arithmetic of the environment kernels uses
// the round-to-nearest intrinsics, never contracted into FMAs, in the oracle's order: the
// environment branches on these values, so both sides must compute the same bits.
#pragma once
#include "common/philox.cuh"

// Constants of a run, a kernel argument built once by the host (never a per-step value).
struct EnvParams {
    unsigned int envs, feature_dim, max_steps, bar_lo, bar_hi;
    int max_position;
    float point_value, commission, ioc_fill_prob, limit_fill_min, limit_fill_max, limit_capture;
    float take_profit, stop_loss;
    unsigned int key0, key1;
};
static_assert(sizeof(EnvParams) == 64, "EnvParams is mirrored field for field by src/env/args.rs");

// Action branches (direction, size, order type) and their codes; done reasons.
#define ENV_BRANCHES 3
#define ENV_BUY 1
#define ENV_SELL 2
#define ENV_MARKET 0
#define ENV_IOC 1
#define ENV_TAKE_PROFIT 1
#define ENV_STOP_LOSS 2
#define ENV_TIME_LIMIT 3
#define ENV_END_OF_DATA 4
#define ENV_PORTFOLIO_FEATURES 4

// The N portfolios, structure of arrays (oracle env::EnvState), one pointer per field.
struct EnvState {
    unsigned int* bar;
    unsigned int* steps;
    unsigned int* clock;
    int* position;
    float* entry;
    float* realized;
    float* fees;
    float* equity;
};
static_assert(sizeof(EnvState) == 64, "EnvState is mirrored by src/env/args.rs StatePtrs");

__device__ __forceinline__ float sign_of(int p) { return p > 0 ? 1.0f : (p < 0 ? -1.0f : 0.0f); }

// A start bar in [lo, hi - 2] from the RESET draw of (env, clock): oracle Split::start.
__device__ __forceinline__ unsigned int env_start(const EnvParams& p, unsigned int env, unsigned int clock) {
    const unsigned int w = philox_draw(make_uint2(p.key0, p.key1), env, clock, PHILOX_STREAM_ENV_RESET).x;
    return p.bar_lo + (unsigned int)(((unsigned long long)w * (p.bar_hi - 1u - p.bar_lo)) >> 32);
}

// Portfolio feature k (0..3) of a portfolio (position pos, entry e, episode steps, realized,
// fees) at a bar closing at c (cuda/state_gather.cu says what each is; oracle
// env::portfolio_features).
__device__ __forceinline__ float portfolio_value(unsigned int k, float c, int pos, float e, unsigned int steps,
                                                 float realized, float fees, const EnvParams& p) {
    switch (k) {
        case 0: return __fdiv_rn((float)pos, (float)p.max_position);
        case 1: return pos != 0 ? __fmul_rn(__fdiv_rn(__fmul_rn(__fsub_rn(c, e), sign_of(pos)), e), 100.0f) : 0.0f;
        case 2: return __fdiv_rn((float)steps, (float)p.max_steps);
        default: return __fmul_rn(__fdiv_rn(__fsub_rn(realized, fees), __fmul_rn(c, p.point_value)), 100.0f);
    }
}

// Element j of env n's state (S = F + 4 wide; cuda/state_gather.cu says what each is).
__device__ __forceinline__ float state_value(unsigned long long n, unsigned int j, const float* __restrict__ features,
                                             const float* __restrict__ close, const EnvParams& p, const EnvState& st) {
    const unsigned int f = p.feature_dim, bar = st.bar[n];
    if (j < f) return features[(unsigned long long)bar * f + j];
    return portfolio_value(j - f, close[bar], st.position[n], st.entry[n], st.steps[n], st.realized[n], st.fees[n], p);
}

#define ENV_FOR_EACH(i, n)                                                                         \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (n); \
         i += (unsigned long long)gridDim.x * blockDim.x)
