// Philox4x32-10 exactly as Random123 and cuRAND define it; matches oracle/src/philox.rs.
// Counter layout: (lane, step, stream, 0); key = run seed (low word, high word).
#pragma once

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

// Philox streams: keep in step with oracle/src/philox.rs `stream`.
#define PHILOX_STREAM_REPLAY_SAMPLE 1u
#define PHILOX_STREAM_ACTION_EXPLORE 2u
#define PHILOX_STREAM_ACTION_RANDOM 3u
#define PHILOX_STREAM_FILL 4u
#define PHILOX_STREAM_ENV_RESET 5u

__device__ __forceinline__ uint4 philox_round(uint4 c, uint2 k) {
    const unsigned int lo0 = PHILOX_M0 * c.x;
    const unsigned int hi0 = __umulhi(PHILOX_M0, c.x);
    const unsigned int lo1 = PHILOX_M1 * c.z;
    const unsigned int hi1 = __umulhi(PHILOX_M1, c.z);
    return make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
}

__device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint2 k) {
    c = philox_round(c, k);
#pragma unroll
    for (int r = 1; r < 10; ++r) {
        k.x += PHILOX_W0;
        k.y += PHILOX_W1;
        c = philox_round(c, k);
    }
    return c;
}

__device__ __forceinline__ uint4 philox_draw(uint2 key, unsigned int lane, unsigned int step, unsigned int stream) {
    return philox4x32_10(make_uint4(lane, step, stream, 0u), key);
}

// Uniform in [0, 1) from the top 24 bits: exact in float (oracle `u01`).
__device__ __forceinline__ float philox_u01(unsigned int x) {
    return __fmul_rn((float)(x >> 8), 1.0f / 16777216.0f);
}
