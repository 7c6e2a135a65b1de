/* AVX-512 kernels. The canonical reduction of kern.h with one zmm register
 * per 16-lane accumulator.
 *
 * matmul has two paths, chosen by M (rows of activations); both do the same
 * arithmetic so the choice never changes a result:
 *  - direct (M <= DIRECT_MAX_M, decode): weights are read straight from the
 *    mapped checkpoint and widened to f32 in registers; 8 weight rows at a
 *    time keep 8 independent FMA chains per activation row in flight.
 *  - packed (larger M, prefill and big batches): a block of CPU_NC weight rows
 *    x CPU_KB columns is widened once into per-thread scratch; then for
 *    every 4 activation rows (kept in L1) a 4x4 register tile (16
 *    accumulators: one transposed tree reduces them all) sweeps the block
 *    four weight rows at a time. (8x2, 6x4, 5x3 and K blocks of 512 and 2048
 *    measured slower on Ice Lake.) Activations and scratch should be 64-byte aligned: a zmm load that
 *    straddles two cache lines costs two. */
#include "cpu/kern.h"

#include <immintrin.h>
#include <string.h>

#define ALWAYS static inline __attribute__((always_inline))

enum { DIRECT_MAX_M = 8, PACK_MR = 4, PACK_NR = 4 };

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

/* kern.h's tree on 16 vectors at once, transposed so the 16 trees share
 * shuffles: lane 4q+r of the result is tree(v[q + 4r]). */
ALWAYS __m512 tree16(const __m512 v[16])
{
    __m512 w[8], x[4], y[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) /* lane l + lane l+8 */
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) /* s8[l] + s8[l+4] */
        x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xdd));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) /* s4[l] + s4[l+2] */
        y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0xee));
    /* s2[0] + s2[1] */
    return _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88),
                         _mm512_shuffle_ps(y[0], y[1], 0xdd));
}

/* Reduces an MR x NR accumulator tile (acc[i*NR + j], NR divides 16) and
 * stores (first K block) or adds the sums into y. Accumulator a goes to tree
 * input a/4 + 4*(a%4) so that its sum lands in lane a: row i's NR sums are
 * side by side, and one masked load/add/store updates its slice of y. */
ALWAYS void flush(const int MR, const int NR, const __m512 *acc, float *y,
                  size_t ldy, int first)
{
    const int rows_per = 16 / NR;
#pragma GCC unroll 4
    for (int g = 0; g * rows_per < MR; g++) {
        __m512 v[16];
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) {
            int a = g * 16 + l;
            v[l / 4 + 4 * (l % 4)] = a < MR * NR ? acc[a] : _mm512_setzero_ps();
        }
        __m512 z = tree16(v);
#pragma GCC unroll 16
        for (int r = 0; r < rows_per; r++) {
            if (g * rows_per + r >= MR)
                break;
            /* lanes r*NR.. of z line up with the row when addressed from
             * -r*NR; masked-off lanes are never touched */
            __mmask16 m = (__mmask16)(((1u << NR) - 1u) << (r * NR));
            float *p = y + (size_t)(g * rows_per + r) * ldy - r * NR;
            if (!first)
                z = _mm512_mask_add_ps(z, m, z, _mm512_maskz_loadu_ps(m, p));
            _mm512_mask_storeu_ps(p, m, z);
        }
    }
}

/* One K block for an MR x NR tile: y[i][j] (=|+=) dot(x_i, w_j) over klen.
 * x and w point at the block's first column; ldw counts elements. */
ALWAYS void tile(const int MR, const int NR, const int WT, const float *x,
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
    for (; k + 16 <= klen; k += 16) {
        __m512 wv[8];
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
        tile(MR, NR, WT, x, ldx, w, ldw, klen, y, ldy, first);              \
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

/* packed path (weights already f32): [MR-1][NR 4 or 1] */
TILE(1, 4, INF_F32, p_1x4) TILE(1, 1, INF_F32, p_1x1)
TILE(2, 4, INF_F32, p_2x4) TILE(2, 1, INF_F32, p_2x1)
TILE(3, 4, INF_F32, p_3x4) TILE(3, 1, INF_F32, p_3x1)
TILE(4, 4, INF_F32, p_4x4) TILE(4, 1, INF_F32, p_4x1)
static const tile_fn packed_tiles[PACK_MR][2] = {
    {p_1x4, p_1x1}, {p_2x4, p_2x1}, {p_3x4, p_3x1}, {p_4x4, p_4x1},
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

static void mm_direct(const cpu_mm *a, int n0, int n1)
{
    size_t es = inf_dtype_size(a->wt);
    const tile_fn *t = direct_tiles[a->wt][a->M - 1];
    int wide = a->M <= 3 ? 8 : 2;
    for (int j = n0; j < n1;) {
        int nr = n1 - j >= wide ? wide : 1;
        tile_fn f = t[nr == wide ? 0 : 1];
        for (int kb = 0; kb < a->K; kb += CPU_KB) {
            int klen = a->K - kb < CPU_KB ? a->K - kb : CPU_KB;
            const char *w = (const char *)a->w + ((size_t)j * a->ldw + kb) * es;
            f(a->x + kb, a->ldx, w, a->ldw, klen, a->y + j, a->ldy, kb == 0);
        }
        j += nr;
    }
}

static void mm_packed(const cpu_mm *a, int n0, int n1, float *pack)
{
    size_t es = inf_dtype_size(a->wt);
    for (int jc = n0; jc < n1; jc += CPU_NC) {
        int nc = n1 - jc < CPU_NC ? n1 - jc : CPU_NC;
        for (int kb = 0; kb < a->K; kb += CPU_KB) {
            int klen = a->K - kb < CPU_KB ? a->K - kb : CPU_KB;
            for (int r = 0; r < nc; r++)
                to_f32((const char *)a->w + ((size_t)(jc + r) * a->ldw + kb) * es,
                       a->wt, pack + (size_t)r * CPU_KB, klen);
            for (int i = 0; i < a->M; i += PACK_MR) {
                int mr = a->M - i < PACK_MR ? a->M - i : PACK_MR;
                const float *x = a->x + (size_t)i * a->ldx + kb;
                float *y = a->y + (size_t)i * a->ldy + jc;
                /* the next row tile comes from L3: fetch it a slice per
                 * panel while this tile sweeps the block */
                int nxt = a->M - i - mr < PACK_MR ? a->M - i - mr : PACK_MR;
                int lines = (klen + 15) / 16, per = (lines + nc / PACK_NR) / (nc / PACK_NR + 1);
                int j = 0;
                for (; j + PACK_NR <= nc; j += PACK_NR) {
                    int l0 = j / PACK_NR * per, l1 = l0 + per < lines ? l0 + per : lines;
                    for (int r = 0; r < nxt; r++)
                        for (int l = l0; l < l1; l++)
                            _mm_prefetch((const char *)(x + (size_t)(mr + r) * a->ldx + l * 16),
                                         _MM_HINT_T0);
                    packed_tiles[mr - 1][0](x, a->ldx, pack + (size_t)j * CPU_KB,
                                            CPU_KB, klen, y + j, a->ldy, kb == 0);
                }
                for (; j < nc; j++)
                    packed_tiles[mr - 1][1](x, a->ldx, pack + (size_t)j * CPU_KB,
                                            CPU_KB, klen, y + j, a->ldy, kb == 0);
            }
        }
    }
}

static void mm(const cpu_mm *a, int n0, int n1, float *pack)
{
    if (a->M <= DIRECT_MAX_M)
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

static void axpy(float a, const float *x, float *y, int n)
{
    __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i),
                                                _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i),
                                              _mm512_maskz_loadu_ps(m, y + i)));
    }
}

const cpu_kern cpu_kern_avx512 = {
    .name = "avx512", .mm = mm, .dot = dot, .axpy = axpy, .to_f32 = to_f32,
};
