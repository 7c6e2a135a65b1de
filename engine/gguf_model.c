/* gguf_model: GGUF metadata onto the model description, tensors bound or
 * converted (gguf_model.h). */
#include "gguf_model.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model_int.h"

struct gguf_weights {
    gguf_file *f;
    void **bufs;   /* converted tensors */
    int n_bufs, cap;
};

/* ---- metadata ----------------------------------------------------------- */

/* An integer key: 1 and *out when present, 0 when absent; -1 (message) when
 * of another type or out of int range. */
static int meta_int(const gguf_file *g, const char *key, int *out, inf_err *err)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return 0;
    int is_int = kv->type <= GGUF_V_I32 || kv->type == GGUF_V_U64 || kv->type == GGUF_V_I64;
    if (!is_int || kv->type == GGUF_V_F32 || kv->inum < -2147483647 || kv->inum > 2147483647) {
        inf_fail(err, INF_ERR_FORMAT, "%s: metadata '%s' must be an integer", gguf_path(g), key);
        return -1;
    }
    *out = (int)kv->inum;
    return 1;
}

static int meta_num(const gguf_file *g, const char *key, double *out, inf_err *err)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return 0;
    if (kv->type == GGUF_V_STRING || kv->type == GGUF_V_ARRAY || kv->type == GGUF_V_BOOL) {
        inf_fail(err, INF_ERR_FORMAT, "%s: metadata '%s' must be a number", gguf_path(g), key);
        return -1;
    }
    *out = kv->num;
    return 1;
}

/* A string key into buf (NUL-terminated, truncated to cap); 0 when absent. */
static int meta_str(const gguf_file *g, const char *key, char *buf, size_t cap, inf_err *err)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return 0;
    if (kv->type != GGUF_V_STRING) {
        inf_fail(err, INF_ERR_FORMAT, "%s: metadata '%s' must be a string", gguf_path(g), key);
        return -1;
    }
    size_t n = kv->str_len < cap - 1 ? (size_t)kv->str_len : cap - 1;
    memcpy(buf, kv->str, n);
    buf[n] = 0;
    return 1;
}

/* The config.json that says what the metadata says, for model__config_parse. */
static int config_json(const gguf_file *g, cJSON **out, inf_err *err)
{
    const char *path = gguf_path(g);
    char arch[64] = "", key[128], rs[32] = "";
    int rc = meta_str(g, "general.architecture", arch, sizeof arch, err);
    if (rc < 0)
        return INF_ERR_FORMAT;
    if (!rc)
        return inf_fail(err, INF_ERR_FORMAT, "%s: no general.architecture", path);
    if (strcmp(arch, "llama"))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: GGUF architecture '%s' is not supported "
                        "(llama: Llama and Mistral)", path, arch);
    static const struct { const char *gguf, *hf; int required; } ints[] = {
        {"embedding_length", "hidden_size", 1},
        {"feed_forward_length", "intermediate_size", 1},
        {"block_count", "num_hidden_layers", 1},
        {"attention.head_count", "num_attention_heads", 1},
        {"attention.head_count_kv", "num_key_value_heads", 0},
        {"attention.key_length", "head_dim", 0},
        {"context_length", "max_position_embeddings", 0},
        {"vocab_size", "vocab_size", 0},
    };
    cJSON *c = cJSON_CreateObject();
    if (!c)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
    cJSON_AddItemToObject(c, "architectures", cJSON_CreateStringArray(
                                                  (const char *const[]){"LlamaForCausalLM"}, 1));
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int v;
        snprintf(key, sizeof key, "%s.%s", arch, ints[i].gguf);
        if ((rc = meta_int(g, key, &v, err)) < 0)
            goto fail;
        if (!rc && ints[i].required) {
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: missing metadata '%s'", path, key);
            goto fail;
        }
        if (rc)
            cJSON_AddNumberToObject(c, ints[i].hf, v);
    }
    if (!cJSON_GetObjectItem(c, "vocab_size")) { /* older files: the embedding's rows */
        const gguf_tensor *e = gguf_find_tensor(g, "token_embd.weight");
        if (e && e->n_dims == 2 && e->ne[1] < 1 << 30)
            cJSON_AddNumberToObject(c, "vocab_size", (double)e->ne[1]);
    }
    double d;
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    if ((rc = meta_num(g, key, &d, err)) < 0)
        goto fail;
    if (rc)
        cJSON_AddNumberToObject(c, "rope_theta", d);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if ((rc = meta_num(g, key, &d, err)) < 0)
        goto fail;
    cJSON_AddNumberToObject(c, "rms_norm_eps", rc ? d : 1e-5); /* llama.cpp's default */
    int rot = 0, hd = 0;
    snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
    if ((rc = meta_int(g, key, &rot, err)) < 0)
        goto fail;
    cJSON *hdj = cJSON_GetObjectItem(c, "head_dim");
    hd = hdj ? hdj->valueint
             : cJSON_GetObjectItem(c, "num_attention_heads")->valueint > 0
                   ? cJSON_GetObjectItem(c, "hidden_size")->valueint /
                         cJSON_GetObjectItem(c, "num_attention_heads")->valueint
                   : 0;
    if (rc && rot != hd) {
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: %s is %d, not the head size %d (partial "
                      "rotary is not supported for llama)", path, key, rot, hd);
        goto fail;
    }
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if ((rc = meta_str(g, key, rs, sizeof rs, err)) < 0)
        goto fail;
    if (rc && strcmp(rs, "none")) {
        if (strcmp(rs, "linear")) {
            rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: %s '%s' is not supported (none, linear)",
                          path, key, rs);
            goto fail;
        }
        snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
        if ((rc = meta_num(g, key, &d, err)) <= 0) {
            if (!rc)
                inf_fail(err, INF_ERR_FORMAT, "%s: linear rope scaling without %s", path, key);
            rc = INF_ERR_FORMAT;
            goto fail;
        }
        cJSON *o = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(o, "rope_type", "linear");
        cJSON_AddNumberToObject(o, "factor", d);
    }
    if (gguf_find_tensor(g, "rope_freqs.weight")) { /* Llama 3.1's rescaled frequencies */
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor 'rope_freqs.weight' (RoPE frequency "
                      "factors, Llama 3.1) is not supported yet", path);
        goto fail;
    }
    cJSON_AddBoolToObject(c, "tie_word_embeddings", !gguf_find_tensor(g, "output.weight"));
    static const char *const ids[][2] = {{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                                         {"tokenizer.ggml.eos_token_id", "eos_token_id"}};
    for (int i = 0; i < 2; i++) {
        int v;
        if ((rc = meta_int(g, ids[i][0], &v, err)) < 0)
            goto fail;
        if (rc)
            cJSON_AddNumberToObject(c, ids[i][1], v);
    }
    *out = c;
    return INF_OK;
fail:
    cJSON_Delete(c);
    return rc < 0 ? INF_ERR_FORMAT : rc;
}

/* ---- tensors ------------------------------------------------------------ */

static void *keep(gguf_weights *w, size_t bytes)
{
    if (w->n_bufs == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        void **b = realloc(w->bufs, sizeof *b * (size_t)cap);
        if (!b)
            return NULL;
        w->bufs = b;
        w->cap = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p)
        w->bufs[w->n_bufs++] = p;
    return p;
}

/* name, which must be [rows, cols] (rows 0: a 1-D [cols]); heads > 0: a
 * projection whose rows are per head interleaved by llama.cpp (undone). */
static int bind(model *m, const char *name, int64_t rows, int64_t cols, int heads,
                model_tensor *out, inf_err *err)
{
    gguf_weights *w = m->src.self;
    const char *path = gguf_path(w->f);
    const gguf_tensor *t = gguf_find_tensor(w->f, name);
    if (!t)
        return inf_fail(err, INF_ERR_FORMAT, "%s: missing tensor '%s'", path, name);
    if (!t->known)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which is not "
                        "supported (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)", path, name,
                        t->type_name);
    int ok = rows == 0 ? t->n_dims == 1 && t->ne[0] == cols
                       : t->n_dims == 2 && t->ne[0] == cols && t->ne[1] == rows;
    if (!ok)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld] (ne "
                        "reversed), expected [%lld, %lld]", path, name, (long long)t->ne[1],
                        (long long)t->ne[0], (long long)(rows ? rows : 1), (long long)cols);
    int64_t R = rows ? rows : 1;
    inf_dtype dt = t->type == GGUF_F32 ? INF_F32 : t->type == GGUF_F16 ? INF_F16
                 : t->type == GGUF_BF16 ? INF_BF16 : INF_DTYPE_NONE;
    size_t es = dt == INF_DTYPE_NONE ? 0 : inf_dtype_size(dt);
    out->rows = R;
    out->cols = cols;
    out->name = t->name;
    if (dt != INF_DTYPE_NONE && !heads && (uintptr_t)t->data % es == 0) {
        out->dtype = dt; /* in place */
        out->data = t->data;
        return INF_OK;
    }
    size_t bb;
    int block = gguf_type_block(t->type, &bb);
    size_t src_row = (size_t)(cols / block) * bb;
    size_t dst_es = dt == INF_DTYPE_NONE ? sizeof(float) : es;
    char *dst = keep(w, (size_t)R * (size_t)cols * dst_es);
    if (!dst)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory converting '%s'", path, name);
    int64_t hd = heads ? R / heads : 0;
    for (int64_t r = 0; r < R; r++) {
        int64_t s = r;
        if (heads) { /* HF row (head h, half, i) is llama.cpp's row (h, 2i + half) */
            int64_t h = r / hd, in = r % hd, half = in / (hd / 2), i = in % (hd / 2);
            s = h * hd + 2 * i + half;
        }
        const char *src = (const char *)t->data + (size_t)s * src_row;
        if (dt != INF_DTYPE_NONE)
            memcpy(dst + (size_t)r * cols * dst_es, src, (size_t)cols * dst_es);
        else
            gguf_dequant(t->type, src, (float *)dst + (size_t)r * cols, cols);
    }
    out->dtype = dt != INF_DTYPE_NONE ? dt : INF_F32;
    out->data = dst;
    return INF_OK;
}

static int bind_all(model *m, inf_err *err)
{
    const model_config *c = &m->cfg;
    int64_t D = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    int64_t Q = (int64_t)c->n_heads * c->head_dim, KV = (int64_t)c->n_kv_heads * c->head_dim;
    int rc;
    if ((rc = bind(m, "token_embd.weight", V, D, 0, &m->embed, err)) ||
        (rc = bind(m, "output_norm.weight", 0, D, 0, &m->norm, err)))
        return rc;
    if (c->tie_word_embeddings)
        m->lm_head = m->embed;
    else if ((rc = bind(m, "output.weight", V, D, 0, &m->lm_head, err)))
        return rc;
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *ly = &m->layers[l];
        const struct { const char *n; int64_t r, k; int heads; model_tensor *t; } s[] = {
            {"attn_norm", 0, D, 0, &ly->attn_norm},  {"attn_q", Q, D, c->n_heads, &ly->wq},
            {"attn_k", KV, D, c->n_kv_heads, &ly->wk}, {"attn_v", KV, D, 0, &ly->wv},
            {"attn_output", D, Q, 0, &ly->wo},     {"ffn_norm", 0, D, 0, &ly->ffn_norm},
            {"ffn_gate", F, D, 0, &ly->w_gate},     {"ffn_up", F, D, 0, &ly->w_up},
            {"ffn_down", D, F, 0, &ly->w_down},
        };
        for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, s[i].n);
            if ((rc = bind(m, name, s[i].r, s[i].k, s[i].heads, s[i].t, err)))
                return rc;
        }
    }
    return INF_OK;
}

int gguf_model_path(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

int gguf_model_tokenizer_dir(const char *model, const char *tokenizer, const char **dir,
                             inf_err *err)
{
    *dir = tokenizer ? tokenizer : model;
    if (!tokenizer && gguf_model_path(model))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: the tokenizer in a GGUF file's metadata "
                        "is not read yet; pass --tokenizer DIR (the Hugging Face directory the "
                        "file was converted from)", model);
    return INF_OK;
}

static void weights_free(void *w)
{
    gguf_weights_free(w);
}

static void weights_prefetch(const void *w, void (*progress)(void *user, size_t done, size_t total),
                             void *user)
{
    gguf_weights_prefetch(w, progress, user);
}

int gguf_model_load(const char *path, model **out, inf_err *err)
{
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    cJSON *cfg = NULL;
    int rc;
    gguf_weights *w = NULL;
    if (!m || !(m->dir = strdup(path)) || !(w = calloc(1, sizeof *w))) {
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    m->src = (model_source){.self = w, .free = weights_free, .prefetch = weights_prefetch};
    if ((rc = gguf_open(path, &w->f, err)) || (rc = config_json(w->f, &cfg, err)) ||
        (rc = model__config_parse(cfg, path, &m->cfg, err)))
        goto fail;
    if (strcmp(m->cfg.desc.family, "llama") || m->cfg.desc.embed_scale != 1.0) {
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: only the llama recipe is read from GGUF",
                      path);
        goto fail;
    }
    m->embed_scale = 1.0f;
    if (!(m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers))) {
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if ((rc = bind_all(m, err)))
        goto fail;
    cJSON_Delete(cfg);
    *out = m;
    return INF_OK;
fail:
    cJSON_Delete(cfg);
    model_destroy(m);
    return rc;
}

void gguf_weights_free(gguf_weights *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n_bufs; i++)
        free(w->bufs[i]);
    free(w->bufs);
    gguf_close(w->f);
    free(w);
}

void gguf_weights_prefetch(const gguf_weights *w,
                           void (*progress)(void *user, size_t done, size_t total), void *user)
{
    size_t total = gguf_data_bytes(w->f), done = 0, next = 0;
    volatile unsigned char sink = 0;
    for (int i = 0; i < gguf_tensor_count(w->f); i++) {
        const gguf_tensor *t = gguf_tensor_at(w->f, i);
        const unsigned char *p = t->data;
        for (size_t off = 0; t->known && off < t->nbytes; off += 4096) {
            sink ^= p[off];
            if (progress && done + off >= next) {
                progress(user, done + off, total);
                next = done + off + total / 100 + 1;
            }
        }
        done += t->nbytes;
    }
    (void)sink;
    if (progress)
        progress(user, total, total);
}
