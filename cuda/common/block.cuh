// Block-wide reductions whose result does not depend on the order of combination
// (min and max are exact), so every launch gives the same bits.
#pragma once

#define TALLYHO_INF __int_as_float(0x7f800000)

// Reduce `v` with `op` over the whole block; every thread gets the result.
// Requires blockDim.x to be a multiple of 32 and at most 1024. Begins and ends with a barrier.
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, Op op) {
    __shared__ float partial[32];
    __syncthreads();
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = partial[0];
    for (unsigned int w = 1; w < warps; ++w) v = op(v, partial[w]);
    __syncthreads();
    return v;
}

struct MinOp { __device__ float operator()(float a, float b) const { return fminf(a, b); } };
struct MaxOp { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };

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
