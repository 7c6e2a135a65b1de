/* hfq_: FP8 checkpoints, compressed-tensors' (llm-compressor's FP8 and
 * FP8-dynamic schemes, format float-quantized) and quant_method fp8's
 * (vLLM's Fp8Config: a scale per tensor, or per block with
 * weight_block_size as DeepSeek-V3's and Qwen3's FP8 releases): each
 * linear's F8_E4M3 weights dequantized to f32, W[n][k] = e4m3(q[n][k]) *
 * the scale of its row, tensor or block. Activations then run unquantized,
 * as vLLM's weight-only FP8 fallback does on GPUs without FP8 arithmetic
 * (hfq.h). */
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

/* An FP8 linear's codes and its scales by blocks of bn rows x bk inputs:
 * W[n][k] = e4m3(w[n][k]) * s[(n / bn) * kb + k / bk], kb = ceil(K / bk).
 * Per channel is bn 1, bk K; per tensor bn N, bk K. */
typedef struct fp8_blocks {
    const st_tensor *w;
    const float *s;
    int64_t bn, bk, kb;
} fp8_blocks;

/* hfq__convert's fn: src an fp8_blocks; w's codes hold no NaN (checked at
 * bind). */
static void fp8_convert(const void *src, const void *aux, int arg, const model_tensor *o,
                        void *dst)
{
    (void)aux, (void)arg;
    const fp8_blocks *b = src;
    const uint8_t *p = b->w->data;
    float *d = dst, lut[256];
    for (unsigned c = 0; c < 256; c++)
        lut[c] = e4m3(c);
    for (int64_t n = 0; n < o->rows; n++) {
        const float *sr = b->s + (n / b->bn) * b->kb;
        for (int64_t k0 = 0; k0 < o->cols; k0 += b->bk) { /* one block's scale at a time */
            int64_t k1 = k0 + b->bk < o->cols ? k0 + b->bk : o->cols;
            float sc = sr[k0 / b->bk];
            for (int64_t k = k0; k < k1; k++) {
                size_t i = (size_t)n * (size_t)o->cols + (size_t)k;
                d[i] = lut[p[i]] * sc;
            }
        }
    }
}

/* Every code of w (name, rows x cols) checked for NaN: at load, lazy or
 * not, so a broken file fails before it serves. */
static int no_nan(const st_tensor *w, const char *name, int64_t rows, int64_t cols, inf_err *err)
{
    const uint8_t *p = w->data;
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++)
        if ((p[i] & 0x7F) == 0x7F)
            return inf_fail(err, INF_ERR_FORMAT, "%s: %s[%lld][%lld] is an FP8 NaN (0x%02X)",
                            w->file, name, (long long)(i / (size_t)cols),
                            (long long)(i % (size_t)cols), p[i]);
    return INF_OK;
}

/* out as f32 from w and its blocks' scales s (hfq__convert, a copy of
 * where they are kept by q). */
static int bind_blocks(hfq *q, const st_tensor *w, const float *s, int64_t bn, int64_t bk,
                       int64_t rows, int64_t cols, model_tensor *out, inf_err *err)
{
    fp8_blocks *b = hfq__keep_bytes(q, sizeof *b);
    if (!b)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, w->name);
    *b = (fp8_blocks){.w = w, .s = s, .bn = bn, .bk = bk, .kb = (cols + bk - 1) / bk};
    hfq__out(out, rows, cols, w->name);
    out->dtype = INF_F32;
    return hfq__convert(q, out, fp8_convert, b, NULL, 0, err);
}

int hfq__fp8_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                  model_tensor *out, inf_err *err)
{
    const st_tensor *w;
    float *sc;
    int rc = hfq__ct_linear(q, st, name, rows, cols, "F8_E4M3", "FP8", &w, &sc, err);
    if (rc || (rc = no_nan(w, name, rows, cols, err)))
        return rc;
    return bind_blocks(q, w, sc, 1, cols, rows, cols, out, err); /* a scale per row */
}

/* ---- quant_method fp8 (vLLM's Fp8Config; DeepSeek-V3's and Qwen3's FP8
 * releases with weight_block_size) ------------------------------------- */

int hfq__fp8_open(const cJSON *qc, const char *path, int block[2], inf_err *err)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(qc, "fmt");
    if (f && !cJSON_IsNull(f) && !(cJSON_IsString(f) && !strcmp(f->valuestring, "e4m3")))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: fp8 quantization_config fmt '%s' is not "
                        "supported (e4m3)", path, hfq__shown(qc, "fmt"));
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(qc, "activation_scheme");
    if (a && !cJSON_IsNull(a) &&
        !(cJSON_IsString(a) &&
          (!strcmp(a->valuestring, "dynamic") || !strcmp(a->valuestring, "static"))))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: fp8 quantization_config activation_scheme "
                        "'%s' is not supported (dynamic, static)", path,
                        hfq__shown(qc, "activation_scheme"));
    block[0] = block[1] = 0;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(qc, "weight_block_size");
    if (!b || cJSON_IsNull(b)) /* a scale per tensor */
        return INF_OK;
    int ok = cJSON_IsArray(b) && cJSON_GetArraySize(b) == 2;
    for (int i = 0; ok && i < 2; i++) {
        const cJSON *v = cJSON_GetArrayItem(b, i);
        ok = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 65536 &&
             v->valuedouble == (double)(int)v->valuedouble;
        block[i] = ok ? (int)v->valuedouble : 0;
    }
    if (!ok)
        return inf_fail(err, INF_ERR_FORMAT, "%s: fp8 quantization_config weight_block_size must "
                        "be two integers in 1..65536 ([rows, inputs])", path);
    return INF_OK;
}

/* P.<part> of linear name ("P.weight"): n finite F32 / BF16 / F16 values,
 * [r, c] (or any shape of one value when n is 1), kept by q. */
static int scales(hfq *q, const st_set *st, const char *name, const char *part, int64_t r,
                  int64_t c, float **out, inf_err *err)
{
    size_t len = strlen(name);
    char pn[300];
    snprintf(pn, sizeof pn, "%.*s%s", (int)(len - 6), name, part);
    const st_tensor *t = st_find(st, pn);
    if (!t)
        return inf_fail(err, INF_ERR_FORMAT, "%s: fp8 checkpoint without tensor '%s'", q->path,
                        pn);
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    int shaped = r * c == 1 ? n == 1 : t->ndim == 2 && t->shape[0] == r && t->shape[1] == c;
    if (t->dtype == INF_DTYPE_NONE || !shaped)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be F32, BF16 or F16 [%lld, %lld]",
                        t->file, pn, (long long)r, (long long)c);
    float *s = hfq__keep(q, (size_t)(r * c));
    if (!s)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, pn);
    for (int64_t i = 0; i < r * c; i++)
        if (!isfinite(s[i] = hfq__float_at(t, (size_t)i)))
            return inf_fail(err, INF_ERR_FORMAT, "%s: %s[%lld] is not finite", t->file, pn,
                            (long long)i);
    *out = s;
    return INF_OK;
}

int hfq__fp8m_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                   model_tensor *out, inf_err *err)
{
    const st_tensor *w = st_find(st, name);
    size_t len = strlen(name);
    if (!w || len < 6 || strcmp(name + len - 6, "weight"))
        return inf_fail(err, INF_ERR_FORMAT, "%s: missing tensor '%s'", q->path, name);
    if (strcmp(w->dtype_name, "F8_E4M3"))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; an fp8 "
                        "checkpoint's linears are F8_E4M3 (others F32, F16 or BF16)", w->file,
                        name, w->dtype_name);
    if (w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be F8_E4M3 [%lld, %lld]",
                        w->file, name, (long long)rows, (long long)cols);
    int rc = no_nan(w, name, rows, cols, err);
    if (rc)
        return rc;
    /* blocks: weight_scale_inv [ceil(N/bn), ceil(K/bk)], what multiplies
     * the codes despite its name (DeepSeek's); else weight_scale, one */
    int64_t bn = q->fp8_block[0] ? q->fp8_block[0] : rows;
    int64_t bk = q->fp8_block[0] ? q->fp8_block[1] : cols;
    float *s;
    if ((rc = scales(q, st, name, q->fp8_block[0] ? "weight_scale_inv" : "weight_scale",
                     (rows + bn - 1) / bn, (cols + bk - 1) / bk, &s, err)))
        return rc;
    return bind_blocks(q, w, s, bn, bk, rows, cols, out, err);
}
