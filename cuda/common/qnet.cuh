// The Q-network's shapes shared by its kernels.
#pragma once

// The network's branch structure, a kernel argument (built by the host, src/qnet/layout.rs
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
