/* hfq_: compressed-tensors checkpoints (llm-compressor, vLLM): the
 * config's scheme checked field by field; W8A8 int8 linears bound as their
 * I8 weights and per-row f32 scales for the int8 kernels (hfq.h). FP8's
 * scheme and weights are in hfq_fp8.c, pack-quantized's in hfq_pack.c. */
#include "hfq_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT "compressed-tensors"

int hfq__jbool(const cJSON *o, const char *k, int def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v))
        return def;
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

static int is_null(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return !v || cJSON_IsNull(v);
}

const char *hfq__shown(const cJSON *o, const char *k)
{
    const char *s = hfq__jstr(o, k);
    return s ? s : "<absent or not a string>";
}

int hfq__ct_args(const cJSON *a, const char *path, const char *g, const char *what, int fp8,
                 inf_err *err)
{
    if (!cJSON_IsObject(a))
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " config_groups.%s.%s is not an object",
                        path, g, what);
    const char *type = hfq__jstr(a, "type");
    if (!type || strcmp(type, fp8 ? "float" : "int"))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.%s.type '%s' is "
                        "not supported%s", path, g, what, hfq__shown(a, "type"),
                        fp8 ? " in an FP8 scheme (float)"
                            : " (int; float weights are format float-quantized)");
    int bits = hfq__jint(a, "num_bits", -1000);
    if (bits != 8)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.%s.num_bits %d "
                        "is not supported%s", path, g, what, bits,
                        fp8 ? " with type float (8: FP8 E4M3)" : " (8)");
    if (hfq__jbool(a, "symmetric", 1) != 1)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.%s.symmetric "
                        "false is not supported (zero points; symmetric %s only)", path, g, what,
                        fp8 ? "FP8" : "int8");
    return INF_OK;
}

int hfq__ct_wscope(const cJSON *w, const char *path, const char *g, const char *scheme,
                   inf_err *err)
{
    const char *ws = hfq__jstr(w, "strategy");
    if (!ws || (strcmp(ws, "channel") && strcmp(ws, "tensor")))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.weights.strategy "
                        "'%s' is not supported%s (channel, tensor)", path, g,
                        hfq__shown(w, "strategy"), scheme);
    if (hfq__jbool(w, "dynamic", 0) != 0)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.weights.dynamic "
                        "must be false", path, g);
    return INF_OK;
}

/* The int8 scheme (W8A8) of group g past the fields every scheme shares:
 * activations per token and dynamic, or per tensor and static (*stat 1). */
static int ct_int8(const cJSON *grp, const char *path, const char *g, int *stat, inf_err *err)
{
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(grp, "weights");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(grp, "input_activations");
    int rc;
    if ((rc = hfq__ct_args(w, path, g, "weights", 0, err)))
        return rc;
    if ((rc = hfq__ct_wscope(w, path, g, "", err)))
        return rc;
    if (!a || cJSON_IsNull(a))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.input_activations "
                        "null (weight-only int8) is not supported (W8A8: int8 activations per "
                        "token or static per tensor; W8A16 checkpoints are format "
                        "pack-quantized)", path, g);
    if ((rc = hfq__ct_args(a, path, g, "input_activations", 0, err)))
        return rc;
    int dyn = hfq__jbool(a, "dynamic", 0);
    const char *as = hfq__jstr(a, "strategy");
    if (dyn < 0)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " config_groups.%s.input_activations"
                        ".dynamic must be true or false", path, g);
    if (!as || strcmp(as, dyn ? "token" : "tensor"))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.input_activations"
                        ".strategy '%s' is not supported with dynamic %s (%s)", path, g,
                        hfq__shown(a, "strategy"), dyn ? "true" : "false",
                        dyn ? "token" : "tensor: one static input_scale per linear");
    *stat = !dyn;
    return INF_OK;
}

/* Group g: *kind HFQ_CT_FP8 for format float-quantized (or naive-quantized
 * with float weights, which stores the same F8_E4M3), HFQ_CT_PACK (*pack
 * filled) for pack-quantized, else HFQ_CT_INT8. */
static int ct_group(const cJSON *grp, const char *path, const char *g, const char *fmt,
                    hfq_kind *kind, hfq_pack *pack, inf_err *err)
{
    if (!cJSON_IsObject(grp))
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " config_groups.%s is not an object",
                        path, g);
    const char *gf = hfq__jstr(grp, "format"); /* newer files: per group */
    fmt = gf ? gf : fmt;
    if (!fmt)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " quantization_config has no format",
                        path);
    if (strcmp(fmt, "int-quantized") && strcmp(fmt, "naive-quantized") &&
        strcmp(fmt, "float-quantized") && strcmp(fmt, "pack-quantized"))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " format '%s' is not supported "
                        "(int-quantized, float-quantized, pack-quantized, naive-quantized)", path,
                        fmt);
    const cJSON *tg = cJSON_GetObjectItemCaseSensitive(grp, "targets");
    if (!cJSON_IsArray(tg) || !cJSON_GetArraySize(tg))
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " config_groups.%s.targets must be a "
                        "non-empty list", path, g);
    if (!is_null(grp, "output_activations"))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.output_activations "
                        "are not supported (null)", path, g);
    if (!strcmp(fmt, "pack-quantized")) {
        *kind = HFQ_CT_PACK;
        return hfq__pack_group(grp, path, g, pack, err);
    }
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(grp, "weights");
    const char *wt = cJSON_IsObject(w) ? hfq__jstr(w, "type") : NULL;
    int fp8 = !strcmp(fmt, "float-quantized") ||
              (!strcmp(fmt, "naive-quantized") && wt && !strcmp(wt, "float"));
    if (fp8) {
        *kind = HFQ_CT_FP8;
        return hfq__fp8_group(grp, path, g, err);
    }
    int stat = 0, rc = ct_int8(grp, path, g, &stat, err);
    *kind = stat ? HFQ_CT_INT8S : HFQ_CT_INT8;
    return rc;
}

static const char *kind_name(hfq_kind k)
{
    return k == HFQ_CT_FP8 ? "FP8" : k == HFQ_CT_PACK ? "pack-quantized"
           : k == HFQ_CT_INT8S ? "static int8" : "int8";
}

int hfq__ct_open(const cJSON *qc, const char *path, hfq_kind *kind, hfq_pack *pack,
                 inf_err *err)
{
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(qc, "config_groups");
    if (!cJSON_IsObject(groups) || !groups->child)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " quantization_config has no "
                        "config_groups", path);
    if (!is_null(qc, "kv_cache_scheme"))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " kv_cache_scheme is not supported "
                        "(null: the KV cache stays f32)", path);
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(qc, "sparsity_config");
    if (sp && !cJSON_IsNull(sp) && !(cJSON_IsObject(sp) && !sp->child)) { /* {}: none */
        const char *f = cJSON_IsObject(sp) ? hfq__jstr(sp, "format") : NULL;
        if (!f || strcmp(f, "dense"))
            return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " sparsity_config format '%s' is "
                            "not supported (none, dense)", path, f ? f : "?");
    }
    const char *fmt = hfq__jstr(qc, "format");
    for (const cJSON *g = groups->child; g; g = g->next) {
        hfq_kind k = HFQ_CT_INT8;
        hfq_pack pk = {0};
        int rc = ct_group(g, path, g->string ? g->string : "?", fmt, &k, &pk, err);
        if (rc)
            return rc;
        if (g != groups->child && k != *kind)
            return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups mix %s and %s "
                            "schemes (one scheme per checkpoint)", path, kind_name(*kind),
                            kind_name(k));
        if (g != groups->child && k == HFQ_CT_PACK && memcmp(&pk, pack, sizeof pk))
            return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: " CT " config_groups.%s.weights "
                            "differ from config_groups.%s's (one pack-quantized scheme per "
                            "checkpoint)", path, g->string ? g->string : "?",
                            groups->child->string ? groups->child->string : "?");
        *kind = k;
        *pack = pk;
    }
    return INF_OK;
}

static int64_t numel(const st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

int hfq__ct_scales(hfq *q, const st_set *st, const char *name, int64_t rows, float **out,
                   inf_err *err)
{
    size_t len = strlen(name);
    char part[256];
    if (len < 6 || len - 6 + 18 >= sizeof part || strcmp(name + len - 6, "weight"))
        return inf_fail(err, INF_ERR_FORMAT, "%s: missing tensor '%s'", q->path, name);
    snprintf(part, sizeof part, "%.*sweight_zero_point", (int)(len - 6), name);
    const st_tensor *zp = st_find(st, part);
    if (zp) /* symmetric files may carry all-zero points: any dtype's zero is zero bits */
        for (size_t i = 0; i < zp->nbytes; i++)
            if (((const uint8_t *)zp->data)[i])
                return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor '%s' holds a nonzero zero "
                                "point; only symmetric schemes are supported", zp->file, part);
    snprintf(part, sizeof part, "%.*sweight_scale", (int)(len - 6), name);
    const st_tensor *s = st_find(st, part);
    if (!s)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " checkpoint without tensor '%s'", q->path,
                        part);
    int64_t ns = numel(s);
    if (s->dtype == INF_DTYPE_NONE || (ns != rows && ns != 1) ||
        (ns == rows && ns != 1 && s->ndim != 1 && !(s->ndim == 2 && s->shape[1] == 1)))
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be F32, BF16 or F16 of shape "
                        "[%lld, 1] (channel) or one value (tensor)", s->file, part,
                        (long long)rows);
    float *sc = hfq__keep(q, (size_t)rows);
    if (!sc)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for %s", q->path, part);
    for (int64_t n = 0; n < rows; n++) {
        sc[n] = hfq__float_at(s, ns == 1 ? 0 : (size_t)n);
        if (!isfinite(sc[n]))
            return inf_fail(err, INF_ERR_FORMAT, "%s: %s[%lld] is not finite", s->file, part,
                            (long long)n);
    }
    *out = sc;
    return INF_OK;
}

int hfq__ct_linear(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                   const char *dtype, const char *scheme, const st_tensor **w, float **sc,
                   inf_err *err)
{
    const st_tensor *t = st_find(st, name);
    if (!t)
        return inf_fail(err, INF_ERR_FORMAT, "%s: missing tensor '%s'", q->path, name);
    if (strcmp(t->dtype_name, dtype))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; a " CT " %s "
                        "checkpoint's linears are %s (others F32, F16 or BF16)", t->file, name,
                        t->dtype_name, scheme, dtype);
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be %s [%lld, %lld]", t->file,
                        name, dtype, (long long)rows, (long long)cols);
    *w = t;
    return hfq__ct_scales(q, st, name, rows, sc, err);
}

/* name's P.input_scale: one finite positive value (F32, BF16 or F16). */
static int ct_input_scale(const st_set *st, const char *name, const char *file, float *out,
                          inf_err *err)
{
    size_t len = strlen(name);
    char part[256];
    snprintf(part, sizeof part, "%.*sinput_scale", (int)(len - 6), name);
    const st_tensor *s = st_find(st, part);
    if (!s)
        return inf_fail(err, INF_ERR_FORMAT, "%s: " CT " static int8 checkpoint without tensor "
                        "'%s'", file, part);
    if (s->dtype == INF_DTYPE_NONE || numel(s) != 1)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' must be one F32, BF16 or F16 value",
                        s->file, part);
    *out = hfq__float_at(s, 0);
    if (!isfinite(*out) || !(*out > 0))
        return inf_fail(err, INF_ERR_FORMAT, "%s: %s is %g; a static input scale is finite and "
                        "positive", s->file, part, (double)*out);
    return INF_OK;
}

int hfq__ct_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                 model_tensor *out, inf_err *err)
{
    const st_tensor *w;
    float *sc;
    int rc = hfq__ct_linear(q, st, name, rows, cols, "I8", "int8", &w, &sc, err);
    if (rc)
        return rc;
    float in = 0; /* dynamic */
    if (q->kind == HFQ_CT_INT8S && (rc = ct_input_scale(st, name, w->file, &in, err)))
        return rc;
    hfq__out(out, rows, cols, w->name);
    out->q8 = w->data;
    out->q8_scale = sc;
    out->q8_in_scale = in;
    return INF_OK;
}
