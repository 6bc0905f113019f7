// Butterfly reductions over a group of `width` lanes (a power of two <= 32, aligned in its
// warp), among the lanes of `mask`: every lane of the group gets the same bits (a + b == b + a
// and max is symmetric). `width` = 32 with the full mask is the whole warp.
#pragma once

#define LANES_ALL 0xffffffffu

__device__ __forceinline__ double group_sum(double v, unsigned int mask, unsigned int width) {
    for (unsigned int offset = width / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(mask, v, offset, width);
    return v;
}

__device__ __forceinline__ double group_max(double v, unsigned int mask, unsigned int width) {
    for (unsigned int offset = width / 2; offset > 0; offset >>= 1) {
        const double o = __shfl_xor_sync(mask, v, offset, width);
        v = o > v ? o : v;
    }
    return v;
}

__device__ __forceinline__ float group_sum(float v, unsigned int mask, unsigned int width) {
    for (unsigned int offset = width / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(mask, v, offset, width);
    return v;
}

__device__ __forceinline__ float group_max(float v, unsigned int mask, unsigned int width) {
    for (unsigned int offset = width / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(mask, v, offset, width));
    return v;
}
