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
