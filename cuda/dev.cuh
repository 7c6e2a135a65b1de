// Device helpers shared by the CUDA backend's kernels (included by .cu files
// only): bf16 loads and stores, warp and block reductions.
#ifndef INFERD_CUDA_DEV_CUH
#define INFERD_CUDA_DEV_CUH

#include <cuda_bf16.h>
#include <stdint.h>

static __device__ __forceinline__ float bf2f(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16); // exact widening
}

static __device__ __forceinline__ uint16_t f2bf(float f)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

template <class V> static __device__ __forceinline__ V warp_sum(V v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), in a fixed
// order for a given block size. red: 32 entries of shared scratch. Every
// thread gets the result.
template <class V> static __device__ V block_sum(V v, V *red)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); // red may still be read by a previous call
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : V(0);
    return warp_sum(v);
}

#endif
