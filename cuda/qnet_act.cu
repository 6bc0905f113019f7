// qnet_act: the online network's acting forward in one launch, from the states x (rows x
// (S + 1), the bias column unread) to Q: cuda/common/qnet_act.cuh says how. Oracle:
// qnet::forward, head_q (the spec of the layer-by-layer path too: qnet_first_layer, the
// cuBLAS products, qnet_head_q). Grid (ceil(rows / R)), ACT_THREADS threads. y (rows x
// out_w, the head outputs without bias) is written if not null; q (rows x A) always.
#include "common/qnet_act.cuh"

// The rows' inputs: x, S of every x_ld floats; nothing after the Q-values.
struct ActX {
    const float* __restrict__ x;
    unsigned int x_ld;
    __device__ __forceinline__ float state(unsigned long long n, unsigned int k) const { return x[n * x_ld + k]; }
    __device__ __forceinline__ void after(unsigned long long, unsigned int, const float*) const {}
};

// The entry points, one per rows-per-block R = 16 MT (the host picks by the number of rows)
// and feed (qnet_act_aligned_rows{R} where the network is aligned: cuda/common/qnet_act.cuh):
// `params` the online network's flat parameters, `heads` its dense head matrix.
extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
qnet_act_rows16(const float* __restrict__ x, unsigned long long rows, const float* __restrict__ params,
    const float* __restrict__ heads, const ActNet net, const BranchShape shape,
    unsigned int na, float v_min, float v_max, float* __restrict__ y, float* __restrict__ q) {
    act_forward<1, false>(ActX{x, net.x_ld}, rows, params, heads, net, shape, na, v_min, v_max, y, q);
}

extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
qnet_act_rows32(const float* __restrict__ x, unsigned long long rows, const float* __restrict__ params,
    const float* __restrict__ heads, const ActNet net, const BranchShape shape,
    unsigned int na, float v_min, float v_max, float* __restrict__ y, float* __restrict__ q) {
    act_forward<2, false>(ActX{x, net.x_ld}, rows, params, heads, net, shape, na, v_min, v_max, y, q);
}

extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
qnet_act_aligned_rows16(const float* __restrict__ x, unsigned long long rows, const float* __restrict__ params,
    const float* __restrict__ heads, const ActNet net, const BranchShape shape,
    unsigned int na, float v_min, float v_max, float* __restrict__ y, float* __restrict__ q) {
    act_forward<1, true>(ActX{x, net.x_ld}, rows, params, heads, net, shape, na, v_min, v_max, y, q);
}

extern "C" __global__ void __launch_bounds__(ACT_THREADS, 1)
qnet_act_aligned_rows32(const float* __restrict__ x, unsigned long long rows, const float* __restrict__ params,
    const float* __restrict__ heads, const ActNet net, const BranchShape shape,
    unsigned int na, float v_min, float v_max, float* __restrict__ y, float* __restrict__ q) {
    act_forward<2, true>(ActX{x, net.x_ld}, rows, params, heads, net, shape, na, v_min, v_max, y, q);
}
