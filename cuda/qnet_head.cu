// qnet_head: the end of the forward. For each network and row, the head-output row y (the
// heads' output GEMMs, without bias) plus the bias (row H of the net's dense head matrix,
// qnet_heads.cu) is the value v [NA] and each branch's advantages a_k [n_k, NA]; then per
// branch the dueling logits
//   logits_k[j, z] = (v[z] + a_k[j, z]) - (1/n_k) sum_j' a_k[j', z]
// and for NA > 1 the log-softmax over z, its exp and Q = sum_z probs z_z (C51); for NA = 1
// Q is the logit. Arithmetic in double, each stored value rounded once to float.
// Oracle: qnet::head.
//
// Layouts (net = blockIdx.y, row = blockIdx.x, `rows` rows per net):
//   y         [nets][rows][out]   out = NA (1 + sum_k n_k): value, then branch k at out[k+1]
//   bias      [out] at net * bias_stride
//   logits, log_probs, probs  [nets][rows][L]   L = sum_k n_k NA, branch k at logit[k]
//   q         [nets][rows][A]   A = sum_k n_k
// log_probs and probs are written only for NA > 1.
// Grid (rows, nets); block: a multiple of 32 threads (one warp per action at a time);
// dynamic shared memory: 2 L + out doubles (the row is staged there with one coalesced
// load; the exps are kept there).
#include "common/qnet.cuh"

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
                                     unsigned long long bias_stride, const BranchShape shape, unsigned int na, float v_min, float v_max, unsigned int rows,
                                     float* __restrict__ logits, float* __restrict__ log_probs,
                                     float* __restrict__ probs, float* __restrict__ q) {
    extern __shared__ double logit_row[];
    const unsigned int nbranch = shape.count;
    const unsigned int net = blockIdx.y, row = blockIdx.x;
    const unsigned int out_w = shape.out[nbranch + 1], L = shape.logit[nbranch], A = shape.q[nbranch];
    const unsigned long long at = (unsigned long long)net * rows + row;
    const float* yr = y + at * out_w;
    const float* br = bias + net * bias_stride;
    double* staged = logit_row + L;  // y + bias
    double* expo = staged + out_w;   // exp(logit - max) per atom
    for (unsigned int c = threadIdx.x; c < out_w; c += blockDim.x) staged[c] = (double)yr[c] + (double)br[c];
    __syncthreads();

    // Dueling logits, one (branch, atom) pair per thread: the mean over actions in order.
    for (unsigned int p = threadIdx.x; p < nbranch * na; p += blockDim.x) {
        const unsigned int k = p / na, z = p % na, n = shape.n[k], base = shape.out[k + 1] + z;
        const double v = staged[z];
        double sum = 0.0;
        for (unsigned int j = 0; j < n; ++j) sum += staged[base + j * na];
        const double mean = sum / (double)n;
        for (unsigned int j = 0; j < n; ++j) {
            const double a = staged[base + j * na];
            logit_row[shape.logit[k] + j * na + z] = (v + a) - mean;
        }
    }
    __syncthreads();

    const unsigned int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const double lo = (double)v_min, dz = na > 1 ? ((double)v_max - lo) / (double)(na - 1) : 0.0;
    for (unsigned int act = threadIdx.x / 32; act < A; act += warps) {
        unsigned int k = 0;
        while (act >= shape.q[k + 1]) ++k;
        const unsigned int base = shape.logit[k] + (act - shape.q[k]) * na;
        float* lg = logits + at * L + base;
        if (na == 1) {
            if (lane == 0) {
                lg[0] = (float)logit_row[base];
                q[at * A + act] = (float)logit_row[base];
            }
            continue;
        }
        double mx = __longlong_as_double(0xfff0000000000000ull);  // -inf
        for (unsigned int z = lane; z < na; z += 32) mx = fmax(mx, logit_row[base + z]);
        mx = warp_max(mx);
        // exp once per atom: probs = e / sum e (= exp(log_probs) to a double ulp).
        double se = 0.0;
        for (unsigned int z = lane; z < na; z += 32) {
            const double e = exp(logit_row[base + z] - mx);
            expo[base + z] = e;
            se += e;
        }
        se = warp_sum(se);
        const double lse = mx + log(se);
        double qs = 0.0;
        for (unsigned int z = lane; z < na; z += 32) {
            const double l = logit_row[base + z], lp = l - lse, pz = expo[base + z] / se;
            lg[z] = (float)l;
            log_probs[at * L + base + z] = (float)lp;
            probs[at * L + base + z] = (float)pz;
            qs += pz * support_atom(lo, dz, z);
        }
        qs = warp_sum(qs);
        if (lane == 0) q[at * A + act] = (float)qs;
    }
}
