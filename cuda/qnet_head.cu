// qnet_head: the end of the forward. For each network and row, the head-output row y (the
// heads' output GEMMs, without bias) plus the bias (row H of the net's dense head matrix,
// qnet_heads.cu) is the value v [NA] and each branch's advantages a_k [n_k, NA]; then per
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
// `dists` = 0 writes q only (acting reads nothing else; the three distribution outputs may
// then be null); otherwise logits, and for NA > 1 log_probs and probs, too.
//
// Work split, so that each value is formed once: a block takes `block_rows` task rows.
//   1. stage: every thread widens its share of the rows' y + bias into shared memory (double);
//   2. mean: each branch's advantage mean per atom, once per (row, branch, z), in order j;
//   3. softmax: a group of `lpa` lanes (a power of two <= 32, so a group never straddles a
//      warp) per (row, action); lane l takes atoms z = l, l + lpa, ... (at most
//      QNET_HEAD_SLOTS, held in registers), and the group's lanes reduce max, sum of e and Q
//      by butterflies of log2(lpa) steps.
// The host picks lpa, the least power of two with NA <= lpa QNET_HEAD_SLOTS (8 for 51 atoms:
// 7 atoms a lane, 91% of the lanes busy; 1 for NA = 1). The reductions run in double in
// another order than the oracle's sums: ~1e-16 relative, invisible after the float rounding.
// Grid: ceil(nets rows / block_rows) blocks of block_rows A lpa threads (rounded up to whole
// warps); dynamic shared memory: block_rows (out + K NA) doubles.
#include "common/qnet.cuh"

#define QNET_HEAD_SLOTS 8

// Sum and max over the `lpa` lanes of `mask` (one group): every lane gets the same bits.
__device__ __forceinline__ double group_sum(double v, unsigned int mask, unsigned int lpa) {
    for (unsigned int offset = lpa / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(mask, v, offset, lpa);
    return v;
}

__device__ __forceinline__ double group_max(double v, unsigned int mask, unsigned int lpa) {
    for (unsigned int offset = lpa / 2; offset > 0; offset >>= 1) v = fmax(v, __shfl_xor_sync(mask, v, offset, lpa));
    return v;
}

extern "C" __global__ void qnet_head(const float* __restrict__ y, const float* __restrict__ bias,
                                     unsigned long long bias_stride, const BranchShape shape, unsigned int na,
                                     float v_min, float v_max, unsigned int rows, unsigned int nets,
                                     unsigned int lpa, unsigned int block_rows, unsigned int dists,
                                     float* __restrict__ logits, float* __restrict__ log_probs,
                                     float* __restrict__ probs, float* __restrict__ q) {
    extern __shared__ double head_smem[];
    const unsigned int nbranch = shape.count, A = shape.q[nbranch];
    const unsigned int out_w = shape.out[nbranch + 1], L = shape.logit[nbranch], mean_w = nbranch * na;
    const unsigned long long first = (unsigned long long)blockIdx.x * block_rows;
    const unsigned long long total = (unsigned long long)nets * rows;
    const unsigned int here = (unsigned int)min((unsigned long long)block_rows, total - first);
    double* staged = head_smem;                   // [block_rows][out_w]
    double* mean = staged + block_rows * out_w;   // [block_rows][K][NA]

    // 1. stage
    for (unsigned int i = threadIdx.x; i < here * out_w; i += blockDim.x) {
        const unsigned int r = i / out_w, c = i - r * out_w;
        const unsigned long long at = first + r;
        const unsigned int net = (unsigned int)(at / rows);
        staged[i] = (double)y[at * out_w + c] + (double)bias[net * bias_stride + c];
    }
    __syncthreads();
    // 2. mean
    for (unsigned int i = threadIdx.x; i < here * mean_w; i += blockDim.x) {
        const unsigned int r = i / mean_w, kz = i - r * mean_w, k = kz / na, z = kz - k * na;
        const double* a = staged + r * out_w + shape.out[k + 1] + z;
        const unsigned int n = shape.n[k];
        double sum = 0.0;
        for (unsigned int j = 0; j < n; ++j) sum += a[j * na];
        mean[i] = sum / (double)n;
    }
    __syncthreads();

    // 3. softmax: group g of the block is (row r, action act).
    const unsigned int g = threadIdx.x / lpa, lane = threadIdx.x % lpa;
    const unsigned int r = g / A, act = g - r * A;
    if (r >= here) return;  // whole groups only: a group's lanes return together
    const unsigned int warp_lane = threadIdx.x % 32;
    const unsigned int mask = (lpa == 32 ? 0xffffffffu : ((1u << lpa) - 1u)) << (warp_lane - lane);
    unsigned int k = 0;
    while (act >= shape.q[k + 1]) ++k;
    const unsigned int j = act - shape.q[k];
    const double* s = staged + r * out_w;
    const double* a = s + shape.out[k + 1] + j * na;
    const double* m = mean + r * mean_w + k * na;
    const unsigned long long at = first + r;
    const unsigned long long base = at * L + shape.logit[k] + j * na;

    if (na == 1) {  // lpa = 1: the logit is Q
        const float l = (float)((s[0] + a[0]) - m[0]);
        if (dists) logits[base] = l;
        q[at * A + act] = l;
        return;
    }

    double l[QNET_HEAD_SLOTS], e[QNET_HEAD_SLOTS];
    double mx = __longlong_as_double(0xfff0000000000000ull);  // -inf
#pragma unroll
    for (unsigned int i = 0; i < QNET_HEAD_SLOTS; ++i) {
        const unsigned int z = lane + i * lpa;
        l[i] = z < na ? (s[z] + a[z]) - m[z] : mx;
        mx = fmax(mx, l[i]);
    }
    mx = group_max(mx, mask, lpa);
    double se = 0.0;
#pragma unroll
    for (unsigned int i = 0; i < QNET_HEAD_SLOTS; ++i) {
        const unsigned int z = lane + i * lpa;
        e[i] = z < na ? exp(l[i] - mx) : 0.0;
        se += e[i];
    }
    se = group_sum(se, mask, lpa);
    const double inv = 1.0 / se, lse = dists ? mx + log(se) : 0.0;
    const double lo = (double)v_min, dz = ((double)v_max - lo) / (double)(na - 1);
    double qs = 0.0;
#pragma unroll
    for (unsigned int i = 0; i < QNET_HEAD_SLOTS; ++i) {
        const unsigned int z = lane + i * lpa;
        if (z < na) {
            const double pz = e[i] * inv;
            qs += pz * support_atom(lo, dz, z);
            if (dists) {
                logits[base + z] = (float)l[i];
                log_probs[base + z] = (float)(l[i] - lse);
                probs[base + z] = (float)pz;
            }
        }
    }
    qs = group_sum(qs, mask, lpa);
    if (lane == 0) q[at * A + act] = (float)qs;
}
