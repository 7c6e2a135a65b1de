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

/* kern.h's 16-lane tree. */
static float tree(const float v[CPU_LANES])
{
    float s8[8], s4[4], s2[2];
    for (int l = 0; l < 8; l++)
        s8[l] = v[l] + v[l + 8];
    for (int l = 0; l < 4; l++)
        s4[l] = s8[l] + s8[l + 4];
    for (int l = 0; l < 2; l++)
        s2[l] = s4[l] + s4[l + 2];
    return s2[0] + s2[1];
}

static float dot(const float *x, const uint16_t *w, int K)
{
    float s = 0.0f;
    for (int k0 = 0; k0 < K; k0 += CPU_KB) {
        int kend = k0 + CPU_KB < K ? k0 + CPU_KB : K;
        float acc[CPU_LANES] = {0};
        for (int c = k0; c < kend; c += 32)
            for (int l = 0; l < CPU_LANES; l++) {
                int e = c + 2 * l, o = e + 1;
                float xe = e < kend ? x[e] : 0.0f, xo = o < kend ? x[o] : 0.0f;
                uint16_t we = e < kend ? w[e] : 0, wo = o < kend ? w[o] : 0;
                uint16_t he = cpu_bf16_rne(xe), ho = cpu_bf16_rne(xo);
                uint16_t le = cpu_bf16_rne(xe - bf16_f32(he));
                uint16_t lo = cpu_bf16_rne(xo - bf16_f32(ho));
                acc[l] = dp(acc[l], ho, wo);
                acc[l] = dp(acc[l], he, we);
                acc[l] = dp(acc[l], lo, wo);
                acc[l] = dp(acc[l], le, we);
            }
        float b = tree(acc);
        s = k0 == 0 ? b : s + b;
    }
    return s;
}

void cpu_generic_mm_bf16dp(const cpu_mm *a, int n0, int n1)
{
    const uint16_t *w = a->w;
    for (int m = 0; m < a->M; m++)
        for (int n = n0; n < n1; n++)
            a->y[(size_t)m * a->ldy + n] =
                dot(a->x + (size_t)m * a->ldx, w + (size_t)n * a->ldw, a->K);
}
