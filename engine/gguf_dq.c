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
 *         value v's scale is scales[v / 16]; x = (d * sc) * (q - 32) */
#include "gguf.h"

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
