/* model_: config.json parsing and weight binding. The config is read
 * strictly: anything we would compute wrongly is refused by name (the
 * family's recipe: mdesc.c), and a value of the wrong JSON type is a format
 * error naming its key. */
#include "model_int.h"

#include "hfq.h"

#include <math.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Adds key's id (one integer or a list) to the eos set, once each. */
static int model__add_eos(model_config *c, const cJSON *o, const char *key,
                          const char *path, inf_err *err)
{
    const cJSON *v = cfgj_item(o, key);
    if (!v)
        return INF_OK;
    const cJSON *one = v;
    int is_list = cJSON_IsArray(v);
    if (is_list)
        one = v->child;
    for (; one; one = is_list ? one->next : NULL) {
        int id;
        if (!cfgj_is_int(one, &id))
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
    int rc = cfgj_int(o, "bos_token_id", 0, &c->bos_token_id, path, err);
    if (rc)
        return rc;
    if (c->bos_token_id < -1 || c->bos_token_id >= c->vocab_size)
        return inf_fail(err, INF_ERR_FORMAT, "%s: bos_token_id %d is outside the vocabulary (vocab_size %d)",
                        path, c->bos_token_id, c->vocab_size);
    return INF_OK;
}

static int model__sizes(const cJSON *root, model_config *c, int default_hd, const char *path,
                        inf_err *err)
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
        if ((rc = cfgj_int(root, req[i].key, 1, v, path, err)))
            return rc;
        if (*v <= 0)
            return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be positive (is %d)", path, req[i].key, *v);
    }
    c->n_kv_heads = c->n_heads;
    if ((rc = cfgj_int(root, "num_key_value_heads", 0, &c->n_kv_heads, path, err)))
        return rc;
    if (c->n_kv_heads <= 0)
        return inf_fail(err, INF_ERR_FORMAT, "%s: 'num_key_value_heads' must be positive (is %d)",
                        path, c->n_kv_heads);
    if (c->n_heads % c->n_kv_heads != 0)
        return inf_fail(err, INF_ERR_FORMAT,
                        "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                        path, c->n_heads, c->n_kv_heads);
    c->head_dim = 0;
    if ((rc = cfgj_int(root, "head_dim", 0, &c->head_dim, path, err)))
        return rc;
    if (!cfgj_item(root, "head_dim") && default_hd > 0) {
        c->head_dim = default_hd;
    } else if (!cfgj_item(root, "head_dim")) {
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
    cJSON *root = NULL;
    int rc = cfgj_read(path, &root, err);
    if (rc)
        return rc;
    rc = model__config_parse(root, path, cfg, err);
    cJSON_Delete(root);
    return rc;
}

int model__config_parse(const cJSON *root, const char *path, model_config *cfg, inf_err *err)
{
    model_config c;
    memset(&c, 0, sizeof c);
    c.max_position_embeddings = 2048;
    c.rope_theta = 10000.0;
    c.rms_norm_eps = 1e-6;
    c.bos_token_id = -1;
    int rc, default_hd = 0;
    if ((rc = mdesc__family(root, &c, &default_hd, path, err)) ||
        (rc = model__sizes(root, &c, default_hd, path, err)))
        goto done;
    if (strcmp(c.desc.family, "gemma3") == 0)
        c.rope_theta = 1000000.0; /* Gemma3TextConfig's default */
    if ((rc = cfgj_int(root, "max_position_embeddings", 0, &c.max_position_embeddings, path, err)) ||
        (rc = cfgj_num(root, "rope_theta", &c.rope_theta, path, err)) ||
        (rc = cfgj_num(root, "rms_norm_eps", &c.rms_norm_eps, path, err)) ||
        (rc = cfgj_bool(root, "tie_word_embeddings", &c.tie_word_embeddings, path, err)) ||
        (rc = model__bos(&c, root, path, err)) ||
        (rc = model__add_eos(&c, root, "eos_token_id", path, err)))
        goto done;
    if (c.max_position_embeddings <= 0) {
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: 'max_position_embeddings' must be positive (is %d)",
                      path, c.max_position_embeddings);
        goto done;
    }
    if (!(c.rope_theta > 0.0) || !(c.rms_norm_eps > 0.0)) {
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be positive", path,
                      c.rope_theta > 0.0 ? "rms_norm_eps" : "rope_theta");
        goto done;
    }
    if ((rc = mdesc__parse(root, &c, path, err)))
        goto done;
    *cfg = c;
done:
    return rc;
}

/* generation_config.json adds its eos ids, and a bos id config.json lacks. */
static int model__gen_config(const char *path, model_config *c, inf_err *err)
{
    cJSON *root = NULL;
    int rc = cfgj_read(path, &root, err);
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
typedef enum { DIM_1, DIM_D, DIM_F, DIM_V, DIM_Q, DIM_KV, DIM_HD, DIM_QKV, DIM_2F } model__dim;

static int64_t model__dim_value(const model_config *c, model__dim d)
{
    switch (d) {
    case DIM_D: return c->hidden_size;
    case DIM_F: return c->intermediate_size;
    case DIM_V: return c->vocab_size;
    case DIM_Q: return (int64_t)c->n_heads * c->head_dim;
    case DIM_KV: return (int64_t)c->n_kv_heads * c->head_dim;
    case DIM_HD: return c->head_dim;
    case DIM_QKV: return (int64_t)(c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    case DIM_2F: return 2 * (int64_t)c->intermediate_size;
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
    case DIM_HD: return "head_dim";
    case DIM_QKV: return "(num_attention_heads+2*num_key_value_heads)*head_dim";
    case DIM_2F: return "2*intermediate_size";
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
    model *m;
    char src[256];
} model__binder;

/* A misaligned tensor's aligned copy, owned by the model (model.copies). */
typedef struct model_copy {
    struct model_copy *next;
    max_align_t data[]; /* the bytes, aligned for any element type */
} model_copy;

/* t's data, or, where the file leaves it misaligned for its element type
 * (safetensors does not align; U8 tensors before it shift the rest), an
 * aligned copy made once: the kernels load elements as their type. NULL
 * when out of memory. */
static const void *model__aligned(model *m, const st_tensor *t)
{
    size_t es = inf_dtype_size(t->dtype);
    if (es <= 1 || (uintptr_t)t->data % es == 0)
        return t->data;
    model_copy *c = malloc(sizeof *c + t->nbytes);
    if (!c)
        return NULL;
    memcpy(c->data, t->data, t->nbytes);
    c->next = m->copies;
    m->copies = c;
    return c->data;
}

/* Binds name, which must be [rows, cols] (rows DIM_1: a 1-D [cols]). */
static int model__bind(const model__binder *b, const char *name, model__dim rows, model__dim cols,
                       model_tensor *out, inf_err *err)
{
    const model_config *c = &b->m->cfg;
    const st_tensor *t = st_find(b->m->st, name);
    if ((!t || t->dtype == INF_DTYPE_NONE) && b->m->hfq && rows != DIM_1) /* GPTQ, AWQ, int8 */
        return hfq_bind(b->m->hfq, b->m->st, name, model__dim_value(c, rows),
                        model__dim_value(c, cols), out, err);
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
    out->data = model__aligned(b->m, t);
    if (!out->data)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory copying tensor '%s' to aligned "
                        "memory", t->file, name);
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

model_tensor model__rows(const model_tensor *t, int64_t r0, int64_t n)
{
    model_tensor v = *t;
    if (t->data)
        v.data = (const char *)t->data + (size_t)(r0 * t->cols) * inf_dtype_size(t->dtype);
    if (t->q8) {
        v.q8 = t->q8 + (size_t)(r0 * t->cols);
        v.q8_scale = t->q8_scale + r0;
    }
    if (t->q4) {
        size_t b = (size_t)(t->cols + 31) / 32;
        v.q4 = t->q4 + (size_t)r0 * (size_t)(t->cols / 2);
        v.q4_scale = t->q4_scale + (size_t)r0 * b;
        v.q4_zero = t->q4_zero + (size_t)r0 * b;
    }
    v.rows = n;
    return v;
}

/* One per-layer tensor: its name after "model.layers.N.", where it goes,
 * its shape, and which families have it. */
typedef struct model__slot {
    const char *suffix;
    size_t off;
    model__dim rows, cols;
    int when;
} model__slot;

enum { W_ALL, W_SPLIT, W_FUSED, W_LLAMA_NORM, W_SANDWICH, W_BIAS_QKV, W_BIAS_O, W_QK_NORM };

static int model__slot_on(const mdesc *d, int when)
{
    switch (when) {
    case W_SPLIT: return !d->fused_qkv;
    case W_FUSED: return d->fused_qkv;
    case W_LLAMA_NORM: return !d->sandwich;
    case W_SANDWICH: return d->sandwich;
    case W_BIAS_QKV: return d->bias_qkv;
    case W_BIAS_O: return d->bias_o;
    case W_QK_NORM: return d->qk_norm;
    default: return 1;
    }
}

#define L_(f) offsetof(model_layer, f)
/* Fused tensors land in wq / w_gate first and are split after. */
static const model__slot model__slots[] = {
    {"input_layernorm.weight", L_(attn_norm), DIM_1, DIM_D, W_ALL},
    {"self_attn.q_proj.weight", L_(wq), DIM_Q, DIM_D, W_SPLIT},
    {"self_attn.k_proj.weight", L_(wk), DIM_KV, DIM_D, W_SPLIT},
    {"self_attn.v_proj.weight", L_(wv), DIM_KV, DIM_D, W_SPLIT},
    {"self_attn.qkv_proj.weight", L_(wq), DIM_QKV, DIM_D, W_FUSED},
    {"self_attn.o_proj.weight", L_(wo), DIM_D, DIM_Q, W_ALL},
    {"self_attn.q_proj.bias", L_(bq), DIM_1, DIM_Q, W_BIAS_QKV},
    {"self_attn.k_proj.bias", L_(bk), DIM_1, DIM_KV, W_BIAS_QKV},
    {"self_attn.v_proj.bias", L_(bv), DIM_1, DIM_KV, W_BIAS_QKV},
    {"self_attn.o_proj.bias", L_(bo), DIM_1, DIM_D, W_BIAS_O},
    {"self_attn.q_norm.weight", L_(q_norm), DIM_1, DIM_HD, W_QK_NORM},
    {"self_attn.k_norm.weight", L_(k_norm), DIM_1, DIM_HD, W_QK_NORM},
    {"post_attention_layernorm.weight", L_(ffn_norm), DIM_1, DIM_D, W_LLAMA_NORM},
    {"post_attention_layernorm.weight", L_(post_attn_norm), DIM_1, DIM_D, W_SANDWICH},
    {"pre_feedforward_layernorm.weight", L_(ffn_norm), DIM_1, DIM_D, W_SANDWICH},
    {"post_feedforward_layernorm.weight", L_(post_ffn_norm), DIM_1, DIM_D, W_SANDWICH},
    {"mlp.gate_proj.weight", L_(w_gate), DIM_F, DIM_D, W_SPLIT},
    {"mlp.up_proj.weight", L_(w_up), DIM_F, DIM_D, W_SPLIT},
    {"mlp.gate_up_proj.weight", L_(w_gate), DIM_2F, DIM_D, W_FUSED},
    {"mlp.down_proj.weight", L_(w_down), DIM_D, DIM_F, W_ALL},
};
#undef L_

static int model__bind_layer(const model__binder *b, int i, model_layer *ly, inf_err *err)
{
    const model_config *c = &b->m->cfg;
    for (size_t j = 0; j < sizeof model__slots / sizeof model__slots[0]; j++) {
        const model__slot *s = &model__slots[j];
        if (!model__slot_on(&c->desc, s->when))
            continue;
        char name[160];
        snprintf(name, sizeof name, "model.layers.%d.%s", i, s->suffix);
        int rc = model__bind(b, name, s->rows, s->cols, (model_tensor *)((char *)ly + s->off), err);
        if (rc)
            return rc;
    }
    if (c->desc.fused_qkv) { /* HF splits q | k | v and gate | up by rows */
        int64_t q = model__dim_value(c, DIM_Q), kv = model__dim_value(c, DIM_KV);
        model_tensor qkv = ly->wq, gu = ly->w_gate;
        ly->wq = model__rows(&qkv, 0, q);
        ly->wk = model__rows(&qkv, q, kv);
        ly->wv = model__rows(&qkv, q + kv, kv);
        ly->w_gate = model__rows(&gu, 0, c->intermediate_size);
        ly->w_up = model__rows(&gu, c->intermediate_size, c->intermediate_size);
    }
    return INF_OK;
}

/* HF multiplies by the scale as a tensor of the activations' dtype: in a
 * bf16 or f16 checkpoint, the scale rounded to it. */
static float model__embed_scale(const model *m)
{
    float s = (float)m->cfg.desc.embed_scale;
    if (m->embed.dtype == INF_BF16)
        return inf_bf16_to_f32(inf_f32_to_bf16(s));
    if (m->embed.dtype == INF_F16)
        return inf_f16_to_f32(inf_f32_to_f16(s));
    return s;
}

/* A W8A8 checkpoint runs every layer matrix on the int8 path as stored: one
 * left in bf16 (listed in `ignore`) would be requantized, which is not the
 * checkpoint's function; the embedding and lm_head stay as stored. */
static int model__check_w8a8(const model *m, inf_err *err)
{
    if (m->embed.q8_scale || m->lm_head.q8_scale)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: '%s' is int8; inferd runs the embedding "
                        "and lm_head as stored in F32, F16 or BF16 (list it in ignore)", m->dir,
                        m->embed.q8_scale ? m->embed.name : m->lm_head.name);
    for (int i = 0; i < m->cfg.n_layers; i++) {
        const model_layer *l = &m->layers[i];
        const model_tensor *ts[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up,
                                    &l->w_down};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
            if (!ts[j]->q8_scale)
                return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: '%s' is %s in a compressed-"
                                "tensors int8 checkpoint; inferd runs one with every layer "
                                "matrix int8 (not in ignore)", m->dir, ts[j]->name,
                                inf_dtype_name(ts[j]->dtype));
    }
    return INF_OK;
}

static int model__bind_all(model *m, inf_err *err)
{
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
    m->embed_scale = model__embed_scale(m);
    for (int i = 0; i < m->cfg.n_layers; i++)
        if ((rc = model__bind_layer(&b, i, &m->layers[i], err)))
            return rc;
    return hfq_is_int8(m->hfq) ? model__check_w8a8(m, err) : INF_OK;
}

int model_load_dir(const char *dir, model **out, inf_err *err)
{
    return model_load_dir_with(dir, NULL, out, err);
}

int model_load_dir_with(const char *dir, const model_load_opts *o, model **out, inf_err *err)
{
    *out = NULL;
    char *path = NULL;
    model *m = calloc(1, sizeof *m);
    int rc;
    if (!m || !(m->dir = strdup(dir)) || !(path = inf_path_join(dir, "config.json"))) {
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    if ((rc = model_config_load(path, &m->cfg, err)) || (rc = hfq_open(path, &m->hfq, err)))
        goto fail;
    hfq_set_packed_q4(m->hfq, o && o->packed_q4);
    hfq_set_packed_q8(m->hfq, o && o->packed_q8);
    /* not a fused checkpoint: its row views need the data at bind */
    if (o && o->lazy_layers && !m->cfg.desc.fused_qkv)
        hfq_set_defer(m->hfq, model_defer, m);
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
    if (m->src.free)
        m->src.free(m->src.self);
    hfq_free(m->hfq);
    model__lazy_free(m);
    for (model_copy *c = m->copies, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(m->layers);
    free(m->dir);
    free(m);
}

size_t model_tensor_bytes(const model_tensor *t)
{
    if (t->q8_scale) /* int8 rows, held or waiting for model_layer_need */
        return (size_t)t->rows * (size_t)t->cols + (size_t)t->rows * sizeof(float);
    if (t->q4 || t->q4_lazy) /* codes, and an f16 scale and a zero per 32 */
        return model_q4_bytes(t) + (t->q4_perm ? (size_t)t->cols * sizeof *t->q4_perm : 0);
    return (size_t)t->rows * (size_t)t->cols * inf_dtype_size(t->dtype);
}

size_t model_weight_bytes(const model *m)
{
    if (!m)
        return 0;
    /* The embedding is a row lookup per token, not a matrix read: it counts
     * only as the lm_head, once, when tied. */
    size_t n = model_tensor_bytes(&m->norm) + model_tensor_bytes(&m->lm_head);
    for (int i = 0; i < m->cfg.n_layers; i++) {
        const model_layer *l = &m->layers[i];
        const model_tensor *ts[] = {&l->attn_norm, &l->wq, &l->wk, &l->wv, &l->wo,
                                    &l->ffn_norm, &l->w_gate, &l->w_up, &l->w_down,
                                    &l->bq, &l->bk, &l->bv, &l->bo, &l->q_norm, &l->k_norm,
                                    &l->post_attn_norm, &l->post_ffn_norm};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
            n += model_tensor_bytes(ts[j]);
    }
    return n;
}

void model_prefetch(const model *m, void (*progress)(void *user, size_t done, size_t total),
                    void *user)
{
    if (m->src.prefetch) {
        m->src.prefetch(m->src.self, progress, user);
        return;
    }
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
    return cfg->max_position_embeddings;
}

const char *model_quant_desc(const model *m)
{
    if (m && m->hfq)
        return hfq_describe(m->hfq);
    return m && m->src.describe ? m->src.describe(m->src.self) : NULL;
}

int model_has_q4(const model *m)
{
    if (m && m->codes_dropped)
        return 1;
    for (int i = 0; m && i < m->cfg.n_layers; i++) {
        const model_layer *l = &m->layers[i];
        const model_tensor *ts[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up,
                                    &l->w_down};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++)
            if (ts[j]->q4 || ts[j]->q4_lazy)
                return 1;
    }
    return 0;
}

void model_drop_layer_codes(model *m, int layer)
{
    if (!m || layer < 0 || layer >= m->cfg.n_layers || !model_has_q4(m))
        return;
    model_layer *l = &m->layers[layer];
    model_tensor *ts[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
    enum { NT = sizeof ts / sizeof ts[0] };
    const void *at[3 * NT] = {0};
    int dropped = 0;
    for (int j = 0; j < NT; j++) {
        if (ts[j]->q4_lazy) /* the lazy list's: converted again when needed */
            continue;
        dropped |= ts[j]->q4 != NULL;
        at[3 * j] = ts[j]->q4;
        at[3 * j + 1] = ts[j]->q4_zero;
        at[3 * j + 2] = ts[j]->q4_scale;
        ts[j]->q4 = ts[j]->q4_zero = NULL;
        ts[j]->q4_scale = NULL;
    }
    if (!dropped)
        return;
    m->codes_dropped = 1; /* from the first layer on, no backend can pack them */
    hfq_drop_codes_at(m->hfq, at, 3 * NT);
    if (m->src.drop_codes)
        m->src.drop_codes(m->src.self, at, 3 * NT);
}


void model_layer_packed(void *mv, int layer)
{
    model *m = mv;
    if (!m)
        return;
    model__lazy_release(m, layer);
    model_drop_layer_codes(m, layer);
}

void model_drop_codes(model *m)
{
    if (!model_has_q4(m))
        return;
    for (int i = 0; i < m->cfg.n_layers; i++) /* every codes buffer is some layer's */
        model_drop_layer_codes(m, i);
}

int model_is_w8a8(const model *m)
{
    return m && m->cfg.n_layers > 0 && m->layers && m->layers[0].wq.q8_scale != NULL;
}
