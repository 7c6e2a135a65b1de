// The quantized GEMMs' inputs (cuda/kern.h, cuda_k_quant_rows): each bf16
// row to the CPU backend's symmetric int8, bit for bit. Two kernels, the
// same arithmetic in the same rounding steps (max is exact in any order):
//   - block (CUDA_QR_BLOCK): a block of 256 threads a row, 2-byte loads,
//     the row read twice (amax, then q). On an H200 it took 9.3 us at
//     K = 4096 and 18.5 at 14336 for one row (bench_cuda's sweep,
//     2026-11-26): four a layer were a quarter of an int8 decode step.
//   - vec (CUDA_QR_VEC): the same block, 16-byte loads of 8 values held in
//     registers between the two passes (rows up to 16,384 values; the rest
//     of a longer row is read again), 8-byte stores. Rows whose K or
//     stride is not a multiple of 8 take the block kernel. The one
//     cuda_k_quant_rows runs since the H200 timed it (2026-11-27: 6.0-7.1
//     us against 8.6-10.0 at K = 4096, 6.2-8.0 against 17.9-19.7 at 14336).
// And cuda_k_add_rmsnorm_q / cuda_k_glu_q: the residual add and RMSNorm
// (cuda/k_norm.cuh), or the gated activation (cuda/k_act.cuh), with the
// quantization of the row it writes, one launch for two.
#include "cuda/dev.cuh"
#include "cuda/k_act.cuh"
#include "cuda/k_norm.cuh"
#include "cuda/kern.h"

namespace {

constexpr int THREADS = 256;
constexpr int R = 8; // vec: 16-byte chunks a thread holds

// Largest value over the block. Max is exact, so any order gives the same
// result; the inputs are never NaN (the kernels skip them).
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

// amax's step for one value: false for NaN, so NaNs are skipped, as the CPU
__device__ __forceinline__ float amax_with(float amax, uint16_t h)
{
    float a = fabsf(bf2f(h));
    return a > amax ? a : amax;
}

// q of one value: fmaxf(NaN, -127) is -127, as C's fmaxf: NaN -> -127;
// rintf rounds to nearest even, and t is then an integer, converted exactly
__device__ __forceinline__ int q_of(uint16_t h, float inv)
{
    float t = fminf(fmaxf(__fmul_rn(bf2f(h), inv), -127.0f), 127.0f);
    return (int)rintf(t);
}

// The rest of a row's quantization once each thread holds the amax of its
// share of the bf16 values o[0..K): the block's amax, inv, q over all ldq
// columns (zeros past K, each thread its own share again), and the scale.
__device__ __forceinline__ void quant_tail(const uint16_t *o, int K, float amax, float *red,
                                           int8_t *qr, int ldq, float *sxr)
{
    amax = block_max(amax, red);
    float inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    for (int k = threadIdx.x; k < ldq; k += blockDim.x)
        qr[k] = (int8_t)(k < K ? q_of(o[k], inv) : 0);
    if (threadIdx.x == 0)
        *sxr = __fdiv_rn(amax, 127.0f);
}

// One block per row t: amax, then q over all ldq columns (zeros past K).
__global__ void __launch_bounds__(THREADS)
    k_quant_rows(const uint16_t *__restrict__ x, int ldx, int K, int8_t *__restrict__ q,
                 int ldq, float *__restrict__ sx)
{
    __shared__ float red[32];
    const uint16_t *xr = x + (size_t)blockIdx.x * ldx;
    float amax = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        amax = amax_with(amax, xr[k]);
    quant_tail(xr, K, amax, red, q + (size_t)blockIdx.x * ldq, ldq, sx + blockIdx.x);
}

// 8 values of a chunk as 8 q bytes, little-endian in two words
__device__ __forceinline__ uint2 q8_of(uint4 v, float inv)
{
    unsigned h[4] = {v.x, v.y, v.z, v.w}, o[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint16_t e = (uint16_t)(h[i / 2] >> (16 * (i % 2)));
        o[i / 4] |= (unsigned)(q_of(e, inv) & 0xff) << (8 * (i % 4));
    }
    return make_uint2(o[0], o[1]);
}

__device__ __forceinline__ float amax8(float amax, uint4 v)
{
    unsigned h[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 8; i++)
        amax = amax_with(amax, (uint16_t)(h[i / 2] >> (16 * (i % 2))));
    return amax;
}

// The same, K and ldx multiples of 8 and x 16-byte aligned: thread t holds
// chunks t, t + THREADS, ... (R of them) from its loads to its stores.
__global__ void __launch_bounds__(THREADS)
    k_quant_rows_vec(const uint16_t *__restrict__ x, int ldx, int K, int8_t *__restrict__ q,
                     int ldq, float *__restrict__ sx)
{
    __shared__ float red[32];
    const uint4 *xr = (const uint4 *)(x + (size_t)blockIdx.x * ldx);
    int8_t *qr = q + (size_t)blockIdx.x * ldq;
    int nc = K / 8;
    uint4 v[R];
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < R; j++) { // all R loads in flight
        int c = threadIdx.x + THREADS * j;
        v[j] = c < nc ? __ldg(xr + c) : make_uint4(0, 0, 0, 0); // +0: leaves amax
    }
#pragma unroll
    for (int j = 0; j < R; j++)
        amax = amax8(amax, v[j]);
    for (int c = threadIdx.x + THREADS * R; c < nc; c += THREADS) // rows past R chunks a thread
        amax = amax8(amax, __ldg(xr + c));
    amax = block_max(amax, red);
    float inv = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
#pragma unroll
    for (int j = 0; j < R; j++) {
        int c = threadIdx.x + THREADS * j;
        if (c < nc)
            *(uint2 *)(qr + 8 * c) = q8_of(v[j], inv);
    }
    for (int c = threadIdx.x + THREADS * R; c < nc; c += THREADS)
        *(uint2 *)(qr + 8 * c) = q8_of(__ldg(xr + c), inv);
    for (int k = K + threadIdx.x; k < ldq; k += THREADS) // the padding
        qr[k] = 0;
    if (threadIdx.x == 0)
        sx[blockIdx.x] = __fdiv_rn(amax, 127.0f);
}

// A static scale (cuda_k_quant_rows_static): one block per row, each value
// on its own: t = v / s (one rounding), clamped, rounded to nearest even.
__global__ void __launch_bounds__(THREADS)
    k_quant_rows_static(const uint16_t *__restrict__ x, int ldx, int K, float s,
                        int8_t *__restrict__ q, int ldq, float *__restrict__ sx)
{
    const uint16_t *xr = x + (size_t)blockIdx.x * ldx;
    int8_t *qr = q + (size_t)blockIdx.x * ldq;
    for (int k = threadIdx.x; k < ldq; k += THREADS) {
        int v = 0;
        if (k < K) {
            float t = fminf(fmaxf(__fdiv_rn(bf2f(__ldg(xr + k)), s), -127.0f), 127.0f);
            v = (int)rintf(t);
        }
        qr[k] = (int8_t)v;
    }
    if (threadIdx.x == 0)
        sx[blockIdx.x] = s;
}

} // namespace

extern "C" cudaError_t cuda_k_quant_rows_static(const uint16_t *x, int ldx, int K, int T,
                                                float s, int8_t *q, int ldq, float *sx,
                                                cudaStream_t st)
{
    if (K < 0 || ldx < K || ldq < K || ldq % 32 || !(s > 0.0f))
        return cudaErrorInvalidValue;
    if (T > 0)
        k_quant_rows_static<<<(unsigned)T, THREADS, 0, st>>>(x, ldx, K, s, q, ldq, sx);
    return cudaGetLastError();
}

namespace {

// Row blockIdx.x: cuda_k_add_rmsnorm's x update and bf16 output (rms_row,
// rms_out), then k_quant_rows's steps on the bf16 values just written (each
// thread rereads its own), so q and sx are the bits the two launches give.
__global__ void __launch_bounds__(THREADS)
    k_add_rmsnorm_q(float *__restrict__ x, const float *__restrict__ delta,
                    const float *__restrict__ gain, int D, float eps, uint16_t *__restrict__ out,
                    int8_t *__restrict__ q, int ldq, float *__restrict__ sx)
{
    __shared__ float red[32], red2[32]; // two: a block_sum's last reads race a block_max's writes
    int i = blockIdx.x;
    float *xr = x + (size_t)i * D;
    const float *dr = delta ? delta + (size_t)i * D : nullptr;
    float inv = rms_row(xr, dr, 0, D, eps, red);
    uint16_t *o = out + (size_t)i * D;
    float amax = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        uint16_t h = rms_out(xr, dr, 0, gain, j, inv);
        o[j] = h;
        amax = amax_with(amax, h);
    }
    quant_tail(o, D, amax, red2, q + (size_t)i * ldq, ldq, sx + i);
}

// Row blockIdx.x of gu [T][2F]: the gated activation (GeGLU when gelu, else
// SwiGLU) into out [T][F] as bf16, then k_quant_rows's steps on it.
__global__ void __launch_bounds__(THREADS)
    k_glu_q(const float *__restrict__ gu, int F, int gelu, uint16_t *__restrict__ out,
            int8_t *__restrict__ q, int ldq, float *__restrict__ sx)
{
    __shared__ float red[32];
    int t = blockIdx.x;
    const float *r = gu + (size_t)t * 2 * F;
    uint16_t *o = out + (size_t)t * F;
    float amax = 0.0f;
    for (int i = threadIdx.x; i < F; i += blockDim.x) {
        uint16_t h = gelu ? geglu_of(r[i], r[F + i]) : swiglu_of(r[i], r[F + i]);
        o[i] = h;
        amax = amax_with(amax, h);
    }
    quant_tail(o, F, amax, red, q + (size_t)t * ldq, ldq, sx + t);
}

} // namespace

extern "C" cudaError_t cuda_k_glu_q(const float *gu, int F, int T, int gelu, uint16_t *out,
                                    int8_t *q, int ldq, float *sx, cudaStream_t st)
{
    if (F < 0 || ldq < F || ldq % 32)
        return cudaErrorInvalidValue;
    if (T > 0)
        k_glu_q<<<(unsigned)T, THREADS, 0, st>>>(gu, F, gelu, out, q, ldq, sx);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_k_add_rmsnorm_q(float *x, const float *delta, const float *gain,
                                            int D, float eps, int n, uint16_t *out, int8_t *q,
                                            int ldq, float *sx, cudaStream_t st)
{
    if (D < 0 || ldq < D || ldq % 32)
        return cudaErrorInvalidValue;
    if (n > 0)
        k_add_rmsnorm_q<<<(unsigned)n, THREADS, 0, st>>>(x, delta, gain, D, eps, out, q, ldq, sx);
    return cudaGetLastError();
}

extern "C" const char *cuda_k_quant_rows_kernel_name(int kernel)
{
    return kernel == CUDA_QR_BLOCK ? "block" : kernel == CUDA_QR_VEC ? "vec" : "?";
}

extern "C" cudaError_t cuda_k_quant_rows_with(int kernel, const uint16_t *x, int ldx, int K,
                                              int T, int8_t *q, int ldq, float *sx,
                                              cudaStream_t st)
{
    if (K < 0 || ldx < K || ldq < K || ldq % 32 || kernel < 0 || kernel >= CUDA_QR_KERNELS)
        return cudaErrorInvalidValue;
    if (T <= 0)
        return cudaGetLastError();
    bool vec = kernel == CUDA_QR_VEC && K % 8 == 0 && ldx % 8 == 0 && ((uintptr_t)x & 15) == 0 &&
               ((uintptr_t)q & 7) == 0;
    if (vec)
        k_quant_rows_vec<<<(unsigned)T, THREADS, 0, st>>>(x, ldx, K, q, ldq, sx);
    else
        k_quant_rows<<<(unsigned)T, THREADS, 0, st>>>(x, ldx, K, q, ldq, sx);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_k_quant_rows(const uint16_t *x, int ldx, int K, int T, int8_t *q,
                                         int ldq, float *sx, cudaStream_t st)
{
    return cuda_k_quant_rows_with(CUDA_QR_VEC, x, ldx, K, T, q, ldq, sx, st);
}
