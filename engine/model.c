/* model_: Llama-family config.json parsing and weight binding. The config is
 * read strictly: anything we would compute wrongly (another architecture,
 * rope_scaling, another activation, biases) is refused by name, and a value
 * of the wrong JSON type is a format error naming its key. */
#include "model.h"

#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Config files are a few KB; anything huge is not one. */
#define MODEL_MAX_JSON ((long)16 << 20)


/* Reads and parses a JSON object file. */
static int model__read_json(const char *path, cJSON **out, inf_err *err)
{
    *out = NULL;
    char *buf;
    int rc = inf_read_file(path, MODEL_MAX_JSON, &buf, NULL, NULL, err);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    if (!root)
        return inf_fail(err, INF_ERR_FORMAT, "%s: not valid JSON", path);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return inf_fail(err, INF_ERR_FORMAT, "%s: not a JSON object", path);
    }
    *out = root;
    return INF_OK;
}

/* key's value, or NULL when absent or null (both mean "use the default"). */
static const cJSON *model__item(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(v) ? NULL : v;
}

static int model__is_int(const cJSON *v, int *out)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!(d >= (double)INT_MIN && d <= (double)INT_MAX) || d != (double)(int)d)
        return 0;
    *out = (int)d;
    return 1;
}

/* An integer key; when absent *out keeps its default, or it is an error if
 * required. */
static int model__int(const cJSON *o, const char *key, int required, int *out,
                      const char *path, inf_err *err)
{
    const cJSON *v = model__item(o, key);
    if (!v) {
        if (required)
            return inf_fail(err, INF_ERR_FORMAT, "%s: missing required key '%s'", path, key);
        return INF_OK;
    }
    if (!model__is_int(v, out))
        return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be an integer", path, key);
    return INF_OK;
}

static int model__num(const cJSON *o, const char *key, double *out, const char *path, inf_err *err)
{
    const cJSON *v = model__item(o, key);
    if (!v)
        return INF_OK;
    if (!cJSON_IsNumber(v))
        return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be a number", path, key);
    *out = v->valuedouble;
    return INF_OK;
}

static int model__bool(const cJSON *o, const char *key, int *out, const char *path, inf_err *err)
{
    const cJSON *v = model__item(o, key);
    if (!v)
        return INF_OK;
    if (!cJSON_IsBool(v))
        return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return INF_OK;
}

/* Adds key's id (one integer or a list) to the eos set, once each. */
static int model__add_eos(model_config *c, const cJSON *o, const char *key,
                          const char *path, inf_err *err)
{
    const cJSON *v = model__item(o, key);
    if (!v)
        return INF_OK;
    const cJSON *one = v;
    int is_list = cJSON_IsArray(v);
    if (is_list)
        one = v->child;
    for (; one; one = is_list ? one->next : NULL) {
        int id;
        if (!model__is_int(one, &id))
            return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be an integer or a list of integers",
                            path, key);
        if (id < 0 || id >= c->vocab_size)
            return inf_fail(err, INF_ERR_FORMAT, "%s: %s %d is outside the vocabulary (vocab_size %d)",
                            path, key, id, c->vocab_size);
        int seen = 0;
        for (int i = 0; i < c->n_eos; i++)
            seen |= c->eos_token_ids[i] == id;
        if (seen)
            continue;
        if (c->n_eos == MODEL_MAX_EOS)
            return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: '%s' has more than %d distinct ids",
                            path, key, MODEL_MAX_EOS);
        c->eos_token_ids[c->n_eos++] = id;
    }
    return INF_OK;
}

static int model__bos(model_config *c, const cJSON *o, const char *path, inf_err *err)
{
    int rc = model__int(o, "bos_token_id", 0, &c->bos_token_id, path, err);
    if (rc)
        return rc;
    if (c->bos_token_id < -1 || c->bos_token_id >= c->vocab_size)
        return inf_fail(err, INF_ERR_FORMAT, "%s: bos_token_id %d is outside the vocabulary (vocab_size %d)",
                        path, c->bos_token_id, c->vocab_size);
    return INF_OK;
}

/* architectures[0], or model_type when there is no architectures list. */
static int model__arch(const cJSON *root, model_config *c, const char *path, inf_err *err)
{
    static const char *const ok[] = {"LlamaForCausalLM", "MistralForCausalLM"};
    const char *arch = NULL;
    const cJSON *a = model__item(root, "architectures");
    if (a) {
        const cJSON *a0 = cJSON_GetArrayItem(a, 0);
        if (!cJSON_IsArray(a) || !cJSON_IsString(a0))
            return inf_fail(err, INF_ERR_FORMAT, "%s: 'architectures' must be a list of names", path);
        arch = a0->valuestring;
    } else {
        const cJSON *t = model__item(root, "model_type");
        if (!t)
            return inf_fail(err, INF_ERR_FORMAT, "%s: neither 'architectures' nor 'model_type' is set", path);
        if (!cJSON_IsString(t))
            return inf_fail(err, INF_ERR_FORMAT, "%s: 'model_type' must be a string", path);
        if (strcmp(t->valuestring, "llama") == 0)
            arch = ok[0];
        else if (strcmp(t->valuestring, "mistral") == 0)
            arch = ok[1];
        else
            return inf_fail(err, INF_ERR_UNSUPPORTED,
                            "%s: model_type '%s' is not supported (Llama family only)", path, t->valuestring);
    }
    if (strcmp(arch, ok[0]) != 0 && strcmp(arch, ok[1]) != 0)
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "%s: architecture '%s' is not supported (Llama family only)", path, arch);
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    return INF_OK;
}

/* What we would compute wrongly rather than refuse: say so by key. */
static int model__refuse(const cJSON *root, const char *path, inf_err *err)
{
    const cJSON *rs = model__item(root, "rope_scaling");
    if (rs) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!cJSON_IsString(t))
            t = cJSON_GetObjectItemCaseSensitive(rs, "type");
        /* transformers writes {"rope_type": "default"} for plain RoPE */
        if (!(cJSON_IsString(t) && strcmp(t->valuestring, "default") == 0)) {
            if (cJSON_IsString(t))
                return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: rope_scaling (type '%s') is not supported yet",
                                path, t->valuestring);
            return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: rope_scaling is not supported yet", path);
        }
    }
    const cJSON *act = model__item(root, "hidden_act");
    if (act) {
        if (!cJSON_IsString(act))
            return inf_fail(err, INF_ERR_FORMAT, "%s: 'hidden_act' must be a string", path);
        if (strcmp(act->valuestring, "silu") != 0)
            return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu only)",
                            path, act->valuestring);
    }
    static const char *const biases[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        int on = 0;
        int rc = model__bool(root, biases[i], &on, path, err);
        if (rc)
            return rc;
        if (on)
            return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: %s true is not supported (no biases)",
                            path, biases[i]);
    }
    return INF_OK;
}

static int model__sizes(const cJSON *root, model_config *c, const char *path, inf_err *err)
{
    static const struct { const char *key; size_t off; } req[] = {
        {"hidden_size", offsetof(model_config, hidden_size)},
        {"intermediate_size", offsetof(model_config, intermediate_size)},
        {"num_hidden_layers", offsetof(model_config, n_layers)},
        {"num_attention_heads", offsetof(model_config, n_heads)},
        {"vocab_size", offsetof(model_config, vocab_size)},
    };
    int rc;
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        int *v = (int *)((char *)c + req[i].off);
        if ((rc = model__int(root, req[i].key, 1, v, path, err)))
            return rc;
        if (*v <= 0)
            return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be positive (is %d)", path, req[i].key, *v);
    }
    c->n_kv_heads = c->n_heads;
    if ((rc = model__int(root, "num_key_value_heads", 0, &c->n_kv_heads, path, err)))
        return rc;
    if (c->n_kv_heads <= 0)
        return inf_fail(err, INF_ERR_FORMAT, "%s: 'num_key_value_heads' must be positive (is %d)",
                        path, c->n_kv_heads);
    if (c->n_heads % c->n_kv_heads != 0)
        return inf_fail(err, INF_ERR_FORMAT,
                        "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                        path, c->n_heads, c->n_kv_heads);
    c->head_dim = 0;
    if ((rc = model__int(root, "head_dim", 0, &c->head_dim, path, err)))
        return rc;
    if (!model__item(root, "head_dim")) {
        if (c->hidden_size % c->n_heads != 0)
            return inf_fail(err, INF_ERR_FORMAT,
                            "%s: hidden_size (%d) is not a multiple of num_attention_heads (%d) and head_dim is not set",
                            path, c->hidden_size, c->n_heads);
        c->head_dim = c->hidden_size / c->n_heads;
    }
    if (c->head_dim <= 0 || c->head_dim % 2 != 0) /* RoPE rotates pairs */
        return inf_fail(err, INF_ERR_FORMAT, "%s: head_dim (%d) must be positive and even", path, c->head_dim);
    /* Consumers multiply these in int. */
    if ((int64_t)c->n_heads * c->head_dim > INT_MAX)
        return inf_fail(err, INF_ERR_FORMAT, "%s: num_attention_heads*head_dim is too large", path);
    return INF_OK;
}

int model_config_load(const char *path, model_config *cfg, inf_err *err)
{
    model_config c;
    memset(&c, 0, sizeof c);
    c.max_position_embeddings = 2048;
    c.rope_theta = 10000.0;
    c.rms_norm_eps = 1e-6;
    c.bos_token_id = -1;

    cJSON *root = NULL;
    int rc = model__read_json(path, &root, err);
    if (rc)
        return rc;
    if ((rc = model__arch(root, &c, path, err)) || (rc = model__refuse(root, path, err)) ||
        (rc = model__sizes(root, &c, path, err)))
        goto done;
    if ((rc = model__int(root, "max_position_embeddings", 0, &c.max_position_embeddings, path, err)) ||
        (rc = model__int(root, "sliding_window", 0, &c.sliding_window, path, err)) ||
        (rc = model__num(root, "rope_theta", &c.rope_theta, path, err)) ||
        (rc = model__num(root, "rms_norm_eps", &c.rms_norm_eps, path, err)) ||
        (rc = model__bool(root, "tie_word_embeddings", &c.tie_word_embeddings, path, err)) ||
        (rc = model__bos(&c, root, path, err)) ||
        (rc = model__add_eos(&c, root, "eos_token_id", path, err)))
        goto done;
    if (c.max_position_embeddings <= 0) {
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: 'max_position_embeddings' must be positive (is %d)",
                      path, c.max_position_embeddings);
        goto done;
    }
    if (c.sliding_window < 0) {
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: 'sliding_window' must not be negative (is %d)",
                      path, c.sliding_window);
        goto done;
    }
    if (!(c.rope_theta > 0.0) || !(c.rms_norm_eps > 0.0)) {
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be positive", path,
                      c.rope_theta > 0.0 ? "rms_norm_eps" : "rope_theta");
        goto done;
    }
    *cfg = c;
done:
    cJSON_Delete(root);
    return rc;
}

/* generation_config.json adds its eos ids, and a bos id config.json lacks. */
static int model__gen_config(const char *path, model_config *c, inf_err *err)
{
    cJSON *root = NULL;
    int rc = model__read_json(path, &root, err);
    if (rc)
        return rc;
    int bos = c->bos_token_id;
    if (!(rc = model__bos(c, root, path, err)) && bos >= 0)
        c->bos_token_id = bos;
    if (!rc)
        rc = model__add_eos(c, root, "eos_token_id", path, err);
    cJSON_Delete(root);
    return rc;
}

/* Which dimension of the config a tensor's rows or cols must equal. */
typedef enum { DIM_1, DIM_D, DIM_F, DIM_V, DIM_Q, DIM_KV } model__dim;

static int64_t model__dim_value(const model_config *c, model__dim d)
{
    switch (d) {
    case DIM_D: return c->hidden_size;
    case DIM_F: return c->intermediate_size;
    case DIM_V: return c->vocab_size;
    case DIM_Q: return (int64_t)c->n_heads * c->head_dim;
    case DIM_KV: return (int64_t)c->n_kv_heads * c->head_dim;
    default: return 1;
    }
}

static const char *model__dim_key(model__dim d)
{
    switch (d) {
    case DIM_D: return "hidden_size";
    case DIM_F: return "intermediate_size";
    case DIM_V: return "vocab_size";
    case DIM_Q: return "num_attention_heads*head_dim";
    case DIM_KV: return "num_key_value_heads*head_dim";
    default: return "1";
    }
}

static void model__shape_str(const st_tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* What the weights were opened from, for "missing tensor" messages. */
typedef struct model__binder {
    const model *m;
    char src[256];
} model__binder;

/* Binds name, which must be [rows, cols] (rows DIM_1: a 1-D [cols]). */
static int model__bind(const model__binder *b, const char *name, model__dim rows, model__dim cols,
                       model_tensor *out, inf_err *err)
{
    const model_config *c = &b->m->cfg;
    const st_tensor *t = st_find(b->m->st, name);
    if (!t)
        return inf_fail(err, INF_ERR_FORMAT, "%s: missing tensor '%s'", b->src, name);
    if (t->dtype == INF_DTYPE_NONE)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; weights must be F32, F16 or BF16",
                        t->file, name, t->dtype_name);
    int64_t r = model__dim_value(c, rows), k = model__dim_value(c, cols);
    int ok = rows == DIM_1 ? (t->ndim == 1 && t->shape[0] == k)
                           : (t->ndim == 2 && t->shape[0] == r && t->shape[1] == k);
    if (!ok) {
        char got[ST_MAX_DIMS * 24 + 3];
        model__shape_str(t, got, sizeof got);
        if (rows == DIM_1)
            return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%lld] (%s)",
                            t->file, name, got, (long long)k, model__dim_key(cols));
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%lld, %lld] (%s, %s)",
                        t->file, name, got, (long long)r, (long long)k, model__dim_key(rows),
                        model__dim_key(cols));
    }
    out->dtype = t->dtype;
    out->data = t->data;
    out->rows = r;
    out->cols = k;
    out->name = t->name;
    return INF_OK;
}

/* The single file, or the index and its shard count. */
static int model__source(model__binder *b, inf_err *err)
{
    const model *m = b->m;
    char *index = inf_path_join(m->dir, "model.safetensors.index.json");
    char *single = inf_path_join(m->dir, "model.safetensors");
    int n = st_count(m->st), n_files = 0;
    const char **files = malloc((size_t)(n > 0 ? n : 1) * sizeof *files);
    int rc = INF_OK;
    if (!index || !single || !files) {
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", m->dir);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const char *f = st_get(m->st, i)->file;
        int seen = 0;
        for (int j = 0; j < n_files && !seen; j++)
            seen = strcmp(files[j], f) == 0;
        if (!seen)
            files[n_files++] = f;
    }
    struct stat sb;
    if (stat(index, &sb) == 0)
        snprintf(b->src, sizeof b->src, "%s (%d shard%s)", index, n_files, n_files == 1 ? "" : "s");
    else
        snprintf(b->src, sizeof b->src, "%s", n_files == 1 ? files[0] : single);
done:
    free(files);
    free(index);
    free(single);
    return rc;
}

static int model__bind_all(model *m, inf_err *err)
{
    static const struct { const char *suffix; size_t off; model__dim rows, cols; } per_layer[] = {
        {"input_layernorm.weight", offsetof(model_layer, attn_norm), DIM_1, DIM_D},
        {"self_attn.q_proj.weight", offsetof(model_layer, wq), DIM_Q, DIM_D},
        {"self_attn.k_proj.weight", offsetof(model_layer, wk), DIM_KV, DIM_D},
        {"self_attn.v_proj.weight", offsetof(model_layer, wv), DIM_KV, DIM_D},
        {"self_attn.o_proj.weight", offsetof(model_layer, wo), DIM_D, DIM_Q},
        {"post_attention_layernorm.weight", offsetof(model_layer, ffn_norm), DIM_1, DIM_D},
        {"mlp.gate_proj.weight", offsetof(model_layer, w_gate), DIM_F, DIM_D},
        {"mlp.up_proj.weight", offsetof(model_layer, w_up), DIM_F, DIM_D},
        {"mlp.down_proj.weight", offsetof(model_layer, w_down), DIM_D, DIM_F},
    };
    model__binder b = {.m = m};
    int rc = model__source(&b, err);
    if (rc)
        return rc;
    if ((rc = model__bind(&b, "model.embed_tokens.weight", DIM_V, DIM_D, &m->embed, err)) ||
        (rc = model__bind(&b, "model.norm.weight", DIM_1, DIM_D, &m->norm, err)))
        return rc;
    if (st_find(m->st, "lm_head.weight")) {
        rc = model__bind(&b, "lm_head.weight", DIM_V, DIM_D, &m->lm_head, err);
    } else if (m->cfg.tie_word_embeddings) {
        m->lm_head = m->embed;
    } else {
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: missing tensor 'lm_head.weight' (tie_word_embeddings is false)",
                      b.src);
    }
    if (rc)
        return rc;
    for (int i = 0; i < m->cfg.n_layers; i++) {
        for (size_t j = 0; j < sizeof per_layer / sizeof per_layer[0]; j++) {
            char name[160];
            snprintf(name, sizeof name, "model.layers.%d.%s", i, per_layer[j].suffix);
            model_tensor *t = (model_tensor *)((char *)&m->layers[i] + per_layer[j].off);
            if ((rc = model__bind(&b, name, per_layer[j].rows, per_layer[j].cols, t, err)))
                return rc;
        }
    }
    return INF_OK;
}

int model_load(const char *dir, model **out, inf_err *err)
{
    *out = NULL;
    char *path = NULL;
    model *m = calloc(1, sizeof *m);
    int rc;
    if (!m || !(m->dir = strdup(dir)) || !(path = inf_path_join(dir, "config.json"))) {
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    if ((rc = model_config_load(path, &m->cfg, err)))
        goto fail;
    free(path);
    if (!(path = inf_path_join(dir, "generation_config.json"))) {
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    struct stat sb;
    if ((stat(path, &sb) == 0 || errno != ENOENT) && (rc = model__gen_config(path, &m->cfg, err)))
        goto fail;
    if ((rc = st_open_dir(dir, &m->st, err)))
        goto fail;
    if (!(m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers))) {
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    if ((rc = model__bind_all(m, err)))
        goto fail;
    free(path);
    *out = m;
    return INF_OK;
fail:
    free(path);
    model_destroy(m);
    return rc;
}

void model_destroy(model *m)
{
    if (!m)
        return;
    st_destroy(m->st);
    free(m->layers);
    free(m->dir);
    free(m);
}

static size_t model__bytes(const model_tensor *t)
{
    return (size_t)t->rows * (size_t)t->cols * inf_dtype_size(t->dtype);
}

size_t model_weight_bytes(const model *m)
{
    if (!m)
        return 0;
    /* The embedding is a row lookup per token, not a matrix read: it counts
     * only as the lm_head, once, when tied. */
    size_t n = model__bytes(&m->norm) + model__bytes(&m->lm_head);
    for (int i = 0; i < m->cfg.n_layers; i++) {
        const model_layer *l = &m->layers[i];
        const model_tensor *ts[] = {&l->attn_norm, &l->wq, &l->wk, &l->wv, &l->wo,
                                    &l->ffn_norm, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
            n += model__bytes(ts[j]);
    }
    return n;
}

void model_prefetch(const model *m, void (*progress)(void *user, size_t done, size_t total),
                    void *user)
{
    size_t total = st_data_bytes(m->st), done = 0, next_report = 0;
    volatile unsigned char sink = 0;
    for (int i = 0; i < st_count(m->st); i++) {
        const st_tensor *t = st_get(m->st, i);
        const unsigned char *p = t->data;
        for (size_t off = 0; off < t->nbytes; off += 4096) {
            sink ^= p[off];
            size_t now = done + (off + 4096 < t->nbytes ? off + 4096 : t->nbytes);
            if (progress && now >= next_report) {
                progress(user, now, total);
                next_report = now + total / 100 + 1;
            }
        }
        done += t->nbytes;
    }
    (void)sink;
    if (progress)
        progress(user, total, total);
}

int model_context(const model_config *cfg)
{
    int n = cfg->max_position_embeddings;
    return cfg->sliding_window > 0 && cfg->sliding_window < n ? cfg->sliding_window : n;
}
