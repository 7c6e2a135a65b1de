// Quantized layer matrices (cuda/kern.h, "quantized layer matrices"): the
// CPU backend's W8A8 and W4A8 GEMMs, bit for bit (their inputs' int8 rows:
// cuda/k_quant_rows.cu; the tensor-core kernels: cuda/k_quant_mma.cu).
//
// Every dot product is an int32 sum of __dp4a (or mma) products, exact (no
// overflow for the contract's sizes), so lane splits, tiles and reduction
// orders are free and a row's bits never depend on M. The few float steps are written
// with explicit rounding intrinsics (__fmul_rn, __fdiv_rn, __fmaf_rn,
// __int2float_rn) so nvcc can neither contract nor reorder them, and W4A8's
// per-group chain runs in increasing g inside one thread per output.
//
// Each GEMM has four kernels, chosen by M (cuda_k_qgemm_kernel):
//   - rows (decode): a warp per weight row, the row read
//     once per pass of up to 8 activation rows (templated on the pass, so
//     M = 1 carries no idle rows), lanes on 16-byte chunks so the warp
//     reads the row coalesced, several loads in flight; memory-bound.
//     int8 up to 16 rows, int4 up to 4.
//   - warp: 8 activation rows a pass at every M (int8: the row kernel so;
//     int4: the first decode kernel, whose chains advance every 32
//     groups); int4 runs it for 5 to 16 rows, where it measured faster.
//   - mma (cuda/k_quant_mma.cu): 64 x 64 tiles on the int8 tensor cores,
//     above 16 rows (1.4-2.8x the tiles at M 64-2048 on an H200).
//   - tiled: 64 x 64 outputs per block through shared memory on the CUDA
//     cores; the prefill kernel until mma, now chosen by nothing.
// All give the same bits; cuda_k_qgemm_kernel says which runs for M.
// Pointers q, w and w4 must be 16-byte aligned (cudaMalloc'd, and the
// contract's strides keep every row so); the launchers refuse otherwise.
#include <cuda_fp16.h>

#include "cuda/dev.cuh"
#include "cuda/k_quant.cuh"
#include "cuda/kern.h"

namespace {

constexpr int WARP_ROWS = 8;   // warp kernels: weight rows per block, a warp each
constexpr int WARP_MR = 8;     // warp kernels: activation rows per pass, in registers
// Which kernel runs for M rows, from bench_cuda's sweep on an H200
// (bench-results/cuda-h200-20261127T1616Z.json, the four Mistral-7B-shaped
// GEMMs summed, us a layer): int8 rows up to 16 (at 16: rows 334, mma 441),
// the tensor cores beyond (at 32: rows 773, mma 490; at 64: tiles 839, mma
// 513); int4 rows up to 4, warp up to 16 (at 16: warp 380, mma 444), the
// tensor cores beyond (at 32: warp 735, mma 464; at 64: tiles 832, mma 470).
constexpr int I8_ROWS_MAX_M = 16, I4_ROWS_MAX_M = 4, I4_WARP_MAX_M = 16;
constexpr int TB = 64;         // tiled: TB rows of M x TB rows of N per block
constexpr int TK = 64;         // tiled: K bytes per stage (two int4 groups)
constexpr int TKI = TK / 4 + 1; // ints per shared row, padded: see tile_dot
constexpr int T_THREADS = 256; // tiled: 16 x 16 threads, 4 x 4 outputs each

// sum of the four byte products of four words each (signed bytes)
__device__ __forceinline__ int dot16(int4 a, int4 b, int s)
{
    s = __dp4a(a.x, b.x, s);
    s = __dp4a(a.y, b.y, s);
    s = __dp4a(a.z, b.z, s);
    return __dp4a(a.w, b.w, s);
}

// ---- row kernels (decode) -----------------------------------------------------

// Rows m0..m0 + MR - 1 of q, clamped to the last row below M: a short last
// pass recomputes that row rather than testing i < mc in the inner loops.
template <int MR>
__device__ __forceinline__ void pass_rows(const int8_t *q, int ldq, int m0, int M,
                                          const int8_t *(&qr)[MR])
{
#pragma unroll
    for (int i = 0; i < MR; i++)
        qr[i] = q + (size_t)min(m0 + i, M - 1) * ldq;
}

// Warp n % WARP_ROWS of block n / WARP_ROWS computes column n of y, MR
// activation rows a pass: lane l sums chunks l, l + 32, ... (16 bytes each)
// of K, eight chunks in flight, the warp adds its lanes' sums (exact) and
// lane i writes row m0 + i.
template <int MR>
__global__ void __launch_bounds__(WARP_ROWS * 32)
    k_gemm_i8_rows(const int8_t *__restrict__ q, int ldq, const float *__restrict__ sx,
                   const int8_t *__restrict__ w, int ldw, const float *__restrict__ sw, int N,
                   int K, float *__restrict__ y, int ldy, int M)
{
    int lane = threadIdx.x & 31, n = blockIdx.x * WARP_ROWS + (threadIdx.x >> 5);
    if (n >= N)
        return; // the whole warp: no block-wide barrier below
    const int4 *wr = (const int4 *)(w + (size_t)n * ldw);
    int nc = (K + 15) / 16; // past K, w and q are zero up to ldw
    for (int m0 = 0; m0 < M; m0 += MR) {
        const int8_t *qr[MR];
        pass_rows<MR>(q, ldq, m0, M, qr);
        int s[MR] = {};
#pragma unroll 8
        for (int c = lane; c < nc; c += 32) {
            int4 wv = __ldg(wr + c);
#pragma unroll
            for (int i = 0; i < MR; i++)
                s[i] = dot16(wv, __ldg((const int4 *)qr[i] + c), s[i]);
        }
        int mc = min(MR, M - m0);
#pragma unroll
        for (int i = 0; i < MR; i++)
            if (i < mc) { // warp-uniform
                int S = warp_sum(s[i]);
                if (lane == i)
                    y[(size_t)(m0 + i) * ldy + n] =
                        __fmul_rn(__fmul_rn(__int2float_rn(S), sx[m0 + i]), sw[n]);
            }
    }
}

constexpr int GC = 128;     // int4 row kernel: groups a chunk, four a lane
constexpr int GCP = GC + 4; // its shared rows, padded: see k_gemm_i4_rows

// The same for int4, a chunk of GC groups at a time: lane l finds s_g of
// groups l, l + 32, l + 64 and l + 96 of the chunk for the pass's rows (the
// four 16-byte loads in flight together) and puts (float)s_g (exact) and
// the scale in the warp's shared rows; lane i < MR then extends row
// m0 + i's chain over the chunk, in increasing g. Slots past G hold 0 and
// 0, which leave the chain's bits alone: acc starts at +0 and is never -0
// (an exact zero sum rounds to +0), and x + (+0) is x for every other x.
// The padded stride puts lane i's float4 reads of row i in banks 4i..4i+3.
template <int MR>
__global__ void __launch_bounds__(WARP_ROWS * 32)
    k_gemm_i4_rows(const int8_t *__restrict__ q, int ldq, const float *__restrict__ sx,
                   const uint8_t *__restrict__ w4, const uint16_t *__restrict__ d, int N, int G,
                   float *__restrict__ y, int ldy, int M)
{
    __shared__ __align__(16) float ss[WARP_ROWS][MR][GCP];
    __shared__ __align__(16) float ds[WARP_ROWS][GC];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n = blockIdx.x * WARP_ROWS + warp;
    if (n >= N)
        return; // the whole warp; the barriers below are per warp
    const int4 *wr = (const int4 *)(w4 + (size_t)n * G * 16);
    const uint16_t *dr = d + (size_t)n * G;
    for (int m0 = 0; m0 < M; m0 += MR) {
        const int8_t *qr[MR];
        pass_rows<MR>(q, ldq, m0, M, qr);
        int mc = min(MR, M - m0);
        float acc = 0.0f; // lane i < mc: row m0 + i's chain
        for (int g0 = 0; g0 < G; g0 += GC) {
            int4 wv[GC / 32];
            uint16_t dv[GC / 32];
#pragma unroll
            for (int j = 0; j < GC / 32; j++) { // the loads first, all in flight
                int g = g0 + lane + 32 * j;
                wv[j] = g < G ? __ldg(wr + g) : make_int4(0, 0, 0, 0);
                dv[j] = g < G ? __ldg(dr + g) : (uint16_t)0;
            }
#pragma unroll
            for (int j = 0; j < GC / 32; j++) {
                int g = g0 + lane + 32 * j, gl = lane + 32 * j;
                int4 lo, hi;
                unpack_q4(wv[j], lo, hi);
#pragma unroll
                for (int i = 0; i < MR; i++) {
                    int s = 0;
                    if (g < G) {
                        const int4 *qg = (const int4 *)qr[i] + 2 * g;
                        s = dot16(hi, __ldg(qg + 1), dot16(lo, __ldg(qg), 0));
                    }
                    ss[warp][i][gl] = __int2float_rn(s); // |s_g| <= 32 * 127 * 8: exact
                }
                ds[warp][gl] = __half2float(__ushort_as_half(dv[j])); // exact
            }
            __syncwarp();
            int nq = (min(GC, G - g0) + 3) / 4;
            if (lane < mc) {
                const float4 *sr = (const float4 *)ss[warp][lane], *dr4 = (const float4 *)ds[warp];
#pragma unroll 4
                for (int j = 0; j < nq; j++) {
                    float4 a = sr[j], b = dr4[j];
                    acc = __fmaf_rn(a.x, b.x, acc);
                    acc = __fmaf_rn(a.y, b.y, acc);
                    acc = __fmaf_rn(a.z, b.z, acc);
                    acc = __fmaf_rn(a.w, b.w, acc);
                }
            }
            __syncwarp(); // the next chunk overwrites ss
        }
        if (lane < mc)
            y[(size_t)(m0 + lane) * ldy + n] = __fmul_rn(acc, sx[m0 + lane]);
    }
}

// ---- warp kernel (int4 for 5 to 16 rows) -------------------------------------

// The first int4 decode kernel: 8 activation rows a pass at every M,
// predicated on the pass's rows. Lane l takes groups l, l + 32, ... (16
// bytes of nibbles and a scale each) and finds s_g for the pass's rows;
// the s_g of the warp's 32 groups go to shared memory, and lane i < 8 then
// runs row m0 + i's chain over them in increasing g before the next 32
// groups. int8's CUDA_QK_WARP is its row kernel with 8 rows a pass.
__global__ void __launch_bounds__(WARP_ROWS * 32)
    k_gemm_i4_warp(const int8_t *__restrict__ q, int ldq, const float *__restrict__ sx,
                   const uint8_t *__restrict__ w4, const uint16_t *__restrict__ d, int N, int G,
                   float *__restrict__ y, int ldy, int M)
{
    // row stride 33: lanes 0..7 read column j of rows 0..7 from distinct banks
    __shared__ int ss[WARP_ROWS][WARP_MR][33];
    __shared__ float ds[WARP_ROWS][32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n = blockIdx.x * WARP_ROWS + warp;
    if (n >= N)
        return; // the whole warp; the barriers below are per warp
    const int4 *wr = (const int4 *)(w4 + (size_t)n * G * 16);
    const uint16_t *dr = d + (size_t)n * G;
    for (int m0 = 0; m0 < M; m0 += WARP_MR) {
        int mc = min(WARP_MR, M - m0);
        float acc = 0.0f; // lane i < mc: row m0 + i's chain
        for (int g0 = 0; g0 < G; g0 += 32) {
            int g = g0 + lane, s[WARP_MR] = {};
            float dg = 0.0f;
            if (g < G) {
                int4 lo, hi;
                unpack_q4(__ldg(wr + g), lo, hi);
                dg = __half2float(__ushort_as_half(__ldg(dr + g))); // exact
#pragma unroll
                for (int i = 0; i < WARP_MR; i++)
                    if (i < mc) {
                        const int4 *qg = (const int4 *)(q + (size_t)(m0 + i) * ldq) + 2 * g;
                        s[i] = dot16(hi, __ldg(qg + 1), dot16(lo, __ldg(qg), 0));
                    }
            }
#pragma unroll
            for (int i = 0; i < WARP_MR; i++)
                ss[warp][i][lane] = s[i];
            ds[warp][lane] = dg;
            __syncwarp();
            int ng = min(32, G - g0);
            if (lane < mc) {
#pragma unroll 4 // a fixed unroll: the default one spilled (ptxas -v)
                for (int j = 0; j < ng; j++) // |s_g| <= 32 * 127 * 8: exact as float
                    acc = __fmaf_rn(__int2float_rn(ss[warp][lane][j]), ds[warp][j], acc);
            }
            __syncwarp(); // the next groups overwrite ss
        }
        if (lane < mc)
            y[(size_t)(m0 + lane) * ldy + n] = __fmul_rn(acc, sx[m0 + lane]);
    }
}

// ---- tiled kernels (prefill) --------------------------------------------------

// Thread t loads chunk t % 4 (16 bytes) of tile row t / 4 from rows r0..
// and columns k0.. of a [rows][ld] int8 matrix into sm; rows at or past
// nrows and columns at or past kend read as zero.
__device__ __forceinline__ void load_tile(int (*sm)[TKI], const int8_t *p, int ld, int r0,
                                          int nrows, int k0, int kend)
{
    int r = threadIdx.x >> 2, c = threadIdx.x & 3, k = k0 + 16 * c;
    int4 v = make_int4(0, 0, 0, 0);
    if (r0 + r < nrows && k < kend)
        v = __ldg((const int4 *)(p + (size_t)(r0 + r) * ld + k));
    sm[r][4 * c] = v.x; // stride TKI is not 16-byte aligned: four stores
    sm[r][4 * c + 1] = v.y;
    sm[r][4 * c + 2] = v.z;
    sm[r][4 * c + 3] = v.w;
}

// s[i][j] += the dot of words [a, b) of tile rows ty + 16 i of qs and
// tx + 16 j of ws (tx = t % 16, ty = t / 16). A warp reads 16 ws rows at
// one column: with the odd stride TKI they fall in 16 distinct banks.
__device__ __forceinline__ void tile_dot(const int (*qs)[TKI], const int (*ws)[TKI], int a,
                                         int b, int s[4][4])
{
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    for (int kk = a; kk < b; kk++) {
        int qa[4], wb[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            qa[i] = qs[ty + 16 * i][kk];
            wb[i] = ws[tx + 16 * i][kk];
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                s[i][j] = __dp4a(qa[i], wb[j], s[i][j]);
    }
}

// Block (x, y): columns x * TB.. and rows y * TB.. of y, K in TK steps.
__global__ void __launch_bounds__(T_THREADS)
    k_gemm_i8_tiled(const int8_t *__restrict__ q, int ldq, const float *__restrict__ sx,
                    const int8_t *__restrict__ w, int ldw, const float *__restrict__ sw, int N,
                    int K, float *__restrict__ y, int ldy, int M)
{
    __shared__ int qs[TB][TKI], ws[TB][TKI];
    int m0 = blockIdx.y * TB, n0 = blockIdx.x * TB, s[4][4] = {};
    int kend = (K + 15) / 16 * 16; // <= ldw <= ldq; zeros past K
    for (int k0 = 0; k0 < kend; k0 += TK) {
        load_tile(qs, q, ldq, m0, M, k0, kend);
        load_tile(ws, w, ldw, n0, N, k0, kend);
        __syncthreads();
        tile_dot(qs, ws, 0, TK / 4, s);
        __syncthreads(); // the next stage overwrites the tiles
    }
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < M && n < N)
                y[(size_t)m * ldy + n] =
                    __fmul_rn(__fmul_rn(__int2float_rn(s[i][j]), sx[m]), sw[n]);
        }
}

// The same for int4, two groups per stage: the loaders unpack the nibbles
// into signed bytes in ws, so the dot is the int8 one; then each thread
// extends its outputs' chains group by group, in increasing g.
__global__ void __launch_bounds__(T_THREADS)
    k_gemm_i4_tiled(const int8_t *__restrict__ q, int ldq, const float *__restrict__ sx,
                    const uint8_t *__restrict__ w4, const uint16_t *__restrict__ d, int N,
                    int G, float *__restrict__ y, int ldy, int M)
{
    __shared__ int qs[TB][TKI], ws[TB][TKI];
    __shared__ float ds[TB][2];
    int m0 = blockIdx.y * TB, n0 = blockIdx.x * TB;
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    float acc[4][4] = {};
    for (int g0 = 0; g0 < G; g0 += 2) {
        load_tile(qs, q, ldq, m0, M, 32 * g0, 32 * G);
        if (threadIdx.x < 2 * TB) { // TB rows x 2 groups
            int r = threadIdx.x >> 1, gi = threadIdx.x & 1, n = n0 + r, g = g0 + gi;
            int4 lo = make_int4(0, 0, 0, 0), hi = lo;
            float dg = 0.0f;
            if (n < N && g < G) {
                unpack_q4(__ldg((const int4 *)(w4 + ((size_t)n * G + g) * 16)), lo, hi);
                dg = __half2float(__ushort_as_half(__ldg(d + (size_t)n * G + g)));
            }
            int *o = &ws[r][8 * gi];
            o[0] = lo.x, o[1] = lo.y, o[2] = lo.z, o[3] = lo.w;
            o[4] = hi.x, o[5] = hi.y, o[6] = hi.z, o[7] = hi.w;
            ds[r][gi] = dg;
        }
        __syncthreads();
        for (int gi = 0; gi < 2 && g0 + gi < G; gi++) {
            int s[4][4] = {};
            tile_dot(qs, ws, 8 * gi, 8 * gi + 8, s);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = __fmaf_rn(__int2float_rn(s[i][j]), ds[tx + 16 * j][gi],
                                          acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < M && n < N)
                y[(size_t)m * ldy + n] = __fmul_rn(acc[i][j], sx[m]);
        }
}

bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

// Launch limits: grid.x up to 2^31 - 1, grid.y up to 65535.
bool grid_fits(long long gx, long long gy)
{
    return gx <= 0x7fffffffLL && gy <= 65535;
}

} // namespace

extern "C" int cuda_k_qgemm_kernel(int bits, int M)
{
    if (bits == 8)
        return M <= I8_ROWS_MAX_M ? CUDA_QK_ROWS : CUDA_QK_MMA;
    return M <= I4_ROWS_MAX_M   ? CUDA_QK_ROWS
           : M <= I4_WARP_MAX_M ? CUDA_QK_WARP
                                : CUDA_QK_MMA;
}

// The grid of kernel `kernel` for M x N; false when it would not fit.
static bool qgemm_grid(int kernel, int M, int N, dim3 *grid)
{
    bool rows = kernel != CUDA_QK_TILED;
    long long gx = rows ? (N + WARP_ROWS - 1) / WARP_ROWS : (N + TB - 1) / TB;
    long long gy = rows ? 1 : (M + TB - 1) / TB;
    if (!grid_fits(gx, gy))
        return false;
    *grid = dim3((unsigned)gx, (unsigned)gy);
    return true;
}

// The row kernels' activation rows a pass for M: all of them up to 8.
#define ROWS_LAUNCH(kern, g, st, M, ...)                                                   \
    do {                                                                                   \
        if ((M) == 1)                                                                      \
            kern<1><<<g, WARP_ROWS * 32, 0, st>>>(__VA_ARGS__);                            \
        else if ((M) == 2)                                                                 \
            kern<2><<<g, WARP_ROWS * 32, 0, st>>>(__VA_ARGS__);                            \
        else if ((M) <= 4)                                                                 \
            kern<4><<<g, WARP_ROWS * 32, 0, st>>>(__VA_ARGS__);                            \
        else                                                                               \
            kern<8><<<g, WARP_ROWS * 32, 0, st>>>(__VA_ARGS__);                            \
    } while (0)

extern "C" const char *cuda_k_qgemm_kernel_name(int kernel)
{
    switch (kernel) {
    case CUDA_QK_ROWS: return "rows";
    case CUDA_QK_TILED: return "tiled";
    case CUDA_QK_WARP: return "warp";
    case CUDA_QK_MMA: return "mma";
    default: return "?";
    }
}

extern "C" cudaError_t cuda_k_gemm_i8_with(int kernel, const int8_t *q, int ldq,
                                           const float *sx, const int8_t *w, int ldw,
                                           const float *sw, int N, int K, float *y, int ldy,
                                           int M, cudaStream_t st)
{
    if (K < 0 || ldw < K || ldw % 32 || ldq < ldw || ldq % 16)
        return cudaErrorInvalidValue;
    if (kernel < 0 || kernel >= CUDA_QK_KERNELS)
        return cudaErrorInvalidValue;
    if (M <= 0 || N <= 0)
        return cudaGetLastError();
    if (!aligned16(q) || !aligned16(w))
        return cudaErrorInvalidValue;
    if (kernel == CUDA_QK_MMA)
        return cuda_k_quant__i8_mma(q, ldq, sx, w, ldw, sw, N, K, y, ldy, M, st);
    dim3 g;
    if (!qgemm_grid(kernel, M, N, &g))
        return cudaErrorInvalidValue;
    if (kernel == CUDA_QK_ROWS)
        ROWS_LAUNCH(k_gemm_i8_rows, g, st, M, q, ldq, sx, w, ldw, sw, N, K, y, ldy, M);
    else if (kernel == CUDA_QK_WARP)
        k_gemm_i8_rows<WARP_MR><<<g, WARP_ROWS * 32, 0, st>>>(q, ldq, sx, w, ldw, sw, N, K, y,
                                                             ldy, M);
    else
        k_gemm_i8_tiled<<<g, T_THREADS, 0, st>>>(q, ldq, sx, w, ldw, sw, N, K, y, ldy, M);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_k_gemm_i8(const int8_t *q, int ldq, const float *sx,
                                      const int8_t *w, int ldw, const float *sw, int N, int K,
                                      float *y, int ldy, int M, cudaStream_t st)
{
    return cuda_k_gemm_i8_with(cuda_k_qgemm_kernel(8, M), q, ldq, sx, w, ldw, sw, N, K, y, ldy, M,
                               st);
}

extern "C" cudaError_t cuda_k_gemm_i4_with(int kernel, const int8_t *q, int ldq,
                                           const float *sx, const uint8_t *w4,
                                           const uint16_t *d, int N, int G, float *y, int ldy,
                                           int M, cudaStream_t st)
{
    if (G < 0 || (long long)ldq < 32LL * G || ldq % 16)
        return cudaErrorInvalidValue;
    if (kernel < 0 || kernel >= CUDA_QK_KERNELS)
        return cudaErrorInvalidValue;
    if (M <= 0 || N <= 0)
        return cudaGetLastError();
    if (!aligned16(q) || !aligned16(w4))
        return cudaErrorInvalidValue;
    if (kernel == CUDA_QK_MMA)
        return cuda_k_quant__i4_mma(q, ldq, sx, w4, d, N, G, y, ldy, M, st);
    dim3 g;
    if (!qgemm_grid(kernel, M, N, &g))
        return cudaErrorInvalidValue;
    if (kernel == CUDA_QK_ROWS)
        ROWS_LAUNCH(k_gemm_i4_rows, g, st, M, q, ldq, sx, w4, d, N, G, y, ldy, M);
    else if (kernel == CUDA_QK_WARP)
        k_gemm_i4_warp<<<g, WARP_ROWS * 32, 0, st>>>(q, ldq, sx, w4, d, N, G, y, ldy, M);
    else
        k_gemm_i4_tiled<<<g, T_THREADS, 0, st>>>(q, ldq, sx, w4, d, N, G, y, ldy, M);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_k_gemm_i4(const int8_t *q, int ldq, const float *sx,
                                      const uint8_t *w4, const uint16_t *d, int N, int G,
                                      float *y, int ldy, int M, cudaStream_t st)
{
    return cuda_k_gemm_i4_with(cuda_k_qgemm_kernel(4, M), q, ldq, sx, w4, d, N, G, y, ldy, M, st);
}
