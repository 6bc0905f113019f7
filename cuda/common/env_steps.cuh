// The per-env steps of the environment after the Q-forward: one env's action select, fill
// and barriers, each the whole of its kernel's loop body (cuda/action_select.cu,
// cuda/fill_step.cu, cuda/barriers.cu: their comments are the specification). Those kernels
// run one over their grid-stride loop; env_step (cuda/env_step.cu) runs all three in a row
// for each env, so that the three chains of memory latencies become one launch. The same
// code either way, so the fused step is the chain of the three bit for bit.
#pragma once
#include "common/env.cuh"

#define ACTION_MAX_BRANCHES 4  // one Philox word per branch

struct ActionBranches {
    unsigned int count;
    unsigned int n[ACTION_MAX_BRANCHES];
};

__device__ __forceinline__ unsigned int word(uint4 w, unsigned int k) {
    return k == 0 ? w.x : (k == 1 ? w.y : (k == 2 ? w.z : w.w));
}

// Env n's actions [count] from its Q-values row (q [N x width]) at epsilon eps.
__device__ __forceinline__ void action_select_env(unsigned long long n, const float* q, const ActionBranches& br,
                                                  unsigned int width, float eps, const unsigned int* clock,
                                                  uint2 key, int* actions) {
    const uint4 w = philox_draw(key, (unsigned int)n, clock[n], PHILOX_STREAM_ACTION_EXPLORE);
    const uint4 r = philox_draw(key, (unsigned int)n, clock[n], PHILOX_STREAM_ACTION_RANDOM);
    const float* row = q + n * width;
    for (unsigned int k = 0; k < br.count; ++k) {
        const unsigned int nk = br.n[k];
        unsigned int a = 0;
        if (philox_u01(word(w, k)) < eps) {
            a = (unsigned int)(((unsigned long long)word(r, k) * nk) >> 32);
        } else {
            // The best value kept in a register, so the loads do not wait on each other
            // (the same comparisons as row[j] > row[a]: a NaN at 0 keeps 0, later ones lose).
            float best = row[0];
#pragma unroll 4
            for (unsigned int j = 1; j < nk; ++j) {
                const float v = row[j];
                if (v > best) best = v, a = j;
            }
        }
        actions[n * br.count + k] = (int)a;
        row += nk;
    }
}

// Env n's order from its actions [N x 3] against its bar's quote: filled, fill_price and the
// portfolio (cuda/fill_step.cu).
__device__ __forceinline__ void fill_step_env(unsigned long long n, const float* __restrict__ bid,
                                              const float* __restrict__ ask, const float* __restrict__ volatility,
                                              const EnvParams& p, const EnvState& st, const int* actions,
                                              int* filled, float* fill_price) {
    const uint2 key = make_uint2(p.key0, p.key1);
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
    if (q == 0) return;
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
    if (!(a2 == ENV_MARKET || u < prob)) return;

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

// Env n's next bar: exits, mark, reward, done, reason and the auto-reset (cuda/barriers.cu).
__device__ __forceinline__ void barriers_env(unsigned long long n, const float* __restrict__ bid,
                                             const float* __restrict__ ask, const float* __restrict__ high,
                                             const float* __restrict__ low, const EnvParams& p, const EnvState& st,
                                             float* reward, float* done, int* reason_out) {
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

// The Q-values row's width: every branch's actions.
__device__ __forceinline__ unsigned int branches_width(const ActionBranches& br) {
    unsigned int width = 0;
    for (unsigned int k = 0; k < br.count; ++k) width += br.n[k];
    return width;
}

// What the environment's step after the Q-forward reads and writes besides the portfolios.
struct EnvStepIo {
    const float* epsilon;
    const float *bid, *ask, *volatility, *high, *low;
    int* actions;
    int* filled;
    float* fill_price;
    float* reward;
    float* done;
    int* reason;
};

// Env n's whole step after the Q-forward (env_step's loop body): select, fill, barriers.
__device__ __forceinline__ void env_step_env(unsigned long long n, const float* q, const ActionBranches& br,
                                             unsigned int width, float eps, const EnvParams& p, const EnvState& st,
                                             const EnvStepIo& io) {
    action_select_env(n, q, br, width, eps, st.clock, make_uint2(p.key0, p.key1), io.actions);
    fill_step_env(n, io.bid, io.ask, io.volatility, p, st, io.actions, io.filled, io.fill_price);
    barriers_env(n, io.bid, io.ask, io.high, io.low, p, st, io.reward, io.done, io.reason);
}
