// cuda_k_gemm's contract (cuda/kern.h) on Hopper's warpgroup MMA
// (wgmma.mma_async, sm_90a): y[M][ldy] = x[M][ldx] . w[N][K]^T, bf16 in,
// f32 accumulate, for the prefill-sized GEMMs where mma.sync reaches a third
// of cuBLAS (docs/cuda.md, "Speed on an H200").
//
// A block is one warpgroup (128 threads) computing 64 rows x 128 columns:
// per 64 columns of K, cp.async brings the x and w tiles into shared memory
// (three stages) in wgmma's no-swizzle K-major layout (8 x 8 core matrices
// of 128 contiguous bytes), and four m64n128k16 instructions, one per 16
// columns of K in increasing order, update the 64 f32 accumulators each
// thread holds, from zero. K ranges and their sum are cuda_k_gemm's (the
// weight's shape picks them, never M), and every M runs the same
// instruction on rows padded to 64, so a row's bits never depend on M.
// Whether they equal the mma.sync kernel's bits (the same k16 steps through
// another instruction) is for a GPU to say: test_cuda and bench_cuda report
// it. No TMA, no warp specialization: the first version, written without a
// GPU; nothing chooses it yet (cuda_k_gemm_wg is called by the tests and
// the benchmark only).
#include "cuda/dev.cuh"
#include "cuda/k_gemm.cuh"
#include "cuda/kern.h"

namespace {

constexpr int BM = 64, BN = 128, BK = 64, STAGES = 3, THREADS = 128;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
constexpr size_t SMEM = (size_t)STAGES * (A_BYTES + B_BYTES);
// Variant 1 (the offsets exchanged) would read B's 16 row groups 2 KB
// apart: room for that reach, so a wrong reading reads wrong values rather
// than outside the block's shared memory.
constexpr size_t SMEM_SWAP = SMEM + (size_t)(BN / 8 - 1) * (BN / 8) * 128;

// Byte offset of element (r, k) of a rows x BK tile in the no-swizzle K-major
// layout: core matrix (r / 8, k / 8), the k-chunks outermost, so the two core
// matrices of one k16 step along K are rows / 8 * 128 bytes apart (the
// descriptor's leading byte offset) and those along M or N 128 bytes apart
// (its stride byte offset).
__device__ __forceinline__ int tile_off(int rows, int r, int k)
{
    return ((k / 8) * (rows / 8) + r / 8) * 128 + (r % 8) * 16 + (k % 8) * 2;
}

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
// start address, leading and stride byte offsets (all >> 4), no swizzle.
// SWAP exchanges the two offsets: a second reading of the ISA's words for
// the no-swizzle mode, kept so that the first GPU run can say which one the
// hardware means (cuda_k_gemm_wg's variant 1).
template <bool SWAP> __device__ __forceinline__ uint64_t desc(const void *p, int lead, int stride)
{
    uint64_t a = (smem_addr(p) & 0x3ffff) >> 4;
    uint64_t l = (uint64_t)((SWAP ? stride : lead) >> 4) & 0x3fff;
    uint64_t s = (uint64_t)((SWAP ? lead : stride) >> 4) & 0x3fff;
    return a | l << 16 | s << 32;
}

__device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wg_wait0()
{
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

// d (64 x 128 f32, this thread's 64) += A (64 x 16) . B (128 x 16)^T.
__device__ __forceinline__ void wg_mma(float (&d)[64], uint64_t da, uint64_t db)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "
                 "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, "
                 "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
                 "%62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
                   "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
                   "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(1));
#else
    (void)d, (void)da, (void)db;
    __trap(); // built for sm_90a alone (the Makefile's rule for this file)
#endif
}

// K columns [k0, k0 + BK) of rows m0.. of x and n0.. of w into one stage,
// 16 bytes a copy; rows outside the matrices and columns at or past kend
// read as zero.
__device__ __forceinline__ void load_stage(unsigned char *as, unsigned char *bs,
                                           const uint16_t *x, int ldx, const uint16_t *w, int M,
                                           int N, int K, int kend, int m0, int n0, int k0)
{
    constexpr int CPR = BK / 8; // 16-byte chunks per row
    for (int c = threadIdx.x; c < (BM + BN) * CPR; c += THREADS) {
        int r = c / CPR, kc = (c % CPR) * 8, k = k0 + kc;
        bool is_a = r < BM;
        int rr = is_a ? r : r - BM, gr = (is_a ? m0 : n0) + rr, lim = is_a ? M : N;
        const uint16_t *src = is_a ? x + (size_t)gr * ldx + k : w + (size_t)gr * K + k;
        bool in = gr < lim && k < kend;
        unsigned char *dst = is_a ? as + tile_off(BM, rr, kc) : bs + tile_off(BN, rr, kc);
        cp16(dst, in ? src : (is_a ? x : w), in ? 16 : 0);
    }
}

// Block (x, y, z): columns blockIdx.x * BN.., rows blockIdx.y * BM.., K
// range z: [z * kc, min(K, (z + 1) * kc)); with one range it writes y,
// with more, range z's sums to part[z][M][N] for cuda_k_gemm_sum.
template <bool SWAP>
__global__ void __launch_bounds__(THREADS)
    k_gemm_wg(const uint16_t *__restrict__ x, int ldx, const uint16_t *__restrict__ w, int N,
              int K, float *__restrict__ y, int ldy, int M, int kc, float *__restrict__ part)
{
    extern __shared__ __align__(128) unsigned char sm[];
    unsigned char *as = sm, *bs = sm + STAGES * A_BYTES;
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        d[i] = 0.0f;
    int kbeg = blockIdx.z * kc, kend = min(K, kbeg + kc);
    int KT = (kend - kbeg + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < KT)
            load_stage(as + s * A_BYTES, bs + s * B_BYTES, x, ldx, w, M, N, K, kend, m0, n0,
                       kbeg + s * BK);
        cp_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        cp_wait<STAGES - 2>();
        // the copies wrote through the generic proxy; wgmma reads through
        // the async one
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); // stage kt is in; every wgmma of stage kt - 1 is done
        int next = kt + STAGES - 1;
        if (next < KT)
            load_stage(as + (next % STAGES) * A_BYTES, bs + (next % STAGES) * B_BYTES, x, ldx, w,
                       M, N, K, kend, m0, n0, kbeg + next * BK);
        cp_commit();
        const unsigned char *a = as + (kt % STAGES) * A_BYTES;
        const unsigned char *b = bs + (kt % STAGES) * B_BYTES;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) // k16 steps in increasing K order
            wg_mma(d, desc<SWAP>(a + kk * 2 * (BM / 8) * 128, (BM / 8) * 128, 128),
                   desc<SWAP>(b + kk * 2 * (BN / 8) * 128, (BN / 8) * 128, 128));
        wg_commit();
        wg_wait0(); // before the next iteration's copies reuse a stage
    }
    cp_wait<0>();
    if (part) {
        y = part + (size_t)blockIdx.z * M * N;
        ldy = N;
    }
    // d[4j + e]: row 16 warp + lane / 4 (+ 8 for e >= 2), column
    // 8 j + 2 (lane % 4) + e % 2 (the m64nNk16 f32 accumulator layout)
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = m0 + 16 * warp + (lane >> 2) + (e >= 2 ? 8 : 0);
            int col = n0 + 8 * j + 2 * (lane & 3) + (e & 1);
            if (row < M && col < N)
                y[(size_t)row * ldy + col] = d[4 * j + e];
        }
}

template <bool SWAP>
cudaError_t launch(const uint16_t *x, int ldx, const uint16_t *w, int N, int K, float *y,
                   int ldy, int M, int splits, float *ws, cudaStream_t st)
{
    int kc = ((K + splits - 1) / splits + 15) / 16 * 16; // cuda_k_gemm's ranges
    dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM), (unsigned)splits);
    k_gemm_wg<SWAP><<<grid, THREADS, SWAP ? SMEM_SWAP : SMEM, st>>>(x, ldx, w, N, K, y, ldy, M,
                                                                    kc, splits > 1 ? ws : nullptr);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || splits == 1)
        return e;
    return cuda_k_gemm_sum(ws, splits, M, N, y, ldy, st);
}

// 1 when the current device runs sm_90a code (compute capability 9.0).
bool hopper()
{
    int dev = 0, major = 0, minor = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ==
               cudaSuccess &&
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) ==
               cudaSuccess &&
           major == 9 && minor == 0;
}

} // namespace

extern "C" cudaError_t cuda_k_gemm_wg_setup(void)
{
    if (!hopper())
        return cudaErrorNotSupported;
    cudaError_t e = cudaFuncSetAttribute(k_gemm_wg<false>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_gemm_wg<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)SMEM_SWAP);
    return e;
}

extern "C" cudaError_t cuda_k_gemm_wg(int variant, const uint16_t *x, int ldx, const uint16_t *w,
                                      int N, int K, float *y, int ldy, int M, int splits,
                                      float *ws, cudaStream_t st)
{
    if (variant < 0 || variant > 1 || K % 8 || ldx % 8 || splits < 1 || (splits > 1 && !ws) ||
        ((uintptr_t)x & 15) || ((uintptr_t)w & 15))
        return cudaErrorInvalidValue;
    if (M <= 0)
        return cudaGetLastError();
    // off Hopper the launch itself fails (no sm_90a image): _setup said so
    return variant ? launch<true>(x, ldx, w, N, K, y, ldy, M, splits, ws, st)
                   : launch<false>(x, ldx, w, N, K, y, ldy, M, splits, ws, st);
}
