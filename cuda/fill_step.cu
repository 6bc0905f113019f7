// fill_step: env n's order from its actions [N x 3] (direction, size, order type) against
// the quote of its bar. q = clamp(pos + side (size + 1), -max, max) - pos contracts (none if
// 0). Market: fills at the touch (ask for a buy, bid for a sell). IOC: at the touch with
// probability ioc_fill_prob. Limit: at ask - c spread (buy) / bid + c spread (sell) with
// probability min + (max - min) vol / (vol + spread). Filled if u01(Philox(n, clock[n],
// FILL).x) < p (market: always). A fill pays commission |q|, enters or averages the entry
// price, or realizes ((price - entry) sign) (closed point_value) and flips at the price.
// Oracle: env::fill_step. Grid: grid-stride over the N envs, any grid.
#include "common/env.cuh"

extern "C" __global__ void fill_step(const float* __restrict__ bid, const float* __restrict__ ask,
                                     const float* __restrict__ volatility, const EnvParams p, const EnvState st,
                                     const int* __restrict__ actions, int* __restrict__ filled,
                                     float* __restrict__ fill_price) {
    const uint2 key = make_uint2(p.key0, p.key1);
    ENV_FOR_EACH(n, p.envs) {
        // Every load the env may need, issued before any store (the state's pointers may
        // alias the outputs as far as the compiler knows): one memory latency, then the bar's.
        const int* a = actions + n * ENV_BRANCHES;
        const int a0 = a[0], a1 = a[1], a2 = a[2];
        const int pos = st.position[n];
        const unsigned int b = st.bar[n], clock = st.clock[n];
        const float entry0 = st.entry[n], fees0 = st.fees[n], realized0 = st.realized[n];
        const float bd = bid[b], ak = ask[b], vol = volatility[b];
        const int side = a0 == ENV_BUY ? 1 : (a0 == ENV_SELL ? -1 : 0);
        const int want = pos + side * (a1 + 1);
        const int q = (want < -p.max_position ? -p.max_position : (want > p.max_position ? p.max_position : want)) - pos;
        filled[n] = 0;
        fill_price[n] = 0.0f;
        if (q == 0) continue;
        const float spread = __fsub_rn(ak, bd);
        const bool buy = q > 0;
        const float touch = buy ? ak : bd;
        float prob, price;
        if (a2 == ENV_MARKET) {
            prob = 1.0f, price = touch;
        } else if (a2 == ENV_IOC) {
            prob = p.ioc_fill_prob, price = touch;
        } else {
            const float x = __fdiv_rn(vol, __fadd_rn(vol, spread));
            prob = __fadd_rn(p.limit_fill_min, __fmul_rn(__fsub_rn(p.limit_fill_max, p.limit_fill_min), x));
            const float improve = __fmul_rn(p.limit_capture, spread);
            price = buy ? __fsub_rn(ak, improve) : __fadd_rn(bd, improve);
        }
        const float u = philox_u01(philox_draw(key, (unsigned int)n, clock, PHILOX_STREAM_FILL).x);
        if (!(a2 == ENV_MARKET || u < prob)) continue;

        const float add = (float)(q < 0 ? -q : q), held = (float)(pos < 0 ? -pos : pos);
        st.fees[n] = __fadd_rn(fees0, __fmul_rn(p.commission, add));
        if (pos == 0) {
            st.entry[n] = price;
        } else if ((pos > 0) == (q > 0)) {
            st.entry[n] = __fdiv_rn(__fadd_rn(__fmul_rn(entry0, held), __fmul_rn(price, add)), __fadd_rn(held, add));
        } else {
            const float closed = add < held ? add : held;
            const float pnl = __fmul_rn(__fmul_rn(__fsub_rn(price, entry0), sign_of(pos)), __fmul_rn(closed, p.point_value));
            st.realized[n] = __fadd_rn(realized0, pnl);
            const int after = pos + q;
            if (after == 0) st.entry[n] = 0.0f;
            else if ((after > 0) != (pos > 0)) st.entry[n] = price;
        }
        st.position[n] = pos + q;
        filled[n] = 1;
        fill_price[n] = price;
    }
}
