// reward_fused: the whole reward chain of cuda/reward_chain.cu in ONE launch, for any N.
// Each thread runs the per-env stages (PnL delta, shaping, snapshot, |r|, duration,
// outcome EMA, scaling: the scale is read before the controllers change it, as in the
// chain) for its envs in index order and accumulates the six sums of the two reductions
// (dones, durations, |pnl|, outcomes; sum r, sum r^2) in double. Each block reduces them
// in a fixed tree and writes its partials; the LAST block to finish (a ticket counter,
// after a memory fence) sums all blocks' partials in a fixed tree, which does not depend
// on which block is last, then updates the EMAs, the controllers and the dispersion
// statistic, and re-arms the ticket. So the results are the chain's, bit for bit, and the
// same at every launch. Grid: REWARD_BLOCKS <= 1024 blocks of REWARD_THREADS threads.
// Oracle: reward::reward_chain (the spec of both paths).

#define REWARD_THREADS 256
#define G_EMA_DURATION 0
#define G_EMA_ABS_PNL 1
#define G_EMA_OUTCOME 2
#define G_SCALE 3
#define G_HOLD_BONUS 4
#define G_DISPERSION 5
#define G_DONES 6
#define G_UPDATES 7
#define SUMS 6

struct RewardParams {
    float entry_cost, min_hold_penalty, ema_rate, outcome_rate, target_abs_reward, scale_gain, scale_min,
        scale_max, target_duration, hold_gain, hold_bonus_max, dispersion_floor;
    unsigned int min_hold, envs;
};

__device__ __forceinline__ float sign_f(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }
__device__ __forceinline__ float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

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

extern "C" __global__ void reward_fused(const float* __restrict__ realized, const int* __restrict__ position,
                                        const RewardParams p, float* __restrict__ prev_realized,
                                        int* __restrict__ prev_position, unsigned int* __restrict__ steps_since_done,
                                        float* __restrict__ outcome_ema, float* __restrict__ global,
                                        double* __restrict__ partial, unsigned int* __restrict__ ticket,
                                        float* __restrict__ pnl_out, float* __restrict__ done_out,
                                        float* __restrict__ raw_out, float* __restrict__ abs_out,
                                        unsigned int* __restrict__ duration_out, float* __restrict__ reward_out) {
    __shared__ double s[REWARD_THREADS];
    __shared__ bool last;
    const float hold_bonus = global[G_HOLD_BONUS], scale = global[G_SCALE];
    double acc[SUMS] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < p.envs;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        // reward_pnl_delta
        const float pnl = __fsub_rn(realized[i], prev_realized[i]);
        const int before = prev_position[i], now = position[i];
        const bool done = before != 0 && (now == 0 || (now > 0) != (before > 0));
        prev_realized[i] = realized[i];
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
        const float fin = __fmul_rn(r, scale);
        reward_out[i] = fin;
        acc[4] += (double)fin;
        acc[5] += (double)fin * (double)fin;
        pnl_out[i] = pnl;
        done_out[i] = done ? 1.0f : 0.0f;
    }
    for (int j = 0; j < SUMS; ++j) {
        const double t = tree_sum(acc[j], s);
        if (threadIdx.x == 0) partial[SUMS * blockIdx.x + j] = t;
    }
    if (threadIdx.x == 0) {
        __threadfence();  // this block's partials are visible before its ticket
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    double tot[SUMS];
    for (int j = 0; j < SUMS; ++j) {
        double a = 0.0;
        for (unsigned int b = threadIdx.x; b < gridDim.x; b += REWARD_THREADS) a += ((volatile double*)partial)[SUMS * b + j];
        tot[j] = tree_sum(a, s);
    }
    if (threadIdx.x != 0) return;
    *ticket = 0u;
    // reward_ema
    const double count = tot[0], rate = (double)p.ema_rate;
    global[G_DONES] = (float)count;
    if (count > 0.0) {
        const int idx[3] = {G_EMA_DURATION, G_EMA_ABS_PNL, G_EMA_OUTCOME};
        for (int j = 0; j < 3; ++j) {
            const double e = (double)global[idx[j]];
            global[idx[j]] = (float)(e + rate * (tot[j + 1] / count - e));
        }
        global[G_UPDATES] = __fadd_rn(global[G_UPDATES], 1.0f);
        // reward_controllers
        float mapped = __fmul_rn(scale, global[G_EMA_ABS_PNL]);
        mapped = mapped > 1.17549435e-38f ? mapped : 1.17549435e-38f;
        const float step = __fmul_rn(p.scale_gain, __fsub_rn(__fdiv_rn(p.target_abs_reward, mapped), 1.0f));
        global[G_SCALE] = clampf(__fmul_rn(scale, __fadd_rn(1.0f, step)), p.scale_min, p.scale_max);
        const float gap = __fdiv_rn(__fsub_rn(p.target_duration, global[G_EMA_DURATION]), p.target_duration);
        const float hold = __fadd_rn(hold_bonus, __fmul_rn(__fmul_rn(p.hold_gain, p.hold_bonus_max), gap));
        global[G_HOLD_BONUS] = clampf(hold, 0.0f, p.hold_bonus_max);
    }
    // reward_dispersion
    const double n = p.envs > 0 ? (double)p.envs : 1.0;
    const double m = tot[4] / n, v = fmax(tot[5] / n - m * m, 0.0);
    global[G_DISPERSION] = (float)(v / fmax(fabs(m), (double)p.dispersion_floor));
}
