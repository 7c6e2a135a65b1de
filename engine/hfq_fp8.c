/* hfq_: compressed-tensors FP8 checkpoints (llm-compressor's FP8 and
 * FP8-dynamic schemes, format float-quantized): each linear's F8_E4M3
 * weights dequantized once at load to f32, W[n][k] = e4m3(q[n][k]) *
 * scale[n]. Activations then run unquantized, as vLLM's weight-only FP8
 * fallback does on GPUs without FP8 arithmetic (hfq.h). */
#include "hfq_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define CT "compressed-tensors"

int hfq__fp8_group(const cJSON *grp, const char *path, const char *g, inf_err *err)
{
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(grp, "weights");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(grp, "input_activations");
    int rc;
    if ((rc = hfq__ct_args(w, path, g, "weights", 1, err)))
        return rc;
    if ((rc = hfq__ct_wscope(w, path, g, " in an FP8 scheme", err)))
        return rc;
    if (!a || cJSON_IsNull(a)) /* weight-only FP8 */
        return INF_OK;
    if ((rc = hfq__ct_args(a, path, g, "input_activations", 1, err)))
        return rc;
    /* FP8-dynamic (per token, dynamic) or FP8 (per tensor, a static
     * input_scale tensor per linear). Both are accepted because activations
     * are not quantized at all: the weights are dequantized to f32 and the
     * layer runs in f32, so a static input_scale is read by nobody. */
    const char *as = hfq__jstr(a, "strategy");
    int dyn = hfq__jbool(a, "dynamic", 0);
    if (!as || !((!strcmp(as, "token") && dyn == 1) || (!strcmp(as, "tensor") && dyn == 0)))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.input_activations"
                        ".strategy '%s' with dynamic %s is not supported in an FP8 scheme (token "
                        "dynamic, tensor static)", path, g, hfq__shown(a, "strategy"),
                        dyn == 1 ? "true" : dyn == 0 ? "false" : "not a boolean");
    return INF_OK;
}

/* OCP FP8 E4M3 ("fn": no infinities) code c as f32, exactly: sign, 4
 * exponent bits of bias 7, 3 mantissa bits; exponent 0 is subnormal,
 * m/8 * 2^-6; S.1111.111 is NaN. */
static float e4m3(unsigned c)
{
    unsigned e = c >> 3 & 15, m = c & 7;
    float v = e == 15 && m == 7 ? NAN
              : e ? ldexpf((float)(8 + m), (int)e - 10) /* (1 + m/8) 2^(e-7) */
                  : ldexpf((float)m, -9);               /* m/8 2^-6          */
    return c & 0x80 ? -v : v;
}

/* d[n][k] = e4m3(w[n][k]) * sc[n] (hfq__convert's fn: src the weight, aux its
 * scales); w's codes hold no NaN (checked at bind). */
static void fp8_convert(const void *src, const void *aux, int arg, const model_tensor *o,
                        void *dst)
{
    (void)arg;
    const uint8_t *p = ((const st_tensor *)src)->data;
    const float *sc = aux;
    float *d = dst, lut[256];
    for (unsigned c = 0; c < 256; c++)
        lut[c] = e4m3(c);
    for (int64_t n = 0; n < o->rows; n++)
        for (int64_t k = 0; k < o->cols; k++) {
            size_t i = (size_t)n * (size_t)o->cols + (size_t)k;
            d[i] = lut[p[i]] * sc[n];
        }
}

int hfq__fp8_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                  model_tensor *out, inf_err *err)
{
    const st_tensor *w;
    float *sc;
    int rc = hfq__ct_linear(q, st, name, rows, cols, "F8_E4M3", "FP8", &w, &sc, err);
    if (rc)
        return rc;
    const uint8_t *p = w->data;
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++) /* at load, lazy or not */
        if ((p[i] & 0x7F) == 0x7F)
            return inf_fail(err, INF_ERR_FORMAT, "%s: %s[%lld][%lld] is an FP8 NaN (0x%02X)",
                            w->file, name, (long long)(i / (size_t)cols),
                            (long long)(i % (size_t)cols), p[i]);
    hfq__out(out, rows, cols, w->name);
    out->dtype = INF_F32;
    return hfq__convert(q, out, fp8_convert, w, sc, 0, err);
}
