// trainer_metrics: the training step's metric sums, accumulated in device memory and read by
// the host every K steps, outside the replay (oracle: trainer::trainer_metrics_step and
// trainer::trainer_metrics_update; the block mirrors trainer::MetricTotals, 11 doubles in
// field order).
//
// trainer_metrics_step: one block of TRAINER_METRICS_THREADS threads; each thread sums its
// envs (grid-stride order) in double, then one fixed tree per value (common/block.cuh), so
// every launch gives the same bits: steps += 1, reward, pnl, trades, episodes and the greedy
// value estimate (the mean over branches of max_j Q_k(s, j) of the acting Q-values, NaNs
// skipped by the comparison) summed over envs, epsilon = the step's, flags |= a non-finite
// reward (4) or Q-value (8) of any env.
// trainer_metrics_update: one thread after each update: updates += 1, loss and gradient
// norm added, flags |= non-finite loss (1) or norm (2).
#include "common/block.cuh"
#include "common/optimizer.cuh"

#define TRAINER_METRICS_THREADS 256
#define TRAINER_METRICS_MAX_BRANCHES 4

enum { M_STEPS, M_REWARD, M_PNL, M_TRADES, M_EPISODES, M_Q, M_UPDATES, M_LOSS, M_GRAD_NORM, M_EPSILON, M_FLAGS, M_WORDS };
static_assert(M_WORDS == 11, "trainer::MetricTotals::WORDS");

// The action branches' sizes (mirrors src/trainer/metrics.rs MetricBranches).
struct MetricBranches {
    unsigned int count;
    unsigned int n[TRAINER_METRICS_MAX_BRANCHES];
};
static_assert(sizeof(MetricBranches) == 20, "MetricBranches is mirrored by src/trainer/metrics.rs");

__device__ __forceinline__ bool finite(double v) { return v - v == 0.0; }

extern "C" __global__ void __launch_bounds__(TRAINER_METRICS_THREADS)
trainer_metrics_step(double* __restrict__ totals, const float* __restrict__ reward, const float* __restrict__ pnl,
                     const float* __restrict__ trade_done, const float* __restrict__ episode_done,
                     const float* __restrict__ q, const MetricBranches br, const float* __restrict__ epsilon,
                     unsigned int envs) {
    __shared__ double s[TRAINER_METRICS_THREADS];
    unsigned int width = 0;
    for (unsigned int k = 0; k < br.count; ++k) width += br.n[k];
    double r = 0.0, p = 0.0, tr = 0.0, ep = 0.0, qs = 0.0;
    unsigned int flags = 0;
    for (unsigned int i = threadIdx.x; i < envs; i += TRAINER_METRICS_THREADS) {
        const float ri = reward[i];
        r += (double)ri;
        p += (double)pnl[i];
        tr += (double)trade_done[i];
        ep += (double)episode_done[i];
        const float* row = q + (unsigned long long)i * width;
        double greedy = 0.0;
        for (unsigned int k = 0; k < br.count; ++k) {
            double best = -__longlong_as_double(0x7ff0000000000000ll);
            for (unsigned int j = 0; j < br.n[k]; ++j) {
                const double v = (double)row[j];
                if (!finite(v)) flags |= 8u;
                best = v > best ? v : best;
            }
            greedy += best;
            row += br.n[k];
        }
        greedy /= (double)br.count;
        qs += greedy;
        if (!finite((double)ri)) flags |= 4u;
    }
    r = block_sum_fixed(r, s, TRAINER_METRICS_THREADS);
    p = block_sum_fixed(p, s, TRAINER_METRICS_THREADS);
    tr = block_sum_fixed(tr, s, TRAINER_METRICS_THREADS);
    ep = block_sum_fixed(ep, s, TRAINER_METRICS_THREADS);
    qs = block_sum_fixed(qs, s, TRAINER_METRICS_THREADS);
    __shared__ unsigned int any;
    if (threadIdx.x == 0) any = 0;
    __syncthreads();
    if (flags) atomicOr(&any, flags);  // an OR: the same bits in any order
    __syncthreads();
    if (threadIdx.x == 0) {
        totals[M_STEPS] += 1.0;
        totals[M_REWARD] += r;
        totals[M_PNL] += p;
        totals[M_TRADES] += tr;
        totals[M_EPISODES] += ep;
        totals[M_Q] += qs;
        totals[M_EPSILON] = (double)*epsilon;
        if (any) totals[M_FLAGS] = (double)((unsigned int)totals[M_FLAGS] | any);
    }
}

extern "C" __global__ void trainer_metrics_update(double* __restrict__ totals, const double* __restrict__ loss,
                                                  const OptCtl* __restrict__ ctl) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const double l = *loss, g = (double)ctl->norm;
    totals[M_UPDATES] += 1.0;
    totals[M_LOSS] += l;
    totals[M_GRAD_NORM] += g;
    unsigned int flags = (unsigned int)totals[M_FLAGS];
    if (!finite(l)) flags |= 1u;
    if (!finite(g)) flags |= 2u;
    totals[M_FLAGS] = (double)flags;
}
