// qnet_head: the end of the forward. For each network and row, the head-output row y (the
// heads' output GEMMs, without bias) plus the bias (row H of the net's dense head matrix,
// qnet_head_matrix.cu) is the value v [NA] and each branch's advantages a_k [n_k, NA]; then per
// branch the dueling logits
//   logits_k[j, z] = (v[z] + a_k[j, z]) - (1/n_k) sum_j' a_k[j', z]
// and for NA > 1 the log-softmax over z, probs = e / sum e with e = exp(logit - max) (equal to
// exp(log_probs) within a double ulp) and Q = sum_z probs z_z (C51); for NA = 1 Q is the logit.
// Arithmetic in double, each stored value rounded once to float. Oracle: qnet::head.
//
// Layouts (`rows` rows per net; task row at = net * rows + row):
//   y         [nets][rows][out]   out = NA (1 + sum_k n_k): value, then branch k at out[k+1]
//   bias      [out] at net * bias_stride
//   logits, log_probs, probs  [nets][rows][L]   L = sum_k n_k NA, branch k at logit[k]
//   q         [nets][rows][A]   A = sum_k n_k
// It writes q and the logits, and for NA > 1 log_probs and probs, too.
//
// qnet_head_q, the acting head: the same Q in float, nothing else written (the experience
// step reads Q only, and its argmax needs no double). The same three stages in float, with
// QNET_HEAD_Q_SLOTS atoms a lane (so lpa = 4 for 51 atoms) and Q = sum e z / sum e. Its
// float softmax errs by a few float ulps of sum_z p_z |z_z| (exp's error, the float sums),
// so it is held to the FlashAttention rule against a float reference summing in another
// order (oracle: qnet::head_q, head_q_f32). Measured dead end here: one thread per (row,
// action) walking its atoms twice needs the fewest instructions, but each warp's chain of
// ~2600 dependent instructions (11 cycles apiece) made it no faster (15-18 us at N = 4096).
// The fused forward's head_q_items (cuda/common/head.cuh) runs 4 chains a thread instead.
// Grid (ceil(rows / block_rows), 1); dynamic shared memory block_rows (out + K NA) + 32 floats.
//
// qnet_head's work split, so that each value is formed once. Grid (ceil(rows / block_rows), nets): a
// block takes `block_rows` rows of one network.
//   1. stage: the block widens its rows' y + bias into shared memory (double), each thread
//      issuing QNET_HEAD_STAGE loads before it converts any, so that one memory latency
//      covers the rows;
//   2. mean: each branch's advantage mean per atom, once per (row, branch, z), in order j;
//   3. softmax: a group of `lpa` lanes (a power of two <= 32, so a group never straddles a
//      warp) per (row, action); lane l takes atoms z = l, l + lpa, ... (at most
//      QNET_HEAD_SLOTS, held in registers), and the group's lanes reduce max, sum of e and Q
//      by butterflies of log2(lpa) steps.
// The host picks lpa, the least power of two with NA <= lpa QNET_HEAD_SLOTS (8 for 51 atoms:
// 7 atoms a lane; 1 for NA = 1). The reductions run in double in another order than the
// oracle's sums, and exp is `exp_nonpositive` below: each within a few double ulps of the
// oracle's, ~1e-16 relative, invisible after the float rounding but at a rounding boundary
// (then one float ulp: QNET_LOSS allows two).
// The kernel is bound by its instruction count (it runs once per forward on every row), so
// the softmax is branch-free per slot: a slot past NA computes on padding and is masked.
// Dynamic shared memory: block_rows (out + K NA) + 32 doubles (the padding: a slot past NA
// reads at most lpa - 1 <= 31 values past its row's end).
#include "common/head.cuh"
#include "common/lanes.cuh"
#include "common/qnet.cuh"

#define QNET_HEAD_SLOTS 8
#define QNET_HEAD_STAGE 8

// exp(x) for x <= 0 in double, without branches (CUDA's exp branches on its range, which
// splits every slot into its own basic block): x = k ln2 + r with k = round(x / ln2),
// |r| <= ln2 / 2, exp(r) by its Taylor polynomial of degree 13 (remainder < 5e-18), scaled by
// 2^k through the exponent field. x is clamped at -708, where exp is still a normal double
// (3.3e-308): every value below that is a probability that rounds to float 0 after division
// by a sum >= 1, so the clamp changes no stored result.
__constant__ double QNET_EXP_TAYLOR[14] = {
    1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880,
    1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0};

__device__ __forceinline__ double exp_nonpositive(double x) {
    const double round = 6755399441055744.0;  // 1.5 2^52: adding it rounds to an integer in the low word
    const double ln2_hi = 6.93147180559945286227e-01, ln2_lo = 2.31904681384629955842e-17;
    x = x < -708.0 ? -708.0 : x;
    const double t = fma(x, 1.4426950408889634074, round);
    const double k = t - round;
    double r = fma(-k, ln2_hi, x);
    r = fma(-k, ln2_lo, r);
    double p = QNET_EXP_TAYLOR[13];
#pragma unroll
    for (int i = 12; i >= 0; --i) p = fma(p, r, QNET_EXP_TAYLOR[i]);
    const int scale = (int)((unsigned int)__double2loint(t) << 20);  // k in the exponent field
    return __hiloint2double(__double2hiint(p) + scale, __double2loint(p));
}

// 1. stage: the block's `here` rows of y (from its first row `yb`) plus the bias `bn`, widened
// to Real into `staged`, each thread issuing STAGE loads before it converts any (so that one
// memory latency covers STAGE of its elements); element i of the rows is column i mod out_w,
// tracked without division.
template <unsigned int STAGE, typename Real>
__device__ __forceinline__ void stage_head_rows(const float* __restrict__ yb, const float* __restrict__ bn,
                                                unsigned int here, unsigned int out_w, Real* staged) {
    const unsigned int count = here * out_w, dc = blockDim.x % out_w;
    unsigned int c = threadIdx.x % out_w;
    for (unsigned int i0 = threadIdx.x; i0 < count; i0 += STAGE * blockDim.x) {
        float yv[STAGE], bv[STAGE];
#pragma unroll
        for (unsigned int u = 0; u < STAGE; ++u) {
            if (i0 + u * blockDim.x < count) {
                yv[u] = yb[i0 + u * blockDim.x];
                bv[u] = bn[c];
            }
            c += dc;
            c = c >= out_w ? c - out_w : c;
        }
#pragma unroll
        for (unsigned int u = 0; u < STAGE; ++u) {
            if (i0 + u * blockDim.x < count) staged[i0 + u * blockDim.x] = (Real)yv[u] + (Real)bv[u];
        }
    }
}

extern "C" __global__ void qnet_head(const float* __restrict__ y, const float* __restrict__ bias,
                                     unsigned long long bias_stride, const BranchShape shape, unsigned int na,
                                     float v_min, float v_max, unsigned int rows, unsigned int lpa,
                                     unsigned int block_rows, float* __restrict__ logits,
                                     float* __restrict__ log_probs, float* __restrict__ probs, float* __restrict__ q) {
    extern __shared__ double head_smem[];
    const unsigned int nbranch = shape.count, A = shape.q[nbranch];
    const unsigned int out_w = shape.out[nbranch + 1], L = shape.logit[nbranch], mean_w = nbranch * na;
    const unsigned int net = blockIdx.y, first = blockIdx.x * block_rows, here = min(block_rows, rows - first);
    const unsigned long long at0 = (unsigned long long)net * rows + first;  // the block's first task row
    double* staged = head_smem;                   // [block_rows][out_w]
    double* mean = staged + block_rows * out_w;   // [block_rows][K][NA], then the padding

    stage_head_rows<QNET_HEAD_STAGE>(y + at0 * out_w, bias + net * bias_stride, here, out_w, staged);
    __syncthreads();
    head_means(staged, shape, na, here, out_w, mean);
    __syncthreads();

    // 3. softmax: group g of the block is (row r, action act).
    const unsigned int g = threadIdx.x / lpa, lane = threadIdx.x % lpa;
    const unsigned int r = g / A, act = g - r * A;
    if (r >= here) return;  // whole groups only: a group's lanes return together
    const unsigned int warp_lane = threadIdx.x % 32;
    const unsigned int mask = (lpa == 32 ? LANES_ALL : ((1u << lpa) - 1u)) << (warp_lane - lane);
    unsigned int k = 0;
    while (act >= shape.q[k + 1]) ++k;
    const unsigned int j = act - shape.q[k];
    const double* s = staged + r * out_w;
    const double* a = s + shape.out[k + 1] + j * na;
    const double* m = mean + r * mean_w + k * na;
    const unsigned long long at = at0 + r;
    const unsigned long long base = at * L + shape.logit[k] + j * na;

    if (na == 1) {  // lpa = 1: the logit is Q
        const float l = (float)((s[0] + a[0]) - m[0]);
        logits[base] = l;
        q[at * A + act] = l;
        return;
    }

    const double neg_inf = __longlong_as_double(0xfff0000000000000ull);
    double l[QNET_HEAD_SLOTS], e[QNET_HEAD_SLOTS];
    double mx = neg_inf;
#pragma unroll
    for (unsigned int i = 0; i < QNET_HEAD_SLOTS; ++i) {
        if (i * lpa >= na) break;  // the same for the whole group
        const unsigned int z = lane + i * lpa;
        const double li = (s[z] + a[z]) - m[z];  // past NA: padding, masked here
        l[i] = z < na ? li : neg_inf;
        mx = l[i] > mx ? l[i] : mx;
    }
    mx = group_max(mx, mask, lpa);
    double se = 0.0;
#pragma unroll
    for (unsigned int i = 0; i < QNET_HEAD_SLOTS; ++i) {
        if (i * lpa >= na) break;
        const double ei = exp_nonpositive(l[i] - mx);
        e[i] = lane + i * lpa < na ? ei : 0.0;
        se += e[i];
    }
    se = group_sum(se, mask, lpa);
    const double inv = 1.0 / se, lse = mx + log(se);
    const double lo = (double)v_min, dz = ((double)v_max - lo) / (double)(na - 1);
    double qs = 0.0;
#pragma unroll
    for (unsigned int i = 0; i < QNET_HEAD_SLOTS; ++i) {
        if (i * lpa >= na) break;
        const unsigned int z = lane + i * lpa;
        const double pz = e[i] * inv;
        qs += pz * support_atom(lo, dz, z);  // e = 0 past NA: adds 0
        if (z < na) {
            logits[base + z] = (float)l[i];
            log_probs[base + z] = (float)(l[i] - lse);
            probs[base + z] = (float)pz;
        }
    }
    qs = group_sum(qs, mask, lpa);
    if (lane == 0) q[at * A + act] = (float)qs;
}

extern "C" __global__ void qnet_head_q(const float* __restrict__ y, const float* __restrict__ bias,
                                       const BranchShape shape, unsigned int na, float v_min, float v_max,
                                       unsigned int rows, unsigned int lpa, unsigned int block_rows,
                                       float* __restrict__ q) {
    extern __shared__ float head_q_smem[];
    const unsigned int nbranch = shape.count, A = shape.q[nbranch];
    const unsigned int out_w = shape.out[nbranch + 1], mean_w = nbranch * na;
    const unsigned int first = blockIdx.x * block_rows, here = min(block_rows, rows - first);
    float* staged = head_q_smem;                 // [block_rows][out_w]
    float* mean = staged + block_rows * out_w;   // [block_rows][K][NA], then the padding
    stage_head_rows<QNET_HEAD_STAGE>(y + (unsigned long long)first * out_w, bias, here, out_w, staged);
    __syncthreads();
    head_means(staged, shape, na, here, out_w, mean);
    __syncthreads();

    // 3. softmax: a lane group per (row, action).
    head_q_rows(staged, mean, shape, na, v_min, v_max, here, lpa, q + (unsigned long long)first * A);
}
