// Grid-wide steps inside one launch.
#pragma once

// True, in every thread, in the one block of the grid that finishes last: each block calls
// this once, from every thread, after its writes; the fence makes those writes visible to
// the last block, which reads them past the non-coherent L1 (__ldcg). `counter` is a word
// that is zero at launch; the last block returns it to zero for the next launch. Lets one
// launch end in a grid-wide step (a final reduction in a fixed order) without a second one.
__device__ __forceinline__ bool last_block_done(unsigned int* counter) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int blocks = gridDim.x * gridDim.y * gridDim.z;
        last = atomicAdd(counter, 1u) + 1u == blocks;
        if (last) atomicExch(counter, 0u);
    }
    __syncthreads();
    return last;
}

// Programmatic dependent launch (sm_90): a kernel the host launches with programmatic stream
// serialization (runtime::Programmatic) may start while the kernel before it on the
// stream is still running. It calls grid_wait_for_prior before it reads anything that kernel
// writes and before it writes anything at all: that returns once the prior grid has completed
// and its writes are visible. grid_let_dependents_launch lets the next such kernel start (its
// blocks take whatever SM resources are free, then wait). Launched without the attribute,
// both are no-ops: the stream already orders the kernels.
__device__ __forceinline__ void grid_wait_for_prior() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void grid_let_dependents_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
