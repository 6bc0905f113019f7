// philox_kat: one Philox4x32-10 call per thread on explicit counters and keys, for the
// known-answer test. Grid: ceil(n / 256) blocks of 256. Oracle: philox::philox4x32_10.
#include "common/philox.cuh"

extern "C" __global__ void philox_kat(const unsigned int* __restrict__ counters,  // [n, 4]
                                      const unsigned int* __restrict__ keys,      // [n, 2]
                                      unsigned int* __restrict__ out,             // [n, 4]
                                      unsigned int n) {
    const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const uint4 c = make_uint4(counters[4 * i], counters[4 * i + 1], counters[4 * i + 2], counters[4 * i + 3]);
    const uint2 k = make_uint2(keys[2 * i], keys[2 * i + 1]);
    const uint4 r = philox4x32_10(c, k);
    out[4 * i] = r.x;
    out[4 * i + 1] = r.y;
    out[4 * i + 2] = r.z;
    out[4 * i + 3] = r.w;
}
