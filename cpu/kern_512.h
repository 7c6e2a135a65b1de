/* The canonical reduction's last step for the AVX-512 matmuls (kern.h's
 * 16-lane tree on zmm accumulators), shared by the f32-FMA tiles
 * (kern_avx512.c) and the vdpbf16ps ones (kern_avx512_bf16.c). */
#ifndef INFERD_CPU_KERN_512_H
#define INFERD_CPU_KERN_512_H

#include <immintrin.h>
#include <stddef.h>

#ifndef ALWAYS
#define ALWAYS static inline __attribute__((always_inline))
#endif

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

#endif
