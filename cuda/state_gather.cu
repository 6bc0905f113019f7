// state_gather: the state of every env, row n of [N x S] (S = F + 4): the features of its
// bar, then its portfolio: position / max_position, open return (close - entry) sign /
// entry x 100 (0 when flat), steps / max_steps, and (realized - fees) / (close x
// point_value) x 100. Also the Q-forward's input x [N x (S + 1)]: the same row and a 1
// (the bias column), so the trunk's first GEMM reads it directly.
// Oracle: env::state_gather. Grid: grid-stride over N x S elements, any grid. It lets the
// kernel after it launch at once (that one waits for this grid's writes).
#include "common/env.cuh"
#include "common/grid.cuh"

extern "C" __global__ void state_gather(const float* __restrict__ features, const float* __restrict__ close,
                                        const EnvParams p, const EnvState st, float* __restrict__ states,
                                        float* __restrict__ x) {
    grid_let_dependents_launch();  // the Q-forward may launch now; it waits for this grid
    const unsigned int f = p.feature_dim, s = f + ENV_PORTFOLIO_FEATURES;
    ENV_FOR_EACH(i, (unsigned long long)p.envs * s) {
        const unsigned long long n = i / s;
        const unsigned int j = (unsigned int)(i % s);
        const float v = state_value(n, j, features, close, p, st);
        states[i] = v;
        x[n * (s + 1ull) + j] = v;
        if (j == s - 1) x[n * (s + 1ull) + s] = 1.0f;
    }
}
