// The float acting head's stages after the head-output rows are staged (y + bias, one row
// of out_w values per row): the advantage means, then per (row, action) the softmax over
// atoms and Q. qnet_head_q (cuda/qnet_head.cu), which stages rows from global memory, takes
// the softmax by lane groups (head_q_rows); the fused forward (cuda/common/qnet_act.cuh),
// whose head-output layer stages them itself, by one thread per (row, action)
// (head_q_items). head_means is both's, and qnet_head's (in double). Oracle: qnet::head_q,
// head_q_f32.
#pragma once
#include "common/lanes.cuh"
#include "common/qnet.cuh"

// Atoms a qnet_head_q lane holds in registers (float: twice qnet_head's, so half the lanes and
// shuffles per action; 4 lanes of 13 atoms for 51).
#define QNET_HEAD_Q_SLOTS 16

// exp(x) for the acting softmax (x <= 0): ex2.approx.ftz of x log2(e), within ~2 float ulps
// plus the product's rounding (|x| ulps of x); results below 2^-126 flush to 0, which moves
// no Q (each is a weight < 1e-38 against a denominator >= 1).
__device__ __forceinline__ float exp_ftz(float x) {
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * 1.44269504088896341f));
    return e;
}

// mean: each branch's advantage mean per atom, once per (row, branch, z), in order j, into
// mean [here][K][NA]. A thread keeps one (branch, z) column (or, with fewer threads than
// columns, one column at a time) and takes the rows in turn, two at a time (two independent
// chains): blockDim / (K NA) rows in parallel, so no item pays a division for its place.
template <typename Real>
__device__ __forceinline__ void head_means(const Real* staged, const BranchShape& shape, unsigned int na,
                                           unsigned int here, unsigned int out_w, Real* mean) {
    const unsigned int mean_w = shape.count * na;
    const unsigned int cols = min(mean_w, blockDim.x), rows_at_once = blockDim.x / cols;
    const unsigned int r0 = threadIdx.x / cols;
    if (r0 >= rows_at_once) return;  // no barrier follows inside
    for (unsigned int kz = threadIdx.x - r0 * cols; kz < mean_w; kz += cols) {
        const unsigned int k = kz / na, z = kz - k * na, n = shape.n[k];
        const Real* a0 = staged + shape.out[k + 1] + z;
        // Two rows at a time (two independent chains); the second may be the first again.
        for (unsigned int r = r0; r < here; r += 2 * rows_at_once) {
            const unsigned int r2 = r + rows_at_once;
            const Real* a = a0 + r * out_w;
            const Real* b = a0 + (r2 < here ? r2 : r) * out_w;
            Real sa = 0, sb = 0;
#pragma unroll 1
            for (unsigned int j = 0; j < n; ++j) sa += a[j * na], sb += b[j * na];
            mean[r * mean_w + kz] = sa / (Real)n;
            if (r2 < here) mean[r2 * mean_w + kz] = sb / (Real)n;
        }
    }
}

// softmax and Q of the staged rows: a group of `lpa` lanes (a power of two <= 32, so a group
// never straddles a warp) per (row, action); lane l holds atoms z = l, l + lpa, ... (at most
// QNET_HEAD_Q_SLOTS) in registers, and the group reduces max, sum e and sum e z by
// butterflies; Q = sum e z / sum e. A group keeps one action (min(A, groups) actions in
// parallel, then the next chunk of actions) and takes the rows in turn, so its branch is
// found once; every loop's trip count is the same for the whole block, so all 32 lanes of a
// warp run each butterfly (full-mask shuffles, no convergence checks): a group without an
// item reads row 0 and writes nothing. `staged` is [here][out_w] with at least 31 readable
// floats after `mean` [here][K][NA] (a slot past NA reads padding, masked); q [here][A] from
// the block's first row. blockDim.x is a multiple of 32.
__device__ __forceinline__ void head_q_rows(const float* staged, const float* mean, const BranchShape& shape,
                                            unsigned int na, float v_min, float v_max, unsigned int here,
                                            unsigned int lpa, float* __restrict__ q) {
    const unsigned int nbranch = shape.count, A = shape.q[nbranch];
    const unsigned int out_w = shape.out[nbranch + 1], mean_w = nbranch * na;
    const unsigned int lane = threadIdx.x % lpa, groups = blockDim.x / lpa, g = threadIdx.x / lpa;
    const unsigned int acts = min(A, groups), rows_at_once = groups / acts;
    const unsigned int r0 = g / acts, a_off = g - r0 * acts;
    const float neg_inf = __int_as_float(0xff800000);
    const float lo = v_min, dz = na > 1 ? (v_max - v_min) / (float)(na - 1) : 0.0f;
    for (unsigned int a0 = 0; a0 < A; a0 += acts) {
        const bool has_action = r0 < rows_at_once && a0 + a_off < A;
        const unsigned int act = has_action ? a0 + a_off : 0;
        unsigned int k = 0;
        while (act >= shape.q[k + 1]) ++k;
        const unsigned int a_col = shape.out[k + 1] + (act - shape.q[k]) * na, m_col = k * na;
        for (unsigned int rb = 0; rb < here; rb += rows_at_once) {
            const bool item = has_action && rb + r0 < here;
            const unsigned int r = item ? rb + r0 : 0;
            const float* s = staged + r * out_w;
            const float* a = s + a_col;
            const float* m = mean + r * mean_w + m_col;
            float* out = q + r * A + act;
            if (na == 1) {  // lpa = 1: the logit is Q
                if (item) *out = (s[0] + a[0]) - m[0];
                continue;
            }
            float l[QNET_HEAD_Q_SLOTS];
            float mx = neg_inf;
#pragma unroll
            for (unsigned int i = 0; i < QNET_HEAD_Q_SLOTS; ++i) {
                if (i * lpa >= na) break;  // the same for the whole block
                const unsigned int z = lane + i * lpa;
                const float li = (s[z] + a[z]) - m[z];  // past NA: padding, masked here
                l[i] = z < na ? li : neg_inf;
                mx = fmaxf(mx, l[i]);
            }
            mx = group_max(mx, LANES_ALL, lpa);
            float se = 0.0f, sez = 0.0f;
#pragma unroll
            for (unsigned int i = 0; i < QNET_HEAD_Q_SLOTS; ++i) {
                if (i * lpa >= na) break;
                const unsigned int z = lane + i * lpa;
                const float e = exp_ftz(l[i] - mx);  // -inf past NA: 0
                se += e;
                sez = fmaf(e, support_atom(lo, dz, z), sez);
            }
            se = group_sum(se, LANES_ALL, lpa);
            sez = group_sum(sez, LANES_ALL, lpa);
            if (item && lane == 0) *out = sez / se;
        }
    }
}

// step(z, z % 4) for each atom z < na in order: the whole fours, unrolled, then the up to 3
// atoms past them. head_q_items' partial sums: atom z goes into partial z % 4.
template <class Step>
__device__ __forceinline__ void each_atom_by_4(unsigned int na, const Step& step) {
    const unsigned int quads = na / 4 * 4;
    for (unsigned int z = 0; z < quads; z += 4)
#pragma unroll
        for (unsigned int i = 0; i < 4; ++i) step(z + i, i);
#pragma unroll
    for (unsigned int i = 0; i < 3; ++i)
        if (quads + i < na) step(quads + i, i);
}

// softmax and Q of the staged rows, one thread per (row, action): its logits (v + a_j) - mean
// over the atoms in order, written over its own advantages a_j (no other item reads them)
// while their max is taken, then e = exp(logit - max), sum e and sum e z in 4 interleaved
// partial sums (atom z into partial z % 4), combined (p0 + p2) + (p1 + p3), so that each
// thread runs 4 independent chains. Q = sum e z / sum e. That is head_q_rows's arithmetic
// at lpa = 4 (33 to 64 atoms: the same bits); other atom counts sum in this order, held to
// the same rule. In the fused forward (one block's rows on 16 warps) it is the faster of
// the two (docs/BENCHMARKS.md): the lane groups' slots each pay a bound check and an
// address, and their butterflies a shuffle chain. `staged` is [here][out_w], `mean`
// [here][K][NA]; q [here][A] from the block's first row.
__device__ __forceinline__ void head_q_items(float* staged, const float* mean, const BranchShape& shape,
                                             unsigned int na, float v_min, float v_max, unsigned int here,
                                             float* __restrict__ q) {
    const unsigned int nbranch = shape.count, A = shape.q[nbranch];
    const unsigned int out_w = shape.out[nbranch + 1], mean_w = nbranch * na;
    const float neg_inf = __int_as_float(0xff800000);
    const float lo = v_min, dz = na > 1 ? (v_max - v_min) / (float)(na - 1) : 0.0f;
    for (unsigned int item = threadIdx.x; item < here * A; item += blockDim.x) {
        const unsigned int r = item / A, act = item - r * A;
        unsigned int k = 0;
        while (act >= shape.q[k + 1]) ++k;
        const float* s = staged + r * out_w;
        float* a = staged + r * out_w + shape.out[k + 1] + (act - shape.q[k]) * na;
        const float* m = mean + r * mean_w + k * na;
        if (na == 1) {  // the logit is Q
            q[item] = (s[0] + a[0]) - m[0];
            continue;
        }
        float mx[4] = {neg_inf, neg_inf, neg_inf, neg_inf};
        each_atom_by_4(na, [&](unsigned int z, unsigned int i) {
            const float l = (s[z] + a[z]) - m[z];
            a[z] = l;
            mx[i] = fmaxf(mx[i], l);
        });
        const float top = fmaxf(fmaxf(mx[0], mx[2]), fmaxf(mx[1], mx[3]));
        float se[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sez[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        each_atom_by_4(na, [&](unsigned int z, unsigned int i) {
            const float e = exp_ftz(a[z] - top);
            se[i] += e;
            sez[i] = fmaf(e, support_atom(lo, dz, z), sez[i]);
        });
        q[item] = ((sez[0] + sez[2]) + (sez[1] + sez[3])) / ((se[0] + se[2]) + (se[1] + se[3]));
    }
}
