// The reward pipeline's shared pieces (cuda/reward_chain.cu, cuda/reward_fused.cu): the
// constants, the global state's word indices (oracle RewardGlobal::to_words), the
// fixed-tree block sum, and the updates of the global state from the reductions' totals.
// Both paths call the same functions on the same totals, so they agree bit for bit.
#pragma once

#define REWARD_THREADS 256
#define G_EMA_DURATION 0
#define G_EMA_ABS_PNL 1
#define G_EMA_OUTCOME 2
#define G_SCALE 3
#define G_HOLD_BONUS 4
#define G_DISPERSION 5
#define G_DONES 6
#define G_UPDATES 7

// The pipeline's constants (oracle RewardConfig), a kernel argument built by the host.
struct RewardParams {
    float entry_cost, min_hold_penalty, ema_rate, outcome_rate, target_abs_reward, scale_gain, scale_min,
        scale_max, target_duration, hold_gain, hold_bonus_max, dispersion_floor;
    unsigned int min_hold, envs;
};

__device__ __forceinline__ float sign_f(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

// Rust's f32::clamp: NaN stays NaN.
__device__ __forceinline__ float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// Fixed-tree sum of one double per thread over a block of REWARD_THREADS; every thread gets it.
__device__ __forceinline__ double tree_sum(double v, double* s) {
    __syncthreads();
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int stride = REWARD_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    return s[0];
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
