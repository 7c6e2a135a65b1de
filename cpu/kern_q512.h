/* The AVX-512 int8 matmul, included by kern_avx512.c (products through
 * vpmaddubsw, any AVX-512 CPU) and by kern_avx512_vnni.c (vpdpbusd, built
 * with -mavx512vnni). Separate files keep VNNI instructions out of the code
 * that must run on CPUs without them. */
#ifndef INFERD_CPU_KERN_Q512_H
#define INFERD_CPU_KERN_Q512_H

#include <immintrin.h>
#include <string.h>

#include "cpu/kern.h"

#ifndef ALWAYS
#define ALWAYS static inline __attribute__((always_inline))
#endif

/* int8 matmul. A column tile is 4 groups (64 weight rows); K goes in chunks
 * of QKC steps of 4 (64 rows x 256 k = 16 KiB of weights, held in L1) and
 * every MR-row tile of up to CPU_MMQ_ROWS rows runs over a chunk before the
 * next, so the weights come from memory once however many rows there are.
 * The int32 sums wait in scratch between chunks. While a chunk computes,
 * its row tiles prefetch the next chunk, each tile a share, spread over its
 * k steps (all of it from the first tile likely stalled that tile on the
 * fill buffers and left the others nothing to overlap). More rows than
 * CPU_MMQ_ROWS go in equal passes, each over every column tile, so a pass's
 * activations stay in L2. With VNNI, vpdpbusd multiplies the offset
 * activations (qx + 128) by the weights and wsum takes the offset out;
 * without, vpmaddubsw multiplies |w| by qx carrying w's sign (pairs cannot
 * saturate) and vpmaddwd widens, giving the signed sums directly. */
enum { QKC = 64, QMR = 6 };

ALWAYS void qchunk(const int VNNI, const int MR, const uint8_t *x, size_t ldx, const int8_t *w,
                   size_t gs, int k0, int k1, int32_t *c, int first, const int8_t *pf,
                   int pfn, int every)
{
    __m512i acc[4 * QMR];
#pragma GCC unroll 24
    for (int a = 0; a < MR * 4; a++)
        acc[a] = first ? _mm512_setzero_si512() : _mm512_load_si512(c + (a / 4) * 64 + (a % 4) * 16);
    const __m512i flip = _mm512_set1_epi8((char)0x80), ones = _mm512_set1_epi16(1);
    int wait = every;
    for (int k = k0; k < k1; k++) {
        __m512i wv[4], wa[4];
        /* pfn k steps of the next chunk, one every `every` k steps */
        if (pfn && --wait == 0) {
            wait = every;
            pfn--;
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                _mm_prefetch((const char *)pf + (size_t)j * gs, _MM_HINT_T0);
            pf += 64;
        }
        __mmask64 neg[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const int8_t *p = w + (size_t)j * gs + (size_t)k * 64;
            wv[j] = _mm512_load_si512((const void *)p);
            if (!VNNI) {
                wa[j] = _mm512_abs_epi8(wv[j]);
                neg[j] = _mm512_movepi8_mask(wv[j]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            int32_t x4;
            memcpy(&x4, x + (size_t)i * ldx + (size_t)k * 4, 4);
            __m512i xb = _mm512_set1_epi32(x4);
#ifdef __AVX512VNNI__
            if (VNNI) {
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++)
                    acc[i * 4 + j] = _mm512_dpbusd_epi32(acc[i * 4 + j], xb, wv[j]);
            } else
#endif
            {
                __m512i xs = _mm512_xor_si512(xb, flip);
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    __m512i sx = _mm512_mask_sub_epi8(xs, neg[j], _mm512_setzero_si512(), xs);
                    __m512i pr = _mm512_maddubs_epi16(wa[j], sx);
                    acc[i * 4 + j] = _mm512_add_epi32(acc[i * 4 + j], _mm512_madd_epi16(pr, ones));
                }
            }
        }
    }
#pragma GCC unroll 24
    for (int a = 0; a < MR * 4; a++)
        _mm512_store_si512(c + (a / 4) * 64 + (a % 4) * 16, acc[a]);
}

typedef void (*qchunk_fn)(const uint8_t *x, size_t ldx, const int8_t *w, size_t gs, int k0,
                          int k1, int32_t *c, int first, const int8_t *pf, int pfn,
                          int every);
#define QCHUNK(V, MR, NAME)                                                             \
    static void NAME(const uint8_t *x, size_t ldx, const int8_t *w, size_t gs, int k0,   \
                     int k1, int32_t *c, int first, const int8_t *pf, int pfn, int every) \
    {                                                                                    \
        qchunk(V, MR, x, ldx, w, gs, k0, k1, c, first, pf, pfn, every);                  \
    }

/* y for rows [m0, m0 + mr) and columns [n0, n0 + 64) from the sums in c. */
ALWAYS void qstore(const int VNNI, const cpu_mmq *a, int m0, int mr, int n0, const int32_t *c)
{
    for (int i = 0; i < mr; i++) {
        __m512 sx = _mm512_set1_ps(a->sx[m0 + i]);
        float *y = a->y + (size_t)(m0 + i) * a->ldy + n0;
        for (int j = 0; j < 4; j++) {
            int left = a->N - n0 - 16 * j;
            if (left <= 0)
                break;
            __mmask16 m = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1u);
            __m512i s = _mm512_load_si512(c + (size_t)i * 64 + 16 * j);
            if (VNNI)
                s = _mm512_sub_epi32(s, _mm512_loadu_si512(a->wsum + n0 + 16 * j));
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(s), sx);
            _mm512_mask_storeu_ps(y + 16 * j, m, _mm512_mul_ps(v, _mm512_loadu_ps(a->sw + n0 + 16 * j)));
        }
    }
}

ALWAYS void mmq_run(const int VNNI, const qchunk_fn *qchunks, const cpu_mmq *a, int n0, int n1,
                    int32_t *scratch)
{
    size_t gs = (size_t)a->K4 * 64;
    int passes = (a->M + CPU_MMQ_ROWS - 1) / CPU_MMQ_ROWS;
    int per = (a->M + passes - 1) / passes;
    per = (per + QMR - 1) / QMR * QMR;
    for (int m0 = 0; m0 < a->M; m0 += per) {
        int rows = a->M - m0 < per ? a->M - m0 : per;
        int tiles = (rows + QMR - 1) / QMR;
        for (int n = n0; n < n1; n += CPU_QN) {
            const int8_t *w = a->w + (size_t)(n / CPU_QG) * gs;
            for (int k0 = 0; k0 < a->K4; k0 += QKC) {
                int k1 = a->K4 - k0 < QKC ? a->K4 : k0 + QKC;
                /* the next chunk: the next k range, or the next column tile's first */
                const int8_t *next = NULL;
                int steps = 0;
                if (k1 < a->K4) {
                    next = w + (size_t)k1 * 64;
                    steps = a->K4 - k1 < QKC ? a->K4 - k1 : QKC;
                } else if (n + CPU_QN < n1) {
                    next = w + 4 * gs;
                    steps = a->K4 < QKC ? a->K4 : QKC;
                }
                int share = (steps + tiles - 1) / tiles;
                int every = share ? (k1 - k0) / share : 1;
                if (every < 1)
                    every = 1;
                for (int t = 0; t < tiles; t++) {
                    int i = t * QMR, mr = rows - i < QMR ? rows - i : QMR;
                    int s0 = t * share < steps ? t * share : steps;
                    int s1 = s0 + share < steps ? s0 + share : steps;
                    qchunks[mr - 1](a->x + (size_t)(m0 + i) * a->ldx, a->ldx, w, gs, k0, k1,
                                    scratch + (size_t)i * 64, k0 == 0,
                                    next ? next + (size_t)s0 * 64 : NULL, s1 - s0, every);
                }
            }
            qstore(VNNI, a, m0, rows, n, scratch);
        }
    }
}

#endif
