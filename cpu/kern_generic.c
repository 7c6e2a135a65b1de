/* Portable kernels: the canonical reduction (see kern.h) spelled out with
 * plain arrays and fmaf(). Slow, exact, and the oracle the SIMD tables are
 * tested against bit for bit. */
#include "cpu/kern.h"

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

/* The 16-lane tree of kern.h. */
static float tree16(const float v[CPU_LANES])
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
        float s = tree16(lane);
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

static void axpy(float a, const float *x, float *y, int n)
{
    for (int i = 0; i < n; i++)
        y[i] = fmaf(a, x[i], y[i]);
}

static void to_f32(const void *w, inf_dtype wt, float *out, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = w_at(w, wt, (size_t)i);
}

const cpu_kern cpu_kern_generic = {
    .name = "generic", .mm = mm, .dot = dot, .axpy = axpy, .to_f32 = to_f32,
};
