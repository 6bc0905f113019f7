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
