// qnet_loss: the Double DQN loss of a batch, one block per sample i, from qnet_head's
// outputs over the stacked rows [s; s'] of the online (net 0) and target (net 1) networks.
// Per branch k:
//   a*_k = argmax_j q_online(s'_i)[k, j], the lowest j on ties;
//   C51 (NA > 1): m = projection of probs_target(s'_i)[k, a*_k] onto the support for
//     r + gamma^n (1 - done) z, scattered in source order by one thread per branch (the
//     oracle's order, so the same double operations), l_k = -sum_z m_z log_probs_online(s_i)[k, a_k, z],
//     dlogits = c (probs sum_z' m_z' - m), c = w_i / (B K);
//   scalar (NA = 1): y = r + gamma^n (1 - done) (1/K) sum_k q_target(s'_i)[k, a*_k],
//     TD_k = y - q_online(s_i)[k, a_k], l_k = Huber(TD_k), dlogit = -c Huber'(TD_k).
// Then the dueling backward into the head-output gradient row dy_i (qnet::head_grad), the
// per-sample loss L_i = (1/K) sum_k l_k and the priority (C51 L_i, scalar mean_k |TD_k|).
// Oracle: qnet::loss_with_next_actions, qnet::next_actions, qnet::head_grad.
//   qnet_loss:        grid (B), block QNET_LOSS_THREADS; dynamic shared: (2 K + 3) NA doubles,
//                     then 3 A floats (+ 3 L for NA > 1).
//   qnet_loss_reduce: ONE block of 256 threads: loss = (1/B) sum_i w_i L_i.
#include "common/qnet.cuh"

#define QNET_LOSS_THREADS 64

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
                                     const float* __restrict__ rewards, const float* __restrict__ dones,
                                     const float* __restrict__ weights, const BranchShape shape,
                                     unsigned int na, unsigned int batch, float v_min,
                                     float v_max, double discount, float kappa, int* __restrict__ next_actions,
                                     double* __restrict__ sample_loss, float* __restrict__ priority,
                                     float* __restrict__ dy) {
    // Dynamic shared memory: doubles m [K NA], dl [K NA], land_l, land_u, land_b [NA], then
    // floats: the sample's rows staged with coalesced loads: q of (online, s), (online, s'),
    // (target, s') [A each], and for NA > 1 log_probs and probs of (online, s) and probs of
    // (target, s') [L each].
    extern __shared__ double smem[];
    __shared__ double red[QNET_LOSS_THREADS][2 * QNET_MAX_BRANCHES];
    __shared__ double branch_loss[QNET_MAX_BRANCHES];
    __shared__ unsigned int a_star[QNET_MAX_BRANCHES], act[QNET_MAX_BRANCHES];
    __shared__ double abs_td;

    const unsigned int i = blockIdx.x, tid = threadIdx.x, nbranch = shape.count;
    const unsigned int L = shape.logit[nbranch], A = shape.q[nbranch], out_w = shape.out[nbranch + 1];
    const bool c51 = na > 1;
    double* m = smem;
    double* dl = m + nbranch * na;
    double* land_l = dl + nbranch * na;
    double* land_u = land_l + na;
    double* land_b = land_u + na;
    float* q_s = (float*)(land_b + na);
    float* q_s2 = q_s + A;
    float* q_tg = q_s2 + A;
    float* lp_s = q_tg + A;
    float* p_s = lp_s + (c51 ? L : 0);
    float* p_tg = p_s + (c51 ? L : 0);

    const unsigned long long rows = 2ull * batch;  // rows per network
    const unsigned long long s_on = i, s2_on = batch + i, s2_tg = rows + batch + i;
    for (unsigned int c = tid; c < A; c += QNET_LOSS_THREADS) {
        q_s[c] = q[s_on * A + c];
        q_s2[c] = q[s2_on * A + c];
        q_tg[c] = q[s2_tg * A + c];
    }
    if (c51) {
        for (unsigned int c = tid; c < L; c += QNET_LOSS_THREADS) {
            lp_s[c] = log_probs[s_on * L + c];
            p_s[c] = probs[s_on * L + c];
            p_tg[c] = probs[s2_tg * L + c];
        }
    }
    if (tid < nbranch) act[tid] = (unsigned int)actions[i * nbranch + tid];
    const double r = (double)rewards[i];
    const double g = __dmul_rn(discount, __dsub_rn(1.0, (double)dones[i]));
    const double c = (double)weights[i] / (double)(batch * nbranch);
    const double lo = (double)v_min, hi = (double)v_max, dz = c51 ? (hi - lo) / (double)(na - 1) : 0.0;
    if (c51) {
        // The landings depend on the row only (r, done), not on the branch.
        for (unsigned int t = tid; t < na; t += QNET_LOSS_THREADS) {
            const Landing x = land(r, g, lo, hi, dz, na, t);
            land_l[t] = x.l;
            land_u[t] = x.u;
            land_b[t] = x.b;
        }
    }
    __syncthreads();

    if (tid < nbranch) {
        const unsigned int k = tid;
        const float* qk = q_s2 + shape.q[k];
        unsigned int best = 0;
        for (unsigned int j = 1; j < shape.n[k]; ++j)
            if (qk[j] > qk[best]) best = j;
        a_star[k] = best;
        next_actions[i * nbranch + k] = (int)best;
    }
    __syncthreads();

    if (c51) {
        // The projection, one thread per branch, in the oracle's order: for each source atom
        // t, m_l += p (u - b), m_u += p (b - l), and m_l += p where l = u.
        if (tid < nbranch) {
            const unsigned int k = tid;
            const float* pt = p_tg + shape.logit[k] + a_star[k] * na;
            double* mk = m + k * na;
            for (unsigned int z = 0; z < na; ++z) mk[z] = 0.0;
            for (unsigned int t = 0; t < na; ++t) {
                const double p = (double)pt[t], l = land_l[t], u = land_u[t], b = land_b[t];
                const unsigned int li = (unsigned int)l, ui = (unsigned int)u;
                mk[li] = __dadd_rn(mk[li], __dmul_rn(p, __dsub_rn(u, b)));
                mk[ui] = __dadd_rn(mk[ui], __dmul_rn(p, __dsub_rn(b, l)));
                if (li == ui) mk[li] = __dadd_rn(mk[li], p);
            }
        }
        __syncthreads();
        // Each thread's share of the cross-entropy and the target mass of every branch.
        double part[2 * QNET_MAX_BRANCHES];
#pragma unroll
        for (unsigned int j = 0; j < 2 * QNET_MAX_BRANCHES; ++j) part[j] = 0.0;
        for (unsigned int z = tid; z < na; z += QNET_LOSS_THREADS) {
#pragma unroll
            for (unsigned int k = 0; k < QNET_MAX_BRANCHES; ++k) {
                if (k >= nbranch) break;
                const double mz = m[k * na + z];
                part[2 * k] += mz * (double)lp_s[shape.logit[k] + act[k] * na + z];
                part[2 * k + 1] += mz;
            }
        }
        for (unsigned int j = 0; j < 2 * nbranch; ++j) red[tid][j] = part[j];
        __syncthreads();
        for (unsigned int stride = QNET_LOSS_THREADS / 2; stride > 0; stride >>= 1) {
            if (tid < stride)
                for (unsigned int j = 0; j < 2 * nbranch; ++j) red[tid][j] += red[tid + stride][j];
            __syncthreads();
        }
        if (tid < nbranch) branch_loss[tid] = -red[0][2 * tid];
        for (unsigned int e = tid; e < nbranch * na; e += QNET_LOSS_THREADS) {
            const unsigned int k = e / na, z = e % na;
            const double mass = red[0][2 * k + 1];
            const double pz = (double)p_s[shape.logit[k] + act[k] * na + z];
            dl[e] = __dmul_rn(c, __dsub_rn(__dmul_rn(pz, mass), m[e]));
        }
    } else if (tid == 0) {
        double next = 0.0;
        for (unsigned int k = 0; k < nbranch; ++k) next += (double)q_tg[shape.q[k] + a_star[k]];
        next /= (double)nbranch;
        const double target = __dadd_rn(r, __dmul_rn(g, next));
        double sum_abs = 0.0;
        for (unsigned int k = 0; k < nbranch; ++k) {
            const double td = target - (double)q_s[shape.q[k] + act[k]];
            branch_loss[k] = huber(td, (double)kappa);
            dl[k] = -c * huber_grad(td, (double)kappa);
            sum_abs += fabs(td);
        }
        abs_td = sum_abs / (double)nbranch;
    }
    __syncthreads();

    // The dueling backward: dv[z] = sum_k dl_k[z]; da_k[j, z] = [j = a_k] dl_k[z] - dl_k[z] / n_k.
    float* dyr = dy + (unsigned long long)i * out_w;
    for (unsigned int col = tid; col < out_w; col += QNET_LOSS_THREADS) {
        double v;
        if (col < na) {
            v = 0.0;
            for (unsigned int k = 0; k < nbranch; ++k) v += dl[k * na + col];
        } else {
            unsigned int k = 0;
            while (col >= shape.out[k + 2]) ++k;
            const unsigned int j = (col - shape.out[k + 1]) / na, z = (col - shape.out[k + 1]) % na;
            const double d = dl[k * na + z];
            v = (j == act[k] ? d : 0.0) - d / (double)shape.n[k];
        }
        dyr[col] = (float)v;
    }
    if (tid == 0) {
        double li = 0.0;
        for (unsigned int k = 0; k < nbranch; ++k) li += branch_loss[k];
        li /= (double)nbranch;
        sample_loss[i] = li;
        priority[i] = (float)(c51 ? li : abs_td);
    }
}

extern "C" __global__ void qnet_loss_reduce(const double* __restrict__ sample_loss, const float* __restrict__ weights,
                                            unsigned int batch, double* __restrict__ loss) {
    __shared__ double red[256];
    double acc = 0.0;
    for (unsigned int i = threadIdx.x; i < batch; i += 256) acc += (double)weights[i] * sample_loss[i];
    const double total = block_sum_fixed(acc, red, 256);
    if (threadIdx.x == 0) loss[0] = total / (double)batch;
}
