#include "spec_mlp_load.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfgjson.h"
#include "st.h"

static int json_int(const cJSON *o, const char *key, int dflt, const char *path, int *out,
                    inf_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (dflt < 0)
            return inf_fail(err, INF_ERR_FORMAT, "%s: missing required key '%s'", path, key);
        *out = dflt;
        return INF_OK;
    }
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
        return INF_OK;
    }
    int i = 0;
    if (!cfgj_is_int(v, &i) || i < 0)
        return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be a non-negative integer", path,
                        key);
    *out = i;
    return INF_OK;
}

static int is_mlp_config(const cJSON *c)
{
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c, "model_type");
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(c, "architectures");
    const cJSON *a0 = cJSON_IsArray(ar) ? cJSON_GetArrayItem(ar, 0) : NULL;
    return (cJSON_IsString(mt) && !strcmp(mt->valuestring, "mlp_speculator")) ||
           (cJSON_IsString(a0) && !strcmp(a0->valuestring, "MLPSpeculatorPreTrainedModel"));
}

int spec_mlp_detect(const char *dir)
{
    char *path = inf_path_join(dir, "config.json"), *buf = NULL;
    int missing = 0, is = 0;
    if (path && inf_read_file(path, 1 << 20, &buf, NULL, &missing, NULL) == INF_OK) {
        cJSON *c = cJSON_Parse(buf);
        is = cJSON_IsObject(c) && is_mlp_config(c);
        cJSON_Delete(c);
    }
    free(buf);
    free(path);
    return is;
}

static int read_config(spec_mlp_ckpt *m, const char *dir, inf_err *err)
{
    char *path = inf_path_join(dir, "config.json"), *buf = NULL;
    if (!path)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    int rc = inf_read_file(path, 1 << 20, &buf, NULL, NULL, err);
    cJSON *c = rc ? NULL : cJSON_Parse(buf);
    free(buf);
    if (!rc && !cJSON_IsObject(c))
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: not a JSON object", path);
    if (!rc) {
        if (!is_mlp_config(c))
            rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: not an MLP speculator (model_type "
                          "\"mlp_speculator\" or architectures "
                          "[\"MLPSpeculatorPreTrainedModel\"])", path);
    }
    int topk = 0, ncand = 0;
    if (!rc && !(rc = json_int(c, "vocab_size", -1, path, &m->vocab, err)) &&
        !(rc = json_int(c, "emb_dim", -1, path, &m->emb_dim, err)) &&
        !(rc = json_int(c, "inner_dim", 0, path, &m->inner, err)) &&
        !(rc = json_int(c, "n_predict", -1, path, &m->n_predict, err)) &&
        /* a list per head in IBM's configs; vLLM (and inferd) follow one
         * candidate path, so its values are not used */
        (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(c, "top_k_tokens_per_head")) ||
         !(rc = json_int(c, "top_k_tokens_per_head", 1, path, &topk, err))) &&
        !(rc = json_int(c, "n_candidates", 1, path, &ncand, err)) &&
        !(rc = json_int(c, "tie_weights", 0, path, &m->tie, err)))
        rc = json_int(c, "scale_input", 0, path, &m->scale_input, err);
    if (!rc && !m->inner)
        m->inner = m->emb_dim;
    if (!rc && (m->vocab < 1 || m->emb_dim < 1 || m->n_predict < 1 || m->n_predict > 32))
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: vocab_size, emb_dim and n_predict must be >= 1 "
                      "(n_predict at most 32)", path);
    if (!rc && m->tie && m->n_predict < 2)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: tie_weights needs n_predict >= 2", path);
    cJSON_Delete(c);
    free(path);
    return rc;
}

/* Tensor "[speculator.]kind.i.suffix" of rows x cols, widened into dst;
 * with dst NULL only found and its shape and dtype checked. */
static int load_tensor(const st_set *st, const char *dir, const char *kind, int i,
                       const char *suffix, int64_t rows, int64_t cols, float *dst, inf_err *err)
{
    char name[160], bare[128];
    snprintf(bare, sizeof bare, "%s.%d.%s", kind, i, suffix);
    snprintf(name, sizeof name, "speculator.%s", bare);
    const st_tensor *t = st_find(st, name);
    if (!t)
        t = st_find(st, bare);
    if (!t)
        return inf_fail(err, INF_ERR_FORMAT, "%s: the speculator has no tensor %s", dir, name);
    int64_t r = t->ndim >= 1 ? t->shape[0] : 0, c = t->ndim == 2 ? t->shape[1] : 1;
    if (t->ndim < 1 || t->ndim > 2 || r != rows || c != cols)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor %s has shape [%lld%s%lld], expected "
                        "[%lld, %lld]", dir, t->name, (long long)r, t->ndim == 2 ? ", " : " x ",
                        (long long)(t->ndim == 2 ? c : 1), (long long)rows, (long long)cols);
    if (t->dtype == INF_DTYPE_NONE)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s (f32, f16 or "
                        "bf16)", dir, t->name, t->dtype_name);
    if (!dst)
        return INF_OK;
    /* safetensors does not promise aligned data: read each value by memcpy */
    size_t n = (size_t)(rows * cols);
    const unsigned char *d = t->data;
    for (size_t k = 0; k < n; k++) {
        if (t->dtype == INF_F32) {
            memcpy(&dst[k], d + 4 * k, 4);
        } else {
            uint16_t h;
            memcpy(&h, d + 2 * k, 2);
            dst[k] = t->dtype == INF_F16 ? inf_f16_to_f32(h) : inf_bf16_to_f32(h);
        }
    }
    return INF_OK;
}

/* Walks every tensor the config calls for, in the arena's order: with p
 * NULL it only checks them (so a config's sizes are never allocated before
 * the file is known to hold them), else it loads them and points the
 * stages into p. */
static int walk_weights(spec_mlp_ckpt *m, const st_set *st, const char *dir, float *p, inf_err *err)
{
    int n_sets = m->tie ? 1 : m->n_predict, n_proj = m->tie ? 2 : m->n_predict;
    size_t V = (size_t)m->vocab, I = (size_t)m->inner;
    int rc = INF_OK;
    for (int i = 0; i < n_sets && !rc; i++) {
        spec_mlp_stage_w *s = &m->stage[i];
        float *emb = p, *head = p ? p + V * I : NULL, *ln_w = p ? head + V * I : NULL,
              *ln_b = p ? ln_w + I : NULL;
        if (p) {
            s->emb = emb, s->head = head, s->ln_w = ln_w, s->ln_b = ln_b;
            p = ln_b + I;
        }
        if (!(rc = load_tensor(st, dir, "emb", i, "weight", m->vocab, m->inner, emb, err)) &&
            !(rc = load_tensor(st, dir, "head", i, "weight", m->vocab, m->inner, head, err)) &&
            !(rc = load_tensor(st, dir, "ln", i, "weight", m->inner, 1, ln_w, err)))
            rc = load_tensor(st, dir, "ln", i, "bias", m->inner, 1, ln_b, err);
    }
    for (int i = 0; i < n_proj && !rc; i++) {
        int in = i == 0 ? m->emb_dim : m->inner;
        if (p)
            m->stage[i].proj = p;
        rc = load_tensor(st, dir, "proj", i, "weight", m->inner, in, p, err);
        if (p)
            p += (size_t)in * I;
    }
    return rc;
}

static int load_weights(spec_mlp_ckpt *m, const char *dir, inf_err *err)
{
    st_set *st = NULL;
    int rc = st_open_dir(dir, &st, err);
    if (rc)
        return rc;
    m->stage = calloc((size_t)m->n_predict, sizeof *m->stage);
    if (!m->stage)
        rc = inf_fail(err, INF_ERR_NOMEM, "out of memory");
    if (!rc)
        rc = walk_weights(m, st, dir, NULL, err);
    /* distinct weight sets: untied, one per stage; tied, one (proj: two);
     * every size is now one the file holds, so none of this overflows */
    int n_sets = m->tie ? 1 : m->n_predict, n_proj = m->tie ? 2 : m->n_predict;
    size_t V = (size_t)m->vocab, I = (size_t)m->inner, E = (size_t)m->emb_dim;
    size_t total = (2 * V * I + 2 * I) * n_sets + E * I + (size_t)(n_proj - 1) * I * I;
    if (!rc && !(m->arena = malloc(sizeof(float) * total)))
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for the speculator's %zu weights",
                      dir, total);
    if (!rc)
        rc = walk_weights(m, st, dir, m->arena, err);
    const float *proj1 = m->tie && !rc ? m->stage[1].proj : NULL;
    for (int i = 1; i < m->n_predict && proj1; i++) {
        m->stage[i] = m->stage[0];
        m->stage[i].proj = proj1;
    }
    st_destroy(st);
    return rc;
}

int spec_mlp_ckpt_load(const char *dir, spec_mlp_ckpt *out, inf_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = read_config(out, dir, err);
    if (!rc)
        rc = load_weights(out, dir, err);
    if (rc)
        spec_mlp_ckpt_free(out);
    return rc;
}

void spec_mlp_ckpt_free(spec_mlp_ckpt *c)
{
    if (!c)
        return;
    free(c->arena);
    free(c->stage);
    c->arena = NULL;
    c->stage = NULL;
}
