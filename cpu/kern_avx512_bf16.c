/* The AVX512_BF16 matmul for bf16 weights: kern.h's vdpbf16ps order. The
 * only file built with -mavx512bf16, so nothing else picks up its
 * instructions on a CPU without them.
 *
 * The activations a call covers are split once into hi/lo bf16 chunks
 * (per row, per 32 k: 32 hi then 32 lo, 128 bytes) in the per-thread pack
 * scratch: every row's whole K when it fits (decode, small batches: weight
 * rows are then read start to end, as in kern_avx512.c's direct path), else
 * K blocks of CPU_KB for as many rows as fit. A tile of MR activation rows x
 * NR weight rows keeps MR*NR zmm accumulators; per 32 k it loads NR weight
 * vectors and, per row, hi and lo, and issues two vdpbf16ps per pair.
 * Zen 4 splits every 512-bit instruction in two; here that costs two
 * vdpbf16ps per 32 weights where the f32 path spends two widenings and two
 * FMAs per 16. */
#include "cpu/kern.h"
#include "cpu/kern_512.h"

#include <immintrin.h>

enum { CHUNK = 32, MAX_MR = 5 };

/* 16 bf16 back to f32 (exact). */
ALWAYS __m512 widen(__m256bh h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16));
}

/* x[0..n) as hi/lo chunks at xs, the last chunk padded with zeros. */
static void split_row(const float *x, int n, uint16_t *xs)
{
    for (int c = 0; c < n; c += CHUNK, xs += 2 * CHUNK) {
        int r = n - c;
        __mmask16 m0 = r >= 16 ? 0xffff : (__mmask16)((1u << r) - 1u);
        __mmask16 m1 = r >= 32 ? 0xffff : r > 16 ? (__mmask16)((1u << (r - 16)) - 1u) : 0;
        __m512 x0 = _mm512_maskz_loadu_ps(m0, x + c);
        __m512 x1 = _mm512_maskz_loadu_ps(m1, x + c + 16);
        __m256bh h0 = _mm512_cvtneps_pbh(x0), h1 = _mm512_cvtneps_pbh(x1);
        __m256bh l0 = _mm512_cvtneps_pbh(_mm512_sub_ps(x0, widen(h0)));
        __m256bh l1 = _mm512_cvtneps_pbh(_mm512_sub_ps(x1, widen(h1)));
        _mm256_storeu_si256((__m256i *)xs, (__m256i)h0);
        _mm256_storeu_si256((__m256i *)(xs + 16), (__m256i)h1);
        _mm256_storeu_si256((__m256i *)(xs + 32), (__m256i)l0);
        _mm256_storeu_si256((__m256i *)(xs + 48), (__m256i)l1);
    }
}

/* One 32-k chunk of a tile; weight lanes past the end (mask m) are 0. */
ALWAYS void step(const int MR, const int NR, const uint16_t *xs, size_t ldxs,
                 const uint16_t *w, size_t ldw, int k, __mmask32 m, __m512 *acc)
{
    __m512i wv[8];
    /* the next tile's rows, this chunk's line of each: with 2 MiB pages the
     * hardware prefetcher alone left a single-row 1x8 pass 17% slower (on
     * Zen 4; 25% at 4 rows), see docs/engine.md. Past the matrix's end it
     * touches nothing: prefetches never fault. */
#pragma GCC unroll 8
    for (int j = 0; j < NR; j++)
        _mm_prefetch((const char *)(w + (size_t)(j + NR) * ldw + k), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int j = 0; j < NR; j++)
        wv[j] = m == 0xffffffffu ? _mm512_loadu_si512(w + (size_t)j * ldw + k)
                                 : _mm512_maskz_loadu_epi16(m, w + (size_t)j * ldw + k);
#pragma GCC unroll 5
    for (int i = 0; i < MR; i++) {
        const uint16_t *p = xs + (size_t)i * ldxs + (size_t)k * 2;
        __m512i hi = _mm512_loadu_si512(p), lo = _mm512_loadu_si512(p + CHUNK);
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++) {
            acc[i * NR + j] = _mm512_dpbf16_ps(acc[i * NR + j], (__m512bh)hi, (__m512bh)wv[j]);
#ifndef BF16DP_HI_ONLY /* measurement only: plain bf16 activations */
            acc[i * NR + j] = _mm512_dpbf16_ps(acc[i * NR + j], (__m512bh)lo, (__m512bh)wv[j]);
#else
            (void)lo;
#endif
        }
    }
}

/* One K block (klen <= CPU_KB) of an MR x NR tile: y (=|+=) the block's sums. */
ALWAYS void tile(const int MR, const int NR, const uint16_t *xs, size_t ldxs,
                 const uint16_t *w, size_t ldw, int klen, float *y, size_t ldy, int first)
{
    __m512 acc[20];
#pragma GCC unroll 20
    for (int a = 0; a < MR * NR; a++)
        acc[a] = _mm512_setzero_ps();
    int k = 0;
    for (; k + CHUNK <= klen; k += CHUNK)
        step(MR, NR, xs, ldxs, w, ldw, k, 0xffffffffu, acc);
    if (k < klen)
        step(MR, NR, xs, ldxs, w, ldw, k, (__mmask32)((1u << (klen - k)) - 1u), acc);
    flush(MR, NR, acc, y, ldy, first);
}

typedef void (*tile_fn)(const uint16_t *xs, size_t ldxs, const uint16_t *w, size_t ldw,
                        int klen, float *y, size_t ldy, int first);
#define TILE(MR, NR)                                                                  \
    static void t##MR##x##NR(const uint16_t *xs, size_t ldxs, const uint16_t *w,      \
                             size_t ldw, int klen, float *y, size_t ldy, int first)   \
    {                                                                                 \
        tile(MR, NR, xs, ldxs, w, ldw, klen, y, ldy, first);                          \
    }
TILE(1, 8) TILE(2, 8) TILE(1, 4) TILE(2, 4) TILE(3, 4) TILE(4, 4)
TILE(1, 1) TILE(2, 1) TILE(3, 1) TILE(4, 1) TILE(5, 4) TILE(5, 1)
/* [MR-1][NR 8, 4, 1]; 8 columns only for one or two rows (16 accumulators).
 * Up to 5 rows in one tile (20 accumulators, 26 registers in all): a
 * verification of 4 drafts is 5 rows, and as a 4x4 tile plus a 1x4 tile
 * its step took 1.43x a 1-row step, as one 5x4 tile 1.23x (docs/engine.md). */
static const tile_fn tiles[MAX_MR][3] = {
    {t1x8, t1x4, t1x1}, {t2x8, t2x4, t2x1}, {NULL, t3x4, t3x1}, {NULL, t4x4, t4x1}, {NULL, t5x4, t5x1},
};

/* One K block (klen at kb) of the column tile at j for rows [r0, r0+rn). */
static void run_tile(const cpu_mm *a, const uint16_t *xs, size_t ldxs, int r0, int rn, int k0,
                     int kb, int klen, int j, int ni)
{
    for (int i = 0; i < rn; i += MAX_MR) {
        int mr = rn - i < MAX_MR ? rn - i : MAX_MR;
        tiles[mr - 1][ni](xs + (size_t)i * ldxs + (size_t)kb * 2, ldxs,
                          (const uint16_t *)a->w + (size_t)j * a->ldw + (size_t)(k0 + kb), a->ldw,
                          klen, a->y + (size_t)(r0 + i) * a->ldy + j, a->ldy, k0 + kb == 0);
    }
}

/* Columns [n0, n1) for rows [r0, r0+rn), k in [k0, k0+kn), whose split
 * activations are at xs (row stride ldxs). One row: each column tile's
 * whole K in turn, so weight rows are read start to end. Several rows (a
 * speculative verification, a small batch): K block by K block over every
 * column tile, so the block's split activations (16 KB for 4 rows) stay in
 * L1 while the weights stream past; across the whole K they were 2x the
 * weight bytes a 4x4 tile reads, from L2, and a 4-row step took 1.44x a
 * 1-row step instead of 1.19x (Zen 4, docs/engine.md). Either order adds
 * each y's K blocks in the same order, so the bits are the same. */
static void run(const cpu_mm *a, const uint16_t *xs, size_t ldxs, int r0, int rn, int k0,
                int kn, int n0, int n1)
{
    int wide = rn <= 2 ? 8 : 4, wi = rn <= 2 ? 0 : 1;
    if (rn == 1) {
        for (int j = n0; j < n1;) {
            int nr = n1 - j >= wide ? wide : 1;
            for (int kb = 0; kb < kn; kb += CPU_KB)
                run_tile(a, xs, ldxs, r0, rn, k0, kb, kn - kb < CPU_KB ? kn - kb : CPU_KB, j,
                         nr == 1 ? 2 : wi);
            j += nr;
        }
        return;
    }
    for (int kb = 0; kb < kn; kb += CPU_KB)
        for (int j = n0; j < n1;) {
            int nr = n1 - j >= wide ? wide : 1;
            run_tile(a, xs, ldxs, r0, rn, k0, kb, kn - kb < CPU_KB ? kn - kb : CPU_KB, j,
                     nr == 1 ? 2 : wi);
            j += nr;
        }
}

void cpu_avx512_mm_bf16dp(const cpu_mm *a, int n0, int n1, float *pack)
{
    uint16_t *xs = (uint16_t *)pack;
    const size_t cap = CPU_PACK_FLOATS * 2; /* uint16 of scratch */
    int M = a->M, K = a->K;
    if (K <= 0) { /* an empty sum */
        for (int m = 0; m < M; m++)
            for (int n = n0; n < n1; n++)
                a->y[(size_t)m * a->ldy + n] = 0.0f;
        return;
    }
    size_t kp = ((size_t)K + CHUNK - 1) / CHUNK * CHUNK;
    /* whole rows when every row fits, else K blocks of CPU_KB */
    int kc = (size_t)M * kp * 2 <= cap ? (int)kp : CPU_KB;
    int mg = (int)(cap / ((size_t)kc * 2));
    if (mg > M)
        mg = M;
    for (int r0 = 0; r0 < M; r0 += mg) {
        int rn = M - r0 < mg ? M - r0 : mg;
        for (int k0 = 0; k0 < K; k0 += kc) {
            int kn = K - k0 < kc ? K - k0 : kc;
            size_t ldxs = ((size_t)kn + CHUNK - 1) / CHUNK * CHUNK * 2;
            for (int r = 0; r < rn; r++)
                split_row(a->x + (size_t)(r0 + r) * a->ldx + k0, kn, xs + (size_t)r * ldxs);
            run(a, xs, ldxs, r0, rn, k0, kn, n0, n1);
        }
    }
}
