/* The AVX2 int4 kernel (q4.h): a 16-row block is two registers of 8 rows;
 * vpmaddubsw products summed in int16 (8 * 2 * 15 * 127 < 32768) and one
 * vpmaddwd give s_g. Two tokens share each group's unpacked weights; the
 * 64 columns' chains wait in a small array between groups. */
#include <immintrin.h>
#include <string.h>

#include "cpu/q4.h"

#define ALWAYS static inline __attribute__((always_inline))

enum { MR2 = 2 };

ALWAYS void tile(const int MR, const int ZP, const cpu_mm4 *a, int m0, int n)
{
    const size_t REC = ZP ? CPU_Q4_RECZ : CPU_Q4_REC;
    __m256 acc[MR2][8];
    for (int i = 0; i < MR; i++)
        for (int c = 0; c < 8; c++)
            acc[i][c] = _mm256_setzero_ps();
    const __m256i lo = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const uint8_t *w = a->w + (size_t)(n / CPU_Q4_ROWS) * a->G * REC;
    for (int g = 0; g < a->G; g++) {
        const uint8_t *rec = w + (size_t)g * REC;
        _mm_prefetch((const char *)rec + 8 * REC, _MM_HINT_T0);
        for (int c = 0; c < 8; c++) { /* block c / 2, rows (c % 2) * 8 .. + 7 */
            int j = c / 2, h = c % 2;
            __m256 d = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(rec + 1024 + 32 * j + 16 * h)));
            /* the 8 rows' zeros as int32 lanes (high int16 halves 0) */
            __m256i z = ZP ? _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(rec + CPU_Q4_REC + 8 * c)))
                           : _mm256_setzero_si256();
            __m256i wu[8];
            for (int p = 0; p < 4; p++) {
                __m256i raw = _mm256_load_si256((const __m256i *)(rec + 256 * j + 64 * p + 32 * h));
                wu[p] = _mm256_and_si256(raw, lo);
                wu[p + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo);
            }
            for (int i = 0; i < MR; i++) {
                const int8_t *x = a->x + (size_t)(m0 + i) * a->ldx + (size_t)g * CPU_Q4_GROUP;
                __m256i s16 = _mm256_setzero_si256();
                for (int p = 0; p < 8; p++) {
                    int32_t x4;
                    memcpy(&x4, x + 4 * p, 4);
                    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(wu[p], _mm256_set1_epi32(x4)));
                }
                __m256i s = _mm256_madd_epi16(s16, ones);
                int32_t xs8 = a->xs8[(size_t)(m0 + i) * a->ldxs + g];
                /* z * sum qx by vpmaddwd, as in q4_512.h */
                s = _mm256_sub_epi32(s, ZP ? _mm256_madd_epi16(z, _mm256_set1_epi32(xs8 / 8))
                                           : _mm256_set1_epi32(xs8));
                acc[i][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[i][c]);
            }
        }
    }
    for (int i = 0; i < MR; i++) {
        __m256 sx = _mm256_set1_ps(a->sx[m0 + i]);
        float *y = a->y + (size_t)(m0 + i) * a->ldy + n;
        for (int c = 0; c < 8; c++) {
            float v[8];
            _mm256_storeu_ps(v, _mm256_mul_ps(acc[i][c], sx));
            int left = a->N - n - 8 * c;
            if (left <= 0)
                break;
            memcpy(y + 8 * c, v, sizeof(float) * (size_t)(left < 8 ? left : 8));
        }
    }
}

#define TILE(MR, ZP)                                         \
    static void tile##MR##_##ZP(const cpu_mm4 *a, int m0, int n) \
    {                                                        \
        tile(MR, ZP, a, m0, n);                              \
    }
TILE(1, 0) TILE(2, 0) TILE(1, 1) TILE(2, 1)

static void mm4(const cpu_mm4 *a, int n0, int n1)
{
    void (*t1)(const cpu_mm4 *, int, int) = a->zp ? tile1_1 : tile1_0;
    void (*t2)(const cpu_mm4 *, int, int) = a->zp ? tile2_1 : tile2_0;
    for (int n = n0; n < n1 && n < a->N; n += CPU_Q4_ROWS)
        for (int m = 0; m < a->M; m += MR2) {
            if (a->M - m >= 2)
                t2(a, m, n);
            else
                t1(a, m, n);
        }
}

const cpu_q4k cpu_q4k_avx2 = {.name = "avx2", .mm4 = mm4, .quant = cpu_q4_quant_rule};
