// Per-token kernels: embedding gather, residual add + RMSNorm, biases and
// QK-norm, RoPE + KV write, SwiGLU / GeGLU, soft-cap. Each token row is one
// block (or a row of blocks), so a token's result never depends on the other
// rows of the batch. Products that the CPU backend rounds separately
// (-ffp-contract=off) are written with __fmul_rn / __fadd_rn so nvcc does not
// fuse them into FMAs either.
#include "cuda/dev.cuh"
#include "cuda/k_act.cuh"
#include "cuda/k_norm.cuh"
#include "cuda/kern.h"
#include "cuda/plan.h"

static __global__ void k_embed(const uint16_t *table, int D, const int32_t *tokens,
                               const int32_t *prev_ids, float scale, float *x)
{
    int t = blockIdx.x, tok = tokens[t];
    if (tok < 0)
        tok = prev_ids[-1 - tok];
    const uint16_t *row = table + (size_t)tok * D;
    float *o = x + (size_t)t * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        o[i] = scale == 1.0f ? bf2f(row[i]) : __fmul_rn(bf2f(row[i]), scale);
}

extern "C" cudaError_t cuda_k_embed(const uint16_t *table, int D, const int32_t *tokens,
                                    const int32_t *prev_ids, int T, float scale, float *x,
                                    cudaStream_t st)
{
    if (T > 0)
        k_embed<<<T, 256, 0, st>>>(table, D, tokens, prev_ids, scale, x);
    return cudaGetLastError();
}

static __global__ void __launch_bounds__(256)
    k_rmsnorm_f32(float *x, const float *gain, int D, float eps)
{
    __shared__ float red[32];
    float *xr = x + (size_t)blockIdx.x * D, ss = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x)
        ss = __fmaf_rn(xr[j], xr[j], ss);
    ss = block_sum(ss, red); // every thread has read its values before any writes
    float inv = 1.0f / sqrtf(ss / (float)D + eps);
    for (int j = threadIdx.x; j < D; j += blockDim.x)
        xr[j] = __fmul_rn(__fmul_rn(xr[j], inv), gain[j]);
}

extern "C" cudaError_t cuda_k_rmsnorm_f32(float *x, const float *gain, int D, float eps, int n,
                                          cudaStream_t st)
{
    if (n > 0)
        k_rmsnorm_f32<<<n, 256, 0, st>>>(x, gain, D, eps);
    return cudaGetLastError();
}

// One warp per (token, head): the head's bias, then for q and k heads
// with qk_gain the RMSNorm over its hd values (lanes' partial sums reduced
// by one butterfly: a fixed order for a given hd).
static __global__ void k_qkv_prep(float *qkv, const float *bias, const float *qk_gain, int Hl,
                                  int KVl, int hd, float eps)
{
    int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
    float *v = qkv + (size_t)t * (Hl + 2 * KVl) * hd + (size_t)h * hd;
    const float *b = bias ? bias + (size_t)h * hd : nullptr;
    float ss = 0.0f;
    for (int d = lane; d < hd; d += 32) {
        float y = b ? __fadd_rn(v[d], b[d]) : v[d];
        v[d] = y;
        ss = __fmaf_rn(y, y, ss);
    }
    if (!qk_gain || h >= Hl + KVl)
        return;
    ss = warp_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)hd + eps);
    const float *g = qk_gain + (h < Hl ? 0 : hd);
    for (int d = lane; d < hd; d += 32)
        v[d] = __fmul_rn(__fmul_rn(v[d], inv), g[d]);
}

extern "C" cudaError_t cuda_k_qkv_prep(float *qkv, int T, const float *bias,
                                       const float *qk_gain, int Hl, int KVl, int hd, float eps,
                                       cudaStream_t st)
{
    if (T > 0 && (bias || qk_gain)) {
        dim3 grid((unsigned)T, (unsigned)(Hl + 2 * KVl));
        k_qkv_prep<<<grid, 32, 0, st>>>(qkv, bias, qk_gain, Hl, KVl, hd, eps);
    }
    return cudaGetLastError();
}

static __global__ void k_softcap(float *x, size_t n, float cap)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = __fmul_rn(cap, tanhf(x[i] / cap));
}

extern "C" cudaError_t cuda_k_softcap(float *x, size_t n, float cap, cudaStream_t st)
{
    if (n > 0)
        k_softcap<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(x, n, cap);
    return cudaGetLastError();
}

static __global__ void __launch_bounds__(256)
    k_add_rmsnorm(float *x, const float *delta, const float *gain, int D, float eps,
                  const int32_t *rows, uint16_t *out)
{
    __shared__ float red[32];
    int i = blockIdx.x, r = rows ? rows[i] : i;
    float *xr = x + (size_t)r * D;
    const float *dr = delta ? delta + (size_t)r * D : nullptr;
    // with rows (the final norm) x stays as it is: a row may be listed
    // twice, and two blocks must not both add delta into it
    int keep = dr && rows;
    float inv = rms_row(xr, dr, keep, D, eps, red);
    uint16_t *o = out + (size_t)i * D;
    for (int j = threadIdx.x; j < D; j += blockDim.x)
        o[j] = rms_out(xr, dr, keep, gain, j, inv);
}

extern "C" cudaError_t cuda_k_add_rmsnorm(float *x, const float *delta, const float *gain,
                                          int D, float eps, const int32_t *rows, int n,
                                          uint16_t *out, cudaStream_t st)
{
    if (n > 0)
        k_add_rmsnorm<<<n, 256, 0, st>>>(x, delta, gain, D, eps, rows, out);
    return cudaGetLastError();
}

static __global__ void k_rope_kv(float *qkv, const int32_t *positions, const int32_t *slots,
                                 cuda_rope r, int Hl, int KVl, int hd,
                                 uint16_t *kc, uint16_t *vc, int bs)
{
    int t = blockIdx.x, half = r.rot / 2, ld = (Hl + 2 * KVl) * hd;
    float *row = qkv + (size_t)t * ld;
    double p = (double)positions[t];
    const double *inv_freq = r.inv_long && positions[t] >= r.long_from ? r.inv_long : r.inv_freq;
    int slot = slots[t], blk = slot / bs, off = slot % bs;
    // the angle depends on the token and i only: one double sincos per i, not
    // per head (the same values, so the same bits)
    __shared__ float s_cos[CUDA_MAX_HEAD_DIM / 2], s_sin[CUDA_MAX_HEAD_DIM / 2];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos(p * inv_freq[i], &s, &c);
        s_cos[i] = (float)(c * r.attn_factor);
        s_sin[i] = (float)(s * r.attn_factor);
    }
    __syncthreads();
    // dims past rot are not rotated: k's go to the cache as they are
    for (int e = threadIdx.x; e < KVl * (hd - r.rot); e += blockDim.x) {
        int h = e / (hd - r.rot), d = r.rot + e % (hd - r.rot);
        kc[(((size_t)blk * KVl + h) * bs + off) * hd + d] = f2bf(row[(size_t)(Hl + h) * hd + d]);
    }
    for (int e = threadIdx.x; e < (Hl + KVl) * half; e += blockDim.x) {
        int h = e / half, i = e % half;
        float cf = s_cos[i], sf = s_sin[i];
        float *v = row + (size_t)h * hd; // k heads follow the q heads
        float a = v[i], b = v[i + half];
        float na = __fsub_rn(__fmul_rn(a, cf), __fmul_rn(b, sf));
        float nb = __fadd_rn(__fmul_rn(b, cf), __fmul_rn(a, sf));
        if (h < Hl) {
            v[i] = na;
            v[i + half] = nb;
        } else {
            uint16_t *k = kc + (((size_t)blk * KVl + (h - Hl)) * bs + off) * hd;
            k[i] = f2bf(na);
            k[i + half] = f2bf(nb);
        }
    }
    const float *vs = row + (size_t)(Hl + KVl) * hd;
    for (int e = threadIdx.x; e < KVl * hd; e += blockDim.x) {
        int h = e / hd, d = e % hd;
        vc[(((size_t)blk * KVl + h) * bs + off) * hd + d] = f2bf(vs[e]);
    }
}

extern "C" cudaError_t cuda_k_rope_kv(float *qkv, int T, const int32_t *positions,
                                      const int32_t *slots, const cuda_rope *rope, int Hl,
                                      int KVl, int hd, uint16_t *kc, uint16_t *vc,
                                      int block_size, cudaStream_t st)
{
    if (rope->rot > hd || rope->rot > CUDA_MAX_HEAD_DIM) // the shared cos/sin rows
        return cudaErrorInvalidValue;
    if (T > 0)
        k_rope_kv<<<T, 128, 0, st>>>(qkv, positions, slots, *rope, Hl, KVl, hd, kc, vc,
                                     block_size);
    return cudaGetLastError();
}

static __global__ void k_swiglu(const float *gu, int F, uint16_t *out)
{
    int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= F)
        return;
    const float *r = gu + (size_t)t * 2 * F;
    out[(size_t)t * F + i] = swiglu_of(r[i], r[F + i]);
}

extern "C" cudaError_t cuda_k_swiglu(const float *gu, int F, int T, uint16_t *out,
                                     cudaStream_t st)
{
    if (T > 0 && F > 0) {
        dim3 grid((unsigned)((F + 255) / 256), (unsigned)T);
        k_swiglu<<<grid, 256, 0, st>>>(gu, F, out);
    }
    return cudaGetLastError();
}

static __global__ void k_geglu(const float *gu, int F, uint16_t *out)
{
    int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= F)
        return;
    const float *r = gu + (size_t)t * 2 * F;
    out[(size_t)t * F + i] = geglu_of(r[i], r[F + i]);
}

extern "C" cudaError_t cuda_k_geglu(const float *gu, int F, int T, uint16_t *out, cudaStream_t st)
{
    if (T > 0 && F > 0) {
        dim3 grid((unsigned)((F + 255) / 256), (unsigned)T);
        k_geglu<<<grid, 256, 0, st>>>(gu, F, out);
    }
    return cudaGetLastError();
}
