// Paged attention: decode (split-K over the context, then a merge), prefill /
// verification tiles (causal mask per row), and the batch-invariant
// tensor-core tiles (cuda_k_attn_tiles: mma.sync over 16 query rows, Q and P
// as bf16 hi + lo, each row its own online softmax). All read K and V
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
    // a window starts at n - window: a split wholly before it sees nothing
    // and leaves max -inf, which the merges weigh 0
    int lo = a.window > 0 && n > a.window ? max(p0, n - a.window) : p0;
    for (int p = lo + w; p < p1; p += DEC_WARPS) {
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
            if (a.softcap > 0.0f)
                s = __fmul_rn(a.softcap, tanhf(s / a.softcap));
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
// blockIdx.y (local), in split order, and writes the bf16 output row. Each
// split's scale exp(m_s - M) is computed once (s_w: a.max_splits <=
// CUDA_SPLIT_MAX, cuda_plan_splitk), not once per output element: the same
// expf of the same argument, so the same bits. The array is static: sized by
// the launch, compute-sanitizer saw reads past it on an H200.
static __global__ void k_attn_combine(cuda_attn_args a)
{
    __shared__ float s_w[CUDA_SPLIT_MAX];
    int di = blockIdx.x, hh = blockIdx.y, g = hh / a.G, j = hh % a.G, hd = a.hd;
    int t = a.dec[di], n = a.positions[t] + 1;
    int ns = (n + a.chunk - 1) / a.chunk;
    size_t step = (size_t)a.G * (hd + 2);
    const float *pb = a.part + (((size_t)di * a.KVl + g) * a.max_splits * a.G + j) * (hd + 2);
    float M = -INFINITY, L = 0.0f;
    for (int s = 0; s < ns; s++)
        M = fmaxf(M, pb[s * step + hd]);
    for (int s = threadIdx.x; s < ns; s += blockDim.x)
        s_w[s] = expf(pb[s * step + hd] - M);
    __syncthreads();
    for (int s = 0; s < ns; s++)
        L += s_w[s] * pb[s * step + hd + 1];
    uint16_t *o = a.out + (size_t)t * a.ldo + (size_t)hh * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float r = 0.0f;
        for (int s = 0; s < ns; s++)
            r += s_w[s] * pb[s * step + d];
        o[d] = f2bf(r / L);
    }
}

// After a kernel that wrote split partials (e, its launch's error): merges
// them for the n tokens of the decode list.
static cudaError_t combine_after(cudaError_t e, const cuda_attn_args *a, int n,
                                 cudaStream_t st)
{
    if (e != cudaSuccess)
        return e;
    dim3 grid((unsigned)n, (unsigned)(a->KVl * a->G));
    if (a->max_splits > CUDA_SPLIT_MAX)
        return cudaErrorInvalidValue;
    k_attn_combine<<<grid, 64, 0, st>>>(*a);
    return cudaGetLastError();
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
    return combine_after(cudaGetLastError(), a, n_dec, st);
}

// ---- batch-invariant attention on the tensor cores -----------------------------

// One warp: the query rows of tile blockIdx.x (row r = token t0 + r / G,
// query head g * G + r % G, at most 16 rows), KV head g = blockIdx.y, the
// positions of split blockIdx.z (the decode kernel's splits, fixed by
// max_context). Keys and values go through shared memory 16 positions at a
// time (two buffers, cp.async); S = Q K^T and O += P V run on mma.sync with Q
// and P carried as bf16 hi + lo pairs, so they keep about 16 bits where one
// bf16 would keep 8. Each row keeps its own online softmax; a 16-position
// block past a row's causal limit changes nothing of it (its scale is
// exp(0) = 1 and its weights are 0), so a row's partial is the same bits
// whatever other rows share its tile: a token computes alike alone,
// decoding, in a prompt chunk or as a verification row. Partials go to
// part[t] in the decode kernel's layout for k_attn_combine.
template <int HDP> static size_t mma_smem()
{
    return (size_t)6 * 16 * (HDP + 8) * sizeof(uint16_t); // Q hi, lo; K, V double-buffered
}

template <int HDP>
static __global__ void __launch_bounds__(32) k_attn_mma(cuda_attn_args a)
{
    constexpr int LD = HDP + 8, NT = HDP / 8, KS = HDP / 16, CPR = HDP / 8;
    extern __shared__ __align__(16) uint16_t mma_sm[];
    uint16_t *qh = mma_sm, *ql = qh + 16 * LD, *kb = ql + 16 * LD, *vb = kb + 2 * 16 * LD;
    int g = blockIdx.y, split = blockIdx.z, lane = threadIdx.x;
    const int32_t *tl = a.tiles + 3 * blockIdx.x;
    int seq = tl[0], t0 = tl[1], nt = tl[2], G = a.G, hd = a.hd, bs = a.block_size;
    int nrows = nt * G, pmax = 0;
    for (int i = 0; i < nt; i++)
        pmax = max(pmax, a.positions[t0 + i]);
    int p0 = split * a.chunk;
    if (p0 > pmax)
        return; // no row reaches this split: the merge never reads it
    int p1 = min(pmax + 1, p0 + a.chunk);
    const int32_t *table = a.table + (size_t)seq * a.MB;

    for (int e = lane; e < 16 * HDP; e += 32) {
        int r = e / HDP, d = e % HDP;
        float v = 0.0f;
        if (r < nrows && d < hd)
            v = a.q[(size_t)(t0 + r / G) * a.ldq + (size_t)(g * G + r % G) * hd + d] * a.scale;
        __nv_bfloat16 h = __float2bfloat16_rn(v);
        qh[r * LD + d] = __bfloat16_as_ushort(h);
        ql[r * LD + d] = f2bf(v - __bfloat162float(h));
    }
    // this lane's rows (lane / 4 and + 8): their causal limits, -1 for padding
    int r0 = lane >> 2, r1 = r0 + 8;
    int lim0 = r0 < nrows ? a.positions[t0 + r0 / G] : -1;
    int lim1 = r1 < nrows ? a.positions[t0 + r1 / G] : -1;
    // first visible position of each row (its window's start)
    int lo0 = a.window > 0 ? lim0 - a.window + 1 : 0, lo1 = a.window > 0 ? lim1 - a.window + 1 : 0;

    auto load = [&](int blk, int buf) {
        int pb = p0 + blk * 16;
        for (int c = lane; c < 2 * 16 * CPR; c += 32) {
            bool isv = c >= 16 * CPR;
            int cc = isv ? c - 16 * CPR : c, r = cc / CPR, ch = (cc % CPR) * 8, p = pb + r;
            const uint16_t *base = isv ? a.vc : a.kc, *src = base;
            bool in = p < p1 && ch < hd;
            if (in)
                src = base + (((size_t)table[p / bs] * a.KVl + g) * bs + p % bs) * hd + ch;
            cp16((isv ? vb : kb) + (buf * 16 + r) * LD + ch, src, in ? 16 : 0);
        }
    };

    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    int nblk = (p1 - p0 + 15) / 16;
    load(0, 0);
    cp_commit();
    for (int blk = 0; blk < nblk; blk++) {
        if (blk + 1 < nblk)
            load(blk + 1, (blk + 1) & 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads(); // block blk (and Q) are in shared memory
        const uint16_t *kt = kb + (blk & 1) * 16 * LD, *vt = vb + (blk & 1) * 16 * LD;
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int k = 0; k < KS; k++) {
            uint32_t ah[4], al[4], bk[4];
            ldsm_a(ah, qh + k * 16, LD);
            ldsm_a(al, ql + k * 16, LD);
            ldsm_b(bk, kt + k * 16, LD);
            mma16816(s[0], ah, bk[0], bk[1]);
            mma16816(s[0], al, bk[0], bk[1]);
            mma16816(s[1], ah, bk[2], bk[3]);
            mma16816(s[1], al, bk[2], bk[3]);
        }
        // s[j][e]: row (e < 2 ? r0 : r1), position pb + 8 j + 2 (lane % 4) + e % 2
        int pb = p0 + blk * 16;
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int p = pb + j * 8 + (lane & 3) * 2 + (e & 1);
                if (a.softcap > 0.0f)
                    s[j][e] = __fmul_rn(a.softcap, tanhf(s[j][e] / a.softcap));
                if (p >= p1 || p > (e < 2 ? lim0 : lim1) || p < (e < 2 ? lo0 : lo1))
                    s[j][e] = -INFINITY;
                if (e < 2)
                    mx0 = fmaxf(mx0, s[j][e]);
                else
                    mx1 = fmaxf(mx1, s[j][e]);
            }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        float c0 = n0 == -INFINITY ? 1.0f : expf(m0 - n0);
        float c1 = n1 == -INFINITY ? 1.0f : expf(m1 - n1);
        float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float nn = e < 2 ? n0 : n1;
                float w = s[j][e] == -INFINITY ? 0.0f : expf(s[j][e] - nn);
                s[j][e] = w;
                if (e < 2)
                    sum0 += w;
                else
                    sum1 += w;
            }
        sum0 += __shfl_xor_sync(0xffffffffu, sum0, 1);
        sum0 += __shfl_xor_sync(0xffffffffu, sum0, 2);
        sum1 += __shfl_xor_sync(0xffffffffu, sum1, 1);
        sum1 += __shfl_xor_sync(0xffffffffu, sum1, 2);
        l0 = l0 * c0 + sum0;
        l1 = l1 * c1 + sum1;
        m0 = n0;
        m1 = n1;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            o[n][0] *= c0;
            o[n][1] *= c0;
            o[n][2] *= c1;
            o[n][3] *= c1;
        }
        // P as the A operand: the S accumulators' layout is the A fragment's
        uint32_t ph[4], pl[4];
        bf16_split2(s[0][0], s[0][1], ph[0], pl[0]);
        bf16_split2(s[0][2], s[0][3], ph[1], pl[1]);
        bf16_split2(s[1][0], s[1][1], ph[2], pl[2]);
        bf16_split2(s[1][2], s[1][3], ph[3], pl[3]);
#pragma unroll
        for (int j = 0; j < HDP / 16; j++) {
            uint32_t bv[4];
            ldsm_bt(bv, vt + j * 16, LD);
            mma16816(o[2 * j], ph, bv[0], bv[1]);
            mma16816(o[2 * j], pl, bv[0], bv[1]);
            mma16816(o[2 * j + 1], ph, bv[2], bv[3]);
            mma16816(o[2 * j + 1], pl, bv[2], bv[3]);
        }
        __syncthreads(); // every lane is done with this buffer before it is refilled
    }
    cp_wait<0>();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int r = h ? r1 : r0, lim = h ? lim1 : lim0;
        if (r >= nrows || lim < p0)
            continue; // padding, or a token whose context ends before this split
        int t = t0 + r / G, j = r % G;
        float *out = a.part + ((((size_t)t * a.KVl + g) * a.max_splits + split) * a.G + j) *
                                  (size_t)(hd + 2);
#pragma unroll
        for (int n = 0; n < NT; n++) {
            int d = n * 8 + (lane & 3) * 2;
            if (d < hd) {
                out[d] = o[n][2 * h];
                out[d + 1] = o[n][2 * h + 1];
            }
        }
        if ((lane & 3) == 0) {
            out[hd] = h ? m1 : m0;
            out[hd + 1] = h ? l1 : l0;
        }
    }
}

extern "C" cudaError_t cuda_k_attn_tiles(const cuda_attn_args *a, int n_tiles, int n_tokens,
                                         cudaStream_t st)
{
    if (n_tiles <= 0)
        return cudaGetLastError();
    if (!cuda_attn_mma_fits(a->hd, a->G))
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)n_tiles, (unsigned)a->KVl, (unsigned)a->max_splits);
    int hd = a->hd;
    if (hd <= 16)
        k_attn_mma<16><<<grid, 32, mma_smem<16>(), st>>>(*a);
    else if (hd <= 32)
        k_attn_mma<32><<<grid, 32, mma_smem<32>(), st>>>(*a);
    else if (hd <= 64)
        k_attn_mma<64><<<grid, 32, mma_smem<64>(), st>>>(*a);
    else if (hd <= 128)
        k_attn_mma<128><<<grid, 32, mma_smem<128>(), st>>>(*a);
    else
        k_attn_mma<256><<<grid, 32, mma_smem<256>(), st>>>(*a);
    return combine_after(cudaGetLastError(), a, n_tokens, st);
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
            bool vis = r < R && p0 + c <= rpos[r] && (a.window <= 0 || p0 + c > rpos[r] - a.window);
            float v = a.softcap > 0.0f ? __fmul_rn(a.softcap, tanhf(sc[k] / a.softcap)) : sc[k];
            Ss[r * (PF_KT + 1) + c] = vis ? v : -INFINITY;
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
    cudaError_t e = cudaFuncSetAttribute((const void *)prefill_kernel(hd),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)prefill_smem(hd));
    if (e == cudaSuccess) /* the tensor-core kernel's widest tile is over 48 KB */
        e = cudaFuncSetAttribute(k_attn_mma<256>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)mma_smem<256>());
    return e;
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
