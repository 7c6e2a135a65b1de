/* The portable vdpbf16ps matmul: kern.h's bf16 order written out element by
 * element from the instruction's definition (Intel SDM, VDPBF16PS and
 * VCVTNEPS2BF16), the oracle that tests hold the AVX512_BF16 kernel to. */
#include "cpu/kern.h"

#include <math.h>
#include <string.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A denormal becomes 0 of its sign (DAZ on inputs, FTZ on results). */
static float flush(float f)
{
    uint32_t u = bits(f);
    return (u & 0x7f800000u) == 0 ? from_bits(u & 0x80000000u) : f;
}

uint16_t cpu_bf16_rne(float x)
{
    uint32_t u = bits(flush(x));
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, upper half */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_f32(uint16_t h) { return from_bits((uint32_t)h << 16); }

/* One step of vdpbf16ps: acc + a*b with its DAZ / FTZ / RNE (the product of
 * two bf16 is exact in f32, so one fmaf rounds as the instruction does). */
static float dp(float acc, uint16_t a, uint16_t b)
{
    return flush(fmaf(flush(bf16_f32(a)), flush(bf16_f32(b)), flush(acc)));
}

/* x's hi and lo halves (kern.h's split). */
static void split(const float *x, int K, uint16_t *hi, uint16_t *lo)
{
    for (int k = 0; k < K; k++) {
        hi[k] = cpu_bf16_rne(x[k]);
        lo[k] = cpu_bf16_rne(x[k] - bf16_f32(hi[k]));
    }
}

/* One K block's sum (len <= CPU_KB), x split into hi and lo. */
static float block(const uint16_t *hi, const uint16_t *lo, const uint16_t *w, int len)
{
    float acc[CPU_LANES] = {0};
    for (int c = 0; c < len; c += 32)
        for (int l = 0; l < CPU_LANES; l++) {
            int e = c + 2 * l, o = e + 1; /* past the end: x = w = 0 */
            uint16_t we = e < len ? w[e] : 0, wo = o < len ? w[o] : 0;
            uint16_t he = e < len ? hi[e] : 0, ho = o < len ? hi[o] : 0;
            uint16_t le = e < len ? lo[e] : 0, lo_ = o < len ? lo[o] : 0;
            acc[l] = dp(acc[l], ho, wo);
            acc[l] = dp(acc[l], he, we);
            acc[l] = dp(acc[l], lo_, wo);
            acc[l] = dp(acc[l], le, we);
        }
    return cpu_tree16(acc);
}

void cpu_generic_mm_bf16dp(const cpu_mm *a, int n0, int n1)
{
    const uint16_t *w = a->w;
    uint16_t hi[CPU_KB], lo[CPU_KB];
    for (int m = 0; m < a->M; m++) {
        float *y = a->y + (size_t)m * a->ldy;
        if (a->K <= 0)
            for (int n = n0; n < n1; n++)
                y[n] = 0.0f;
        /* block sums added left to right into y */
        for (int k0 = 0; k0 < a->K; k0 += CPU_KB) {
            int len = a->K - k0 < CPU_KB ? a->K - k0 : CPU_KB;
            split(a->x + (size_t)m * a->ldx + k0, len, hi, lo);
            for (int n = n0; n < n1; n++) {
                float b = block(hi, lo, w + (size_t)n * a->ldw + k0, len);
                y[n] = k0 == 0 ? b : y[n] + b;
            }
        }
    }
}
