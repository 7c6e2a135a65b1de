// Paged attention: decode (split-K over the context, then a merge) and
// prefill / verification tiles (causal mask per row). Both read K and V
// through the sequence's block table from the layer's cache
// [num_blocks][KVl][block_size][hd] bf16 and keep softmax statistics in f32
// with the online (running max) formulation.
#include <math.h>

#include "cuda/dev.cuh"
#include "cuda/kern.h"
#include "cuda/plan.h"

// ---- decode ---------------------------------------------------------------

#define DEC_THREADS 128
#define DEC_WARPS (DEC_THREADS / 32)

// One block: decode token a.dec[blockIdx.x], KV head g with up to
// CUDA_DEC_HEADS of its query heads (j0..), positions of split blockIdx.z.
// Warp w takes positions p0 + w, p0 + w + DEC_WARPS, ...; lane l holds dims
// 2l, 2l+1 (+ 64 i) of every head, so a key row is one coalesced load per
// warp and the q.k sum is one butterfly. The warps' partial softmaxes are
// merged in warp order, then written as this split's (acc, max, sum).
template <int NP>
static __global__ void __launch_bounds__(DEC_THREADS)
    k_attn_decode(cuda_attn_args a, int hgroups)
{
    __shared__ float s_m[DEC_WARPS][CUDA_DEC_HEADS], s_l[DEC_WARPS][CUDA_DEC_HEADS];
    __shared__ float s_acc[DEC_WARPS][CUDA_DEC_HEADS][NP * 64];
    int di = blockIdx.x, g = blockIdx.y / hgroups;
    int j0 = (blockIdx.y % hgroups) * CUDA_DEC_HEADS, split = blockIdx.z;
    int t = a.dec[di], n = a.positions[t] + 1, p0 = split * a.chunk;
    if (p0 >= n)
        return; // this context has fewer splits: the merge never reads this one
    int p1 = min(n, p0 + a.chunk), gc = min(CUDA_DEC_HEADS, a.G - j0);
    int hd = a.hd, bs = a.block_size, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int32_t *table = a.table + (size_t)a.tok_seq[t] * a.MB;
    const float *qrow = a.q + (size_t)t * a.ldq + (size_t)(g * a.G + j0) * hd;

    float2 q[CUDA_DEC_HEADS][NP], acc[CUDA_DEC_HEADS][NP];
    float m[CUDA_DEC_HEADS], l[CUDA_DEC_HEADS];
#pragma unroll
    for (int j = 0; j < CUDA_DEC_HEADS; j++) {
        m[j] = -INFINITY;
        l[j] = 0.0f;
#pragma unroll
        for (int i = 0; i < NP; i++) {
            int d = 2 * lane + 64 * i;
            float2 v = make_float2(0.0f, 0.0f);
            if (j < gc && d < hd)
                v = make_float2(qrow[j * hd + d] * a.scale, qrow[j * hd + d + 1] * a.scale);
            q[j][i] = v;
            acc[j][i] = make_float2(0.0f, 0.0f);
        }
    }
    for (int p = p0 + w; p < p1; p += DEC_WARPS) {
        size_t base = (((size_t)table[p / bs] * a.KVl + g) * bs + p % bs) * hd;
        float2 k[NP], v[NP];
#pragma unroll
        for (int i = 0; i < NP; i++) {
            int d = 2 * lane + 64 * i;
            k[i] = v[i] = make_float2(0.0f, 0.0f);
            if (d < hd) { // hd is even and base + d too: 4-byte aligned pairs
                uint32_t kk = *(const uint32_t *)(a.kc + base + d);
                uint32_t vv = *(const uint32_t *)(a.vc + base + d);
                k[i] = make_float2(bf2f((uint16_t)kk), bf2f((uint16_t)(kk >> 16)));
                v[i] = make_float2(bf2f((uint16_t)vv), bf2f((uint16_t)(vv >> 16)));
            }
        }
#pragma unroll
        for (int j = 0; j < CUDA_DEC_HEADS; j++) {
            if (j >= gc)
                break;
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < NP; i++)
                s += q[j][i].x * k[i].x + q[j][i].y * k[i].y;
            s = warp_sum(s);
            if (s > m[j]) {
                float c = expf(m[j] - s); // 0 on the first position
                l[j] *= c;
#pragma unroll
                for (int i = 0; i < NP; i++) {
                    acc[j][i].x *= c;
                    acc[j][i].y *= c;
                }
                m[j] = s;
            }
            float e = expf(s - m[j]);
            l[j] += e;
#pragma unroll
            for (int i = 0; i < NP; i++) {
                acc[j][i].x += e * v[i].x;
                acc[j][i].y += e * v[i].y;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < CUDA_DEC_HEADS; j++) {
        if (lane == 0) {
            s_m[w][j] = m[j];
            s_l[w][j] = l[j];
        }
#pragma unroll
        for (int i = 0; i < NP; i++) {
            s_acc[w][j][2 * lane + 64 * i] = acc[j][i].x;
            s_acc[w][j][2 * lane + 64 * i + 1] = acc[j][i].y;
        }
    }
    __syncthreads();
    float *out = a.part +
                 ((((size_t)di * a.KVl + g) * a.max_splits + split) * a.G + j0) * (hd + 2);
    for (int e = threadIdx.x; e < gc * (hd + 2); e += DEC_THREADS) {
        int j = e / (hd + 2), d = e % (hd + 2);
        float M = -INFINITY;
        for (int ww = 0; ww < DEC_WARPS; ww++)
            M = fmaxf(M, s_m[ww][j]);
        float r = 0.0f;
        for (int ww = 0; ww < DEC_WARPS; ww++) {
            if (s_m[ww][j] == -INFINITY) // a warp that saw no position
                continue;
            float f = expf(s_m[ww][j] - M);
            r += f * (d < hd ? s_acc[ww][j][d] : s_l[ww][j]);
        }
        out[(size_t)j * (hd + 2) + d] = d == hd ? M : r; // [hd]: max, [hd + 1]: sum
    }
}

// Merges the splits of decode token a.dec[blockIdx.x], query head
// blockIdx.y (local), in split order, and writes the bf16 output row.
static __global__ void k_attn_combine(cuda_attn_args a)
{
    int di = blockIdx.x, hh = blockIdx.y, g = hh / a.G, j = hh % a.G, hd = a.hd;
    int t = a.dec[di], n = a.positions[t] + 1;
    int ns = (n + a.chunk - 1) / a.chunk;
    size_t step = (size_t)a.G * (hd + 2);
    const float *pb = a.part + (((size_t)di * a.KVl + g) * a.max_splits * a.G + j) * (hd + 2);
    float M = -INFINITY, L = 0.0f;
    for (int s = 0; s < ns; s++)
        M = fmaxf(M, pb[s * step + hd]);
    for (int s = 0; s < ns; s++)
        L += expf(pb[s * step + hd] - M) * pb[s * step + hd + 1];
    uint16_t *o = a.out + (size_t)t * a.ldo + (size_t)hh * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float r = 0.0f;
        for (int s = 0; s < ns; s++)
            r += expf(pb[s * step + hd] - M) * pb[s * step + d];
        o[d] = f2bf(r / L);
    }
}

extern "C" cudaError_t cuda_k_attn_decode(const cuda_attn_args *a, int n_dec, cudaStream_t st)
{
    if (n_dec <= 0)
        return cudaGetLastError();
    int hgroups = (a->G + CUDA_DEC_HEADS - 1) / CUDA_DEC_HEADS;
    dim3 grid((unsigned)n_dec, (unsigned)(a->KVl * hgroups), (unsigned)a->max_splits);
    switch ((a->hd + 63) / 64) {
    case 1:
        k_attn_decode<1><<<grid, DEC_THREADS, 0, st>>>(*a, hgroups);
        break;
    case 2:
        k_attn_decode<2><<<grid, DEC_THREADS, 0, st>>>(*a, hgroups);
        break;
    case 3:
        k_attn_decode<3><<<grid, DEC_THREADS, 0, st>>>(*a, hgroups);
        break;
    case 4:
        k_attn_decode<4><<<grid, DEC_THREADS, 0, st>>>(*a, hgroups);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return e;
    dim3 cgrid((unsigned)n_dec, (unsigned)(a->KVl * a->G));
    k_attn_combine<<<cgrid, 64, 0, st>>>(*a);
    return cudaGetLastError();
}

// ---- prefill / verification --------------------------------------------------

#define PF_THREADS 128
#define PF_KT 32 // KV positions per shared-memory tile
#define PF_R CUDA_ATTN_ROWS

static size_t prefill_smem(int hd)
{
    size_t floats = (size_t)PF_R * (hd + 1) + (size_t)PF_KT * (hd + 1) + (size_t)PF_KT * hd +
                    (size_t)PF_R * (PF_KT + 1) + 3 * PF_R;
    return floats * sizeof(float) + PF_R * sizeof(int);
}

// One block: tile blockIdx.x (tokens t0..t0+nq-1 of one sequence) and KV
// head blockIdx.y; row r is token t0 + r / G, query head g*G + r % G.
// Thread (r = tid % 32, c = tid / 32) computes scores for row r and columns
// c, c+4, ...; then accumulates dims c, c+4, ... of row r's output. Q and K
// rows are padded to hd + 1 floats so the 32 rows a warp reads at one dim
// fall in 32 different banks.
template <int NI>
static __global__ void __launch_bounds__(PF_THREADS) k_attn_prefill(cuda_attn_args a)
{
    extern __shared__ float sm[];
    int hd = a.hd, ldq = hd + 1;
    float *Qs = sm;                       // [PF_R][hd + 1]
    float *Ks = Qs + PF_R * ldq;          // [PF_KT][hd + 1]
    float *Vs = Ks + PF_KT * ldq;         // [PF_KT][hd]
    float *Ss = Vs + PF_KT * hd;          // [PF_R][PF_KT + 1]
    float *rm = Ss + PF_R * (PF_KT + 1);  // [PF_R] running max
    float *rl = rm + PF_R;                // [PF_R] running sum
    float *rc = rl + PF_R;                // [PF_R] this tile's rescale
    int *rpos = (int *)(rc + PF_R);       // [PF_R] row's position, -1 unused

    const int32_t *tile = a.tiles + 3 * blockIdx.x;
    int s = tile[0], t0 = tile[1], nq = tile[2], g = blockIdx.y, G = a.G, R = nq * G;
    int tid = threadIdx.x, r = tid & 31, c0 = tid >> 5, bs = a.block_size;
    const int32_t *table = a.table + (size_t)s * a.MB;

    for (int e = tid; e < PF_R * hd; e += PF_THREADS) {
        int rr = e / hd, d = e % hd;
        float v = 0.0f;
        if (rr < R)
            v = a.q[(size_t)(t0 + rr / G) * a.ldq + (size_t)(g * G + rr % G) * hd + d] * a.scale;
        Qs[rr * ldq + d] = v;
    }
    if (tid < PF_R) {
        rpos[tid] = tid < R ? a.positions[t0 + tid / G] : -1;
        rm[tid] = -INFINITY;
        rl[tid] = 0.0f;
    }
    __syncthreads();
    int n_kv = 0;
    for (int i = 0; i < PF_R; i++)
        n_kv = max(n_kv, rpos[i] + 1);

    float acc[NI];
#pragma unroll
    for (int i = 0; i < NI; i++)
        acc[i] = 0.0f;

    for (int p0 = 0; p0 < n_kv; p0 += PF_KT) {
        for (int e = tid; e < PF_KT * hd; e += PF_THREADS) {
            int c = e / hd, d = e % hd, p = p0 + c;
            float kv = 0.0f, vv = 0.0f;
            if (p < n_kv) {
                size_t at = (((size_t)table[p / bs] * a.KVl + g) * bs + p % bs) * hd + d;
                kv = bf2f(a.kc[at]);
                vv = bf2f(a.vc[at]);
            }
            Ks[c * ldq + d] = kv;
            Vs[c * hd + d] = vv;
        }
        __syncthreads();
        float sc[PF_KT / 4];
#pragma unroll
        for (int k = 0; k < PF_KT / 4; k++)
            sc[k] = 0.0f;
        for (int d = 0; d < hd; d++) { // one q load serves all 8 columns
            float qv = Qs[r * ldq + d];
#pragma unroll
            for (int k = 0; k < PF_KT / 4; k++)
                sc[k] += qv * Ks[(c0 + 4 * k) * ldq + d];
        }
#pragma unroll
        for (int k = 0; k < PF_KT / 4; k++) {
            int c = c0 + 4 * k;
            Ss[r * (PF_KT + 1) + c] = (r < R && p0 + c <= rpos[r]) ? sc[k] : -INFINITY;
        }
        __syncthreads();
        if (tid < PF_R) {
            float *row = Ss + tid * (PF_KT + 1), mx = -INFINITY;
            for (int c = 0; c < PF_KT; c++)
                mx = fmaxf(mx, row[c]);
            float mnew = fmaxf(rm[tid], mx);
            if (mnew == -INFINITY) { // nothing visible yet in this row
                rc[tid] = 1.0f;
                for (int c = 0; c < PF_KT; c++)
                    row[c] = 0.0f;
            } else {
                float corr = rm[tid] == -INFINITY ? 0.0f : expf(rm[tid] - mnew), sum = 0.0f;
                for (int c = 0; c < PF_KT; c++) {
                    float e = row[c] == -INFINITY ? 0.0f : expf(row[c] - mnew);
                    row[c] = e;
                    sum += e;
                }
                rl[tid] = rl[tid] * corr + sum;
                rm[tid] = mnew;
                rc[tid] = corr;
            }
        }
        __syncthreads();
        float corr = rc[r];
        const float *prow = Ss + r * (PF_KT + 1);
#pragma unroll
        for (int i = 0; i < NI; i++)
            acc[i] *= corr;
        for (int c = 0; c < PF_KT; c++) {
            float pc = prow[c];
#pragma unroll
            for (int i = 0; i < NI; i++) {
                int d = c0 + 4 * i;
                if (d < hd)
                    acc[i] += pc * Vs[c * hd + d];
            }
        }
        __syncthreads(); // the next tile overwrites Ks, Vs and Ss
    }
    if (r < R) {
        float inv = 1.0f / rl[r];
        uint16_t *o = a.out + (size_t)(t0 + r / G) * a.ldo + (size_t)(g * G + r % G) * hd;
#pragma unroll
        for (int i = 0; i < NI; i++) {
            int d = c0 + 4 * i;
            if (d < hd)
                o[d] = f2bf(acc[i] * inv);
        }
    }
}

typedef void (*prefill_fn)(cuda_attn_args);

// The instance whose register tile covers ceil(hd / 4) dims per thread.
static prefill_fn prefill_kernel(int hd)
{
    int ni = (hd + 3) / 4;
    if (ni <= 2)
        return k_attn_prefill<2>;
    if (ni <= 4)
        return k_attn_prefill<4>;
    if (ni <= 8)
        return k_attn_prefill<8>;
    if (ni <= 16)
        return k_attn_prefill<16>;
    if (ni <= 32)
        return k_attn_prefill<32>;
    return k_attn_prefill<64>;
}

extern "C" cudaError_t cuda_k_attn_setup(int hd)
{
    if (hd < 2 || hd > CUDA_MAX_HEAD_DIM)
        return cudaErrorInvalidValue;
    return cudaFuncSetAttribute((const void *)prefill_kernel(hd),
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)prefill_smem(hd));
}

extern "C" cudaError_t cuda_k_attn_prefill(const cuda_attn_args *a, int n_tiles,
                                           cudaStream_t st)
{
    if (n_tiles <= 0)
        return cudaGetLastError();
    dim3 grid((unsigned)n_tiles, (unsigned)a->KVl);
    prefill_kernel(a->hd)<<<grid, PF_THREADS, prefill_smem(a->hd), st>>>(*a);
    return cudaGetLastError();
}
