// qnet_head: the end of the forward. For each network and row, the head-output row y (the
// heads' output GEMMs, without bias) plus the bias (row H of the net's dense head matrix,
// qnet_heads.cu) is the value v [NA] and each branch's advantages a_k [n_k, NA]; then per
// branch the dueling logits
//   logits_k[j, z] = (v[z] + a_k[j, z]) - (1/n_k) sum_j' a_k[j', z]
// and for NA > 1 the log-softmax over z, probs = e / sum e with e = exp(logit - max) (equal to
// exp(log_probs) within a double ulp) and Q = sum_z probs z_z (C51); for NA = 1 Q is the logit.
// Arithmetic in double, each stored value rounded once to float. Oracle: qnet::head.
//
// Layouts (`rows` rows per net):
//   y         [nets][rows][out]   out = NA (1 + sum_k n_k): value, then branch k at out[k+1]
//   bias      [out] at net * bias_stride
//   logits, log_probs, probs  [nets][rows][L]   L = sum_k n_k NA, branch k at logit[k]
//   q         [nets][rows][A]   A = sum_k n_k
// `dists` = 0 writes q only (acting reads nothing else; the three distribution outputs may
// then be null); otherwise logits, and for NA > 1 log_probs and probs, too.
//
// One warp per (net, row, action): the warp's lanes split the atoms z (lane, lane + 32, ...),
// each lane forming its own logits (the branch's advantage mean over the actions included,
// recomputed by every action's warp: n_k loads per atom, cheaper than a block-wide step),
// so the only exchanges are three butterfly reductions (max, sum of e, Q) and all of a row's
// actions run at once. NA = 1: lane 0 alone.
// Grid: ceil(nets rows A / QNET_HEAD_WARPS) blocks of 32 QNET_HEAD_WARPS threads; dynamic
// shared memory: 2 NA doubles per warp (the action's logits and their exps).
#include "common/qnet.cuh"

#define QNET_HEAD_WARPS 4

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;  // the butterfly gives every lane the same bits (a + b == b + a)
}

__device__ __forceinline__ double warp_max(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

extern "C" __global__ void qnet_head(const float* __restrict__ y, const float* __restrict__ bias,
                                     unsigned long long bias_stride, const BranchShape shape, unsigned int na,
                                     float v_min, float v_max, unsigned int rows, unsigned int nets,
                                     unsigned int dists, float* __restrict__ logits, float* __restrict__ log_probs,
                                     float* __restrict__ probs, float* __restrict__ q) {
    extern __shared__ double head_smem[];
    const unsigned int nbranch = shape.count, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const unsigned int A = shape.q[nbranch];
    const unsigned long long task = (unsigned long long)blockIdx.x * QNET_HEAD_WARPS + warp;
    if (task >= (unsigned long long)nets * rows * A) return;  // whole warps only
    const unsigned long long at = task / A;                   // net * rows + row
    const unsigned int act = (unsigned int)(task % A), net = (unsigned int)(at / rows);
    unsigned int k = 0;
    while (act >= shape.q[k + 1]) ++k;
    const unsigned int n = shape.n[k], j = act - shape.q[k], out_w = shape.out[nbranch + 1], L = shape.logit[nbranch];
    const float* yr = y + at * out_w;
    const float* br = bias + net * bias_stride;
    const unsigned int adv = shape.out[k + 1], col = adv + j * na;
    // The staged head output y + bias of column c, in double (the oracle's input).
    auto staged = [&](unsigned int c) { return (double)yr[c] + (double)br[c]; };
    // The dueling logit of atom z: (v + a_j) - (1/n) sum_j' a_j', the mean in order.
    auto logit = [&](unsigned int z) {
        double sum = 0.0;
        for (unsigned int i = 0; i < n; ++i) sum += staged(adv + i * na + z);
        return (staged(z) + staged(col + z)) - sum / (double)n;
    };
    const unsigned long long base = at * L + shape.logit[k] + j * na;

    if (na == 1) {
        if (lane == 0) {
            const float l = (float)logit(0);
            if (dists) logits[base] = l;
            q[at * A + act] = l;
        }
        return;
    }

    double* lrow = head_smem + warp * 2 * na;
    double* expo = lrow + na;
    double mx = __longlong_as_double(0xfff0000000000000ull);  // -inf
    for (unsigned int z = lane; z < na; z += 32) {
        const double l = logit(z);
        lrow[z] = l;
        mx = fmax(mx, l);
    }
    mx = warp_max(mx);
    double se = 0.0;
    for (unsigned int z = lane; z < na; z += 32) {
        const double e = exp(lrow[z] - mx);
        expo[z] = e;
        se += e;
    }
    se = warp_sum(se);
    const double inv = 1.0 / se, lse = dists ? mx + log(se) : 0.0;
    const double lo = (double)v_min, dz = ((double)v_max - lo) / (double)(na - 1);
    double qs = 0.0;
    for (unsigned int z = lane; z < na; z += 32) {
        const double pz = expo[z] * inv;
        qs += pz * support_atom(lo, dz, z);
        if (dists) {
            logits[base + z] = (float)lrow[z];
            log_probs[base + z] = (float)(lrow[z] - lse);
            probs[base + z] = (float)pz;
        }
    }
    qs = warp_sum(qs);
    if (lane == 0) q[at * A + act] = (float)qs;
}
