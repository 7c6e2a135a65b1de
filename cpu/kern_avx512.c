/* AVX-512 kernels. The canonical reduction of kern.h with one zmm register
 * per 16-lane accumulator.
 *
 * matmul has three paths, chosen by M (rows of activations); all do the
 * same arithmetic so the choice never changes a result:
 *  - direct (M <= DIRECT_MAX_M, decode): weights are read straight from the
 *    mapped checkpoint and widened to f32 in registers; 8 weight rows at a
 *    time keep 8 independent FMA chains per activation row in flight. From
 *    4 rows on, compute is long enough to hide memory only if each tile
 *    prefetches the weight rows four tiles ahead.
 *  - blocked (M <= BLOCKED_MAX_M): the direct tiles over L2-sized weight
 *    blocks, 8 activation rows at a time (see mm_direct).
 *  - packed (larger M, prefill and big batches): a block of CPU_NC weight rows
 *    x CPU_KB columns is widened once into per-thread scratch (rows
 *    CPU_PACK_LD apart); for every 4 activation rows (kept in L1) a 4x4
 *    register tile (16 accumulators: one transposed tree reduces them all)
 *    sweeps the block four weight rows at a time. The first row tile widens
 *    the weights itself as it goes, so the block is never a separate pass
 *    over memory, and every tile fetches a slice of the next row tile a line
 *    at a time. (8x2, 6x4, 5x3 and K blocks of 512 and 2048 measured slower on
 *    Ice Lake; so did prefetching the next weight block: it slows the sweep
 *    about as much as it saves.) Activations and scratch should be 64-byte
 *    aligned: a zmm load that straddles two cache lines costs two. */
#include "cpu/kern.h"
#include "cpu/kern_512.h"
#include "cpu/kern_q512.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

enum { DIRECT_MAX_M = 8, BLOCKED_MAX_M = 16, BLOCK_N = 64, PACK_MR = 4, PACK_NR = 4 };

/* 16 weights of dtype wt at w[off..off+16) widened to f32. */
ALWAYS __m512 load_w(const void *w, int wt, size_t off)
{
    if (wt == INF_F32)
        return _mm512_loadu_ps((const float *)w + off);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + off));
    if (wt == INF_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The same for the lanes in mask m; other lanes are +0. */
ALWAYS __m512 load_w_mask(const void *w, int wt, size_t off, __mmask16 m)
{
    if (wt == INF_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)w + off);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + off);
    if (wt == INF_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One K block for an MR x NR tile: y[i][j] (=|+=) dot(x_i, w_j) over klen.
 * x and w point at the block's first column; ldw counts elements. */
ALWAYS void tile(const int MR, const int NR, const int WT, const int PF, const float *x,
                 size_t ldx, const void *w, size_t ldw, int klen, float *y,
                 size_t ldy, int first)
{
    /* fixed sizes (not VLAs) so that after unrolling every element is a
     * register */
    __m512 acc[24];
#pragma GCC unroll 32
    for (int a = 0; a < MR * NR; a++)
        acc[a] = _mm512_setzero_ps();
    int k = 0;
    const size_t es = WT == INF_F32 ? 4 : 2;
    for (; k + 16 <= klen; k += 16) {
        __m512 wv[8];
        /* a line of each row: 4 tiles on for 4-8 rows; the next tile for
         * 1-3 (measured best there, two ahead no better; docs/engine.md) */
        if (PF && (k * es) % 64 == 0)
#pragma GCC unroll 8
            for (int j = 0; j < NR; j++)
                _mm_prefetch((const char *)w +
                                 ((size_t)((MR > 3 ? 4 : 1) * NR + j) * ldw + (size_t)k) * es,
                             _MM_HINT_T0);
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++)
            wv[j] = load_w(w, WT, (size_t)j * ldw + (size_t)k);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)i * ldx + k);
            /* keep one load per row: GCC would otherwise fold it into
             * every FMA that uses it, loading the row NR times */
            __asm__("" : "+v"(xv));
#pragma GCC unroll 8
            for (int j = 0; j < NR; j++)
                acc[i * NR + j] = _mm512_fmadd_ps(xv, wv[j], acc[i * NR + j]);
        }
    }
    if (k < klen) {
        __mmask16 m = (__mmask16)((1u << (klen - k)) - 1u);
        __m512 wv[8];
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++)
            wv[j] = load_w_mask(w, WT, (size_t)j * ldw + (size_t)k, m);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)i * ldx + k);
#pragma GCC unroll 8
            for (int j = 0; j < NR; j++)
                acc[i * NR + j] = _mm512_fmadd_ps(xv, wv[j], acc[i * NR + j]);
        }
    }
    flush(MR, NR, acc, y, ldy, first);
}

typedef void (*tile_fn)(const float *x, size_t ldx, const void *w, size_t ldw,
                        int klen, float *y, size_t ldy, int first);

#define TILE(MR, NR, WT, NAME)                                              \
    static void NAME(const float *x, size_t ldx, const void *w, size_t ldw, \
                     int klen, float *y, size_t ldy, int first)             \
    {                                                                       \
        tile(MR, NR, WT, (NR) > 1, x, ldx, w, ldw, klen, y, ldy, first);            \
    }

/* direct path: [dtype][MR-1][wide NR or 1]; the wide tile is 8 columns for
 * MR <= 3 (decode: eight independent weight streams in flight) and 2 for
 * larger MR (16 accumulators either way). */
#define DIRECT_SET(WT, T)                                                   \
    TILE(1, 8, WT, d_##T##_1w) TILE(1, 1, WT, d_##T##_1x1)                  \
    TILE(2, 8, WT, d_##T##_2w) TILE(2, 1, WT, d_##T##_2x1)                  \
    TILE(3, 8, WT, d_##T##_3w) TILE(3, 1, WT, d_##T##_3x1)                  \
    TILE(4, 2, WT, d_##T##_4w) TILE(4, 1, WT, d_##T##_4x1)                  \
    TILE(5, 2, WT, d_##T##_5w) TILE(5, 1, WT, d_##T##_5x1)                  \
    TILE(6, 2, WT, d_##T##_6w) TILE(6, 1, WT, d_##T##_6x1)                  \
    TILE(7, 2, WT, d_##T##_7w) TILE(7, 1, WT, d_##T##_7x1)                  \
    TILE(8, 2, WT, d_##T##_8w) TILE(8, 1, WT, d_##T##_8x1)
DIRECT_SET(INF_F32, f32)
DIRECT_SET(INF_F16, f16)
DIRECT_SET(INF_BF16, bf16)

#define DIRECT_ROW(T)                                                       \
    {{d_##T##_1w, d_##T##_1x1}, {d_##T##_2w, d_##T##_2x1},                  \
     {d_##T##_3w, d_##T##_3x1}, {d_##T##_4w, d_##T##_4x1},                  \
     {d_##T##_5w, d_##T##_5x1}, {d_##T##_6w, d_##T##_6x1},                  \
     {d_##T##_7w, d_##T##_7x1}, {d_##T##_8w, d_##T##_8x1}}
static const tile_fn direct_tiles[3][8][2] = {
    [INF_F32] = DIRECT_ROW(f32),
    [INF_F16] = DIRECT_ROW(f16),
    [INF_BF16] = DIRECT_ROW(bf16),
};

/* Columns of a direct path's wide tile for mr activation rows. */
static int direct_wide(int mr) { return mr <= 3 ? 8 : 2; }

/* packed path, tiles narrower than 4x4 (row and column tails):
 * [MR-1][NR 4 or 1], weights already f32 at stride CPU_PACK_LD */
TILE(1, 4, INF_F32, p_1x4) TILE(1, 1, INF_F32, p_1x1)
TILE(2, 4, INF_F32, p_2x4) TILE(2, 1, INF_F32, p_2x1)
TILE(3, 4, INF_F32, p_3x4) TILE(3, 1, INF_F32, p_3x1)
TILE(4, 1, INF_F32, p_4x1)
static const tile_fn packed_tiles[PACK_MR][2] = {
    {p_1x4, p_1x1}, {p_2x4, p_2x1}, {p_3x4, p_3x1}, {NULL, p_4x1},
};

/* One 16-k step of ptile, lanes in mask m (the rest count as 0). */
ALWAYS void pstep(const int WT, const float *x, size_t ldx, const void *w, size_t ldw,
                  const float *pw, float *pk, int kk, __mmask16 m, __m512 acc[16])
{
    __m512 wv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        if (WT < 0) {
            wv[j] = m == 0xffff ? _mm512_loadu_ps(pw + (size_t)j * CPU_PACK_LD + kk)
                                : _mm512_maskz_loadu_ps(m, pw + (size_t)j * CPU_PACK_LD + kk);
        } else {
            wv[j] = m == 0xffff ? load_w(w, WT, (size_t)j * ldw + (size_t)kk)
                                : load_w_mask(w, WT, (size_t)j * ldw + (size_t)kk, m);
            _mm512_storeu_ps(pk + (size_t)j * CPU_PACK_LD + kk, wv[j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m512 xv = m == 0xffff ? _mm512_loadu_ps(x + (size_t)i * ldx + kk)
                                : _mm512_maskz_loadu_ps(m, x + (size_t)i * ldx + kk);
        __asm__("" : "+v"(xv)); /* one load per row (see tile()) */
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            acc[i * 4 + j] = _mm512_fmadd_ps(xv, wv[j], acc[i * 4 + j]);
    }
}

/* The packed path's 4x4 tile over one K block: x rows at ldx; weights
 * either from the packed block (WT < 0), or, for the first row tile of a
 * block (WT = dtype), from the checkpoint, widened in registers and also
 * stored into the packed block for the row tiles after it. Once per 64 k it
 * prefetches one of the npf lines at pf (a slice of the next row tile): so
 * spread out, the fetches from L3 never stall the FMAs waiting for fill
 * buffers, as a burst of them would. */
ALWAYS void ptile(const int WT, const float *x, size_t ldx, const void *w, size_t ldw,
                  float *pk, int klen, float *y, size_t ldy, int first, const char *pf,
                  int npf)
{
    const float *pw = WT < 0 ? (const float *)w : pk;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int a = 0; a < 16; a++)
        acc[a] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= klen; k += 16) {
        if (k % 64 == 0 && npf-- > 0)
            _mm_prefetch(pf + (size_t)(k / 64) * 64, _MM_HINT_T0);
        pstep(WT, x, ldx, w, ldw, pw, pk, k, 0xffff, acc);
    }
    if (k < klen) {
        if (k % 64 == 0 && npf-- > 0)
            _mm_prefetch(pf + (size_t)(k / 64) * 64, _MM_HINT_T0);
        pstep(WT, x, ldx, w, ldw, pw, pk, k, (__mmask16)((1u << (klen - k)) - 1u), acc);
    }
    flush(4, 4, acc, y, ldy, first);
}

typedef void (*ptile_fn)(const float *x, size_t ldx, const void *w, size_t ldw, float *pk,
                         int klen, float *y, size_t ldy, int first, const char *pf, int npf);
#define PTILE(WT, NAME)                                                          \
    static void NAME(const float *x, size_t ldx, const void *w, size_t ldw, float *pk, \
                     int klen, float *y, size_t ldy, int first, const char *pf, int npf) \
    {                                                                            \
        ptile(WT, x, ldx, w, ldw, pk, klen, y, ldy, first, pf, npf);             \
    }
PTILE(-1, pt_packed)
PTILE(INF_F32, pt_f32)
PTILE(INF_F16, pt_f16)
PTILE(INF_BF16, pt_bf16)
static const ptile_fn packing_tiles[3] = {
    [INF_F32] = pt_f32, [INF_F16] = pt_f16, [INF_BF16] = pt_bf16,
};

static void to_f32(const void *w, inf_dtype wt, float *out, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, load_w(w, wt, (size_t)i));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(out + i, m, load_w_mask(w, wt, (size_t)i, m));
    }
}

static void mm_packed(const cpu_mm *a, int n0, int n1, float *pack)
{
    size_t es = inf_dtype_size(a->wt);
    for (int jc = n0; jc < n1; jc += CPU_NC) {
        int nc = n1 - jc < CPU_NC ? n1 - jc : CPU_NC, nc4 = nc / PACK_NR * PACK_NR;
        const char *wblk = (const char *)a->w + (size_t)jc * a->ldw * es;
        for (int kb = 0; kb < a->K; kb += CPU_KB) {
            int klen = a->K - kb < CPU_KB ? a->K - kb : CPU_KB;
            /* columns past the last full sliver are packed up front; the
             * full slivers by the first row tile as it goes */
            for (int r = nc4; r < nc; r++)
                to_f32(wblk + ((size_t)r * a->ldw + kb) * es, a->wt,
                       pack + (size_t)r * CPU_PACK_LD, klen);
            int slivers = nc4 / PACK_NR;
            for (int i = 0; i < a->M; i += PACK_MR) {
                int mr = a->M - i < PACK_MR ? a->M - i : PACK_MR;
                const float *x = a->x + (size_t)i * a->ldx + kb;
                float *y = a->y + (size_t)i * a->ldy + jc;
                if (mr < PACK_MR) { /* row tail: the block is packed by now */
                    for (int j = 0; j < nc4; j += PACK_NR)
                        packed_tiles[mr - 1][0](x, a->ldx, pack + (size_t)j * CPU_PACK_LD,
                                                CPU_PACK_LD, klen, y + j, a->ldy, kb == 0);
                } else {
                    /* each sliver fetches a slice of one row of the next row
                     * tile, a line per 64 k */
                    int nxt = a->M - i - mr < PACK_MR ? a->M - i - mr : PACK_MR;
                    int lines = (klen + 15) / 16;
                    int per_row = nxt && slivers > nxt ? (slivers + nxt - 1) / nxt : 1;
                    int run = (lines + per_row - 1) / per_row;
                    for (int s = 0; s < slivers; s++) {
                        int r = s / per_row, l0 = s % per_row * run;
                        int npf = r < nxt ? (lines - l0 < run ? lines - l0 : run) : 0;
                        const char *pf = (const char *)(x + (size_t)(mr + r) * a->ldx + (size_t)l0 * 16);
                        int j = s * PACK_NR;
                        float *pk = pack + (size_t)j * CPU_PACK_LD;
                        if (i == 0)
                            packing_tiles[a->wt](x, a->ldx, wblk + ((size_t)j * a->ldw + kb) * es,
                                                 a->ldw, pk, klen, y + j, a->ldy, kb == 0, pf, npf);
                        else
                            pt_packed(x, a->ldx, pk, CPU_PACK_LD, NULL, klen, y + j, a->ldy,
                                      kb == 0, pf, npf);
                    }
                }
                for (int j = nc4; j < nc; j++)
                    packed_tiles[mr - 1][1](x, a->ldx, pack + (size_t)j * CPU_PACK_LD,
                                            CPU_PACK_LD, klen, y + j, a->ldy, kb == 0);
            }
        }
    }
}

/* The direct tiles over one block: weight rows [jc, je) x one K block, for
 * every group of up to DIRECT_MAX_M activation rows. */
static void direct_block(const cpu_mm *a, int jc, int je, int kb)
{
    size_t es = inf_dtype_size(a->wt);
    int klen = a->K - kb < CPU_KB ? a->K - kb : CPU_KB;
    for (int i = 0; i < a->M; i += DIRECT_MAX_M) {
        int mr = a->M - i < DIRECT_MAX_M ? a->M - i : DIRECT_MAX_M;
        const tile_fn *t = direct_tiles[a->wt][mr - 1];
        int wide = direct_wide(mr);
        const float *x = a->x + (size_t)i * a->ldx + kb;
        float *y = a->y + (size_t)i * a->ldy;
        for (int j = jc; j < je;) {
            int nr = je - j >= wide ? wide : 1;
            const char *w = (const char *)a->w + ((size_t)j * a->ldw + kb) * es;
            t[nr == wide ? 0 : 1](x, a->ldx, w, a->ldw, klen, y + j, a->ldy, kb == 0);
            j += nr;
        }
    }
}

/* The direct tiles: with up to DIRECT_MAX_M activation rows, the block is
 * one weight tile. With more (up to BLOCKED_MAX_M) the rows go in groups of
 * DIRECT_MAX_M over blocks of BLOCK_N weight rows (128 KiB of bf16 per K
 * block): the first group pulls a block from memory, the others find it in
 * L2, still narrow. Cheaper there than the packed path, whose f32 copy of
 * the block is twice the L2 traffic and whose first row tile alone cannot
 * hide the memory.
 * From 4 rows on, the K blocks go outermost: the activations' block (up to
 * 8 x 1024 floats) then stays in L1 across every weight tile of the range,
 * where alternating K blocks would refetch it from L2 for each tile. With
 * fewer rows it is small anyway, and whole weight rows keep the memory
 * streams long. Either order adds each output's K blocks in turn. */
static void mm_direct(const cpu_mm *a, int n0, int n1)
{
    int block = a->M > DIRECT_MAX_M ? BLOCK_N : direct_wide(a->M);
    if (a->M >= 4) {
        for (int kb = 0; kb < a->K; kb += CPU_KB)
            for (int jc = n0; jc < n1; jc += block)
                direct_block(a, jc, n1 - jc < block ? n1 : jc + block, kb);
    } else {
        for (int jc = n0; jc < n1; jc += block)
            for (int kb = 0; kb < a->K; kb += CPU_KB)
                direct_block(a, jc, n1 - jc < block ? n1 : jc + block, kb);
    }
}

static void mm(const cpu_mm *a, int n0, int n1, float *pack)
{
    if (a->M <= BLOCKED_MAX_M)
        mm_direct(a, n0, n1);
    else
        mm_packed(a, n0, n1, pack);
}

static float dot(const float *a, const float *b, int n)
{
    float y = 0.0f;
    for (int kb = 0; kb < n; kb += CPU_KB) {
        int klen = n - kb < CPU_KB ? n - kb : CPU_KB;
        d_f32_1x1(a + kb, 0, b + kb, 0, klen, &y, 0, kb == 0);
    }
    return y;
}

/* Up to 4 rows x 64 columns of wsum: the rows' outputs stay in registers
 * while the value rows stream past; lanes outside mask m[c] are not stored. */
ALWAYS void wsum_tile(const int RR, const float *w, size_t ldw, const float *v, size_t ldv,
                      int n, float *o, size_t ldo, const __mmask16 m[4])
{
    __m512 acc[16];
#pragma GCC unroll 4
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            acc[r * 4 + c] = _mm512_maskz_loadu_ps(m[c], o + (size_t)r * ldo + 16 * c);
    for (int p = 0; p < n; p++) {
        __m512 vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            vv[c] = _mm512_maskz_loadu_ps(m[c], v + (size_t)p * ldv + 16 * c);
#pragma GCC unroll 4
        for (int r = 0; r < RR; r++) {
            __m512 b = _mm512_set1_ps(w[(size_t)r * ldw + p]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                acc[r * 4 + c] = _mm512_fmadd_ps(b, vv[c], acc[r * 4 + c]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            _mm512_mask_storeu_ps(o + (size_t)r * ldo + 16 * c, m[c], acc[r * 4 + c]);
}

static void wsum(const float *w, size_t ldw, int R, const float *v, size_t ldv, int n,
                 float *o, size_t ldo, int D)
{
    for (int d0 = 0; d0 < D; d0 += 64) {
        __mmask16 m[4];
        for (int c = 0; c < 4; c++) {
            int left = D - d0 - 16 * c;
            m[c] = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1u) : 0;
        }
        int r = 0;
        for (; r + 4 <= R; r += 4)
            wsum_tile(4, w + (size_t)r * ldw, ldw, v + d0, ldv, n, o + (size_t)r * ldo + d0, ldo, m);
        const float *wr = w + (size_t)r * ldw;
        float *orow = o + (size_t)r * ldo + d0;
        switch (R - r) {
        case 3: wsum_tile(3, wr, ldw, v + d0, ldv, n, orow, ldo, m); break;
        case 2: wsum_tile(2, wr, ldw, v + d0, ldv, n, orow, ldo, m); break;
        case 1: wsum_tile(1, wr, ldw, v + d0, ldv, n, orow, ldo, m); break;
        }
    }
}

/* kern.h's exp on 16 lanes, operation for operation. */
ALWAYS __m512 exp16(__m512 x)
{
    __m512 xc = _mm512_max_ps(_mm512_set1_ps(CPU_EXP_LO), x); /* NaN stays */
    xc = _mm512_min_ps(_mm512_set1_ps(CPU_EXP_HI), xc);
    __m512 t = _mm512_mul_ps(xc, _mm512_set1_ps(CPU_EXP_LOG2E));
    t = _mm512_add_ps(t, _mm512_set1_ps(CPU_EXP_MAGIC));
    __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(CPU_EXP_MAGIC));
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-CPU_EXP_C1), xc);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-CPU_EXP_C2), r);
    __m512 p = _mm512_set1_ps(CPU_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CPU_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CPU_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CPU_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CPU_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CPU_EXP_P5));
    __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    __m512i sb = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(127 - 0x4b400000)), 23);
    __m512 e = _mm512_mul_ps(y, _mm512_castsi512_ps(sb));
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(CPU_EXP_LO), _CMP_LT_OQ);
    return _mm512_mask_mov_ps(e, under, _mm512_setzero_ps());
}

static float softmax_exp(float *x, int n, float scale)
{
    __m512 sv = _mm512_set1_ps(scale), mv = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), sv);
        _mm512_storeu_ps(x + i, v);
        mv = _mm512_max_ps(v, mv); /* a NaN in v keeps mv */
    }
    __mmask16 tail = (__mmask16)((1u << (n - i)) - 1u);
    if (i < n) {
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + i), sv);
        _mm512_mask_storeu_ps(x + i, tail, v);
        mv = _mm512_mask_max_ps(mv, tail, v, mv);
    }
    float m = _mm512_reduce_max_ps(mv);
    __m512 mb = _mm512_set1_ps(m);
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mb)));
    if (i < n)
        _mm512_mask_storeu_ps(x + i, tail,
                              exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + i), mb)));
    return m;
}

ALWAYS __m512 swiglu16(__m512 g, __m512 u)
{
    __m512 e = exp16(_mm512_xor_ps(g, _mm512_set1_ps(-0.0f)));
    __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), e);
    return _mm512_mul_ps(_mm512_div_ps(g, d), u);
}

/* g[i] = f(g[i], u[i]) over n elements, 16 at a time (the GLUs). */
ALWAYS void glu_loop(float *g, const float *u, int n, __m512 (*f)(__m512, __m512))
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(g + i, f(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(g + i, m, f(_mm512_maskz_loadu_ps(m, g + i),
                                          _mm512_maskz_loadu_ps(m, u + i)));
    }
}

static void swiglu(float *g, const float *u, int n) { glu_loop(g, u, n, swiglu16); }

ALWAYS __m512 geglu16(__m512 x, __m512 u)
{
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    __m512 a = _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps(0.044715f), x3));
    __m512 e = exp16(_mm512_mul_ps(_mm512_set1_ps(CPU_GELU_M2C), a));
    __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), e);
    return _mm512_mul_ps(_mm512_div_ps(x, d), u);
}

static void geglu(float *g, const float *u, int n) { glu_loop(g, u, n, geglu16); }

/* kern.h's int8 quantization, 16 lanes at a time. */
static float quant(const float *v, int n, int8_t *q, int offset)
{
    __m512 mv = _mm512_setzero_ps();
    int i = 0;
    for (; i < n; i += 16) { /* max_ps returns its second operand for NaN */
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1u);
        mv = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(m, v + i)), mv);
    }
    float amax = _mm512_reduce_max_ps(mv);
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    __m512 iv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    __m512i add = _mm512_set1_epi32(offset ? 128 : 0);
    for (i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512 t = _mm512_max_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, v + i), iv), lo);
        __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_min_ps(t, hi)), add);
        _mm_mask_storeu_epi8(q + i, m, _mm512_cvtepi32_epi8(r));
    }
    return amax / 127.0f;
}

/* int8 matmul without VNNI (kern_q512.h). */
QCHUNK(0, 1, qm1) QCHUNK(0, 2, qm2) QCHUNK(0, 3, qm3)
QCHUNK(0, 4, qm4) QCHUNK(0, 5, qm5) QCHUNK(0, 6, qm6)
static const qchunk_fn qchunks_madd[QMR] = {qm1, qm2, qm3, qm4, qm5, qm6};

static void mmq_madd(const cpu_mmq *a, int n0, int n1, int32_t *scratch)
{
    mmq_run(0, qchunks_madd, a, n0, n1, scratch);
}

const cpu_kern cpu_kern_avx512 = {
    .name = "avx512", .mm = mm, .dot = dot, .to_f32 = to_f32,
    .wsum = wsum, .softmax_exp = softmax_exp, .swiglu = swiglu, .geglu = geglu,
    .quant = quant, .mmq = cpu_avx512_mmq_vnni,
};

const cpu_kern cpu_kern_avx512_novnni = {
    .name = "avx512", .mm = mm, .dot = dot, .to_f32 = to_f32,
    .wsum = wsum, .softmax_exp = softmax_exp, .swiglu = swiglu, .geglu = geglu,
    .quant = quant, .mmq = mmq_madd,
};

static void mm_bf16dp(const cpu_mm *a, int n0, int n1, float *pack)
{
    if (a->wt == INF_BF16)
        cpu_avx512_mm_bf16dp(a, n0, n1, pack);
    else
        mm(a, n0, n1, pack);
}

/* Only picked where the CPU has AVX512_BF16, which implies VNNI. */
const cpu_kern cpu_kern_avx512_bf16 = {
    .name = "avx512bf16", .bf16dp = 1, .mm = mm_bf16dp, .dot = dot, .to_f32 = to_f32,
    .wsum = wsum, .softmax_exp = softmax_exp, .swiglu = swiglu, .geglu = geglu,
    .quant = quant, .mmq = cpu_avx512_mmq_vnni,
};
