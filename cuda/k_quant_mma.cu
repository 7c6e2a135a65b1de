// The quantized GEMMs on the tensor cores (CUDA_QK_MMA, cuda/kern.h):
// mma.sync m16n8k32 with signed 8-bit inputs and 32-bit integer
// accumulators, sm_80 and later. Integer sums are exact in any order, so
// these kernels give the same bits as the others (cuda/k_quant.cu): int8
// accumulates every 32 columns of K into one int32 per output; int4 takes
// one instruction per group of 32 from a zero accumulator, which is s_g
// itself, and extends the output's float chain with it, groups in order.
//
// Written without a GPU at hand (2026-11-26): test_cuda's exact tests run
// it at every M and bench_cuda's sweep times it beside the others the next
// time one is lent; until then cuda_k_qgemm_kernel never picks it.
//
// A block computes MB x NB outputs with four warps (2 x 2, 32 x 32 each:
// two m16 by four n8 tiles), KB bytes of K a stage through shared memory.
#include <cuda_fp16.h>

#include "cuda/dev.cuh"
#include "cuda/k_quant.cuh"

namespace {

constexpr int MB = 64, NB = 64; // outputs a block
constexpr int KB = 64;          // K bytes a stage: two mma steps, two int4 groups
constexpr int KBP = KB + 16;    // shared row stride in bytes: 20 words, so the
                                // fragment reads of 8 rows x 4 words hit 32 banks
constexpr int THREADS = 128;

// d += a . b for one m16n8k32 tile. Fragments (PTX ISA, mma.m16n8k32 with
// .s8): with g = lane / 4 and t = lane % 4, a[0] holds A row g, columns
// 4t..4t+3; a[1] row g + 8; a[2] and a[3] the same rows at columns + 16.
// b[0] holds B column g (a weight row), K rows 4t..4t+3, b[1] + 16. d[0],
// d[1]: row g, columns 2t, 2t + 1; d[2], d[3]: row g + 8.
__device__ __forceinline__ void mma_s8(int (&d)[4], const int (&a)[4], const int (&b)[2])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    __trap(); // not built: the Makefile's CUDA_ARCH starts at sm_80
#endif
}

// Thread t copies 16-byte chunks t and t + THREADS of a [64][KB] tile from
// rows r0.. and bytes k0.. of a [rows][ld] int8 matrix into sm ([64][KBP]);
// rows at or past nrows and bytes at or past kend read as zero.
__device__ __forceinline__ void load_a(int8_t *sm, const int8_t *p, int ld, int r0, int nrows,
                                       int k0, int kend)
{
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int c = threadIdx.x + THREADS * i, r = c >> 2, k = k0 + 16 * (c & 3);
        int4 v = make_int4(0, 0, 0, 0);
        if (r0 + r < nrows && k < kend)
            v = __ldg((const int4 *)(p + (size_t)(r0 + r) * ld + k));
        *(int4 *)(sm + r * KBP + 16 * (c & 3)) = v;
    }
}

__device__ __forceinline__ int word(const int8_t *sm, int row, int byte)
{
    return *(const int *)(sm + row * KBP + byte);
}

// The warp's A fragments (rows wm * 32 + 16 i) and B fragments (weight
// rows wn * 32 + 8 j) at byte kk of the stage.
__device__ __forceinline__ void frags(const int8_t *as, const int8_t *bs, int kk, int (&a)[2][4],
                                      int (&b)[4][2])
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int wm = warp >> 1, wn = warp & 1;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int r = wm * 32 + 16 * i + g;
        a[i][0] = word(as, r, kk + 4 * t);
        a[i][1] = word(as, r + 8, kk + 4 * t);
        a[i][2] = word(as, r, kk + 16 + 4 * t);
        a[i][3] = word(as, r + 8, kk + 16 + 4 * t);
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int n = wn * 32 + 8 * j + g;
        b[j][0] = word(bs, n, kk + 4 * t);
        b[j][1] = word(bs, n, kk + 16 + 4 * t);
    }
}

// Output (m, n) of accumulator element e of tile (i, j), block-relative.
__device__ __forceinline__ void out_at(int i, int j, int e, int *m, int *n)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    *m = (warp >> 1) * 32 + 16 * i + (lane >> 2) + (e >> 1) * 8;
    *n = (warp & 1) * 32 + 8 * j + 2 * (lane & 3) + (e & 1);
}

// put(i, j, e, m, n) for each of the thread's outputs inside M x N, at
// (m, n) of y for accumulator element e of tile (i, j).
template <class F> __device__ __forceinline__ void store_outs(int m0, int n0, int M, int N, F put)
{
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int m, n;
                out_at(i, j, e, &m, &n);
                m += m0, n += n0;
                if (m < M && n < N)
                    put(i, j, e, m, n);
            }
}

__global__ void __launch_bounds__(THREADS)
    k_gemm_i8_mma(const int8_t *__restrict__ q, int ldq, const float *__restrict__ sx,
                  const int8_t *__restrict__ w, int ldw, const float *__restrict__ sw, int N,
                  int K, float *__restrict__ y, int ldy, int M)
{
    __shared__ __align__(16) int8_t as[MB * KBP], bs[NB * KBP];
    int m0 = blockIdx.y * MB, n0 = blockIdx.x * NB;
    int kend = (K + 31) / 32 * 32; // <= ldw <= ldq; zeros past K
    int acc[2][4][4] = {};
    for (int k0 = 0; k0 < kend; k0 += KB) {
        load_a(as, q, ldq, m0, M, k0, kend);
        load_a(bs, w, ldw, n0, N, k0, kend);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < KB; kk += 32) {
            if (k0 + kk >= kend) // block-uniform
                break;
            int a[2][4], b[4][2];
            frags(as, bs, kk, a, b);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    mma_s8(acc[i][j], a[i], b[j]);
        }
        __syncthreads(); // the next stage overwrites the tiles
    }
    store_outs(m0, n0, M, N, [&](int i, int j, int e, int m, int n) {
        y[(size_t)m * ldy + n] = __fmul_rn(__fmul_rn(__int2float_rn(acc[i][j][e]), sx[m]), sw[n]);
    });
}

// int4: a stage holds two groups; thread t < 2 NB unpacks group t % 2 of
// weight row t / 2 into 32 signed bytes in k order (the low nibbles' 16,
// then the high nibbles') and keeps its scale.
__global__ void __launch_bounds__(THREADS)
    k_gemm_i4_mma(const int8_t *__restrict__ q, int ldq, const float *__restrict__ sx,
                  const uint8_t *__restrict__ w4, const uint16_t *__restrict__ d, int N, int G,
                  float *__restrict__ y, int ldy, int M)
{
    static_assert(2 * NB == THREADS, "a thread a weight row's group");
    __shared__ __align__(16) int8_t as[MB * KBP], bs[NB * KBP];
    __shared__ float ds[NB][2];
    int m0 = blockIdx.y * MB, n0 = blockIdx.x * NB;
    float acc[2][4][4] = {};
    for (int g0 = 0; g0 < G; g0 += 2) {
        load_a(as, q, ldq, m0, M, 32 * g0, 32 * G);
        {
            int r = threadIdx.x >> 1, gi = threadIdx.x & 1, n = n0 + r, g = g0 + gi;
            int4 lo = make_int4(0, 0, 0, 0), hi = lo;
            float dg = 0.0f;
            if (n < N && g < G) {
                unpack_q4(__ldg((const int4 *)(w4 + ((size_t)n * G + g) * 16)), lo, hi);
                dg = __half2float(__ushort_as_half(__ldg(d + (size_t)n * G + g))); // exact
            }
            *(int4 *)(bs + r * KBP + 32 * gi) = lo;
            *(int4 *)(bs + r * KBP + 32 * gi + 16) = hi;
            ds[r][gi] = dg;
        }
        __syncthreads();
        for (int gi = 0; gi < 2 && g0 + gi < G; gi++) { // groups in order
            int a[2][4], b[4][2];
            frags(as, bs, 32 * gi, a, b);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    int s[4] = {0, 0, 0, 0}; // one group from zero: s_g, exact
                    mma_s8(s, a[i], b[j]);
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int m, n;
                        out_at(i, j, e, &m, &n);
                        acc[i][j][e] =
                            __fmaf_rn(__int2float_rn(s[e]), ds[n][gi], acc[i][j][e]);
                    }
                }
        }
        __syncthreads();
    }
    store_outs(m0, n0, M, N, [&](int i, int j, int e, int m, int n) {
        y[(size_t)m * ldy + n] = __fmul_rn(acc[i][j][e], sx[m]);
    });
}

bool grid(int M, int N, dim3 *g)
{
    long long gx = (N + NB - 1) / NB, gy = (M + MB - 1) / MB;
    if (gx > 0x7fffffffLL || gy > 65535)
        return false;
    *g = dim3((unsigned)gx, (unsigned)gy);
    return true;
}

} // namespace

cudaError_t cuda_k_quant__i8_mma(const int8_t *q, int ldq, const float *sx, const int8_t *w,
                                 int ldw, const float *sw, int N, int K, float *y, int ldy,
                                 int M, cudaStream_t st)
{
    dim3 g;
    if (!grid(M, N, &g))
        return cudaErrorInvalidValue;
    k_gemm_i8_mma<<<g, THREADS, 0, st>>>(q, ldq, sx, w, ldw, sw, N, K, y, ldy, M);
    return cudaGetLastError();
}

cudaError_t cuda_k_quant__i4_mma(const int8_t *q, int ldq, const float *sx, const uint8_t *w4,
                                 const uint16_t *d, int N, int G, float *y, int ldy, int M,
                                 cudaStream_t st)
{
    dim3 g;
    if (!grid(M, N, &g))
        return cudaErrorInvalidValue;
    k_gemm_i4_mma<<<g, THREADS, 0, st>>>(q, ldq, sx, w4, d, N, G, y, ldy, M);
    return cudaGetLastError();
}
