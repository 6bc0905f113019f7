// The optimizer's control block, advanced by kernels (mirrors src/optimizer.rs OptCtl).
#pragma once

struct OptCtl {
    unsigned int step;   // Adam updates applied so far (advanced by optimizer_grad_norm)
    float norm;          // global gradient norm of the last update
    double scale;        // clip scale of the last update
    double bias1;        // 1 - beta1^step: Adam's bias corrections of that step
    double bias2;        // 1 - beta2^step
};
static_assert(sizeof(OptCtl) == 32, "OptCtl is read as OptCtl::WORDS = 8 words by src/optimizer.rs");
