// reward_fused: every stage of cuda/reward_stages.cu in ONE launch, for any N.
// Each thread runs the per-env stages (step PnL and close test, shaping, snapshot, |r|,
// duration, outcome EMA, scaling or its differential Sharpe ratio: the scale is read before
// the controllers change it, as in the unfused stages) for its envs in index order and accumulates the six sums of the two reductions
// (dones, durations, |pnl|, outcomes; sum r, sum r^2) in double. Each block reduces them
// with block_sum and writes its partials; the LAST block to finish (a ticket counter,
// after a memory fence) sums all blocks' partials the same way, in an order that does not depend
// on which block is last, then updates the EMAs, the controllers and the dispersion
// statistic, and re-arms the ticket. So the results are the unfused stages', bit for bit, and the
// same at every launch. Grid: at most 1024 blocks of REWARD_THREADS threads.
// Oracle: reward::reward_step (the spec of both paths).

#include "common/reward.cuh"

#define SUMS 6

extern "C" __global__ void reward_fused(const float* __restrict__ pnl_in, const int* __restrict__ position,
                                        const RewardParams p, int* __restrict__ prev_position,
                                        unsigned int* __restrict__ steps_since_done, float* __restrict__ outcome_ema,
                                        float* __restrict__ dsr_a, float* __restrict__ dsr_b,
                                        float* __restrict__ global,
                                        double* __restrict__ partial, unsigned int* __restrict__ ticket,
                                        float* __restrict__ pnl_out, float* __restrict__ done_out,
                                        float* __restrict__ raw_out, float* __restrict__ abs_out,
                                        unsigned int* __restrict__ duration_out, float* __restrict__ reward_out) {
    __shared__ double s[SUMS * REWARD_WARPS];
    __shared__ bool last;
    const float hold_bonus = global[G_HOLD_BONUS], scale = global[G_SCALE];
    double acc[SUMS] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < p.envs;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        // reward_pnl_delta
        const float pnl = pnl_in[i];
        const int before = prev_position[i], now = position[i];
        const bool done = before != 0 && (now == 0 || (now > 0) != (before > 0));
        // reward_shaping
        float r = pnl;
        if (before == 0 && now != 0) r = __fsub_rn(r, p.entry_cost);
        if (now != 0) r = __fadd_rn(r, hold_bonus);
        const unsigned int since = steps_since_done[i];
        if (done && since + 1u < p.min_hold) r = __fsub_rn(r, p.min_hold_penalty);
        prev_position[i] = now;
        // reward_snapshot, reward_abs, reward_duration
        raw_out[i] = r;
        abs_out[i] = fabsf(r);
        duration_out[i] = done ? since + 1u : 0u;
        steps_since_done[i] = done ? 0u : since + 1u;
        // reward_ema's sums, reward_outcome
        if (done) {
            acc[0] += 1.0;
            acc[1] += (double)(since + 1u);
            acc[2] += (double)fabsf(pnl);
            acc[3] += (double)sign_f(pnl);
            const float o = outcome_ema[i];
            outcome_ema[i] = __fadd_rn(o, __fmul_rn(p.outcome_rate, __fsub_rn(sign_f(pnl), o)));
        }
        // reward_scale, reward_dispersion's sums
        const float fin = scaled_reward(r, scale, p, dsr_a + i, dsr_b + i);
        reward_out[i] = fin;
        acc[4] += (double)fin;
        acc[5] += (double)fin * (double)fin;
        pnl_out[i] = pnl;
        done_out[i] = done ? 1.0f : 0.0f;
    }
    block_sum(acc, s);
    if (threadIdx.x == 0) {
        for (int j = 0; j < SUMS; ++j) partial[SUMS * blockIdx.x + j] = acc[j];
        __threadfence();  // this block's partials are visible before its ticket
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    double tot[SUMS] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (unsigned int b = threadIdx.x; b < gridDim.x; b += REWARD_THREADS)
        for (int j = 0; j < SUMS; ++j) tot[j] += ((volatile double*)partial)[SUMS * b + j];
    block_sum(tot, s);
    if (threadIdx.x != 0) return;
    *ticket = 0u;
    reward_ema_update(tot, p, global);
    reward_controllers_update(p, global);
    reward_dispersion_update(tot[4], tot[5], p, global);
}
