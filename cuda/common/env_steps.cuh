// The per-env steps of the environment after the Q-forward: one env's action select, fill
// and barriers (cuda/action_select.cu, cuda/fill_step.cu, cuda/barriers.cu: their comments
// are the specification). Each stage is a function on registers (select_actions,
// fill_order, barrier_step, on the env's Portfolio); each kernel's loop body (*_env) reads
// what its stage needs, runs it and writes what it changed. env_step (cuda/env_step.cu, and
// the experience step's tail) runs the three stages in a row on one read of the portfolio
// and the market, every load issued before any store: one chain of memory latencies for
// the whole step, not one a stage. The same arithmetic either way, so the fused step is the
// chain of the three bit for bit.
#pragma once
#include "common/env.cuh"

#define ACTION_MAX_BRANCHES 4  // one Philox word per branch

struct ActionBranches {
    unsigned int count;
    unsigned int n[ACTION_MAX_BRANCHES];
};
static_assert(sizeof(ActionBranches) == 20, "ActionBranches is mirrored by src/env/args.rs");

__device__ __forceinline__ unsigned int word(uint4 w, unsigned int k) {
    return k == 0 ? w.x : (k == 1 ? w.y : (k == 2 ? w.z : w.w));
}

// An env's portfolio in registers: EnvState's fields at env n.
struct Portfolio {
    unsigned int bar, steps, clock;
    int position;
    float entry, realized, fees, equity;
};

__device__ __forceinline__ Portfolio portfolio_of(const EnvState& st, unsigned long long n) {
    return Portfolio{st.bar[n],   st.steps[n],    st.clock[n], st.position[n], st.entry[n],
                     st.realized[n], st.fees[n], st.equity[n]};
}

__device__ __forceinline__ void portfolio_store(const EnvState& st, unsigned long long n, const Portfolio& f) {
    st.bar[n] = f.bar, st.steps[n] = f.steps, st.clock[n] = f.clock, st.position[n] = f.position;
    st.entry[n] = f.entry, st.realized[n] = f.realized, st.fees[n] = f.fees, st.equity[n] = f.equity;
}

// The net realized PnL of a portfolio, realized - fees: what the step's PnL is measured from.
__device__ __forceinline__ float net_of(const Portfolio& f) { return __fsub_rn(f.realized, f.fees); }

// s' of env n, row n of next_states [N x S]: bar `after.bar`'s features, then the portfolio
// features of `after` (the portfolio after the step, before any reset) at that bar's close
// c: the element function of state_gather (state_value), so for an env that is not done
// the next step's states row, bit for bit.
__device__ __forceinline__ void next_state_row(unsigned long long n, const float* __restrict__ features, float c,
                                               const EnvParams& p, const Portfolio& after, float* next_states) {
    const unsigned int f = p.feature_dim, s = f + ENV_PORTFOLIO_FEATURES;
    const float* feat = features + (unsigned long long)after.bar * f;
    float* row = next_states + n * s;
    for (unsigned int j = 0; j < f; ++j) row[j] = feat[j];
#pragma unroll
    for (unsigned int k = 0; k < ENV_PORTFOLIO_FEATURES; ++k)
        row[f + k] = portfolio_value(k, c, after.position, after.entry, after.steps, after.realized, after.fees, p);
}

// Select: env n's action a[k] in each branch k from its Q-values row (branch after branch):
// the RANDOM draw's word k scaled to the branch where the EXPLORE draw's word k is below
// eps, else the branch's argmax (the first of equals). The argmax is taken either way, so
// the row's loads do not wait on the draws.
__device__ __forceinline__ void select_actions(unsigned long long n, const float* row, const ActionBranches& br, float eps,
                                               unsigned int clock, uint2 key, int* a) {
    const uint4 w = philox_draw(key, (unsigned int)n, clock, PHILOX_STREAM_ACTION_EXPLORE);
    const uint4 r = philox_draw(key, (unsigned int)n, clock, PHILOX_STREAM_ACTION_RANDOM);
#pragma unroll
    for (unsigned int k = 0; k < ACTION_MAX_BRANCHES; ++k) {
        if (k >= br.count) break;
        const unsigned int nk = br.n[k];
        // The best value kept in a register, so the loads do not wait on each other (the
        // same comparisons as row[j] > row[best]: a NaN at 0 keeps 0, later ones lose).
        float best = row[0];
        unsigned int arg = 0;
#pragma unroll 4
        for (unsigned int j = 1; j < nk; ++j) {
            const float v = row[j];
            if (v > best) best = v, arg = j;
        }
        a[k] = philox_u01(word(w, k)) < eps ? (int)(((unsigned long long)word(r, k) * nk) >> 32) : (int)arg;
        row += nk;
    }
}

// Fill: the order actions a [3] make on portfolio f at its bar's quote (bid bd, ask ak,
// volatility vol). Where it fills, f's fees, entry, realized and position are updated and
// the price is in `price`; returns whether it filled (price 0 where not).
__device__ __forceinline__ int fill_order(unsigned long long n, const int* a, float bd, float ak, float vol,
                                          const EnvParams& p, Portfolio& f, float& price) {
    const uint2 key = make_uint2(p.key0, p.key1);
    const int pos = f.position;
    const int side = a[0] == ENV_BUY ? 1 : (a[0] == ENV_SELL ? -1 : 0);
    const int want = pos + side * (a[1] + 1);
    const int q = (want < -p.max_position ? -p.max_position : (want > p.max_position ? p.max_position : want)) - pos;
    price = 0.0f;
    if (q == 0) return 0;
    const float spread = __fsub_rn(ak, bd);
    const bool buy = q > 0;
    const float touch = buy ? ak : bd;
    float prob, px;
    if (a[2] == ENV_MARKET) {
        prob = 1.0f, px = touch;
    } else if (a[2] == ENV_IOC) {
        prob = p.ioc_fill_prob, px = touch;
    } else {
        const float x = __fdiv_rn(vol, __fadd_rn(vol, spread));
        prob = __fadd_rn(p.limit_fill_min, __fmul_rn(__fsub_rn(p.limit_fill_max, p.limit_fill_min), x));
        const float improve = __fmul_rn(p.limit_capture, spread);
        px = buy ? __fsub_rn(ak, improve) : __fadd_rn(bd, improve);
    }
    const float u = philox_u01(philox_draw(key, (unsigned int)n, f.clock, PHILOX_STREAM_FILL).x);
    if (!(a[2] == ENV_MARKET || u < prob)) return 0;

    const float add = (float)(q < 0 ? -q : q), held = (float)(pos < 0 ? -pos : pos);
    const float entry0 = f.entry;
    f.fees = __fadd_rn(f.fees, __fmul_rn(p.commission, add));
    if (pos == 0) {
        f.entry = px;
    } else if ((pos > 0) == (q > 0)) {
        f.entry = __fdiv_rn(__fadd_rn(__fmul_rn(entry0, held), __fmul_rn(px, add)), __fadd_rn(held, add));
    } else {
        const float closed = add < held ? add : held;
        const float pnl = __fmul_rn(__fmul_rn(__fsub_rn(px, entry0), sign_of(pos)), __fmul_rn(closed, p.point_value));
        f.realized = __fadd_rn(f.realized, pnl);
        const int after = pos + q;
        if (after == 0) f.entry = 0.0f;
        else if ((after > 0) != (pos > 0)) f.entry = px;
    }
    f.position = pos + q;
    price = px;
    return 1;
}

// Barriers: portfolio f on its next bar t = bar + 1 (always inside the market; its range
// lo_t, hi_t and quote bid_t, ask_t): exits, mark, the reason (0: none), the step's PnL
// against net_before (the net realized PnL before the fill), the portfolio after the step and
// before the reset (`after`, s'), and the auto-reset, f updated.
__device__ __forceinline__ void barrier_step(unsigned long long n, float lo_t, float hi_t, float bid_t, float ask_t,
                                             float net_before, const EnvParams& p, Portfolio& f, int& reason,
                                             float& pnl, Portfolio& after) {
    const unsigned int t = f.bar + 1;
    const int pos = f.position;
    const float entry = f.entry;
    const unsigned int steps = f.steps + 1, clock = f.clock + 1;
    float realized = f.realized, fees = f.fees;
    const float s = sign_of(pos);
    const bool lng = pos > 0;
    reason = 0;
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
    pnl = __fsub_rn(__fsub_rn(realized, fees), net_before);
    after = Portfolio{t, steps, clock, held, entry, realized, fees, equity};
    f.clock = clock;
    if (reason != 0) {
        f.bar = env_start(p, (unsigned int)n, clock);
        f.steps = 0, f.position = 0;
        f.entry = 0.0f, f.realized = 0.0f, f.fees = 0.0f, f.equity = 0.0f;
    } else {
        f = after;
    }
}

// The kernels' loop bodies: each reads its stage's inputs, runs it, writes what it changed.

// Env n's actions [count] from its Q-values row (q [N x width]) at epsilon eps
// (cuda/action_select.cu).
__device__ __forceinline__ void action_select_env(unsigned long long n, const float* q, const ActionBranches& br,
                                                  unsigned int width, float eps, const unsigned int* clock,
                                                  uint2 key, int* actions) {
    int a[ACTION_MAX_BRANCHES];
    select_actions(n, q + n * width, br, eps, clock[n], key, a);
#pragma unroll
    for (unsigned int k = 0; k < ACTION_MAX_BRANCHES; ++k)
        if (k < br.count) actions[n * br.count + k] = a[k];
}

// Env n's order from its actions [N x 3] against its bar's quote: filled, fill_price,
// net_before (realized - fees before the fill) and the portfolio (cuda/fill_step.cu).
__device__ __forceinline__ void fill_step_env(unsigned long long n, const float* __restrict__ bid,
                                              const float* __restrict__ ask, const float* __restrict__ volatility,
                                              const EnvParams& p, const EnvState& st, const int* actions,
                                              int* filled, float* fill_price, float* net_before) {
    // Every load first (the state's pointers may alias the outputs as far as the compiler
    // knows): one memory latency, then the bar's.
    const int* ap = actions + n * ENV_BRANCHES;
    const int a[ENV_BRANCHES] = {ap[0], ap[1], ap[2]};
    Portfolio f = portfolio_of(st, n);
    const float bd = bid[f.bar], ak = ask[f.bar], vol = volatility[f.bar];
    const float net0 = net_of(f);
    float price;
    const int did = fill_order(n, a, bd, ak, vol, p, f, price);
    filled[n] = did;
    fill_price[n] = price;
    net_before[n] = net0;
    if (did) st.fees[n] = f.fees, st.entry[n] = f.entry, st.realized[n] = f.realized, st.position[n] = f.position;
}

// Env n's next bar: exits, mark, the step's PnL, s', done, reason and the auto-reset
// (cuda/barriers.cu).
__device__ __forceinline__ void barriers_env(unsigned long long n, const float* __restrict__ features,
                                             const float* __restrict__ close, const float* __restrict__ bid,
                                             const float* __restrict__ ask, const float* __restrict__ high,
                                             const float* __restrict__ low, const EnvParams& p, const EnvState& st,
                                             const float* net_before, float* pnl_out, float* next_states,
                                             float* done, int* reason_out) {
    // Every load first: the env's state, then its next bar's quote, range and close, so that
    // the chain is two memory latencies, not one per branch.
    Portfolio f = portfolio_of(st, n);
    const float net0 = net_before[n];
    const unsigned int t = f.bar + 1;
    const float lo_t = low[t], hi_t = high[t], bid_t = bid[t], ask_t = ask[t], c_t = close[t];
    int reason;
    float pnl;
    Portfolio after;
    barrier_step(n, lo_t, hi_t, bid_t, ask_t, net0, p, f, reason, pnl, after);
    next_state_row(n, features, c_t, p, after, next_states);
    pnl_out[n] = pnl;
    done[n] = reason != 0 ? 1.0f : 0.0f;
    reason_out[n] = reason;
    portfolio_store(st, n, f);
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
    const float *features, *close, *bid, *ask, *volatility, *high, *low;
    int* actions;
    int* filled;
    float* fill_price;
    float* net_before;
    float* pnl;
    float* next_states;
    float* done;
    int* reason;
};
static_assert(sizeof(EnvStepIo) == 128, "EnvStepIo is mirrored field for field inside src/env/args.rs ActEnv");

// Env n's whole step after the Q-forward (env_step's loop body): select, fill, barriers on
// one read of its portfolio, its bar's and next bar's market and its Q-values row (all
// issued before any store: two memory latencies for the step), then every write (s' reads
// the next bar's features as it writes them).
__device__ __forceinline__ void env_step_env(unsigned long long n, const float* q, const ActionBranches& br,
                                             unsigned int width, float eps, const EnvParams& p, const EnvState& st,
                                             const EnvStepIo& io) {
    Portfolio f = portfolio_of(st, n);
    const unsigned int b = f.bar, t = b + 1;
    const float bd = io.bid[b], ak = io.ask[b], vol = io.volatility[b];
    const float lo_t = io.low[t], hi_t = io.high[t], bid_t = io.bid[t], ask_t = io.ask[t], c_t = io.close[t];
    int a[ACTION_MAX_BRANCHES] = {0, 0, 0, 0};
    select_actions(n, q + n * width, br, eps, f.clock, make_uint2(p.key0, p.key1), a);
    const float net0 = net_of(f);
    float price;
    const int did = fill_order(n, a, bd, ak, vol, p, f, price);
    int reason;
    float pnl;
    Portfolio after;
    barrier_step(n, lo_t, hi_t, bid_t, ask_t, net0, p, f, reason, pnl, after);
#pragma unroll
    for (unsigned int k = 0; k < ACTION_MAX_BRANCHES; ++k)
        if (k < br.count) io.actions[n * br.count + k] = a[k];
    io.filled[n] = did;
    io.fill_price[n] = price;
    io.net_before[n] = net0;
    next_state_row(n, io.features, c_t, p, after, io.next_states);
    io.pnl[n] = pnl;
    io.done[n] = reason != 0 ? 1.0f : 0.0f;
    io.reason[n] = reason;
    portfolio_store(st, n, f);
}
