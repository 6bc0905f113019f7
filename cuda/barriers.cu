// barriers: env n moves to bar t = bar[n] + 1. An open position exits at its stop-loss
// entry (1 -/+ sl) if the bar's low (long) / high (short) reaches it, else at its take-profit
// entry (1 +/- tp) against the high / low (stop-loss first: the conservative order within a
// bar). Else the time limit (steps + 1 >= max_steps) or the end of data (t + 1 >= hi) ends
// the episode, an open position exiting at the touch. Then the mark at the mid of bar t,
// equity = (realized - fees) + unrealized; the step's PnL, pnl = (realized - fees) -
// net_before (the fill step's net_before: the fill's and the exit's net realized PnL); s',
// row n of next_states [N x S]: the state_gather row of the portfolio after the step and
// before any reset (bar t, the position held after any exit, steps + 1, realized and fees
// with the exit); the clock advance, and the auto-reset of a done env to a Philox-chosen
// start bar. Oracle: env::barriers. Grid: grid-stride over the N envs, any grid.
#include "common/env_steps.cuh"

extern "C" __global__ void barriers(const float* __restrict__ features, const float* __restrict__ close,
                                    const float* __restrict__ bid, const float* __restrict__ ask,
                                    const float* __restrict__ high, const float* __restrict__ low,
                                    const EnvParams p, const EnvState st, const float* __restrict__ net_before,
                                    float* __restrict__ pnl, float* __restrict__ next_states,
                                    float* __restrict__ done, int* __restrict__ reason_out) {
    ENV_FOR_EACH(n, p.envs)
    barriers_env(n, features, close, bid, ask, high, low, p, st, net_before, pnl, next_states, done, reason_out);
}
