// state_gather: the state of every env, row n of [N x S] (S = F + 4): the features of its
// bar, then its portfolio: position / max_position, open return (close - entry) sign /
// entry x 100 (0 when flat), steps / max_steps, and (realized - fees) / (close x
// point_value) x 100. Also the Q-forward's input x [N x (S + 1)]: the same row and a 1
// (the bias column), so the trunk's first GEMM reads it directly.
// Oracle: env::state_gather. Grid: grid-stride over N x S elements, any grid.
#include "common/env.cuh"

extern "C" __global__ void state_gather(const float* __restrict__ features, const float* __restrict__ close,
                                        const EnvParams p, const EnvState st, float* __restrict__ states,
                                        float* __restrict__ x) {
    const unsigned int f = p.feature_dim, s = f + ENV_PORTFOLIO_FEATURES;
    ENV_FOR_EACH(i, (unsigned long long)p.envs * s) {
        const unsigned long long n = i / s;
        const unsigned int j = (unsigned int)(i % s), bar = st.bar[n];
        float v;
        if (j < f) {
            v = features[(unsigned long long)bar * f + j];
        } else {
            const float c = close[bar];
            const int pos = st.position[n];
            switch (j - f) {
                case 0: v = __fdiv_rn((float)pos, (float)p.max_position); break;
                case 1: {
                    const float e = st.entry[n];
                    v = pos != 0 ? __fmul_rn(__fdiv_rn(__fmul_rn(__fsub_rn(c, e), sign_of(pos)), e), 100.0f) : 0.0f;
                    break;
                }
                case 2: v = __fdiv_rn((float)st.steps[n], (float)p.max_steps); break;
                default:
                    v = __fmul_rn(__fdiv_rn(__fsub_rn(st.realized[n], st.fees[n]), __fmul_rn(c, p.point_value)), 100.0f);
            }
        }
        states[i] = v;
        x[n * (s + 1ull) + j] = v;
        if (j == s - 1) x[n * (s + 1ull) + s] = 1.0f;
    }
}
