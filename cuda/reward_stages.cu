// reward_stages: the unfused reward pipeline, one kernel per stage of oracle
// reward::reward_step, launched in reward::Stage::ALL order (the two reductions, stage 6
// `reward_ema` and stage 10 `reward_dispersion`, are a partial kernel and a finalize
// kernel each). Per-env stages: grid-stride over N, any grid, float32 with _rn intrinsics
// in the oracle's order. Reductions: the launcher's blocks (at most 1024) of REWARD_THREADS threads sum
// their envs in double (each thread in index order, then a fixed tree), the finalize
// kernel (ONE block of REWARD_THREADS) sums the block partials in a fixed tree: the same
// bits at every launch. The global state is 8 floats (oracle RewardGlobal::to_words).
// Oracle: reward::reward_step.

#include "common/reward.cuh"

#define FOR_EACH_ENV(i, n)                                                                         \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < (n); \
         i += (unsigned long long)gridDim.x * blockDim.x)

// Stage 1: the env's step PnL (pnl_in) and the trade-closed test on the positions.
extern "C" __global__ void reward_pnl_delta(const float* __restrict__ pnl_in, const int* __restrict__ position,
                                            const RewardParams p, const int* __restrict__ prev_position,
                                            float* __restrict__ pnl, float* __restrict__ done,
                                            float* __restrict__ reward) {
    FOR_EACH_ENV(i, p.envs) {
        const float d = pnl_in[i];
        const int before = prev_position[i], now = position[i];
        const bool closed = before != 0 && (now == 0 || (now > 0) != (before > 0));
        pnl[i] = d;
        done[i] = closed ? 1.0f : 0.0f;
        reward[i] = d;
    }
}

extern "C" __global__ void reward_shaping(const int* __restrict__ position, const RewardParams p,
                                          const float* __restrict__ global, int* __restrict__ prev_position,
                                          const unsigned int* __restrict__ steps_since_done,
                                          const float* __restrict__ done, float* __restrict__ reward) {
    const float hold_bonus = global[G_HOLD_BONUS];
    FOR_EACH_ENV(i, p.envs) {
        const int before = prev_position[i], now = position[i];
        float r = reward[i];
        if (before == 0 && now != 0) r = __fsub_rn(r, p.entry_cost);
        if (now != 0) r = __fadd_rn(r, hold_bonus);
        if (done[i] == 1.0f && steps_since_done[i] + 1u < p.min_hold) r = __fsub_rn(r, p.min_hold_penalty);
        reward[i] = r;
        prev_position[i] = now;
    }
}

extern "C" __global__ void reward_snapshot(const float* __restrict__ reward, const RewardParams p,
                                           float* __restrict__ raw) {
    FOR_EACH_ENV(i, p.envs) raw[i] = reward[i];
}

extern "C" __global__ void reward_abs(const float* __restrict__ raw, const RewardParams p, float* __restrict__ abs_out) {
    FOR_EACH_ENV(i, p.envs) abs_out[i] = fabsf(raw[i]);
}

extern "C" __global__ void reward_duration(const float* __restrict__ done, const RewardParams p,
                                           unsigned int* __restrict__ steps_since_done,
                                           unsigned int* __restrict__ duration) {
    FOR_EACH_ENV(i, p.envs) {
        const unsigned int s = steps_since_done[i];
        if (done[i] == 1.0f) {
            duration[i] = s + 1u;
            steps_since_done[i] = 0u;
        } else {
            duration[i] = 0u;
            steps_since_done[i] = s + 1u;
        }
    }
}

// Stage 6, part 1: per block, the count, sum of durations, of |pnl| and of sign(pnl) over
// the envs with a done: partial[4 block + 0..3].
extern "C" __global__ void reward_ema_partial(const float* __restrict__ done, const unsigned int* __restrict__ duration,
                                              const float* __restrict__ pnl, const RewardParams p,
                                              double* __restrict__ partial) {
    __shared__ double s[4 * REWARD_WARPS];
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    FOR_EACH_ENV(i, p.envs) {
        if (done[i] == 1.0f) {
            acc[0] += 1.0;
            acc[1] += (double)duration[i];
            acc[2] += (double)fabsf(pnl[i]);
            acc[3] += (double)sign_f(pnl[i]);
        }
    }
    block_sum(acc, s);
    if (threadIdx.x == 0)
        for (int j = 0; j < 4; ++j) partial[4 * blockIdx.x + j] = acc[j];
}

// Stage 6, part 2 (ONE block): the sums over blocks, then the three EMAs where any env was done.
extern "C" __global__ void reward_ema_finalize(const double* __restrict__ partial, unsigned int blocks,
                                               const RewardParams p, float* __restrict__ global) {
    __shared__ double s[4 * REWARD_WARPS];
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    for (unsigned int b = threadIdx.x; b < blocks; b += REWARD_THREADS)
        for (int j = 0; j < 4; ++j) acc[j] += partial[4 * b + j];
    block_sum(acc, s);
    if (threadIdx.x == 0) reward_ema_update(acc, p, global);
}

extern "C" __global__ void reward_outcome(const float* __restrict__ done, const float* __restrict__ pnl,
                                          const RewardParams p, float* __restrict__ outcome_ema) {
    FOR_EACH_ENV(i, p.envs) {
        if (done[i] == 1.0f) {
            const float o = outcome_ema[i];
            outcome_ema[i] = __fadd_rn(o, __fmul_rn(p.outcome_rate, __fsub_rn(sign_f(pnl[i]), o)));
        }
    }
}

// Stage 8: raw x scale, or its differential Sharpe ratio on the env's moments (dsr_eta > 0).
extern "C" __global__ void reward_scale(const float* __restrict__ raw, const RewardParams p,
                                        const float* __restrict__ global, float* __restrict__ dsr_a,
                                        float* __restrict__ dsr_b, float* __restrict__ reward) {
    const float scale = global[G_SCALE];
    FOR_EACH_ENV(i, p.envs) reward[i] = scaled_reward(raw[i], scale, p, dsr_a + i, dsr_b + i);
}

// Stage 9 (ONE thread): the scale and hold controllers, at a step with a done.
extern "C" __global__ void reward_controllers(const RewardParams p, float* __restrict__ global) {
    if (blockIdx.x == 0 && threadIdx.x == 0) reward_controllers_update(p, global);
}

// Stage 10, part 1: per block, sum r and sum r^2 of the final rewards: partial[2 block + 0..1].
extern "C" __global__ void reward_dispersion_partial(const float* __restrict__ reward, const RewardParams p,
                                                     double* __restrict__ partial) {
    __shared__ double s[2 * REWARD_WARPS];
    double acc[2] = {0.0, 0.0};
    FOR_EACH_ENV(i, p.envs) {
        const double r = (double)reward[i];
        acc[0] += r;
        acc[1] += r * r;
    }
    block_sum(acc, s);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = acc[0];
        partial[2 * blockIdx.x + 1] = acc[1];
    }
}

// Stage 10, part 2 (ONE block): dispersion = max(E r^2 - m^2, 0) / max(|m|, floor).
extern "C" __global__ void reward_dispersion_finalize(const double* __restrict__ partial, unsigned int blocks,
                                                      const RewardParams p, float* __restrict__ global) {
    __shared__ double s[2 * REWARD_WARPS];
    double acc[2] = {0.0, 0.0};
    for (unsigned int b = threadIdx.x; b < blocks; b += REWARD_THREADS) {
        acc[0] += partial[2 * b];
        acc[1] += partial[2 * b + 1];
    }
    block_sum(acc, s);
    if (threadIdx.x == 0) reward_dispersion_update(acc[0], acc[1], p, global);
}
