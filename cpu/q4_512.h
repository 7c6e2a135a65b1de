/* The AVX-512 int4 kernel, included by q4_avx512.c (products through
 * vpmaddubsw, any AVX-512 CPU) and q4_avx512_vnni.c (vpdpbusd, built with
 * -mavx512vnni), as kern_q512.h is for int8.
 *
 * A column tile is 64 rows (four registers of 16); up to Q4MR tokens run
 * over it together, so each group's weights are unpacked once for them. Per
 * group and block of 16 rows: the 4 packed registers give 8 of q + 8 (mask,
 * shift and mask), each token's s_g comes from 8 vpdpbusd (or 8 vpmaddubsw
 * summed in int16, which cannot overflow: 8 * 2 * 15 * 127 < 32768, then one
 * vpmaddwd), minus 8 * its group sum, and one fma adds it to the chain. */
#ifndef INFERD_CPU_Q4_512_H
#define INFERD_CPU_Q4_512_H

#include <immintrin.h>
#include <string.h>

#include "cpu/q4.h"
#include "engine/qdef.h"

#ifndef ALWAYS
#define ALWAYS static inline __attribute__((always_inline))
#endif

enum { Q4MR = 4 };

ALWAYS void q4_tile(const int VNNI, const int MR, const int ZP, const cpu_mm4 *a, int m0, int n)
{
    (void)VNNI;
    const size_t REC = ZP ? CPU_Q4_RECZ : CPU_Q4_REC;
    __m512 acc[4 * Q4MR];
#pragma GCC unroll 16
    for (int i = 0; i < 4 * MR; i++)
        acc[i] = _mm512_setzero_ps();
    const __m512i lo = _mm512_set1_epi8(0x0f), ones = _mm512_set1_epi16(1);
    const uint8_t *w = a->w + (size_t)(n / CPU_Q4_ROWS) * a->G * REC;
    for (int g = 0; g < a->G; g++) {
        const uint8_t *rec = w + (size_t)g * REC;
        _mm_prefetch((const char *)rec + 8 * REC, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(rec + 1024 + 32 * j)));
            /* the 16 rows' zeros as int32 lanes, whose high int16 halves are 0 */
            __m512i z = ZP ? _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(rec + CPU_Q4_REC + 16 * j)))
                           : _mm512_setzero_si512();
            __m512i wu[8];
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                __m512i raw = _mm512_load_si512((const void *)(rec + 256 * j + 64 * p));
                wu[p] = _mm512_and_si512(raw, lo);
                wu[p + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo);
            }
#pragma GCC unroll 4
            for (int i = 0; i < MR; i++) {
                const int8_t *x = a->x + (size_t)(m0 + i) * a->ldx + (size_t)g * CPU_Q4_GROUP;
                __m512i s = _mm512_setzero_si512();
#ifdef __AVX512VNNI__
                if (VNNI) {
                    /* the activations as a broadcast memory operand: GCC
                     * otherwise keeps every token's 8 broadcasts in
                     * registers across the 4 blocks and spills them */
#define Q4DP(p)                                                          \
    __asm__("vpdpbusd " #p "*4(%2)%{1to16%}, %1, %0"                     \
            : "+v"(s)                                                    \
            : "v"(wu[p]), "r"(x), "m"(*(const int8_t(*)[32])x))
                    Q4DP(0); Q4DP(1); Q4DP(2); Q4DP(3);
                    Q4DP(4); Q4DP(5); Q4DP(6); Q4DP(7);
#undef Q4DP
                } else
#endif
                {
                    __m512i s16 = _mm512_setzero_si512();
#pragma GCC unroll 8
                    for (int p = 0; p < 8; p++) {
                        int32_t x4;
                        memcpy(&x4, x + 4 * p, 4);
                        s16 = _mm512_add_epi16(s16, _mm512_maddubs_epi16(wu[p], _mm512_set1_epi32(x4)));
                    }
                    s = _mm512_madd_epi16(s16, ones);
                }
                int32_t xs8 = a->xs8[(size_t)(m0 + i) * a->ldxs + g];
                /* z * sum qx by vpmaddwd: the sum fits int16 (|sum| <= 32 * 127),
                 * and z's high half multiplies the sum's sign bits by 0 */
                s = _mm512_sub_epi32(s, ZP ? _mm512_madd_epi16(z, _mm512_set1_epi32(xs8 / 8))
                                           : _mm512_set1_epi32(xs8));
                acc[4 * i + j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[4 * i + j]);
            }
        }
    }
    for (int i = 0; i < MR; i++) {
        __m512 sx = _mm512_set1_ps(a->sx[m0 + i]);
        float *y = a->y + (size_t)(m0 + i) * a->ldy + n;
        for (int j = 0; j < 4; j++) {
            int left = a->N - n - 16 * j;
            if (left <= 0)
                break;
            __mmask16 m = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1u);
            _mm512_mask_storeu_ps(y + 16 * j, m, _mm512_mul_ps(acc[4 * i + j], sx));
        }
    }
}

typedef void (*q4_tile_fn)(const cpu_mm4 *a, int m0, int n);
#define Q4TILE(V, MR, ZP, NAME)                              \
    static void NAME(const cpu_mm4 *a, int m0, int n)        \
    {                                                        \
        q4_tile(V, MR, ZP, a, m0, n);                        \
    }

/* The tiles of one table: symmetric ones (NAME) and with zero points
 * (NAME##_zp), Q4MR of each. */
#define Q4TILES(V, NAME)                                                              \
    Q4TILE(V, 1, 0, NAME##1) Q4TILE(V, 2, 0, NAME##2) Q4TILE(V, 3, 0, NAME##3)        \
    Q4TILE(V, 4, 0, NAME##4) Q4TILE(V, 1, 1, NAME##z1) Q4TILE(V, 2, 1, NAME##z2)      \
    Q4TILE(V, 3, 1, NAME##z3) Q4TILE(V, 4, 1, NAME##z4)                               \
    static const q4_tile_fn NAME[2][Q4MR] = {{NAME##1, NAME##2, NAME##3, NAME##4},    \
                                             {NAME##z1, NAME##z2, NAME##z3, NAME##z4}};

/* Column tiles in order, each over all rows in groups of Q4MR. */
ALWAYS void q4_run(const q4_tile_fn tables[2][Q4MR], const cpu_mm4 *a, int n0, int n1)
{
    const q4_tile_fn *tiles = tables[a->zp != 0];
    for (int n = n0; n < n1 && n < a->N; n += CPU_Q4_ROWS)
        for (int m = 0; m < a->M; m += Q4MR)
            tiles[(a->M - m < Q4MR ? a->M - m : Q4MR) - 1](a, m, n);
}

/* q4.h's quant: qdef_q4_group's rule 16 lanes at a time. Lanes past K are
 * loaded as 0, which the rule's largest |v| and q = 0 past len agree with;
 * NaN lanes are left out of the largest |v| as the rule does, and
 * vrndscaleps rounds half to even as nearbyintf. */
static void q4_quant512(const float *v, int K, uint8_t *u, uint16_t *d)
{
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512 lo = _mm512_set1_ps(-8.0f), hi = _mm512_set1_ps(7.0f);
    const __m512i eight = _mm512_set1_epi32(8);
    for (int g = 0; g * CPU_Q4_GROUP < K; g++) {
        const float *vg = v + g * CPU_Q4_GROUP;
        int len = K - g * CPU_Q4_GROUP < CPU_Q4_GROUP ? K - g * CPU_Q4_GROUP : CPU_Q4_GROUP;
        __mmask16 m[2] = {len >= 16 ? 0xffff : (__mmask16)((1u << len) - 1),
                          len >= 32 ? 0xffff : len > 16 ? (__mmask16)((1u << (len - 16)) - 1) : 0};
        __m512 x[2], ab[2];
        for (int h = 0; h < 2; h++) {
            x[h] = _mm512_maskz_loadu_ps(m[h], vg + 16 * h);
            ab[h] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x[h], x[h], _CMP_ORD_Q),
                                        _mm512_and_ps(x[h], absm));
        }
        float mx = _mm512_reduce_max_ps(_mm512_max_ps(ab[0], ab[1])), a = 0.0f, inv;
        if (mx > 0.0f) { /* the first value of the largest |v| */
            __m512 mm = _mm512_set1_ps(mx);
            uint32_t hit = _mm512_cmp_ps_mask(ab[0], mm, _CMP_EQ_OQ) |
                           (uint32_t)_mm512_cmp_ps_mask(ab[1], mm, _CMP_EQ_OQ) << 16;
            a = vg[__builtin_ctz(hit)];
        }
        d[g] = qdef_q4_scale(a, &inv);
        for (int h = 0; h < 2; h++) {
            __m512 t = _mm512_roundscale_ps(_mm512_mul_ps(x[h], _mm512_set1_ps(inv)),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            t = _mm512_min_ps(_mm512_max_ps(t, lo), hi); /* max_ps gives lo for NaN */
            _mm_storeu_si128((__m128i *)(u + g * CPU_Q4_GROUP + 16 * h),
                             _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(t), eight)));
        }
    }
}

#endif
