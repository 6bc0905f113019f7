// The reward pipeline's shared pieces (cuda/reward_stages.cu, cuda/reward_fused.cu): the
// constants, the global state's word indices (oracle RewardGlobal::to_words), the
// fixed-order block sum, and the updates of the global state from the reductions' totals.
// Both paths call the same functions on the same totals, so they agree bit for bit.
#pragma once

#define REWARD_THREADS 256
#define REWARD_WARPS (REWARD_THREADS / 32)
#define G_EMA_DURATION 0
#define G_EMA_ABS_PNL 1
#define G_EMA_OUTCOME 2
#define G_SCALE 3
#define G_HOLD_BONUS 4
#define G_DISPERSION 5
#define G_DONES 6
#define G_UPDATES 7

#define REWARD_DSR_CLIP 10.0f
#define REWARD_DSR_MIN_VARIANCE 1e-12f

// The pipeline's constants (oracle RewardConfig), a kernel argument built by the host.
struct RewardParams {
    float entry_cost, min_hold_penalty, ema_rate, outcome_rate, target_abs_reward, scale_gain, scale_min,
        scale_max, target_duration, hold_gain, hold_bonus_max, dispersion_floor, dsr_eta;
    unsigned int min_hold, envs;
};
static_assert(sizeof(RewardParams) == 60, "RewardParams is mirrored field for field by src/reward.rs");

__device__ __forceinline__ float sign_f(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

// Rust's f32::clamp: NaN stays NaN.
__device__ __forceinline__ float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// The differential Sharpe ratio of return r on moments *a_io, *b_io at rate eta, which it
// moves (Moody and Saffell 1998; oracle reward::dsr, in its order).
__device__ __forceinline__ float dsr(float eta, float r, float* a_io, float* b_io) {
    const float a = *a_io, b = *b_io;
    const float da = __fsub_rn(r, a), db = __fsub_rn(__fmul_rn(r, r), b);
    const float var = __fsub_rn(b, __fmul_rn(a, a));
    float d = 0.0f;
    if (var > REWARD_DSR_MIN_VARIANCE)
        d = __fdiv_rn(__fsub_rn(__fmul_rn(b, da), __fmul_rn(__fmul_rn(a, 0.5f), db)), __fmul_rn(var, __fsqrt_rn(var)));
    *a_io = __fadd_rn(a, __fmul_rn(eta, da));
    *b_io = __fadd_rn(b, __fmul_rn(eta, db));
    return d < -REWARD_DSR_CLIP ? -REWARD_DSR_CLIP : (d > REWARD_DSR_CLIP ? REWARD_DSR_CLIP : d);
}

// Stage 8 `reward_scale` of one env: raw x scale, or its differential Sharpe ratio on the
// env's moments where dsr_eta > 0.
__device__ __forceinline__ float scaled_reward(float raw, float scale, const RewardParams& p, float* dsr_a, float* dsr_b) {
    const float r = __fmul_rn(raw, scale);
    return p.dsr_eta > 0.0f ? dsr(p.dsr_eta, r, dsr_a, dsr_b) : r;
}

// Fixed-order sums of K doubles per thread over a block of REWARD_THREADS: each warp adds
// by shuffles at offsets 16, 8, 4, 2, 1, then warp 0 adds the REWARD_WARPS warp totals the
// same way. Thread 0 ends with the K block totals in v (other threads' v are partial). The
// order depends on nothing but the thread index, so every launch gives the same bits, and
// each of the K sums is formed alike whatever K is (the unfused stages' reductions of 4 and 2
// values and the fused kernel's of 6 agree bit for bit). s: K * REWARD_WARPS doubles of
// shared memory, free for reuse when this returns.
template <int K>
__device__ __forceinline__ void block_sum(double (&v)[K], double* s) {
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < K; ++j)
        for (int o = 16; o > 0; o >>= 1) v[j] += __shfl_down_sync(0xffffffffu, v[j], o);
    __syncthreads();  // s may still be read by a previous block_sum
    if (lane == 0)
#pragma unroll
        for (int j = 0; j < K; ++j) s[warp * K + j] = v[j];
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int j = 0; j < K; ++j) {
            double x = lane < REWARD_WARPS ? s[lane * K + j] : 0.0;
            for (int o = REWARD_WARPS / 2; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
            v[j] = x;
        }
    }
}

// Stage 6 `reward_ema` from the totals (count, sum of durations, of |pnl|, of outcomes).
__device__ __forceinline__ void reward_ema_update(const double* tot, const RewardParams& p, float* global) {
    const double count = tot[0], rate = (double)p.ema_rate;
    global[G_DONES] = (float)count;
    if (count > 0.0) {
        const int idx[3] = {G_EMA_DURATION, G_EMA_ABS_PNL, G_EMA_OUTCOME};
        for (int j = 0; j < 3; ++j) {
            const double e = (double)global[idx[j]];
            global[idx[j]] = (float)(e + rate * (tot[j + 1] / count - e));
        }
        global[G_UPDATES] = __fadd_rn(global[G_UPDATES], 1.0f);
    }
}

// Stage 9 `reward_controllers`, at a step with a done (after reward_ema_update).
__device__ __forceinline__ void reward_controllers_update(const RewardParams& p, float* global) {
    if (!(global[G_DONES] > 0.0f)) return;
    const float scale = global[G_SCALE];
    float mapped = __fmul_rn(scale, global[G_EMA_ABS_PNL]);
    mapped = mapped > 1.17549435e-38f ? mapped : 1.17549435e-38f;  // max(f32::MIN_POSITIVE), NaN too (Rust max)
    const float step = __fmul_rn(p.scale_gain, __fsub_rn(__fdiv_rn(p.target_abs_reward, mapped), 1.0f));
    global[G_SCALE] = clampf(__fmul_rn(scale, __fadd_rn(1.0f, step)), p.scale_min, p.scale_max);
    const float gap = __fdiv_rn(__fsub_rn(p.target_duration, global[G_EMA_DURATION]), p.target_duration);
    const float hold = __fadd_rn(global[G_HOLD_BONUS], __fmul_rn(__fmul_rn(p.hold_gain, p.hold_bonus_max), gap));
    global[G_HOLD_BONUS] = clampf(hold, 0.0f, p.hold_bonus_max);
}

// Stage 10 `reward_dispersion` from sum r and sum r^2: max(E r^2 - m^2, 0) / max(|m|, floor).
__device__ __forceinline__ void reward_dispersion_update(double sum, double sq, const RewardParams& p, float* global) {
    const double n = p.envs > 0 ? (double)p.envs : 1.0;
    const double m = sum / n, v = fmax(sq / n - m * m, 0.0);
    global[G_DISPERSION] = (float)(v / fmax(fabs(m), (double)p.dispersion_floor));
}
