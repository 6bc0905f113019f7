// Q-network optimizer: the control block advanced by kernels (mirrors src/optimizer.rs).
#pragma once

struct OptCtl {
    unsigned int step;   // Adam updates applied so far (advanced by qnet_grad_norm)
    float norm;          // global gradient norm of the last update
    double scale;        // clip scale of the last update
    double bias1;        // 1 - beta1^step: Adam's bias corrections of that step
    double bias2;        // 1 - beta2^step
};
static_assert(sizeof(OptCtl) == 32, "OptCtl is read as OptCtl::WORDS = 8 words by src/optimizer.rs");

// The network's branch structure, a kernel argument (built by the host, src/qnet.rs
// `BranchShape`, so no kernel loads it): K = count branch sizes n_k; head-output row offsets
// (value head at 0, branch k at out[k + 1]), logit row offsets (branch k at logit[k]) and Q
// row offsets (branch k at q[k]); each offset array ends with its row width.
#define QNET_MAX_BRANCHES 8

struct BranchShape {
    unsigned int count;
    unsigned int n[QNET_MAX_BRANCHES];
    unsigned int out[QNET_MAX_BRANCHES + 2];
    unsigned int logit[QNET_MAX_BRANCHES + 1];
    unsigned int q[QNET_MAX_BRANCHES + 1];
};
static_assert(sizeof(BranchShape) == 148, "BranchShape is mirrored by src/qnet/layout.rs");

// The C51 support atom z_i = v_min + i dz, dz = (v_max - v_min) / (NA - 1), in double
// without contraction: the oracle's qnet::support.
__device__ __forceinline__ double support_atom(double lo, double dz, unsigned int i) {
    return __dadd_rn(lo, __dmul_rn((double)i, dz));
}

// The same in float (the acting head's): v_min + i dz rounded after each operation.
__device__ __forceinline__ float support_atom(float lo, float dz, unsigned int i) {
    return __fadd_rn(lo, __fmul_rn((float)i, dz));
}

// Sum over a block of exactly `threads` (a power of two <= 1024) doubles in a fixed tree:
// the same bits at every launch. Every thread gets the result. `s` has `threads` slots.
__device__ __forceinline__ double block_sum_fixed(double v, double* s, unsigned int threads) {
    __syncthreads();
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int stride = threads / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    return s[0];
}
