/* gguf_dequant: ggml's block formats, written from their definitions
 * (ggml-common.h's block structs; the reference dequantizers' f32
 * arithmetic, in their order, so the values are the ones ggml computes).
 *
 *   Q8_0  32 values: f16 d, i8 q[32];                      x = d * q
 *   Q4_0  32 values: f16 d, u8 qs[16];  q_i = low nibble of qs[i] (i < 16),
 *         high nibble of qs[i - 16] (i >= 16);              x = d * (q - 8)
 *   Q4_K  256 values: f16 d, f16 dmin, u8 scales[12], u8 qs[128]: 8 groups
 *         of 32 with 6-bit scale sc_j and min m_j (scale_min below); values
 *         64c..64c+31 are the low nibbles of qs[32c..32c+31] with group 2c,
 *         64c+32..64c+63 the high nibbles with group 2c+1;
 *         x = (d * sc) * q - (dmin * m)
 *   Q5_K  as Q4_K plus u8 qh[32] before qs: bit 2c of qh[l] is the fifth
 *         bit (16) of value 64c + l, bit 2c+1 of value 64c + 32 + l
 *   Q6_K  256 values: u8 ql[128], u8 qh[64], i8 scales[16], f16 d: per half
 *         h (128 values; ql += 64h, qh += 32h, scales += 8h), l < 32:
 *         q0 = lo(ql[l])      | (qh[l] & 3) << 4          -> value l
 *         q1 = lo(ql[l + 32]) | (qh[l] >> 2 & 3) << 4     -> value l + 32
 *         q2 = hi(ql[l])      | (qh[l] >> 4 & 3) << 4     -> value l + 64
 *         q3 = hi(ql[l + 32]) | (qh[l] >> 6) << 4         -> value l + 96
 *         value v's scale is scales[v / 16]; x = (d * sc) * (q - 32)
 *   Q4_1  32 values: f16 d, f16 m, u8 qs[16]; q as Q4_0's;    x = q * d + m
 *   Q5_0  32 values: f16 d, u32 qh (little-endian), u8 qs[16]; q as Q4_0's
 *         plus bit i of qh as its fifth bit (16);          x = (q - 16) * d
 *   Q5_1  as Q5_0 with f16 m after d;                       x = q * d + m
 *   Q2_K  256 values: u8 scales[16], u8 qs[64], f16 d, f16 dmin: value v
 *         (half h = v / 128, w = v % 128, part p = w / 32, l = w % 32) has
 *         the 2-bit code (qs[32h + l] >> 2p) & 3 and sub-block s = v / 16,
 *         whose byte scales[s] holds a scale (low nibble) and a min (high);
 *         x = (d * sc) * q - (dmin * m)
 *   Q3_K  256 values: u8 hmask[32], u8 qs[64], u8 scales[12], f16 d: the
 *         2-bit code as Q2_K's, less 4 unless bit (4h + p) of hmask[l] is
 *         set; sub-block s's 6-bit scale: the low 4 bits are nibble s / 8 of
 *         scales[s % 8], the high 2 bits bits 2(s / 4)..+1 of
 *         scales[8 + s % 4]; x = (d * (sc - 32)) * q
 *   IQ4_NL 32 values: f16 d, u8 qs[16]; codes as Q4_0's, each an index into
 *         the non-linear table NL below;                  x = d * NL[q]
 *   IQ4_XS 256 values: f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]:
 *         8 sub-blocks of 32 coded as IQ4_NL's (qs += 16 each); sub-block
 *         b's 6-bit scale is nibble b % 2 of scales_l[b / 2] with bits
 *         2b..2b+1 of scales_h above it;           x = (d * (sc - 32)) * NL[q] */
#include "gguf.h"

#include <string.h>

static float h2f(const uint8_t *p)
{
    return inf_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* Q4_K / Q5_K's 6-bit scale and min of group j from the 12 bytes. */
static void scale_min(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void dq_q8_0(const uint8_t *b, float *y)
{
    float d = h2f(b);
    for (int i = 0; i < 32; i++)
        y[i] = d * (float)(int8_t)b[2 + i];
}

static void dq_q4_0(const uint8_t *b, float *y)
{
    float d = h2f(b);
    for (int i = 0; i < 16; i++) {
        y[i] = (float)((b[2 + i] & 0xF) - 8) * d;
        y[i + 16] = (float)((b[2 + i] >> 4) - 8) * d;
    }
}

/* Q4_1 (qh NULL, min) and Q5_0 (no min) / Q5_1: the 32 codes at qs, their
 * fifth bits in qh (bit i for value i). */
static void dq_legacy(const uint8_t *b, float *y, int has_min, const uint8_t *qh,
                      const uint8_t *qs)
{
    float d = h2f(b), m = has_min ? h2f(b + 2) : 0.0f;
    uint32_t hb = qh ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                           (uint32_t)qh[3] << 24
                     : 0;
    int off = qh && !has_min ? 16 : 0; /* Q5_0 is centred, Q4_1 / Q5_1 carry a min */
    for (int i = 0; i < 16; i++) {
        int q0 = (qs[i] & 0xF) | (int)(hb >> i & 1) << 4;
        int q1 = (qs[i] >> 4) | (int)(hb >> (i + 16) & 1) << 4;
        if (has_min) {
            y[i] = (float)q0 * d + m;
            y[i + 16] = (float)q1 * d + m;
        } else {
            y[i] = (float)(q0 - off) * d;
            y[i + 16] = (float)(q1 - off) * d;
        }
    }
}

/* The IQ4 formats' 16 levels (ggml's kvalues_iq4nl, part of the format). */
static const int8_t NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                              1,    13,   25,  38,  53,  69,  89,  113};

/* 32 IQ4 codes at qs with the factor dl. */
static void dq_nl32(const uint8_t *qs, float dl, float *y)
{
    for (int i = 0; i < 16; i++) {
        y[i] = dl * (float)NL[qs[i] & 0xF];
        y[i + 16] = dl * (float)NL[qs[i] >> 4];
    }
}

static void dq_iq4_xs(const uint8_t *b, float *y)
{
    float d = h2f(b);
    unsigned sh = (unsigned)(b[2] | b[3] << 8);
    for (int s = 0; s < 8; s++) {
        int ls = (b[4 + s / 2] >> (4 * (s % 2)) & 0xF) | (int)(sh >> (2 * s) & 3) << 4;
        dq_nl32(b + 8 + 16 * s, d * (float)(ls - 32), y + 32 * s);
    }
}

/* Q2_K's and Q3_K's 2-bit code of value v (the low bits, before Q3_K's
 * high bit). */
static int code2(const uint8_t *qs, int v)
{
    int h = v / 128, w = v % 128;
    return qs[32 * h + w % 32] >> (2 * (w / 32)) & 3;
}

static void dq_q2_k(const uint8_t *b, float *y)
{
    const uint8_t *scales = b, *qs = b + 16;
    float d = h2f(b + 80), dmin = h2f(b + 82);
    for (int s = 0; s < 16; s++) {
        float dl = d * (float)(scales[s] & 0xF), ml = dmin * (float)(scales[s] >> 4);
        for (int v = 16 * s; v < 16 * s + 16; v++)
            y[v] = dl * (float)code2(qs, v) - ml;
    }
}

static void dq_q3_k(const uint8_t *b, float *y)
{
    const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    float d = h2f(b + 108);
    for (int s = 0; s < 16; s++) {
        int low = sc[s % 8] >> (4 * (s / 8)) & 0xF, high = sc[8 + s % 4] >> (2 * (s / 4)) & 3;
        float dl = d * (float)((low | high << 4) - 32);
        for (int v = 16 * s; v < 16 * s + 16; v++) {
            int h = v / 128, w = v % 128, bit = 4 * h + w / 32;
            int q = code2(qs, v) - (hmask[w % 32] >> bit & 1 ? 0 : 4);
            y[v] = dl * (float)q;
        }
    }
}

/* Q4_K (qh NULL) and Q5_K. */
static void dq_k45(const uint8_t *b, float *y, const uint8_t *qh, const uint8_t *qs)
{
    float d = h2f(b), dmin = h2f(b + 2);
    const uint8_t *scales = b + 4;
    for (int c = 0; c < 4; c++) {
        int sc, m;
        scale_min(2 * c, scales, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        scale_min(2 * c + 1, scales, &sc, &m);
        float d2 = d * (float)sc, m2 = dmin * (float)m;
        const uint8_t *q = qs + 32 * c;
        for (int l = 0; l < 32; l++) {
            int hi1 = qh && (qh[l] >> (2 * c) & 1) ? 16 : 0;
            int hi2 = qh && (qh[l] >> (2 * c + 1) & 1) ? 16 : 0;
            y[64 * c + l] = d1 * (float)((q[l] & 0xF) + hi1) - m1;
            y[64 * c + 32 + l] = d2 * (float)((q[l] >> 4) + hi2) - m2;
        }
    }
}

static void dq_q6_k(const uint8_t *b, float *y)
{
    float d = h2f(b + 128 + 64 + 16);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * h;
        float *o = y + 128 * h;
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q0 = ((ql[l] & 0xF) | ((qh[l] >> 0 & 3) << 4)) - 32;
            int q1 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2 & 3) << 4)) - 32;
            int q2 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
            int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
            o[l] = d * (float)sc[is] * (float)q0;
            o[l + 32] = d * (float)sc[is + 2] * (float)q1;
            o[l + 64] = d * (float)sc[is + 4] * (float)q2;
            o[l + 96] = d * (float)sc[is + 6] * (float)q3;
        }
    }
}

void gguf_dequant(uint32_t type, const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    switch (type) {
    case GGUF_F32:
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                         (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
            union { uint32_t u; float f; } v = {u};
            dst[i] = v.f;
        }
        break;
    case GGUF_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = h2f(b + 2 * i);
        break;
    case GGUF_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = inf_bf16_to_f32((uint16_t)(b[2 * i] | b[2 * i + 1] << 8));
        break;
    case GGUF_Q8_0:
        for (int64_t i = 0; i < n / 32; i++)
            dq_q8_0(b + 34 * i, dst + 32 * i);
        break;
    case GGUF_Q4_0:
        for (int64_t i = 0; i < n / 32; i++)
            dq_q4_0(b + 18 * i, dst + 32 * i);
        break;
    case GGUF_Q4_1:
        for (int64_t i = 0; i < n / 32; i++)
            dq_legacy(b + 20 * i, dst + 32 * i, 1, NULL, b + 20 * i + 4);
        break;
    case GGUF_Q5_0:
        for (int64_t i = 0; i < n / 32; i++)
            dq_legacy(b + 22 * i, dst + 32 * i, 0, b + 22 * i + 2, b + 22 * i + 6);
        break;
    case GGUF_Q5_1:
        for (int64_t i = 0; i < n / 32; i++)
            dq_legacy(b + 24 * i, dst + 32 * i, 1, b + 24 * i + 4, b + 24 * i + 8);
        break;
    case GGUF_Q2_K:
        for (int64_t i = 0; i < n / 256; i++)
            dq_q2_k(b + 84 * i, dst + 256 * i);
        break;
    case GGUF_Q3_K:
        for (int64_t i = 0; i < n / 256; i++)
            dq_q3_k(b + 110 * i, dst + 256 * i);
        break;
    case GGUF_IQ4_NL:
        for (int64_t i = 0; i < n / 32; i++)
            dq_nl32(b + 18 * i + 2, h2f(b + 18 * i), dst + 32 * i);
        break;
    case GGUF_IQ4_XS:
        for (int64_t i = 0; i < n / 256; i++)
            dq_iq4_xs(b + 136 * i, dst + 256 * i);
        break;
    case GGUF_Q4_K:
        for (int64_t i = 0; i < n / 256; i++)
            dq_k45(b + 144 * i, dst + 256 * i, NULL, b + 144 * i + 16);
        break;
    case GGUF_Q5_K:
        for (int64_t i = 0; i < n / 256; i++)
            dq_k45(b + 176 * i, dst + 256 * i, b + 176 * i + 16, b + 176 * i + 48);
        break;
    case GGUF_Q6_K:
        for (int64_t i = 0; i < n / 256; i++)
            dq_q6_k(b + 210 * i, dst + 256 * i);
        break;
    default:
        break;
    }
}

/* Eight nibbles (one per byte of x, < 16) as four bytes, two a byte, the
 * first low: bytes 2j and 2j + 1 of x into byte j. */
static uint32_t pair_nibbles(uint64_t x)
{
    x = (x | x >> 4) & 0x00ff00ff00ff00ffu;
    x = (x | x >> 8) & 0x0000ffff0000ffffu;
    return (uint32_t)(x | x >> 16);
}

void gguf_q4_0_codes(const void *src, int64_t n, uint8_t *u, uint16_t *d)
{
    const uint8_t *b = src;
    const uint64_t m = 0x0f0f0f0f0f0f0f0fu;
    for (int64_t i = 0; i < n / 32; i++, b += 18, u += 16) {
        d[i] = (uint16_t)(b[0] | b[1] << 8);
        /* the block holds code j low and j + 16 high in byte j (bytes
         * loaded little-endian: byte j of the word is qs[j]) */
        uint64_t q[2];
        memcpy(q, b + 2, 16);
        for (int h = 0; h < 2; h++) {
            uint32_t lo = pair_nibbles(q[h] & m), hi = pair_nibbles(q[h] >> 4 & m);
            memcpy(u + 4 * h, &lo, 4);     /* codes 8h .. 8h + 7 */
            memcpy(u + 8 + 4 * h, &hi, 4); /* codes 16 + 8h .. 16 + 8h + 7 */
        }
    }
}
