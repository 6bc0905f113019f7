// barriers: env n moves to bar t = bar[n] + 1. An open position exits at its stop-loss
// entry (1 -/+ sl) if the bar's low (long) / high (short) reaches it, else at its take-profit
// entry (1 +/- tp) against the high / low (stop-loss first: the conservative order within a
// bar). Else the time limit (steps + 1 >= max_steps) or the end of data (t + 1 >= hi) ends
// the episode, an open position exiting at the touch. Then the mark at the mid of bar t,
// equity = (realized - fees) + unrealized, reward = (equity - equity_before) reward_scale
// (or its differential Sharpe ratio, Moody and Saffell 1998), the clock advance, and the
// auto-reset of a done env to a Philox-chosen start bar.
// Oracle: env::barriers, env::dsr. Grid: grid-stride over the N envs, any grid.
#include "common/env.cuh"

__device__ __forceinline__ float dsr(float eta, float r, float* a_io, float* b_io) {
    const float a = *a_io, b = *b_io;
    const float da = __fsub_rn(r, a), db = __fsub_rn(__fmul_rn(r, r), b);
    const float var = __fsub_rn(b, __fmul_rn(a, a));
    float d = 0.0f;
    if (var > ENV_DSR_MIN_VARIANCE)
        d = __fdiv_rn(__fsub_rn(__fmul_rn(b, da), __fmul_rn(__fmul_rn(a, 0.5f), db)), __fmul_rn(var, __fsqrt_rn(var)));
    *a_io = __fadd_rn(a, __fmul_rn(eta, da));
    *b_io = __fadd_rn(b, __fmul_rn(eta, db));
    return d < -ENV_DSR_CLIP ? -ENV_DSR_CLIP : (d > ENV_DSR_CLIP ? ENV_DSR_CLIP : d);
}

extern "C" __global__ void barriers(const float* __restrict__ bid, const float* __restrict__ ask,
                                    const float* __restrict__ high, const float* __restrict__ low,
                                    const EnvParams p, const EnvState st, float* __restrict__ reward,
                                    float* __restrict__ done, int* __restrict__ reason_out) {
    ENV_FOR_EACH(n, p.envs) {
        // Every load first: the env's state, then its next bar's quote and range (t is always
        // inside the market), so that the chain is two memory latencies, not one per branch.
        const unsigned int t = st.bar[n] + 1;
        const int pos = st.position[n];
        const float entry = st.entry[n], equity_before = st.equity[n];
        const unsigned int steps = st.steps[n] + 1, clock = st.clock[n] + 1;
        float realized = st.realized[n], fees = st.fees[n];
        const float lo_t = low[t], hi_t = high[t], bid_t = bid[t], ask_t = ask[t];
        const float s = sign_of(pos);
        const bool lng = pos > 0;
        int reason = 0;
        float exit_px = 0.0f;
        if (pos != 0 && p.stop_loss > 0.0f) {
            const float px = __fmul_rn(entry, lng ? __fsub_rn(1.0f, p.stop_loss) : __fadd_rn(1.0f, p.stop_loss));
            if (lng ? lo_t <= px : hi_t >= px) reason = ENV_STOP_LOSS, exit_px = px;
        }
        if (pos != 0 && reason == 0 && p.take_profit > 0.0f) {
            const float px = __fmul_rn(entry, lng ? __fadd_rn(1.0f, p.take_profit) : __fsub_rn(1.0f, p.take_profit));
            if (lng ? hi_t >= px : lo_t <= px) reason = ENV_TAKE_PROFIT, exit_px = px;
        }
        if (reason == 0 && steps >= p.max_steps) reason = ENV_TIME_LIMIT;
        if (reason == 0 && t + 1 >= p.bar_hi) reason = ENV_END_OF_DATA;
        if (reason == ENV_TIME_LIMIT || reason == ENV_END_OF_DATA) exit_px = lng ? bid_t : ask_t;

        int held = pos;
        if (reason != 0 && pos != 0) {
            const float size = (float)(pos < 0 ? -pos : pos);
            realized = __fadd_rn(realized, __fmul_rn(__fmul_rn(__fsub_rn(exit_px, entry), s), __fmul_rn(size, p.point_value)));
            fees = __fadd_rn(fees, __fmul_rn(p.commission, size));
            held = 0;
        }
        const float mid = __fmul_rn(__fadd_rn(bid_t, ask_t), 0.5f);
        const float unrealized =
            held != 0 ? __fmul_rn(__fmul_rn(__fsub_rn(mid, entry), s), __fmul_rn((float)(held < 0 ? -held : held), p.point_value))
                      : 0.0f;
        const float equity = __fadd_rn(__fsub_rn(realized, fees), unrealized);
        const float r = __fmul_rn(__fsub_rn(equity, equity_before), p.reward_scale);
        reward[n] = p.dsr_eta > 0.0f ? dsr(p.dsr_eta, r, st.dsr_a + n, st.dsr_b + n) : r;
        st.clock[n] = clock;
        done[n] = reason != 0 ? 1.0f : 0.0f;
        reason_out[n] = reason;
        if (reason != 0) {
            st.bar[n] = env_start(p, (unsigned int)n, clock);
            st.steps[n] = 0;
            st.position[n] = 0;
            st.entry[n] = 0.0f;
            st.realized[n] = 0.0f;
            st.fees[n] = 0.0f;
            st.equity[n] = 0.0f;
        } else {
            st.bar[n] = t;
            st.steps[n] = steps;
            st.position[n] = held;
            st.realized[n] = realized;
            st.fees[n] = fees;
            st.equity[n] = equity;
        }
    }
}
