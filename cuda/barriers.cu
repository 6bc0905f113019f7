// barriers: env n moves to bar t = bar[n] + 1. An open position exits at its stop-loss
// entry (1 -/+ sl) if the bar's low (long) / high (short) reaches it, else at its take-profit
// entry (1 +/- tp) against the high / low (stop-loss first: the conservative order within a
// bar). Else the time limit (steps + 1 >= max_steps) or the end of data (t + 1 >= hi) ends
// the episode, an open position exiting at the touch. Then the mark at the mid of bar t,
// equity = (realized - fees) + unrealized, reward = (equity - equity_before) reward_scale
// (or its differential Sharpe ratio, Moody and Saffell 1998), the clock advance, and the
// auto-reset of a done env to a Philox-chosen start bar.
// Oracle: env::barriers, env::dsr. Grid: grid-stride over the N envs, any grid.
#include "common/env_steps.cuh"

extern "C" __global__ void barriers(const float* __restrict__ bid, const float* __restrict__ ask,
                                    const float* __restrict__ high, const float* __restrict__ low,
                                    const EnvParams p, const EnvState st, float* __restrict__ reward,
                                    float* __restrict__ done, int* __restrict__ reason_out) {
    ENV_FOR_EACH(n, p.envs) barriers_env(n, bid, ask, high, low, p, st, reward, done, reason_out);
}
