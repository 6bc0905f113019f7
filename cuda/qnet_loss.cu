// qnet_loss: the Double DQN loss of a batch, one block per sample i, from qnet_head's
// outputs over the stacked rows [s; s'] of the online (net 0) and target (net 1) networks.
// Per branch k:
//   a*_k = argmax_j q_online(s'_i)[k, j], the lowest j on ties;
//   C51 (NA > 1): m = projection of probs_target(s'_i)[k, a*_k] onto the support for
//     r + g z, l_k = -sum_z m_z log_probs_online(s_i)[k, a_k, z],
//     dlogits = c (probs sum_z' m_z' - m), c = w_i / (B K);
//   scalar (NA = 1): y = r + g (1/K) sum_k q_target(s'_i)[k, a*_k],
//     TD_k = y - q_online(s_i)[k, a_k], l_k = Huber(TD_k), dlogit = -c Huber'(TD_k).
// with g = discounts[i] widened to double: the row's bootstrap discount (gamma^k, or 0 after a
// terminal; the replay stores it per row).
// Then the dueling backward into the head-output gradient row dy_i (qnet::head_grad), the
// per-sample loss L_i = (1/K) sum_k l_k and the priority (C51 L_i, scalar mean_k |TD_k|);
// and, in the block that finishes last, the batch loss (1/B) sum_i w_i L_i summed in index
// order (so one launch, and the same bits whichever block is last).
// The projection runs one thread per target atom (k, z): each sums the contributions that
// land on z in source order t, the same double operations in the same order as the oracle's
// scatter, so m is the oracle's to the bit.
// Oracle: qnet::loss_with_next_actions, qnet::next_actions, qnet::head_grad.
// Grid (B), block QNET_LOSS_LANES K threads (QNET_LOSS_LANES per branch: thread
// k QNET_LOSS_LANES + zl takes atoms z = zl, zl + QNET_LOSS_LANES, ...); dynamic shared: 3 K NA
// + 2 NA doubles, 2 NA unsigned ints, then 3 A floats (+ 3 L for NA > 1). `done` is a word
// that is zero at launch (the last block returns it to zero).
#include "common/qnet.cuh"

#include "common/grid.cuh"
#include "common/lanes.cuh"

#define QNET_LOSS_LANES 64
#define QNET_LOSS_WARPS (QNET_MAX_BRANCHES * QNET_LOSS_LANES / 32)

__device__ __forceinline__ double clampd(double x, double lo, double hi) {
    return x < lo ? lo : (x > hi ? hi : x);  // Rust's f64::clamp for non-NaN x
}

// Where source atom t of the target distribution lands: b = clamp((Tz - v_min) / dz, 0, NA-1)
// for Tz = clamp(r + g z_t, v_min, v_max), split between l = floor(b) and u = ceil(b).
struct Landing {
    double l, u, b;
};

__device__ __forceinline__ Landing land(double r, double g, double lo, double hi, double dz, unsigned int na,
                                        unsigned int t) {
    const double tz = clampd(__dadd_rn(r, __dmul_rn(g, support_atom(lo, dz, t))), lo, hi);
    const double b = clampd(__ddiv_rn(__dsub_rn(tz, lo), dz), 0.0, (double)(na - 1));
    return Landing{floor(b), ceil(b), b};
}

__device__ __forceinline__ double huber(double d, double kappa) {
    const double a = fabs(d);
    return a <= kappa ? __dmul_rn(__dmul_rn(0.5, d), d) : __dmul_rn(kappa, __dsub_rn(a, __dmul_rn(0.5, kappa)));
}

__device__ __forceinline__ double huber_grad(double d, double kappa) {
    return fabs(d) <= kappa ? d : (d > 0.0 ? kappa : (d < 0.0 ? -kappa : 0.0));
}

extern "C" __global__ void qnet_loss(const float* __restrict__ q, const float* __restrict__ log_probs,
                                     const float* __restrict__ probs, const int* __restrict__ actions,
                                     const float* __restrict__ rewards, const float* __restrict__ discounts,
                                     const float* __restrict__ weights, const BranchShape shape,
                                     unsigned int na, unsigned int batch, float v_min,
                                     float v_max, float kappa, int* __restrict__ next_actions,
                                     double* __restrict__ sample_loss, float* __restrict__ priority,
                                     float* __restrict__ dy, unsigned int* __restrict__ done, double* __restrict__ loss) {
    // Dynamic shared memory: doubles m, dl, dl / n_k [K NA each], the landings' weights
    // u - b and b - l [NA each]; unsigned ints l and u [NA each]; then floats: the sample's
    // rows staged with coalesced loads: q of (online, s), (online, s'), (target, s') [A each],
    // and for NA > 1 log_probs and probs of (online, s) and probs of (target, s') [L each].
    extern __shared__ double smem[];
    __shared__ double warp_part[QNET_LOSS_WARPS][2];
    __shared__ double branch_loss[QNET_MAX_BRANCHES];
    __shared__ unsigned int a_star[QNET_MAX_BRANCHES], act[QNET_MAX_BRANCHES];
    __shared__ double abs_td;

    const unsigned int i = blockIdx.x, tid = threadIdx.x, threads = blockDim.x, nbranch = shape.count;
    const unsigned int L = shape.logit[nbranch], A = shape.q[nbranch], out_w = shape.out[nbranch + 1];
    const bool c51 = na > 1;
    double* m = smem;
    double* dl = m + nbranch * na;
    double* dln = dl + nbranch * na;
    double* w_lo = dln + nbranch * na;  // u - b: the share of source atom t that lands on l
    double* w_hi = w_lo + na;           // b - l: the share that lands on u
    unsigned int* land_l = (unsigned int*)(w_hi + na);
    unsigned int* land_u = land_l + na;
    float* q_s = (float*)(land_u + na);
    float* q_s2 = q_s + A;
    float* q_tg = q_s2 + A;
    float* lp_s = q_tg + A;
    float* p_s = lp_s + (c51 ? L : 0);
    float* p_tg = p_s + (c51 ? L : 0);

    const unsigned long long rows = 2ull * batch;  // rows per network
    const unsigned long long s_on = i, s2_on = batch + i, s2_tg = rows + batch + i;
    for (unsigned int c = tid; c < A; c += threads) {
        q_s[c] = q[s_on * A + c];
        q_s2[c] = q[s2_on * A + c];
        q_tg[c] = q[s2_tg * A + c];
    }
    if (c51) {
        for (unsigned int c = tid; c < L; c += threads) {
            lp_s[c] = log_probs[s_on * L + c];
            p_s[c] = probs[s_on * L + c];
            p_tg[c] = probs[s2_tg * L + c];
        }
    }
    if (tid < nbranch) act[tid] = (unsigned int)actions[i * nbranch + tid];
    const double r = (double)rewards[i];
    const double g = (double)discounts[i];
    const double c = (double)weights[i] / (double)(batch * nbranch);
    const double lo = (double)v_min, hi = (double)v_max, dz = c51 ? (hi - lo) / (double)(na - 1) : 0.0;
    if (c51) {
        // The landings depend on the row only (r, g), not on the branch.
        for (unsigned int t = tid; t < na; t += threads) {
            const Landing x = land(r, g, lo, hi, dz, na, t);
            land_l[t] = (unsigned int)x.l;
            land_u[t] = (unsigned int)x.u;
            w_lo[t] = __dsub_rn(x.u, x.b);
            w_hi[t] = __dsub_rn(x.b, x.l);
        }
    }
    __syncthreads();

    const unsigned int k = tid / QNET_LOSS_LANES, zl = tid % QNET_LOSS_LANES;
    if (zl == 0 && k < nbranch) {
        const float* qk = q_s2 + shape.q[k];
        unsigned int best = 0;
        for (unsigned int j = 1; j < shape.n[k]; ++j)
            if (qk[j] > qk[best]) best = j;
        a_star[k] = best;
        next_actions[i * nbranch + k] = (int)best;
    }
    __syncthreads();

    if (c51) {
        // Thread (k, z): m_z summed over the source atoms t in order, each contributing
        // p (u - b) where l = z, p (b - l) where u = z, and p more where l = u = z.
        double ce = 0.0, mass = 0.0;
        const float* pt = p_tg + shape.logit[k] + a_star[k] * na;
        const float* lpk = lp_s + shape.logit[k] + act[k] * na;
        for (unsigned int z = zl; z < na; z += QNET_LOSS_LANES) {
            double mz = 0.0;
            for (unsigned int t = 0; t < na; ++t) {
                const unsigned int li = land_l[t], ui = land_u[t];
                if (li != z && ui != z) continue;
                const double p = (double)pt[t];
                if (li == z) mz = __dadd_rn(mz, __dmul_rn(p, w_lo[t]));
                if (ui == z) mz = __dadd_rn(mz, __dmul_rn(p, w_hi[t]));
                if (li == ui) mz = __dadd_rn(mz, p);
            }
            m[k * na + z] = mz;
            ce += mz * (double)lpk[z];
            mass += mz;
        }
        // The branch's cross-entropy and target mass: its two warps' butterflies, then warp 0's
        // share plus warp 1's.
        ce = group_sum(ce, LANES_ALL, 32);
        mass = group_sum(mass, LANES_ALL, 32);
        const unsigned int warp = tid / 32;
        if (tid % 32 == 0) {
            warp_part[warp][0] = ce;
            warp_part[warp][1] = mass;
        }
        __syncthreads();
        const unsigned int w0 = k * (QNET_LOSS_LANES / 32);
        const double ce_k = warp_part[w0][0] + warp_part[w0 + 1][0];
        const double mass_k = warp_part[w0][1] + warp_part[w0 + 1][1];
        if (zl == 0) branch_loss[k] = -ce_k;
        const double nk = (double)shape.n[k];
        for (unsigned int z = zl; z < na; z += QNET_LOSS_LANES) {
            const unsigned int e = k * na + z;
            const double pz = (double)p_s[shape.logit[k] + act[k] * na + z];
            const double d = __dmul_rn(c, __dsub_rn(__dmul_rn(pz, mass_k), m[e]));
            dl[e] = d;
            dln[e] = d / nk;
        }
    } else if (tid == 0) {
        double next = 0.0;
        for (unsigned int b = 0; b < nbranch; ++b) next += (double)q_tg[shape.q[b] + a_star[b]];
        next /= (double)nbranch;
        const double target = __dadd_rn(r, __dmul_rn(g, next));
        double sum_abs = 0.0;
        for (unsigned int b = 0; b < nbranch; ++b) {
            const double td = target - (double)q_s[shape.q[b] + act[b]];
            branch_loss[b] = huber(td, (double)kappa);
            dl[b] = -c * huber_grad(td, (double)kappa);
            dln[b] = dl[b] / (double)shape.n[b];
            sum_abs += fabs(td);
        }
        abs_td = sum_abs / (double)nbranch;
    }
    __syncthreads();

    // The dueling backward: dv[z] = sum_k dl_k[z]; da_k[j, z] = [j = a_k] dl_k[z] - dl_k[z] / n_k.
    float* dyr = dy + (unsigned long long)i * out_w;
    for (unsigned int col = tid; col < out_w; col += threads) {
        double v;
        if (col < na) {
            v = 0.0;
            for (unsigned int b = 0; b < nbranch; ++b) v += dl[b * na + col];
        } else {
            unsigned int b = 0;
            while (col >= shape.out[b + 2]) ++b;
            const unsigned int j = (col - shape.out[b + 1]) / na, z = (col - shape.out[b + 1]) % na;
            const double d = dl[b * na + z];
            v = (j == act[b] ? d : 0.0) - dln[b * na + z];
        }
        dyr[col] = (float)v;
    }
    if (tid == 0) {
        double li = 0.0;
        for (unsigned int b = 0; b < nbranch; ++b) li += branch_loss[b];
        li /= (double)nbranch;
        sample_loss[i] = li;
        priority[i] = (float)(c51 ? li : abs_td);
    }
    if (!last_block_done(done)) return;

    // The batch loss: each thread's samples in order, the warps' butterflies, the warps in order.
    double acc = 0.0;
    for (unsigned int b = tid; b < batch; b += threads) acc += (double)weights[b] * __ldcg(sample_loss + b);
    acc = group_sum(acc, LANES_ALL, 32);
    if (tid % 32 == 0) warp_part[tid / 32][0] = acc;
    __syncthreads();
    if (tid == 0) {
        double total = 0.0;
        for (unsigned int w = 0; w < threads / 32; ++w) total += warp_part[w][0];
        loss[0] = total / (double)batch;
    }
}
