/* Portable kernels: the canonical reduction (see kern.h) spelled out with
 * plain arrays and fmaf(). Slow, exact, and the oracle the SIMD tables are
 * tested against bit for bit. */
#include "cpu/kern.h"
#include "engine/qdef.h"

#include <math.h>
#include <string.h>

static float w_at(const void *w, inf_dtype wt, size_t i)
{
    switch (wt) {
    case INF_F16: return inf_f16_to_f32(((const uint16_t *)w)[i]);
    case INF_BF16: return inf_bf16_to_f32(((const uint16_t *)w)[i]);
    default: return ((const float *)w)[i];
    }
}

/* The 16-lane tree of kern.h (the vdpbf16ps oracle sums its lanes with it
 * too). */
float cpu_tree16(const float v[CPU_LANES])
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

/* Canonical dot of x (f32) with w (any dtype) over n elements. */
static float dot_any(const float *x, const void *w, inf_dtype wt, int n)
{
    float y = 0.0f;
    for (int kb = 0; kb < n; kb += CPU_KB) {
        int klen = n - kb < CPU_KB ? n - kb : CPU_KB;
        float lane[CPU_LANES] = {0};
        for (int k = 0; k < klen; k += CPU_LANES)
            for (int l = 0; l < CPU_LANES; l++) {
                int kk = k + l;
                float a = kk < klen ? x[kb + kk] : 0.0f;
                float b = kk < klen ? w_at(w, wt, (size_t)(kb + kk)) : 0.0f;
                lane[l] = fmaf(a, b, lane[l]);
            }
        float s = cpu_tree16(lane);
        y = kb == 0 ? s : y + s;
    }
    return y;
}

static void mm(const cpu_mm *a, int n0, int n1, float *pack)
{
    (void)pack;
    size_t es = inf_dtype_size(a->wt);
    for (int m = 0; m < a->M; m++)
        for (int n = n0; n < n1; n++)
            a->y[(size_t)m * a->ldy + n] =
                dot_any(a->x + (size_t)m * a->ldx,
                        (const char *)a->w + (size_t)n * a->ldw * es, a->wt,
                        a->K);
}

static float dot(const float *a, const float *b, int n)
{
    return dot_any(a, b, INF_F32, n);
}

static void to_f32(const void *w, inf_dtype wt, float *out, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = w_at(w, wt, (size_t)i);
}

static void wsum(const float *w, size_t ldw, int R, const float *v, size_t ldv, int n,
                 float *o, size_t ldo, int D)
{
    for (int r = 0; r < R; r++)
        for (int p = 0; p < n; p++)
            for (int d = 0; d < D; d++)
                o[(size_t)r * ldo + d] =
                    fmaf(w[(size_t)r * ldw + p], v[(size_t)p * ldv + d], o[(size_t)r * ldo + d]);
}

/* kern.h's exp, one operation per statement. */
static float kexp(float x)
{
    float xc = x < CPU_EXP_LO ? CPU_EXP_LO : x;
    xc = xc > CPU_EXP_HI ? CPU_EXP_HI : xc;
    float t = xc * CPU_EXP_LOG2E;
    t = t + CPU_EXP_MAGIC;
    float n = t - CPU_EXP_MAGIC;
    float r = fmaf(n, -CPU_EXP_C1, xc);
    r = fmaf(n, -CPU_EXP_C2, r);
    float p = CPU_EXP_P0;
    p = fmaf(p, r, CPU_EXP_P1);
    p = fmaf(p, r, CPU_EXP_P2);
    p = fmaf(p, r, CPU_EXP_P3);
    p = fmaf(p, r, CPU_EXP_P4);
    p = fmaf(p, r, CPU_EXP_P5);
    float r2 = r * r;
    float y = fmaf(p, r2, r);
    y = y + 1.0f;
    uint32_t tb, sb;
    memcpy(&tb, &t, sizeof tb);
    sb = (tb - 0x4b400000u + 127u) << 23; /* 2^n */
    float s;
    memcpy(&s, &sb, sizeof s);
    float e = y * s;
    return x < CPU_EXP_LO ? 0.0f : e;
}

static float softmax_exp(float *x, int n, float scale)
{
    float m = -INFINITY;
    for (int i = 0; i < n; i++) {
        x[i] = x[i] * scale;
        if (x[i] > m)
            m = x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] = kexp(x[i] - m);
    return m;
}

static void swiglu(float *g, const float *u, int n)
{
    for (int i = 0; i < n; i++) {
        float d = 1.0f + kexp(-g[i]);
        g[i] = g[i] / d * u[i];
    }
}

static void geglu(float *g, const float *u, int n)
{
    for (int i = 0; i < n; i++) {
        float x = g[i], x3 = (x * x) * x, a = x + 0.044715f * x3;
        float d = 1.0f + kexp(CPU_GELU_M2C * a);
        g[i] = x / d * u[i];
    }
}

/* kern.h's int8 quantization: qdef's definition, offset when asked. */
static float quant(const float *v, int n, int8_t *q, int offset)
{
    float s = qdef_i8(v, n, q);
    for (int i = 0; offset && i < n; i++)
        q[i] = (int8_t)(uint8_t)(q[i] + 128);
    return s;
}

/* Exact int32 sums straight off the packed layout. */
static void mmq(const cpu_mmq *a, int n0, int n1, int32_t *scratch)
{
    (void)scratch;
    for (int n = n0; n < n1; n++) {
        const int8_t *w = a->w + (size_t)(n / CPU_QG) * a->K4 * 64 + (size_t)(n % CPU_QG) * 4;
        for (int m = 0; m < a->M; m++) {
            const uint8_t *x = a->x + (size_t)m * a->ldx;
            int32_t acc = 0;
            for (int k4 = 0; k4 < a->K4; k4++)
                for (int j = 0; j < 4; j++)
                    acc += ((int32_t)x[4 * k4 + j] - 128) * w[(size_t)k4 * 64 + j];
            a->y[(size_t)m * a->ldy + n] = (float)acc * a->sx[m] * a->sw[n];
        }
    }
}

static void mm_bf16dp(const cpu_mm *a, int n0, int n1, float *pack)
{
    if (a->wt == INF_BF16)
        cpu_generic_mm_bf16dp(a, n0, n1);
    else
        mm(a, n0, n1, pack);
}

const cpu_kern cpu_kern_generic = {
    .name = "generic", .mm = mm, .dot = dot, .to_f32 = to_f32,
    .wsum = wsum, .softmax_exp = softmax_exp, .swiglu = swiglu, .geglu = geglu,
    .quant = quant, .mmq = mmq,
};

const cpu_kern cpu_kern_generic_bf16 = {
    .name = "generic-bf16", .bf16dp = 1, .mm = mm_bf16dp, .dot = dot, .to_f32 = to_f32,
    .wsum = wsum, .softmax_exp = softmax_exp, .swiglu = swiglu, .geglu = geglu,
    .quant = quant, .mmq = mmq,
};
