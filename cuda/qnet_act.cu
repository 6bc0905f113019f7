// qnet_act: the online network's acting forward in one launch, from the states to Q. A block
// takes R rows and runs the whole network on them with every activation in shared memory:
// the first layer, trunk 2 and the heads' hidden layer (each relu(x w + b)), the heads'
// output layer (the value head and one advantage head per branch, each on its own slice of
// the hidden layer), then the acting head of cuda/common/head.cuh (advantage means,
// softmax, Q). Oracle: qnet::forward, head_q (the spec of the layer-by-layer path too:
// qnet_first_layer, the cuBLAS products, qnet_head_q).
//
// Why one launch: at acting sizes every product is a few thousand rows by a few hundred
// columns, where cuBLAS's float32 kernels fill the GPU in one partial wave (30-36 TFLOP/s of
// the H200's 67), and each of the chain's 8 launches and each activation's round trip
// through memory costs its own latency. Here each block streams the weights (L2-resident)
// through shared memory once for its R rows.
//
// The weights come packed (qnet_act_pack, after every change of the online parameters): for
// each layer, pass and slice, the [ACT_KT][ACT_COLS] tile the block stages, zeros where a
// segment's fan-in or width ends, then each layer's biases per pass. So staging a slice is
// 16-byte copies of one contiguous tile, whatever the network's shapes. In a tile row, the
// first 4 of column thread ct's 8 columns are at 4 ct and the last 4 at ACT_COLS / 2 + 4 ct,
// so a warp's 8 column threads read 128 contiguous bytes (no bank conflict).
//
// A layer is a list of segments: segment h multiplies input rows [x_off, x_off + fan_in)
// into output columns [col0, col0 + width) (trunk layers: one segment; the heads' output
// layer: the value head, then each branch, each on its own hidden slice). Each segment's
// columns are padded to a multiple of ACT_TILE_COLS (pcol0, pwidth), so a thread's columns
// never straddle two heads.
//
// Work split of a layer: passes of ACT_COLS padded columns, each in slices of ACT_KT input
// rows, ACT_STAGES slices in flight (cp.async). ACT_GROUPS groups of ACT_GROUP threads split
// a slice's rows (group g takes rows k = g mod ACT_GROUPS); in a group, warp w's lane l holds
// rows TR (l / 8) .. + TR and columns 8 (8 w + l % 8) .. + 8 of the pass in registers
// (8 TR sums), its inputs from the k-major activation (x[k][r]). At the end of a pass group 0
// adds the others' sums and writes the outputs.
//
// Numerics. Each output is a (K + 1)-term float sum: (bias + the group-0 rows in order k) +
// the group-1 rows in order + the group-2 rows in order (float FMAs), relu on the hidden
// layers; a head-output value y is the sum without the bias, and the head reads y + bias
// rounded once, as qnet_head_q stages it. So it is held to the GEMM chain's bound like the
// cuBLAS path (which sums in its own order), and every rows-per-block gives the same bits.
//
// Shared memory (floats; the host sizes it from the network, ActNet): P [p_floats], Q
// [q_floats], the weight stages [ACT_STAGES][ACT_KT][ACT_COLS] (at the end of a pass, the
// groups' sums). P holds the input rows (k-major), then trunk 2's output, then the staged
// head rows [R][out_w] and 32 floats of padding; Q holds the first layer's output, then the
// heads' hidden layer, then the head's means [R][K][NA] and padding. Both are zeroed first:
// a slice reads up to ACT_KT - 1 rows past a segment's fan-in, which must be finite (their
// weights are 0).
//
// Grid (ceil(rows / R)), ACT_THREADS threads. y (rows x out_w, the head outputs without
// bias) is written if not null; q (rows x A) always.
//
// qnet_act_pack: pack[i] = index[i] == ACT_NONE ? 0 : params[index[i]] (the host builds the
// index from the layout: src/qnet/act.rs). Grid-stride, any grid.
#include "common/head.cuh"
#include "common/qnet.cuh"

#define ACT_GROUPS 3
#define ACT_GROUP 128
#define ACT_THREADS (ACT_GROUPS * ACT_GROUP)
#define ACT_COLS 256
#define ACT_ROW_THREADS 4
#define ACT_TILE_COLS 8
#define ACT_KT 24
#define ACT_STAGES 3
#define ACT_SEGMENTS (QNET_MAX_BRANCHES + 1)
#define ACT_LAYERS 4
#define ACT_NONE 0xffffffffu

struct ActSegment {
    unsigned int x_off, fan_in, col0, width, pcol0;
};

// A layer's passes, its slices per pass, its first tile and its first bias in the pack.
struct ActLayer {
    unsigned int count, pwidth, slices;
    unsigned long long tile0, bias0;
    ActSegment seg[ACT_SEGMENTS];
};

struct ActNet {
    ActLayer layer[ACT_LAYERS];
    unsigned int s, x_ld, p_floats, q_floats;
};

// The segment of padded column p (constant indices only, so the layer stays in the
// parameter bank).
__device__ __forceinline__ ActSegment act_segment(const ActLayer& L, unsigned int p) {
    ActSegment s = L.seg[0];
#pragma unroll
    for (unsigned int h = 1; h < ACT_SEGMENTS; ++h)
        if (h < L.count && p >= L.seg[h].pcol0) s = L.seg[h];
    return s;
}

__device__ __forceinline__ void act_cp_async16(float* dst, const float* src) {
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}

__device__ __forceinline__ void act_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void act_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// One packed tile [ACT_KT][ACT_COLS] into `stage`, 16 bytes a copy.
__device__ __forceinline__ void act_load_tile(float* stage, const float* tile) {
    constexpr unsigned int chunks = ACT_KT * ACT_COLS / 4;
    static_assert(chunks % ACT_THREADS == 0, "a tile is whole 16-byte copies for every thread");
#pragma unroll
    for (unsigned int j = 0; j < chunks / ACT_THREADS; ++j) {
        const unsigned int c = threadIdx.x + j * ACT_THREADS;
        act_cp_async16(stage + 4 * c, tile + 4 * c);
    }
}

// TR consecutive floats of shared memory (16-byte aligned for TR >= 4).
template <int TR>
__device__ __forceinline__ void act_load_rows(const float* p, float (&a)[TR]) {
    if constexpr (TR % 4 == 0) {
#pragma unroll
        for (int i = 0; i < TR; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(p + i);
            a[i] = v.x, a[i + 1] = v.y, a[i + 2] = v.z, a[i + 3] = v.w;
        }
    } else if constexpr (TR == 2) {
        const float2 v = *reinterpret_cast<const float2*>(p);
        a[0] = v.x, a[1] = v.y;
    } else {
        a[0] = p[0];
    }
}

// The same TR floats back (the k-major epilogue of a hidden layer).
template <int TR>
__device__ __forceinline__ void act_store_rows(float* p, const float (&v)[TR]) {
    if constexpr (TR % 4 == 0) {
#pragma unroll
        for (int i = 0; i < TR; i += 4) *reinterpret_cast<float4*>(p + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
    } else if constexpr (TR == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else {
        p[0] = v[0];
    }
}

// One layer (see the top of the file). Hidden layers (HEAD false): out[c][r] = relu(acc),
// k-major like `in`. The head-output layer: out[r][c] (row-major, out_w wide) = acc + bias,
// and y[r][c] = acc for rows below `here` if y is not null.
template <int TR, bool HEAD>
__device__ __forceinline__ void act_layer(const float* __restrict__ pack, const ActLayer& L, const float* in,
                                          float* out, float* stages, unsigned int out_w, float* __restrict__ y,
                                          unsigned int here) {
    constexpr unsigned int R = ACT_ROW_THREADS * TR, TC = ACT_TILE_COLS, TILE = ACT_KT * ACT_COLS;
    const unsigned int group = threadIdx.x / ACT_GROUP, gt = threadIdx.x % ACT_GROUP;
    const unsigned int rt = (gt % 32) / 8, ct = (gt / 32) * 8 + gt % 8;
    const unsigned int slices = L.slices;
    for (unsigned int p0 = 0, pass = 0; p0 < L.pwidth; p0 += ACT_COLS, ++pass) {
        const float* tiles = pack + (L.tile0 + (unsigned long long)pass * slices) * TILE;
        // The columns this thread computes (in one segment: segments are padded to TC).
        unsigned int x_off = 0, col = 0, cols = 0;
        {
            const unsigned int p = p0 + TC * ct;
            const ActSegment s = act_segment(L, p);
            if (p < L.pwidth && p - s.pcol0 < s.width) {
                x_off = s.x_off;
                col = s.col0 + (p - s.pcol0);
                cols = min(TC, s.width - (p - s.pcol0));
            }
        }
        float bias[TC], acc[TR][TC];
        {
            const float4* b = reinterpret_cast<const float4*>(pack + L.bias0 + p0 + TC * ct);
            const float4 b0 = __ldg(b), b1 = __ldg(b + 1);
            bias[0] = b0.x, bias[1] = b0.y, bias[2] = b0.z, bias[3] = b0.w;
            bias[4] = b1.x, bias[5] = b1.y, bias[6] = b1.z, bias[7] = b1.w;
        }
#pragma unroll
        for (unsigned int j = 0; j < TC; ++j)
#pragma unroll
            for (int i = 0; i < TR; ++i) acc[i][j] = (HEAD || group != 0) ? 0.0f : bias[j];

#pragma unroll
        for (unsigned int s = 0; s < ACT_STAGES - 1; ++s) {
            if (s < slices) act_load_tile(stages + s * TILE, tiles + s * TILE);
            act_cp_async_commit();
        }
        for (unsigned int s = 0; s < slices; ++s) {
            act_cp_async_wait<ACT_STAGES - 2>();
            __syncthreads();
            const unsigned int next = s + ACT_STAGES - 1;
            if (next < slices) act_load_tile(stages + (next % ACT_STAGES) * TILE, tiles + next * TILE);
            act_cp_async_commit();
            if (cols == 0) continue;  // past the layer's columns: nothing to compute
            // This group's rows of the slice: k = s ACT_KT + group, + ACT_GROUPS, ...
            const float* ws = stages + (s % ACT_STAGES) * TILE + group * ACT_COLS + 4 * ct;
            const float* xs = in + (x_off + s * ACT_KT + group) * R + rt * TR;
#pragma unroll
            for (unsigned int kk = 0; kk < ACT_KT; kk += ACT_GROUPS) {
                float a[TR];
                act_load_rows<TR>(xs + kk * R, a);
                const float4 b0 = *reinterpret_cast<const float4*>(ws + kk * ACT_COLS);
                const float4 b1 = *reinterpret_cast<const float4*>(ws + kk * ACT_COLS + ACT_COLS / 2);
                const float b[TC] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
                for (int i = 0; i < TR; ++i)
#pragma unroll
                    for (unsigned int j = 0; j < TC; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
        __syncthreads();  // every warp is done with the stages: they take the groups' sums now

        // Groups 1.. leave their sums in float4 slots [group - 1][TR TC / 4][ACT_GROUP]
        // (conflict-free); group 0 adds them in group order.
        float4* partial = reinterpret_cast<float4*>(stages);
        constexpr unsigned int slots = TR * TC / 4;
        if (group != 0 && cols > 0) {
#pragma unroll
            for (int i = 0; i < TR; ++i)
#pragma unroll
                for (unsigned int j = 0; j < TC; j += 4)
                    partial[((group - 1) * slots + (i * TC + j) / 4) * ACT_GROUP + gt] =
                        make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
        }
        __syncthreads();
        if (group == 0 && cols > 0) {
#pragma unroll
            for (unsigned int g = 0; g < ACT_GROUPS - 1; ++g)
#pragma unroll
                for (int i = 0; i < TR; ++i)
#pragma unroll
                    for (unsigned int j = 0; j < TC; j += 4) {
                        const float4 o = partial[(g * slots + (i * TC + j) / 4) * ACT_GROUP + gt];
                        acc[i][j] += o.x, acc[i][j + 1] += o.y, acc[i][j + 2] += o.z, acc[i][j + 3] += o.w;
                    }
#pragma unroll
            for (unsigned int j = 0; j < TC; ++j) {
                if (j >= cols) break;
                if (HEAD) {
#pragma unroll
                    for (int i = 0; i < TR; ++i) {
                        const unsigned int r = rt * TR + i;
                        out[r * out_w + col + j] = acc[i][j] + bias[j];
                        if (y != nullptr && r < here) y[(unsigned long long)r * out_w + col + j] = acc[i][j];
                    }
                } else {
                    float v[TR];
#pragma unroll
                    for (int i = 0; i < TR; ++i) v[i] = acc[i][j] > 0.0f ? acc[i][j] : 0.0f;
                    act_store_rows<TR>(out + (col + j) * R + rt * TR, v);
                }
            }
        }
        __syncthreads();  // the sums are read before the next pass refills the stages
    }
}

template <int TR>
__device__ __forceinline__ void act_forward(const float* __restrict__ x, unsigned long long rows,
                                            const float* __restrict__ pack, const ActNet& net,
                                            const BranchShape& shape, unsigned int na, float v_min, float v_max,
                                            unsigned int lpa, float* __restrict__ y, float* __restrict__ q) {
    constexpr unsigned int R = ACT_ROW_THREADS * TR;
    extern __shared__ __align__(16) float act_smem[];
    float* P = act_smem;
    float* Q = P + net.p_floats;
    float* stages = Q + net.q_floats;
    const unsigned long long first = (unsigned long long)blockIdx.x * R;
    const unsigned int here = (unsigned int)min((unsigned long long)R, rows - first);
    const unsigned int out_w = shape.out[shape.count + 1], A = shape.q[shape.count];

    for (unsigned int i = 4 * threadIdx.x; i < net.p_floats + net.q_floats; i += 4 * blockDim.x)
        *reinterpret_cast<float4*>(P + i) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    __syncthreads();
    for (unsigned int i = threadIdx.x; i < here * net.s; i += blockDim.x) {
        const unsigned int r = i / net.s, k = i - r * net.s;
        P[k * R + r] = x[(first + r) * net.x_ld + k];
    }
    __syncthreads();

    act_layer<TR, false>(pack, net.layer[0], P, Q, stages, 0, nullptr, here);
    act_layer<TR, false>(pack, net.layer[1], Q, P, stages, 0, nullptr, here);
    act_layer<TR, false>(pack, net.layer[2], P, Q, stages, 0, nullptr, here);
    act_layer<TR, true>(pack, net.layer[3], Q, P, stages, out_w, y == nullptr ? y : y + first * out_w, here);
    __syncthreads();

    head_means(P, shape, na, here, out_w, Q);
    __syncthreads();
    head_q_rows(P, Q, shape, na, v_min, v_max, here, lpa, q + first * A);
}

extern "C" __global__ void qnet_act_pack(const float* __restrict__ params, const unsigned int* __restrict__ index,
                                         unsigned long long count, float* __restrict__ pack) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned int e = index[i];
        pack[i] = e == ACT_NONE ? 0.0f : params[e];
    }
}

// The entry points, one per rows-per-block R = 4 TR (the host picks by the number of rows).
extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
qnet_act_rows8(const float* __restrict__ x, unsigned long long rows, const float* __restrict__ pack, const ActNet net,
    const BranchShape shape, unsigned int na, float v_min, float v_max, unsigned int lpa, float* __restrict__ y,
    float* __restrict__ q) {
    act_forward<2>(x, rows, pack, net, shape, na, v_min, v_max, lpa, y, q);
}

extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
qnet_act_rows16(const float* __restrict__ x, unsigned long long rows, const float* __restrict__ pack, const ActNet net,
    const BranchShape shape, unsigned int na, float v_min, float v_max, unsigned int lpa, float* __restrict__ y,
    float* __restrict__ q) {
    act_forward<4>(x, rows, pack, net, shape, na, v_min, v_max, lpa, y, q);
}

extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
qnet_act_rows32(const float* __restrict__ x, unsigned long long rows, const float* __restrict__ pack, const ActNet net,
    const BranchShape shape, unsigned int na, float v_min, float v_max, unsigned int lpa, float* __restrict__ y,
    float* __restrict__ q) {
    act_forward<8>(x, rows, pack, net, shape, na, v_min, v_max, lpa, y, q);
}
