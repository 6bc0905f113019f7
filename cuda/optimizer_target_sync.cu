// optimizer_target_sync (Polyak form; the hard form is one device-to-device copy):
// target = tau * online + (1 - tau) * target in double with explicit round-to-nearest
// operations (no contraction), rounded once to float: bitwise the oracle's
// qnet::target_sync. Grid-stride over n, any grid.
extern "C" __global__ void optimizer_target_sync_polyak(const float* __restrict__ online, float* __restrict__ target,
                                                   unsigned long long n, float tau) {
    const double a = (double)tau, b = __dsub_rn(1.0, (double)tau);
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        target[i] = (float)__dadd_rn(__dmul_rn(a, (double)online[i]), __dmul_rn(b, (double)target[i]));
    }
}

// optimizer_target_sync_every (the hard form on a cadence, for a captured training step):
// target = online where the update count ctl->step is a multiple of `period`, else nothing;
// the count is read from device memory, so a replayed graph syncs on the right updates.
// Oracle: optimizer::target_sync_every (used by trainer::OracleTrainer's update).
// Grid-stride over n, any grid.
#include "common/optimizer.cuh"
extern "C" __global__ void optimizer_target_sync_every(const OptCtl* __restrict__ ctl, unsigned int period,
                                                       const float* __restrict__ online, float* __restrict__ target,
                                                       unsigned long long n) {
    if (ctl->step % period != 0u) return;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        target[i] = online[i];
    }
}
