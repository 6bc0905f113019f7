// fill_step: env n's order from its actions [N x 3] (direction, size, order type) against
// the quote of its bar. q = clamp(pos + side (size + 1), -max, max) - pos contracts (none if
// 0). Market: fills at the touch (ask for a buy, bid for a sell). IOC: at the touch with
// probability ioc_fill_prob. Limit: at ask - c spread (buy) / bid + c spread (sell) with
// probability min + (max - min) vol / (vol + spread). Filled if u01(Philox(n, clock[n],
// FILL).x) < p (market: always). A fill pays commission |q|, enters or averages the entry
// price, or realizes ((price - entry) sign) (closed point_value) and flips at the price.
// Every env's net_before = realized - fees before its fill (what barriers measures the step's
// PnL from). Oracle: env::fill_step. Grid: grid-stride over the N envs, any grid.
#include "common/env_steps.cuh"

extern "C" __global__ void fill_step(const float* __restrict__ bid, const float* __restrict__ ask,
                                     const float* __restrict__ volatility, const EnvParams p, const EnvState st,
                                     const int* __restrict__ actions, int* __restrict__ filled,
                                     float* __restrict__ fill_price, float* __restrict__ net_before) {
    ENV_FOR_EACH(n, p.envs) fill_step_env(n, bid, ask, volatility, p, st, actions, filled, fill_price, net_before);
}
