// Q-network optimizer: the control block advanced by kernels (mirrors src/optimizer.rs).
#pragma once

struct OptCtl {
    unsigned int step;   // Adam updates applied so far (advanced by qnet_grad_norm_finalize)
    float norm;          // global gradient norm of the last update
    double scale;        // clip scale of the last update
};
