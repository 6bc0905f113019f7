// schedule_epsilon: the exploration rate of the coming step, from a step counter in device
// memory, then the counter's advance (saturating at 2^32 - 1, past any schedule's end): epsilon = start + (end - start) * min(step, steps) /
// steps (end from the start when steps = 0), in float with the round-to-nearest intrinsics,
// so the oracle reproduces every bit. A captured experience step replays it, so epsilon
// anneals under graph replay with no host write. Oracle: schedule::schedule_epsilon.
// Grid: one thread.

// The schedule's constants, a kernel argument (mirrors src/schedule.rs EpsilonParams).
struct EpsilonSchedule {
    float start, end;
    unsigned int steps;
};
static_assert(sizeof(EpsilonSchedule) == 12, "EpsilonSchedule is mirrored field for field by src/schedule.rs EpsilonParams");

extern "C" __global__ void schedule_epsilon(const EpsilonSchedule s, unsigned int* __restrict__ step,
                                            float* __restrict__ epsilon) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const unsigned int t = *step;
    float e = s.end;
    if (s.steps > 0 && t < s.steps) {
        const float frac = __fdiv_rn((float)t, (float)s.steps);
        e = __fadd_rn(s.start, __fmul_rn(__fsub_rn(s.end, s.start), frac));
    }
    *epsilon = e;
    *step = t == 0xffffffffu ? t : t + 1u;
}
