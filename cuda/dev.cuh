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

// ---- tensor cores (sm_80 and newer): async copies, ldmatrix, mma.sync ----

static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

// 16 bytes from global to shared, asynchronously; src_bytes 0 zero-fills.
static __device__ __forceinline__ void cp16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes));
}

static __device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> static __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ldmatrix with transpose: B fragments of a row-major [k][n] tile.
static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// mma.sync m16n8k16 fragments from shared memory, for a warp (lane =
// threadIdx.x % 32). p points at the tile's first element, ld is its row
// stride in elements (rows 16-byte aligned).
//   ldsm_a:  A, 16 rows x 16 k of a row-major [m][k] tile.
//   ldsm_b:  B of two n8 tiles (r[0..1] columns 0-7, r[2..3] columns 8-15),
//            16 n x 16 k of a row-major [n][k] tile (a weight, keys).
//   ldsm_bt: the same from a row-major [k][n] tile (values), transposed.
static __device__ __forceinline__ void ldsm_a(uint32_t r[4], const uint16_t *p, int ld)
{
    int lane = threadIdx.x & 31;
    ldsm_x4(r, p + (lane & 15) * ld + (lane >> 4) * 8);
}

static __device__ __forceinline__ void ldsm_b(uint32_t r[4], const uint16_t *p, int ld)
{
    int lane = threadIdx.x & 31;
    ldsm_x4(r, p + ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8);
}

static __device__ __forceinline__ void ldsm_bt(uint32_t r[4], const uint16_t *p, int ld)
{
    int lane = threadIdx.x & 31;
    ldsm_x4_trans(r, p + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8);
}

// a and b as bf16 pairs (a in the low half) rounded to nearest, and what the
// rounding left: hi + lo carries about 16 bits of each.
static __device__ __forceinline__ void bf16_split2(float a, float b, uint32_t &hi, uint32_t &lo)
{
    __nv_bfloat16 ah = __float2bfloat16_rn(a), bh = __float2bfloat16_rn(b);
    __nv_bfloat16 al = __float2bfloat16_rn(a - __bfloat162float(ah));
    __nv_bfloat16 bl = __float2bfloat16_rn(b - __bfloat162float(bh));
    hi = (uint32_t)__bfloat16_as_ushort(ah) | (uint32_t)__bfloat16_as_ushort(bh) << 16;
    lo = (uint32_t)__bfloat16_as_ushort(al) | (uint32_t)__bfloat16_as_ushort(bl) << 16;
}

#endif
