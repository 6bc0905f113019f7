// Row and column of a flat row-major index.
#pragma once

struct RowCol {
    unsigned long long r;
    unsigned int c;
};

// Element i of a matrix of n elements in rows of `ld`: a 32-bit division when n < 2^32 (the
// branch is the same for every thread of a launch), a 64-bit one otherwise.
__device__ __forceinline__ RowCol row_col(unsigned long long i, unsigned long long ld, unsigned long long n) {
    if (n <= 0xffffffffull) {
        const unsigned int i32 = (unsigned int)i, ld32 = (unsigned int)ld;
        return RowCol{i32 / ld32, i32 % ld32};
    }
    return RowCol{i / ld, (unsigned int)(i % ld)};
}
