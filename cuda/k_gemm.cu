// Batch-invariant GEMM: y[M][ldy] (f32) = x[M][ldx] . w[N][K]^T, bf16 in,
// f32 accumulate, on the tensor cores through mma.sync m16n8k16.
//
// Why not cuBLAS here: cuBLAS picks kernels (tile shapes, split-K) by M, so
// a row's result changes with the number of rows beside it, and greedy text
// then depends on the batch. Here every output element is, for each of the
// weight's fixed K ranges (cuda_plan_gemm_splits: by shape, never by M), one
// f32 accumulator updated by one m16n8k16 instruction per 16 columns of K,
// in increasing K order, starting from zero, and the ranges are added in
// order; the instruction computes each element from its own row and column
// only. Tile shapes, the warp layout and the pipeline depth change with M
// for speed, but none of them changes that chain, so a row's bits never
// depend on M (tests/test_cuda.c checks).
#include "cuda/dev.cuh"
#include "cuda/k_gemm.cuh"
#include "cuda/kern.h"
#include "cuda/plan.h"

namespace {

// A tile shape: BM x BN outputs per block, BK columns of K per pipeline
// stage, warps of WM x WN outputs each, STAGES stages of shared memory.
template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_> struct shape {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_;
    static constexpr int WARPS = (BM / WM) * (BN / WN), THREADS = WARPS * 32;
    static constexpr int LD = BK + 8; // padded row: ldmatrix's 8 rows hit 8 bank groups
    static constexpr size_t SMEM = (size_t)STAGES * (BM + BN) * LD * 2;
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "mma tiles");
};

// The shapes cuda_k_gemm picks by M and N, from bench_cuda's timings of the
// candidates below on an H100 (docs/cuda.md): a decode step's few rows take
// narrow column blocks with deep stages, so that enough blocks and bytes are
// in flight; prefill-sized M reuses each loaded tile across more rows and
// columns.
using shape_16 = shape<16, 32, 128, 16, 16, 4>;  // M <= 16
using shape_32 = shape<32, 32, 128, 16, 16, 3>;  // M <= 32, N < 16384
using shape_64 = shape<64, 64, 64, 32, 32, 3>;   // M <= 64
using shape_128 = shape<128, 128, 64, 64, 32, 3>; // the rest

// Loads K columns [k0, k0 + BK) of rows [m0, m0 + BM) of x and [n0, n0 + BN)
// of w into one stage; rows outside the matrices and columns at or past
// kend (the end of this block's K range) read as zero.
// VEC: 16-byte asynchronous copies (K, ldx and the pointers are multiples
// of 8 elements); otherwise element by element.
template <class S, bool VEC>
__device__ __forceinline__ void load_stage(uint16_t *as, uint16_t *bs, const uint16_t *x,
                                           int ldx, const uint16_t *w, int M, int N, int K,
                                           int kend, int m0, int n0, int k0)
{
    if (VEC) {
        constexpr int CPR = S::BK / 8; // 16-byte chunks per row
        for (int c = threadIdx.x; c < (S::BM + S::BN) * CPR; c += S::THREADS) {
            int r = c / CPR, kc = (c % CPR) * 8, k = k0 + kc;
            bool is_a = r < S::BM;
            int rr = is_a ? r : r - S::BM;
            int gr = (is_a ? m0 : n0) + rr, lim = is_a ? M : N;
            const uint16_t *src = is_a ? x + (size_t)gr * ldx + k : w + (size_t)gr * K + k;
            bool in = gr < lim && k < kend;
            uint16_t *dst = (is_a ? as : bs) + rr * S::LD + kc;
            cp16(dst, in ? src : (is_a ? x : w), in ? 16 : 0);
        }
    } else {
        for (int e = threadIdx.x; e < (S::BM + S::BN) * S::BK; e += S::THREADS) {
            int r = e / S::BK, kc = e % S::BK, k = k0 + kc;
            bool is_a = r < S::BM;
            int rr = is_a ? r : r - S::BM;
            int gr = (is_a ? m0 : n0) + rr, lim = is_a ? M : N;
            uint16_t v = 0;
            if (gr < lim && k < kend)
                v = is_a ? x[(size_t)gr * ldx + k] : w[(size_t)gr * K + k];
            (is_a ? as : bs)[rr * S::LD + kc] = v;
        }
    }
}

// Block (x, y, z): columns blockIdx.x * BN.., rows blockIdx.y * BM.., and K
// range z: [z * kc, min(K, (z + 1) * kc)). With one range it writes y; with
// more, range z's sums go to part[z][M][N] for k_gemm_reduce.
template <class S, bool VEC>
__global__ void __launch_bounds__(S::THREADS)
    k_gemm(const uint16_t *__restrict__ x, int ldx, const uint16_t *__restrict__ w, int N,
           int K, float *__restrict__ y, int ldy, int M, int kc, float *__restrict__ part)
{
    extern __shared__ __align__(16) uint16_t smem[];
    constexpr int MT = S::WM / 16, NT = S::WN / 8, WCOLS = S::BN / S::WN;
    uint16_t *as = smem, *bs = smem + S::STAGES * S::BM * S::LD;
    int m0 = blockIdx.y * S::BM, n0 = blockIdx.x * S::BN;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int wm = (warp / WCOLS) * S::WM, wn = (warp % WCOLS) * S::WN;

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;

    int kbeg = blockIdx.z * kc, kend = min(K, kbeg + kc);
    int KT = (kend - kbeg + S::BK - 1) / S::BK;
#pragma unroll
    for (int s = 0; s < S::STAGES - 1; s++) {
        if (s < KT)
            load_stage<S, VEC>(as + s * S::BM * S::LD, bs + s * S::BN * S::LD, x, ldx, w, M, N,
                               K, kend, m0, n0, kbeg + s * S::BK);
        cp_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        cp_wait<S::STAGES - 2>();
        __syncthreads(); // stage kt is in; every warp is done with stage kt - 1
        int next = kt + S::STAGES - 1;
        if (next < KT) {
            int sl = next % S::STAGES;
            load_stage<S, VEC>(as + sl * S::BM * S::LD, bs + sl * S::BN * S::LD, x, ldx, w, M,
                               N, K, kend, m0, n0, kbeg + next * S::BK);
        }
        cp_commit();
        const uint16_t *a = as + (kt % S::STAGES) * S::BM * S::LD;
        const uint16_t *b = bs + (kt % S::STAGES) * S::BN * S::LD;
#pragma unroll
        for (int kk = 0; kk < S::BK; kk += 16) {
            uint32_t af[MT][4], bf[NT / 2][4];
#pragma unroll
            for (int i = 0; i < MT; i++)
                ldsm_a(af[i], a + (wm + i * 16) * S::LD + kk, S::LD);
#pragma unroll
            for (int j = 0; j < NT / 2; j++)
                ldsm_b(bf[j], b + (wn + j * 16) * S::LD + kk, S::LD);
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++)
                    mma16816(acc[i][j], af[i], bf[j / 2][(j & 1) * 2],
                             bf[j / 2][(j & 1) * 2 + 1]);
        }
    }
    cp_wait<0>();

    // c0, c1: row lane / 4, columns 2 (lane % 4) + {0, 1}; c2, c3: row + 8
    if (part) {
        y = part + (size_t)blockIdx.z * M * N;
        ldy = N;
    }
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) {
            int col = n0 + wn + j * 8 + (lane & 3) * 2;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int row = m0 + wm + i * 16 + (lane >> 2) + h * 8;
                if (row >= M)
                    continue;
                float *o = y + (size_t)row * ldy + col;
                if (col < N)
                    o[0] = acc[i][j][2 * h];
                if (col + 1 < N)
                    o[1] = acc[i][j][2 * h + 1];
            }
        }
}

// y[m][n] = part[0][m][n] + part[1][m][n] + ..., in that order.
__global__ void k_gemm_reduce(const float *__restrict__ part, int splits, int M, int N,
                              float *__restrict__ y, int ldy)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)M * N;
    if (i >= n)
        return;
    float s = part[i];
    for (int z = 1; z < splits; z++)
        s += part[(size_t)z * n + i];
    y[(i / N) * ldy + i % N] = s;
}

// Every launch: the K ranges of `splits` (a multiple of 16 columns each, so
// the k16 steps fall where they would without splitting), then the sum.
template <class S, bool VEC>
cudaError_t launch(const uint16_t *x, int ldx, const uint16_t *w, int N, int K, float *y,
                   int ldy, int M, int splits, float *ws, cudaStream_t st)
{
    int kc = ((K + splits - 1) / splits + 15) / 16 * 16;
    dim3 grid((unsigned)((N + S::BN - 1) / S::BN), (unsigned)((M + S::BM - 1) / S::BM),
              (unsigned)splits);
    k_gemm<S, VEC><<<grid, S::THREADS, S::SMEM, st>>>(x, ldx, w, N, K, y, ldy, M, kc,
                                                       splits > 1 ? ws : nullptr);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || splits == 1)
        return e;
    return cuda_k_gemm_sum(ws, splits, M, N, y, ldy, st);
}

template <class S>
cudaError_t launch_shape(bool vec, const uint16_t *x, int ldx, const uint16_t *w, int N, int K,
                         float *y, int ldy, int M, int splits, float *ws, cudaStream_t st)
{
    return vec ? launch<S, true>(x, ldx, w, N, K, y, ldy, M, splits, ws, st)
               : launch<S, false>(x, ldx, w, N, K, y, ldy, M, splits, ws, st);
}

template <class S> cudaError_t setup_vec()
{
    return cudaFuncSetAttribute(k_gemm<S, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)S::SMEM);
}

template <class S> cudaError_t allow_smem()
{
    cudaError_t e = setup_vec<S>();
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_gemm<S, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)S::SMEM);
    return e;
}

// Candidate shapes for bench_cuda, which times them per (M, N, K) to choose
// the shapes above; every one computes the same bits.
struct variant {
    const char *name;
    cudaError_t (*setup)();
    cudaError_t (*run)(const uint16_t *, int, const uint16_t *, int, int, float *, int, int, int,
                       float *, cudaStream_t);
};

#define VARIANT(name, ...)                                                                  \
    {name, setup_vec<shape<__VA_ARGS__>>, launch<shape<__VA_ARGS__>, true>}

const variant variants[] = {
    VARIANT("16x16x256 w16x16 s3", 16, 16, 256, 16, 16, 3),
    VARIANT("16x32x128 w16x16 s4", 16, 32, 128, 16, 16, 4),
    VARIANT("16x16x128 w16x16 s4", 16, 16, 128, 16, 16, 4),
    VARIANT("16x32x256 w16x16 s3", 16, 32, 256, 16, 16, 3),
    VARIANT("16x64x128 w16x16 s3", 16, 64, 128, 16, 16, 3),
    VARIANT("32x32x128 w16x16 s3", 32, 32, 128, 16, 16, 3),
    VARIANT("64x32x64 w16x32 s4", 64, 32, 64, 16, 32, 4),
    VARIANT("64x16x128 w16x16 s3", 64, 16, 128, 16, 16, 3),
    VARIANT("64x64x64 w32x32 s3", 64, 64, 64, 32, 32, 3),
    VARIANT("128x64x64 w64x32 s4", 128, 64, 64, 64, 32, 4),
    VARIANT("128x128x32 w64x32 s3", 128, 128, 32, 64, 32, 3),
    VARIANT("128x128x64 w64x32 s3", 128, 128, 64, 64, 32, 3),
    VARIANT("128x256x32 w64x64 s3", 128, 256, 32, 64, 64, 3),
    VARIANT("256x128x32 w64x64 s3", 256, 128, 32, 64, 64, 3),
};

} // namespace

cudaError_t cuda_k_gemm_sum(const float *part, int splits, int M, int N, float *y, int ldy,
                            cudaStream_t st)
{
    size_t n = (size_t)M * N;
    k_gemm_reduce<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(part, splits, M, N, y, ldy);
    return cudaGetLastError();
}

extern "C" int cuda_k_gemm_variants(void)
{
    return (int)(sizeof variants / sizeof *variants);
}

extern "C" const char *cuda_k_gemm_variant_name(int v)
{
    return v >= 0 && v < cuda_k_gemm_variants() ? variants[v].name : "?";
}

extern "C" cudaError_t cuda_k_gemm_variant(int v, const uint16_t *x, int ldx, const uint16_t *w,
                                           int N, int K, float *y, int ldy, int M, int splits,
                                           float *ws, cudaStream_t st)
{
    if (v < 0 || v >= cuda_k_gemm_variants() || K % 8 || ldx % 8 || splits < 1)
        return cudaErrorInvalidValue;
    return variants[v].run(x, ldx, w, N, K, y, ldy, M, splits, ws, st); // set up by _setup
}

extern "C" size_t cuda_k_gemm_smem(void)
{
    size_t m = shape_16::SMEM;
    m = shape_32::SMEM > m ? shape_32::SMEM : m;
    m = shape_64::SMEM > m ? shape_64::SMEM : m;
    return shape_128::SMEM > m ? shape_128::SMEM : m;
}

extern "C" cudaError_t cuda_k_gemm_setup(void)
{
    cudaError_t e = allow_smem<shape_16>();
    if (e == cudaSuccess)
        e = allow_smem<shape_32>();
    if (e == cudaSuccess)
        e = allow_smem<shape_64>();
    if (e == cudaSuccess)
        e = allow_smem<shape_128>();
    return e;
}

extern "C" cudaError_t cuda_k_gemm_variants_setup(void)
{
    cudaError_t e = cudaSuccess;
    for (int v = 0; e == cudaSuccess && v < cuda_k_gemm_variants(); v++)
        e = variants[v].setup(); // here, not per launch: bench_cuda times the launches
    return e;
}

extern "C" cudaError_t cuda_k_gemm(const uint16_t *x, int ldx, const uint16_t *w, int N, int K,
                                   float *y, int ldy, int M, int splits, float *ws,
                                   cudaStream_t st)
{
    if (M <= 0)
        return cudaGetLastError();
    if (splits < 1 || (splits > 1 && !ws))
        return cudaErrorInvalidValue;
    // 16-byte copies need every row start 16-byte aligned
    bool vec = K % 8 == 0 && ldx % 8 == 0 && ((uintptr_t)x & 15) == 0 &&
               ((uintptr_t)w & 15) == 0;
    bool wide = N >= CUDA_GEMM_WIDE_N;
    if (M <= 16)
        return launch_shape<shape_16>(vec, x, ldx, w, N, K, y, ldy, M, splits, ws, st);
    if (M <= 32 && !wide)
        return launch_shape<shape_32>(vec, x, ldx, w, N, K, y, ldy, M, splits, ws, st);
    if (M <= 64)
        return launch_shape<shape_64>(vec, x, ldx, w, N, K, y, ldy, M, splits, ws, st);
    return launch_shape<shape_128>(vec, x, ldx, w, N, K, y, ldy, M, splits, ws, st);
}
