// Quantized layer matrices (cuda/kern.h, "quantized layer matrices"): the
// CPU backend's W8A8 and W4A8 arithmetic, bit for bit.
//
// Every dot product is an int32 sum of __dp4a products, exact (no overflow
// for the contract's sizes), so lane splits, tiles and reduction orders are
// free and a row's bits never depend on M. The few float steps are written
// with explicit rounding intrinsics (__fmul_rn, __fdiv_rn, __fmaf_rn,
// __int2float_rn) so nvcc can neither contract nor reorder them, and W4A8's
// per-group chain runs in increasing g inside one thread per output.
//
// Each GEMM has two shapes, chosen by M:
//   - warp (M <= WARP_MAX_M, decode): a warp per weight row, the row read
//     once per MR activation rows (one pass for M <= 8), lanes on 16-byte
//     chunks so the warp reads the row coalesced; memory-bound.
//   - tiled (prefill): 64 x 64 outputs per block through shared memory, so
//     the weights are read M / 64 times rather than M / 8.
// Both give the same bits; the threshold is a guess until bench_cuda times it.
// Pointers q, w and w4 must be 16-byte aligned (cudaMalloc'd, and the
// contract's strides keep every row so); the launchers refuse otherwise.
#include <cuda_fp16.h>

#include "cuda/dev.cuh"
#include "cuda/kern.h"

namespace {

constexpr int QUANT_THREADS = 256;
constexpr int WARP_ROWS = 8;   // warp kernels: weight rows per block, a warp each
constexpr int MR = 8;          // warp kernels: activation rows per pass, in registers
constexpr int WARP_MAX_M = 32; // larger M takes the tiled kernels
constexpr int TB = 64;         // tiled: TB rows of M x TB rows of N per block
constexpr int TK = 64;         // tiled: K bytes per stage (two int4 groups)
constexpr int TKI = TK / 4 + 1; // ints per shared row, padded: see tile_dot
constexpr int T_THREADS = 256; // tiled: 16 x 16 threads, 4 x 4 outputs each

// Largest value over the block. Max is exact, so any order gives the same
// result; the inputs are never NaN (quant_rows skips them).
__device__ float block_max(float v, float *red)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// One block per row t: amax, then q over all ldq columns (zeros past K).
__global__ void __launch_bounds__(QUANT_THREADS)
    k_quant_rows(const uint16_t *__restrict__ x, int ldx, int K, int8_t *__restrict__ q,
                 int ldq, float *__restrict__ sx)
{
    __shared__ float red[32];
    const uint16_t *xr = x + (size_t)blockIdx.x * ldx;
    int8_t *qr = q + (size_t)blockIdx.x * ldq;
    float amax = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        float a = fabsf(bf2f(xr[k]));
        if (a > amax) // false for NaN: NaNs skipped, as the CPU
            amax = a;
    }
    amax = block_max(amax, red);
    float inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    for (int k = threadIdx.x; k < ldq; k += blockDim.x) {
        int r = 0;
        if (k < K) {
            // fmaxf(NaN, -127) is -127, as C's fmaxf: NaN -> -127
            float t = fminf(fmaxf(__fmul_rn(bf2f(xr[k]), inv), -127.0f), 127.0f);
            r = (int)rintf(t); // nearest even; t is then an integer, converted exactly
        }
        qr[k] = (int8_t)r;
    }
    if (threadIdx.x == 0)
        sx[blockIdx.x] = __fdiv_rn(amax, 127.0f);
}

// sum of the four byte products of four words each (signed bytes)
__device__ __forceinline__ int dot16(int4 a, int4 b, int s)
{
    s = __dp4a(a.x, b.x, s);
    s = __dp4a(a.y, b.y, s);
    s = __dp4a(a.z, b.z, s);
    return __dp4a(a.w, b.w, s);
}

// One Q4_0 group's 16 bytes as signed weights q = nibble - 8: lo holds
// k = 4j..4j+3 of the group (low nibbles of bytes 4j..4j+3), hi holds
// k = 16 + 4j.. (their high nibbles). __vsub4 subtracts per byte with
// wrap-around, so 0..15 - 8 becomes the signed bytes -8..7.
__device__ __forceinline__ void unpack_q4(int4 v, int4 &lo, int4 &hi)
{
    const unsigned m = 0x0F0F0F0Fu, e = 0x08080808u;
    unsigned w[4] = {(unsigned)v.x, (unsigned)v.y, (unsigned)v.z, (unsigned)v.w};
    lo = make_int4((int)__vsub4(w[0] & m, e), (int)__vsub4(w[1] & m, e),
                   (int)__vsub4(w[2] & m, e), (int)__vsub4(w[3] & m, e));
    hi = make_int4((int)__vsub4((w[0] >> 4) & m, e), (int)__vsub4((w[1] >> 4) & m, e),
                   (int)__vsub4((w[2] >> 4) & m, e), (int)__vsub4((w[3] >> 4) & m, e));
}

// ---- warp kernels (decode) ---------------------------------------------------

// Warp n % WARP_ROWS of block n / WARP_ROWS computes column n of y: for
// each pass of up to MR rows, lane l sums chunks l, l + 32, ... (16 bytes
// each) of K against the MR activation rows, the warp adds its lanes'
// sums (exact) and lane i writes row m0 + i.
__global__ void __launch_bounds__(WARP_ROWS * 32)
    k_gemm_i8_warp(const int8_t *__restrict__ q, int ldq, const float *__restrict__ sx,
                   const int8_t *__restrict__ w, int ldw, const float *__restrict__ sw, int N,
                   int K, float *__restrict__ y, int ldy, int M)
{
    int lane = threadIdx.x & 31, n = blockIdx.x * WARP_ROWS + (threadIdx.x >> 5);
    if (n >= N)
        return; // the whole warp: no block-wide barrier below
    const int4 *wr = (const int4 *)(w + (size_t)n * ldw);
    int nc = (K + 15) / 16; // past K, w and q are zero up to ldw
    for (int m0 = 0; m0 < M; m0 += MR) {
        int mc = min(MR, M - m0), s[MR] = {};
#pragma unroll 4 // for speed: several weight loads in flight per lane
        for (int c = lane; c < nc; c += 32) {
            int4 wv = __ldg(wr + c);
#pragma unroll
            for (int i = 0; i < MR; i++)
                if (i < mc) {
                    const int4 *qr = (const int4 *)(q + (size_t)(m0 + i) * ldq);
                    s[i] = dot16(wv, __ldg(qr + c), s[i]);
                }
        }
#pragma unroll
        for (int i = 0; i < MR; i++) {
            int S = warp_sum(s[i]);
            if (lane == i && i < mc)
                y[(size_t)(m0 + i) * ldy + n] =
                    __fmul_rn(__fmul_rn(__int2float_rn(S), sx[m0 + i]), sw[n]);
        }
    }
}

// The same for int4: lane l takes groups l, l + 32, ... (16 bytes of
// nibbles and a scale each) and finds s_g for the pass's rows; the s_g of
// the warp's 32 groups go to shared memory, and lane i < MR then runs row
// m0 + i's chain over them in increasing g before the next 32 groups.
__global__ void __launch_bounds__(WARP_ROWS * 32)
    k_gemm_i4_warp(const int8_t *__restrict__ q, int ldq, const float *__restrict__ sx,
                   const uint8_t *__restrict__ w4, const uint16_t *__restrict__ d, int N, int G,
                   float *__restrict__ y, int ldy, int M)
{
    // row stride 33: lanes 0..7 read column j of rows 0..7 from distinct banks
    __shared__ int ss[WARP_ROWS][MR][33];
    __shared__ float ds[WARP_ROWS][32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, n = blockIdx.x * WARP_ROWS + warp;
    if (n >= N)
        return; // the whole warp; the barriers below are per warp
    const int4 *wr = (const int4 *)(w4 + (size_t)n * G * 16);
    const uint16_t *dr = d + (size_t)n * G;
    for (int m0 = 0; m0 < M; m0 += MR) {
        int mc = min(MR, M - m0);
        float acc = 0.0f; // lane i < mc: row m0 + i's chain
        for (int g0 = 0; g0 < G; g0 += 32) {
            int g = g0 + lane, s[MR] = {};
            float dg = 0.0f;
            if (g < G) {
                int4 lo, hi;
                unpack_q4(__ldg(wr + g), lo, hi);
                dg = __half2float(__ushort_as_half(__ldg(dr + g))); // exact
#pragma unroll
                for (int i = 0; i < MR; i++)
                    if (i < mc) {
                        const int4 *qg = (const int4 *)(q + (size_t)(m0 + i) * ldq) + 2 * g;
                        s[i] = dot16(hi, __ldg(qg + 1), dot16(lo, __ldg(qg), 0));
                    }
            }
#pragma unroll
            for (int i = 0; i < MR; i++)
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

// A quantized GEMM's launch: the warp kernels (a warp per weight row) for
// decode-sized M, the tiles beyond; false when the grid would not fit.
static bool qgemm_grid(int M, int N, bool *warp, dim3 *grid)
{
    *warp = M <= WARP_MAX_M;
    long long gx = *warp ? (N + WARP_ROWS - 1) / WARP_ROWS : (N + TB - 1) / TB;
    long long gy = *warp ? 1 : (M + TB - 1) / TB;
    if (!grid_fits(gx, gy))
        return false;
    *grid = dim3((unsigned)gx, (unsigned)gy);
    return true;
}

extern "C" cudaError_t cuda_k_quant_rows(const uint16_t *x, int ldx, int K, int T, int8_t *q,
                                         int ldq, float *sx, cudaStream_t st)
{
    if (K < 0 || ldx < K || ldq < K || ldq % 32)
        return cudaErrorInvalidValue;
    if (T <= 0)
        return cudaGetLastError();
    k_quant_rows<<<(unsigned)T, QUANT_THREADS, 0, st>>>(x, ldx, K, q, ldq, sx);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_k_gemm_i8(const int8_t *q, int ldq, const float *sx,
                                      const int8_t *w, int ldw, const float *sw, int N, int K,
                                      float *y, int ldy, int M, cudaStream_t st)
{
    if (K < 0 || ldw < K || ldw % 32 || ldq < ldw || ldq % 16)
        return cudaErrorInvalidValue;
    if (M <= 0 || N <= 0)
        return cudaGetLastError();
    if (!aligned16(q) || !aligned16(w))
        return cudaErrorInvalidValue;
    bool warp;
    dim3 g;
    if (!qgemm_grid(M, N, &warp, &g))
        return cudaErrorInvalidValue;
    if (warp)
        k_gemm_i8_warp<<<g, WARP_ROWS * 32, 0, st>>>(q, ldq, sx, w, ldw, sw, N, K, y, ldy, M);
    else
        k_gemm_i8_tiled<<<g, T_THREADS, 0, st>>>(q, ldq, sx, w, ldw, sw, N, K, y, ldy, M);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_k_gemm_i4(const int8_t *q, int ldq, const float *sx,
                                      const uint8_t *w4, const uint16_t *d, int N, int G,
                                      float *y, int ldy, int M, cudaStream_t st)
{
    if (G < 0 || (long long)ldq < 32LL * G || ldq % 16)
        return cudaErrorInvalidValue;
    if (M <= 0 || N <= 0)
        return cudaGetLastError();
    if (!aligned16(q) || !aligned16(w4))
        return cudaErrorInvalidValue;
    bool warp;
    dim3 g;
    if (!qgemm_grid(M, N, &warp, &g))
        return cudaErrorInvalidValue;
    if (warp)
        k_gemm_i4_warp<<<g, WARP_ROWS * 32, 0, st>>>(q, ldq, sx, w4, d, N, G, y, ldy, M);
    else
        k_gemm_i4_tiled<<<g, T_THREADS, 0, st>>>(q, ldq, sx, w4, d, N, G, y, ldy, M);
    return cudaGetLastError();
}
