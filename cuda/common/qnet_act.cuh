// The acting forward (qnet_act and the experience step): the online network's acting forward in one launch, from the states to Q. A block
// takes R rows and runs the whole network on them with every activation in shared memory:
// the first layer, trunk 2 and the heads' hidden layer (each relu(x w + b)), the heads'
// output layer (the value head and one advantage head per branch, each on its own slice of
// the hidden layer), then the acting head of cuda/common/head.cuh (advantage means,
// softmax, Q). Oracle: qnet::forward, head_q (the spec of the layer-by-layer path too:
// qnet_first_layer, the cuBLAS products, qnet_head_q).
//
// Why one launch: at acting sizes every product is a few thousand rows by a few hundred
// columns, where cuBLAS's float32 kernels fill the GPU in one partial wave, and each of the
// chain's 8 launches and each activation's round trip through memory costs its own latency.
// Here each block streams the weights (L2-resident) through shared memory once for its R
// rows, from where the update keeps them: the trunk layers from the flat parameters, the
// heads' output layer from the online dense head matrix (qnet_head_matrix.cu; Adam's mirror and
// set_params keep it current), whose rows are 16-byte aligned where the compact ones are
// not. Nothing is packed for acting, so an update or set_params needs nothing more before
// the next forward.
//
// Products: 3xTF32 on the tensor cores (mma.sync m16n8k8). The tensor core reads a float's
// top 19 bits (TF32, truncated), so each float x is hi = x as it is (read as trunc(x),
// within 2^-10 |x|) plus lo = x - trunc(x) (exact in float; read truncated in turn, within
// 2^-20 |x|), and a b is taken as lo_a hi_b + hi_a lo_b + hi_a hi_b (small terms first, into
// the running float accumulator). The two truncated lo terms err by 2^-20 |a b| each and the
// dropped lo_a lo_b is below 2^-20 |a b|, so the products are float32-class (the bound:
// tolerance::gemm_chain_3xtf32), where plain TF32 errs by 2^-9 |a b|. Two instructions a
// split, no rounding step.
//
// A layer is a list of segments: segment h multiplies input rows [x_off, x_off + fan_in)
// (x_off a multiple of 8) into `width` staged columns whose weights are src[w + k ld + j]
// (src: the flat parameters for the trunk, the dense head matrix for the heads' outputs),
// staged column j being output column col0 + j. A head's staging starts at the multiple of
// 8 at or below its first hidden row and of 4 at or below its first column; the rows and
// columns before are another head's, zero in this block of the block-diagonal matrix, and
// its first `lead` staged columns are not written. Trunk layers: one segment (its bias row
// after its weight rows); the heads' output layer: the value head, then each branch, each on
// its own hidden slice. Every layer's biases are at src[bias + j], added after the sum (one
// mechanism for all four layers, so a trunk layer's K is its fan-in, not fan-in + 1: 256
// inputs are 8 slices, where a ones row made them 9). Each segment's staged columns are
// padded to ACT_WARP_COLS (pcol0; pwidth in all), so a warp's columns are one segment's: all
// its tiles read the same input rows.
//
// Work split of a layer: passes of ACT_COLS padded columns, each in slices of ACT_KT input
// rows (cp.async, zero-filled past a segment's fan-in or width; 16-byte copies where the
// layer's rows allow, else 4-byte). The slices of the whole forward are one stream through
// ACT_STAGES = 2 stages (ActStream): each slice's copies are issued while the one before is
// computed, across passes and layers too, so no pass waits for its first slice. ACT_GROUPS
// groups of 8 warps split a slice's inputs (group i takes its ACT_KSTEPS blocks of 8 from
// 8 ACT_KSTEPS i), so each multiprocessor has 16 warps to hide the tensor cores' latency; in
// a group, warp w owns columns [32 w, 32 w + 32) of the pass and all R rows: MT = R / 16 row
// tiles by 4 column tiles of mma.m16n8k8, 16 MT accumulators a lane. At the end of a pass
// group 0 adds group 1's sums (left in the stage just computed) and writes the outputs.
// Thread i of group g copies the 4 columns at 4 (i % 64) of staged rows 16 g + (i % 256) / 64
// + 4 j, the group's own 16 rows of the slice: one segment's for the whole pass. So a group
// waits on its own copies only, and each slice starts at a barrier of the group's 256
// threads (act_group_sync), not of the block: within a pass the two groups drift apart, one's
// copy issue and barrier under the other's mma, and meet at the pass's end for the sums.
// Aligned networks (qnet_act_aligned_rows{R}: every staged row starts 16-byte aligned and its
// width rounded up to 4 lies inside the source, the host's `aligned_fits`; the default
// network is one) take only 16-byte copies, compiled without the 4-byte path:
// rows past a segment's fan-in zero-filled (zero-byte copies, which read nothing), a chunk's
// columns past the width read (from the row's next weights) but never written out, chunks
// wholly past it not copied (their staged columns feed only outputs that are not written).
//
// Layouts (floats), so that every fragment load is one instruction into the registers the
// mma reads (no moves) and each quarter-warp phase hits 32 distinct banks. Activations (a
// layer's input) are kept as the tiles' A fragments (act_at): for each block of 8 inputs
// and each row tile, 32 float4s, lane (g, t)'s holding A[g][t], A[g + 8][t], A[g][t + 4],
// A[g + 8][t + 4], so a lane loads a tile's fragment as one float4 and a warp reads 512
// contiguous bytes; the previous layer's epilogue writes its outputs there (float2 stores).
// A staged slice is [ACT_KT][ACT_STAGE_LD], ACT_STAGE_LD = 8 mod 32: lane (g, t) reads its
// B elements B[t][g], B[t + 4][g] at bank 8 t + g.
//
// Parameters: a pass finds its segment's index on the segments' first columns and reads
// that one segment (act_segment), where a select over every segment's fields cost each
// pass's set-up and epilogue dozens of constant-bank reads.
//
// Numerics. Each output's sum is (group 0's mma accumulations over its inputs, in order) +
// (group 1's), the same for every rows-per-block (a row's result does not depend on the other
// rows of its tile); a hidden output is relu(sum + bias), rounded once; a head-output value
// y is the sum without the bias, and the head reads y + bias rounded once, as qnet_head_q
// stages it.
//
// Shared memory (the host sizes it from the network, ActNet): P [p_floats], Q [q_floats],
// the stages [ACT_STAGES][ACT_KT][ACT_STAGE_LD]. P holds the input rows, then trunk 2's
// output, then the staged head rows [R][out_w]; Q holds the first layer's output, then the
// heads' hidden layer, then the head's means [R][K][NA]. Both are zeroed first: a slice reads
// up to ACT_KT - 1 inputs past a segment's fan-in, which must be finite (their weights are 0).
//
// Grid (ceil(rows / R)), ACT_THREADS threads. y (rows x out_w, the head outputs without
// bias) is written if not null; q (rows x A) always.
#pragma once
#include "common/grid.cuh"
#include "common/head.cuh"
#include "common/qnet.cuh"

#define ACT_WARPS 8
#define ACT_GROUPS 2
#define ACT_GROUP (ACT_WARPS * 32)
#define ACT_THREADS (ACT_GROUPS * ACT_GROUP)
#define ACT_WARP_COLS 32
#define ACT_COLS (ACT_WARPS * ACT_WARP_COLS)
#define ACT_KT 32
#define ACT_STAGES 2
#define ACT_KSTEPS (ACT_KT / (8 * ACT_GROUPS))
#define ACT_STAGE_LD (ACT_COLS + 8)
#define ACT_SEGMENTS (QNET_MAX_BRANCHES + 1)
#define ACT_LAYERS 4

struct ActSegment {
    unsigned int x_off, fan_in, col0, lead, width, pcol0;
    unsigned int w, ld, bias;
};
static_assert(sizeof(ActSegment) == 36, "ActSegment is mirrored by src/qnet/act.rs");

// A layer's segments, its padded width, its slices per pass, and whether every segment's
// weight rows start 16-byte aligned (w and ld multiples of 4: 16-byte copies; else 4-byte
// ones).
struct ActLayer {
    unsigned int count, pwidth, slices, vec4;
    ActSegment seg[ACT_SEGMENTS];
};
static_assert(sizeof(ActLayer) == 340, "ActLayer is mirrored by src/qnet/act.rs");

struct ActNet {
    ActLayer layer[ACT_LAYERS];
    unsigned int s, x_ld, p_floats, q_floats;
};
static_assert(sizeof(ActNet) == 1376, "ActNet is mirrored by src/qnet/act.rs");

// The segment of padded column p: its index found on the segments' first columns, then the
// segment read by that index.
__device__ __forceinline__ const ActSegment& act_segment(const ActLayer& L, unsigned int p) {
    unsigned int at = 0;
#pragma unroll
    for (unsigned int h = 1; h < ACT_SEGMENTS; ++h)
        if (h < L.count && p >= L.seg[h].pcol0) at = h;
    return L.seg[at];
}

// Where input k of block row r lies in an activation buffer of R = 16 MT rows: the float4 of
// lane 4 (i % 8) + kk % 4 of row tile r / 16 in input block k / 8 (i = r % 16, kk = k % 8),
// element i / 8 + 2 (kk / 4) of it, so a lane's A fragment of one tile is one float4.
template <int MT>
__device__ __forceinline__ unsigned int act_at(unsigned int r, unsigned int k) {
    const unsigned int i = r % 16, kk = k % 8;
    return (((k / 8) * MT + r / 16) * 32 + 4 * (i % 8) + kk % 4) * 4 + i / 8 + 2 * (kk / 4);
}

// 16 bytes (or `bytes` of them, the rest zero) from global to shared memory.
__device__ __forceinline__ void act_cp_async16(float* dst, const float* src, unsigned int bytes) {
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}

// 4 bytes (or none: zero).
__device__ __forceinline__ void act_cp_async4(float* dst, const float* src, unsigned int bytes) {
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}

// A barrier of group `group`'s ACT_GROUP threads only (named barrier 1 + group; 0 is
// __syncthreads'), with shared memory ordered across it.
__device__ __forceinline__ void act_group_sync(unsigned int group) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + group), "n"(ACT_GROUP) : "memory");
}

__device__ __forceinline__ void act_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void act_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// What a thread copies of a pass: 4 columns of one segment, `n` of them inside it (0 to 4),
// from staged rows k, k + 8, ..: the next slice's first at `src` (row k + i at src + i ld),
// those below fan_in; into `dst` of a stage. `base` (the segment's start) is the source of
// the zero-byte copies, which read nothing.
struct ActCopy {
    const float* src;
    const float* base;
    unsigned long long ld;
    unsigned int k, fan_in, n, dst, vec4;
};

template <bool ALIGNED>
__device__ __forceinline__ ActCopy act_copy_of(const float* __restrict__ src, const ActLayer& L, unsigned int p0) {
    constexpr unsigned int chunks = ACT_COLS / 4;
    const unsigned int gt = threadIdx.x % ACT_GROUP, cc = gt % chunks, p = p0 + 4 * cc;
    const unsigned int kk = (ACT_KT / ACT_GROUPS) * (threadIdx.x / ACT_GROUP) + gt / chunks;
    const ActSegment s = act_segment(L, p);
    const unsigned int dst = kk * ACT_STAGE_LD + 4 * cc;
    ActCopy c{src, src, 0, kk, 0, 0, dst, L.vec4};
    if (p < L.pwidth && p - s.pcol0 < s.width) {
        const float* first = src + s.w + (p - s.pcol0);
        c = ActCopy{first + (unsigned long long)kk * s.ld, first, s.ld, kk, s.fan_in, min(4u, s.width - (p - s.pcol0)), dst, L.vec4};
    }
    return c;
}

// The copy's next slice into `stage` (zeros past fan_in and past the segment's width; the
// aligned feed: see the top of the file), and the copy moved on to the slice after it.
template <bool ALIGNED>
__device__ __forceinline__ void act_stage(float* stage, ActCopy& c) {
    constexpr unsigned int rows_per = ACT_GROUP / (ACT_COLS / 4);
    static_assert((ACT_KT / ACT_GROUPS) % rows_per == 0, "a group's rows of a slice are whole rows of copies for each of its threads");
#pragma unroll
    for (unsigned int j = 0; j < ACT_KT / ACT_GROUPS / rows_per; ++j) {
        const bool in = c.k + j * rows_per < c.fan_in;
        const float* row = in ? c.src + j * rows_per * c.ld : c.base;
        float* dst = stage + c.dst + j * rows_per * ACT_STAGE_LD;
        if (ALIGNED) {
            if (c.n != 0) act_cp_async16(dst, row, in ? 16 : 0);
        } else if (c.vec4) {
            act_cp_async16(dst, row, in ? 4 * c.n : 0);
        } else {
#pragma unroll
            for (unsigned int e = 0; e < 4; ++e) act_cp_async4(dst + e, in && e < c.n ? row + e : c.base, in && e < c.n ? 4 : 0);
        }
    }
    c.k += ACT_KT;
    c.src += ACT_KT * c.ld;
}

// x = hi + lo: hi = x's own bits, which the tensor core reads truncated to TF32, and lo =
// x - that truncation, exactly (read truncated in turn).
__device__ __forceinline__ unsigned int act_lo(float x) {
    return __float_as_uint(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u));
}

// d += a b on one m16n8k8 TF32 tile.
__device__ __forceinline__ void act_mma(float (&d)[4], const unsigned int (&a)[4], const unsigned int (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A group's 8 inputs of a staged slice into a warp's accumulators: xq at the lane's A
// fragment (a float4, act_at) of row tile 0 in those inputs' block, wb at its B element of
// column tile 0 (staged row t of the group's, column g of the warp's). Lane (g, t) = (lane /
// 4, lane % 4); the PTX fragment layouts of m16n8k8.tf32: a0..a3 = A[g][t], A[g + 8][t],
// A[g][t + 4], A[g + 8][t + 4]; b0, b1 = B[t][g], B[t + 4][g].
template <int MT>
__device__ __forceinline__ void act_slice(float (&acc)[MT][4][4], const float* xq, const float* wb) {
    unsigned int ah[MT][4], al[MT][4], bh[4][2], bl[4][2];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        const float4 a = *reinterpret_cast<const float4*>(xq + 128 * m);
        const float v[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) ah[m][i] = __float_as_uint(v[i]), al[m][i] = act_lo(v[i]);
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const float v = wb[8 * n + 4 * i * ACT_STAGE_LD];
            bh[n][i] = __float_as_uint(v), bl[n][i] = act_lo(v);
        }
    // Small terms first, each over all the tiles before the next (independent chains).
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < 4; ++n) act_mma(acc[m][n], al[m], bh[n]);
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < 4; ++n) act_mma(acc[m][n], ah[m], bl[n]);
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < 4; ++n) act_mma(acc[m][n], ah[m], bh[n]);
}

// The slices of the whole forward are one stream: every layer's passes in order, every
// pass's slices in order, stream slice u in stage u % ACT_STAGES, each slice's copies issued
// while the one before is computed (across passes and layers too, so no pass waits for its
// first slice). `copy` is the stream's next slice to issue, `u` the next to compute.
struct ActStream {
    ActCopy copy;
    unsigned int u;
};

// One layer (see the top of the file), its weights and biases in `src`; `next` (null for
// the last) the layer after it, whose weights are in `next_src`. Hidden layers (HEAD
// false): out = relu(acc + bias) as the next layer's input (act_at). The head-output layer:
// out[r][c] (row-major, out_w wide) = acc + bias, and y[r][c] = acc for rows below `here` if
// y is not null. On entry the stream's slice u (the layer's first) is in flight. ALIGNED:
// the aligned feed (see the top of the file).
template <int MT, bool HEAD, bool ALIGNED>
__device__ __forceinline__ void act_layer(const float* __restrict__ src, const ActLayer& L,
                                          const float* __restrict__ next_src, const ActLayer* next, ActStream& st,
                                          const float* in, float* out, float* stages, unsigned int out_w,
                                          float* __restrict__ y, unsigned int here) {
    constexpr unsigned int STAGE = ACT_KT * ACT_STAGE_LD;
    static_assert(ACT_KT == 8 * ACT_GROUPS * ACT_KSTEPS, "a slice is ACT_KSTEPS blocks of 8 inputs for each group");
    static_assert(ACT_STAGES == 2, "one slice in flight while one is computed: the pass's partial sums take the other");
    static_assert(16 * MT * ACT_GROUP <= STAGE, "group 1's sums fit one stage");
    const unsigned int group = threadIdx.x / ACT_GROUP, gt = threadIdx.x % ACT_GROUP;
    const unsigned int warp = gt / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const unsigned int slices = L.slices;
    for (unsigned int p0 = 0; p0 < L.pwidth; p0 += ACT_COLS) {
        const unsigned int wp = p0 + ACT_WARP_COLS * warp;  // the warp's first padded column
        const ActSegment seg = act_segment(L, wp);
        const unsigned int wlocal = wp - seg.pcol0;  // its first staged column in the segment
        const bool busy = wp < L.pwidth && wlocal < seg.width;
        // The lane's fragments of slice 0: its A float4 in the group's input block, its B
        // element in the group's staged rows.
        const float* xq = in + ((seg.x_off / 8 + ACT_KSTEPS * group) * MT * 32 + lane) * 4;
        const unsigned int wb = (8 * ACT_KSTEPS * group + t) * ACT_STAGE_LD + ACT_WARP_COLS * warp + g;
        float acc[MT][4][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int n = 0; n < 4; ++n)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.0f;

        for (unsigned int s = 0; s < slices; ++s, ++st.u, xq += (ACT_KT / 8) * MT * 128) {
            act_cp_async_wait<0>();
            act_group_sync(group);  // the group's rows of slice u are in; its warps are done with u - 1
            // The stream's next slice: this pass's, the next pass's first, the next layer's first.
            if (s + 1 == slices && p0 + ACT_COLS < L.pwidth) st.copy = act_copy_of<ALIGNED>(src, L, p0 + ACT_COLS);
            if (s + 1 == slices && p0 + ACT_COLS >= L.pwidth && next != nullptr) st.copy = act_copy_of<ALIGNED>(next_src, *next, 0);
            if (s + 1 < slices || p0 + ACT_COLS < L.pwidth || next != nullptr)
                act_stage<ALIGNED>(stages + ((st.u + 1) % ACT_STAGES) * STAGE, st.copy);
            act_cp_async_commit();
            if (busy) {
                const float* w = stages + (st.u % ACT_STAGES) * STAGE + wb;
#pragma unroll
                for (unsigned int j = 0; j < ACT_KSTEPS; ++j) act_slice<MT>(acc, xq + j * MT * 128, w + 8 * j * ACT_STAGE_LD);
            }
        }
        __syncthreads();  // every warp is done with the last slice's stage: it takes group 1's sums

        // Group 1 leaves its sums in float4 slots [MT 4][ACT_GROUP] (conflict-free) of the
        // stage of the slice just computed (the stream's next is in flight into the other);
        // group 0 adds them, then writes the outputs.
        float4* partial = reinterpret_cast<float4*>(stages + ((st.u - 1) % ACT_STAGES) * STAGE);
        if (group == 1 && busy) {
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int n = 0; n < 4; ++n)
                    partial[(4 * m + n) * ACT_GROUP + gt] = make_float4(acc[m][n][0], acc[m][n][1], acc[m][n][2], acc[m][n][3]);
        }
        __syncthreads();
        if (group == 0 && busy) {
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int n = 0; n < 4; ++n) {
                    const float4 o = partial[(4 * m + n) * ACT_GROUP + gt];
                    acc[m][n][0] += o.x, acc[m][n][1] += o.y, acc[m][n][2] += o.z, acc[m][n][3] += o.w;
                }
        }
        __syncthreads();  // the sums are read before the stream refills their stage

        if (group == 0 && busy) {
            // acc[m][n][2 h + e] = C[16 m + g + 8 h][8 n + 2 t + e] (c0..c3 of the PTX layout).
#pragma unroll
            for (int n = 0; n < 4; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const unsigned int local = wlocal + 8 * n + 2 * t + e;
                    if (local < seg.lead || local >= seg.width) continue;
                    const unsigned int col = seg.col0 + local;
                    const float bias = __ldg(src + seg.bias + local);
#pragma unroll
                    for (int m = 0; m < MT; ++m) {
                        const float v0 = acc[m][n][e], v1 = acc[m][n][2 + e];  // rows 16 m + g, + 8
                        const unsigned int r = 16 * m + g;
                        if (HEAD) {
                            out[r * out_w + col] = v0 + bias;
                            out[(r + 8) * out_w + col] = v1 + bias;
                            if (y != nullptr && r < here) y[(unsigned long long)r * out_w + col] = v0;
                            if (y != nullptr && r + 8 < here) y[(unsigned long long)(r + 8) * out_w + col] = v1;
                        } else {
                            *reinterpret_cast<float2*>(out + act_at<MT>(r, col)) = make_float2(fmaxf(v0 + bias, 0.0f), fmaxf(v1 + bias, 0.0f));
                        }
                    }
                }
        }
    }
    __syncthreads();  // the layer's output is complete
}

// The rows' inputs and what follows their Q-values, by the entry points: `In::state(n, k)`
// is input k of row n (staged once, as read), `In::after(first, here, q)` runs once every
// Q-value of the block's rows [first, first + here) is in q (rows x A), with no barrier
// after it. qnet_act reads x (ActX); the experience step gathers the states and steps the
// envs (cuda/experience_step.cu).
template <int MT, bool ALIGNED, class In>
__device__ __forceinline__ void act_forward(const In& in, unsigned long long rows,
                                            const float* __restrict__ params, const float* __restrict__ heads,
                                            const ActNet& net, const BranchShape& shape, unsigned int na,
                                            float v_min, float v_max, float* __restrict__ y,
                                            float* __restrict__ q) {
    constexpr unsigned int R = 16 * MT;
    extern __shared__ __align__(16) float act_smem[];
    float* P = act_smem;
    float* Q = P + net.p_floats;
    float* stages = Q + net.q_floats;
    const unsigned long long first = (unsigned long long)blockIdx.x * R;
    const unsigned int here = (unsigned int)min((unsigned long long)R, rows - first);
    const unsigned int out_w = shape.out[shape.count + 1], A = shape.q[shape.count];

    // The activations' padding zeroed (shared memory only) while the kernel ahead may still
    // run (a programmatic launch); then the stream's first slice, in flight while the states
    // are staged.
    for (unsigned int i = 4 * threadIdx.x; i < net.p_floats + net.q_floats; i += 4 * blockDim.x)
        *reinterpret_cast<float4*>(P + i) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    grid_wait_for_prior();
    grid_let_dependents_launch();
    ActStream st{act_copy_of<ALIGNED>(params, net.layer[0], 0), 0};
    act_stage<ALIGNED>(stages, st.copy);
    act_cp_async_commit();
    __syncthreads();
    // The states.
    for (unsigned int i = threadIdx.x; i < here * net.s; i += blockDim.x) {
        const unsigned int r = i / net.s, k = i - r * net.s;
        P[act_at<MT>(r, k)] = in.state(first + r, k);
    }
    __syncthreads();

    act_layer<MT, false, ALIGNED>(params, net.layer[0], params, &net.layer[1], st, P, Q, stages, 0, nullptr, here);
    act_layer<MT, false, ALIGNED>(params, net.layer[1], params, &net.layer[2], st, Q, P, stages, 0, nullptr, here);
    act_layer<MT, false, ALIGNED>(params, net.layer[2], heads, &net.layer[3], st, P, Q, stages, 0, nullptr, here);
    act_layer<MT, true, ALIGNED>(heads, net.layer[3], nullptr, nullptr, st, Q, P, stages, out_w, y == nullptr ? y : y + first * out_w, here);

    head_means(P, shape, na, here, out_w, Q);
    __syncthreads();
    head_q_items(P, Q, shape, na, v_min, v_max, here, q + first * A);
    in.after(first, here, q);
}
