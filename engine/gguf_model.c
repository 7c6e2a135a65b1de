/* gguf_model: GGUF metadata onto the model description, tensors bound or
 * converted (gguf_model.h). */
#include "gguf_model.h"

#include <cJSON.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bufs.h"
#include "gguf_meta.h"
#include "model_int.h"

struct gguf_weights {
    gguf_file *f;
    bufs bufs;     /* converted tensors, and Q4_0 codes (is_code) */
    int lazy_on;   /* model_load_opts.lazy_layers: layer matrices deferred */
    int codes_on;  /* model_load_opts.packed_q4: Q4_0 layer matrices as codes */
    int n_codes;   /* those bound so */
    int threads;   /* model_load_opts.threads, resolved: at least 1 */
    char types[64];  /* the block types of layer matrices made f32, "Q4_K, Q6_K" */
    char desc[256]; /* model_source.describe's line */
};

/* ---- tensors ------------------------------------------------------------ */

/* The file's row of HF's row r of a projection whose rows llama.cpp
 * interleaved per head of hd rows (hd 0: not interleaved): HF row (head h,
 * half, i) is llama.cpp's row (h, 2i + half). */
static int64_t file_row(int64_t r, int64_t hd)
{
    if (!hd)
        return r;
    int64_t h = r / hd, in = r % hd, half = in / (hd / 2), i = in % (hd / 2);
    return h * hd + 2 * i + half;
}

/* One conversion of a tensor's rows (convert(), q4_0_fill()). */
typedef struct conv {
    const gguf_tensor *t;
    int64_t R, cols, hd;      /* hd: rows per head when interleaved, else 0 */
    inf_dtype dt;             /* INF_DTYPE_NONE: blocks dequantized to f32   */
    char *dst;                /* or the codes: */
    uint8_t *u, *z;
    uint16_t *d;
} conv;

typedef struct conv_part {
    const conv *c;
    void (*rows)(const conv *c, int64_t r0, int64_t r1);
    int64_t r0, r1;
} conv_part;

static void *conv_run(void *arg)
{
    const conv_part *p = arg;
    p->rows(p->c, p->r0, p->r1);
    return NULL;
}

/* rows(c, ...) over c->R rows, on up to `threads` threads when the tensor
 * is large: dequantizing a layer's blocks (and touching its fresh memory)
 * takes longer than reading them, and the backend waits for each layer. */
#define CONV_THREADS 16
static void conv_rows(const conv *c, void (*rows)(const conv *c, int64_t r0, int64_t r1),
                      int threads)
{
    /* a small tensor is not worth a thread (check_gguf's 256-wide ones are not small) */
    int nt = c->R * c->cols < ((int64_t)1 << 16) ? 1 : threads;
    nt = nt > CONV_THREADS ? CONV_THREADS : nt < 1 ? 1 : nt;
    if (nt > c->R)
        nt = (int)c->R;
    pthread_t th[CONV_THREADS];
    conv_part part[CONV_THREADS];
    int up[CONV_THREADS] = {0};
    for (int i = 0; i < nt; i++) {
        part[i] = (conv_part){.c = c, .rows = rows, .r0 = c->R * i / nt,
                              .r1 = c->R * (i + 1) / nt};
        up[i] = i > 0 && pthread_create(&th[i], NULL, conv_run, &part[i]) == 0;
    }
    conv_run(&part[0]);
    for (int i = 1; i < nt; i++) /* a thread that did not start: its rows here */
        if (up[i])
            pthread_join(th[i], NULL);
        else
            conv_run(&part[i]);
}

static void convert_rows(const conv *c, int64_t r0, int64_t r1)
{
    size_t bb;
    int block = gguf_type_block(c->t->type, &bb);
    size_t src_row = (size_t)(c->cols / block) * bb;
    size_t dst_es = c->dt == INF_DTYPE_NONE ? sizeof(float) : inf_dtype_size(c->dt);
    for (int64_t r = r0; r < r1; r++) {
        const char *src = (const char *)c->t->data + (size_t)file_row(r, c->hd) * src_row;
        if (c->dt != INF_DTYPE_NONE)
            memcpy(c->dst + (size_t)r * c->cols * dst_es, src, (size_t)c->cols * dst_es);
        else
            gguf_dequant(c->t->type, src, (float *)c->dst + (size_t)r * c->cols, c->cols);
    }
}

/* t's R x cols values into dst as dtype dt (INF_DTYPE_NONE: a block type,
 * dequantized to f32); heads > 0: rows interleaved per head by llama.cpp,
 * put back in HF's order. */
static void convert(const gguf_tensor *t, int64_t R, int64_t cols, int heads, inf_dtype dt,
                    char *dst, int threads)
{
    const conv c = {.t = t, .R = R, .cols = cols, .hd = heads ? R / heads : 0, .dt = dt,
                    .dst = dst};
    conv_rows(&c, convert_rows, dt == INF_DTYPE_NONE ? threads : 1); /* copies: one */
}

static void q4_0_rows(const conv *c, int64_t r0, int64_t r1)
{
    const int64_t B = c->cols / 32;
    memset(c->z + r0 * B, 8, (size_t)((r1 - r0) * B));
    for (int64_t r = r0; r < r1; r++)
        gguf_q4_0_codes((const char *)c->t->data + (size_t)(file_row(r, c->hd) * B) * 18,
                        c->cols, c->u + r * (c->cols / 2), c->d + r * B);
}

/* A Q4_0 matrix's R x cols values as the int4 kernels' codes u, f16 scales
 * d and zeros z (8: Q4_0 is w = d * (q - 8)), rows put back in HF's order
 * (heads > 0, as convert()). */
static void q4_0_fill(const gguf_tensor *t, int64_t R, int64_t cols, int heads, uint8_t *u,
                      uint16_t *d, uint8_t *z, int threads)
{
    const conv c = {.t = t, .R = R, .cols = cols, .hd = heads ? R / heads : 0, .u = u, .z = z,
                    .d = d};
    conv_rows(&c, q4_0_rows, threads);
}

/* q4_0_fill as model_defer calls it (arg: heads), into model_q4_parts. */
static void codes_deferred(const void *t, const void *aux, int heads, const model_tensor *o,
                           void *dst)
{
    uint8_t *u, *z;
    uint16_t *d;
    model_q4_parts(o, dst, &u, &d, &z);
    q4_0_fill(t, o->rows, o->cols, heads, u, d, z, ((const gguf_weights *)aux)->threads);
}

/* A Q4_0 layer matrix as its own codes, scales and zero 8 (model_tensor.q4)
 * for the CPU's int4 kernels, which take Q4_0's numbers as they are: no f32
 * step, nothing rounded again. layer >= 0 with lazy layers: made when the
 * backend needs the layer, in a buffer reused from layer to layer. */
static int bind_codes(model *m, const gguf_tensor *t, int heads, int layer, model_tensor *out,
                      inf_err *err)
{
    gguf_weights *w = m->src.self;
    out->dtype = INF_DTYPE_NONE;
    out->data = NULL;
    w->n_codes++;
    if (w->lazy_on && layer >= 0) {
        out->q4_lazy = 1;
        return model_defer(m, out, layer, codes_deferred, t, w, heads, err);
    }
    void *buf = bufs_keep(&w->bufs, model_q4_bytes(out), 1); /* as a deferred one's */
    if (!buf)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory for the codes of '%s'",
                        gguf_path(w->f), t->name);
    uint8_t *u, *z;
    uint16_t *d;
    model_q4_parts(out, buf, &u, &d, &z);
    q4_0_fill(t, out->rows, out->cols, heads, u, d, z, w->threads);
    out->q4 = u, out->q4_scale = d, out->q4_zero = z;
    return INF_OK;
}

/* A block type whose layer matrices are dequantized to f32, listed once
 * for the start-up line. */
static void note_type(gguf_weights *w, const char *name)
{
    size_t n = strlen(name), have = strlen(w->types);
    for (const char *p = w->types; (p = strstr(p, name)); p += n)
        if ((p == w->types || p[-1] == ' ') && (p[n] == ',' || !p[n]))
            return;
    if (have + n + 3 < sizeof w->types)
        snprintf(w->types + have, sizeof w->types - have, "%s%s", have ? ", " : "", name);
}

static inf_dtype plain_dtype(const gguf_tensor *t)
{
    return t->type == GGUF_F32 ? INF_F32 : t->type == GGUF_F16 ? INF_F16
         : t->type == GGUF_BF16 ? INF_BF16 : INF_DTYPE_NONE;
}

/* convert() as model_defer calls it (aux: the weights, arg: heads). */
static void convert_deferred(const void *t, const void *aux, int heads, const model_tensor *o,
                             void *dst)
{
    convert(t, o->rows, o->cols, heads, plain_dtype(t), dst, ((const gguf_weights *)aux)->threads);
}

/* name, which must be [rows, cols] (rows 0: a 1-D [cols]); heads > 0: a
 * projection whose rows are per head interleaved by llama.cpp (undone).
 * matrix: a layer matrix (Q4_0 ones bound as codes when the model is
 * loaded for them); layer >= 0: one whose conversion (if it needs one)
 * waits for model_layer_need when the model is loaded with lazy layers. */
static int bind(model *m, const char *name, int64_t rows, int64_t cols, int heads, int matrix,
                int layer, model_tensor *out, inf_err *err)
{
    gguf_weights *w = m->src.self;
    const char *path = gguf_path(w->f);
    const gguf_tensor *t = gguf_find_tensor(w->f, name);
    if (!t)
        return inf_fail(err, INF_ERR_FORMAT, "%s: missing tensor '%s'", path, name);
    if (!t->known)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which is not "
                        "supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, "
                        "Q6_K, IQ4_NL, IQ4_XS)", path, name,
                        t->type_name);
    int ok = rows == 0 ? t->n_dims == 1 && t->ne[0] == cols
                       : t->n_dims == 2 && t->ne[0] == cols && t->ne[1] == rows;
    if (!ok)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld] (ne "
                        "reversed), expected [%lld, %lld]", path, name, (long long)t->ne[1],
                        (long long)t->ne[0], (long long)(rows ? rows : 1), (long long)cols);
    int64_t R = rows ? rows : 1;
    inf_dtype dt = plain_dtype(t);
    size_t es = dt == INF_DTYPE_NONE ? 0 : inf_dtype_size(dt);
    out->rows = R;
    out->cols = cols;
    out->name = t->name;
    if (dt != INF_DTYPE_NONE && !heads && (uintptr_t)t->data % es == 0) {
        out->dtype = dt; /* in place */
        out->data = t->data;
        return INF_OK;
    }
    if (w->codes_on && matrix && t->type == GGUF_Q4_0)
        return bind_codes(m, t, heads, layer, out, err); /* out's shape set above */
    if (matrix && dt == INF_DTYPE_NONE)
        note_type(w, t->type_name);
    if (w->lazy_on && layer >= 0) {
        out->dtype = dt != INF_DTYPE_NONE ? dt : INF_F32;
        return model_defer(m, out, layer, convert_deferred, t, w, heads, err);
    }
    size_t dst_es = dt == INF_DTYPE_NONE ? sizeof(float) : es;
    char *dst = bufs_keep(&w->bufs, (size_t)R * (size_t)cols * dst_es, 0);
    if (!dst)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory converting '%s'", path, name);
    convert(t, R, cols, heads, dt, dst, w->threads);
    out->dtype = dt != INF_DTYPE_NONE ? dt : INF_F32;
    out->data = dst;
    return INF_OK;
}

/* llama.cpp's per-layer names: which model_layer field, the shape
 * ([rows, cols]; rows 0 for 1-D), whether q/k rows are interleaved, and
 * which descriptions have it. */
enum { G_ALL, G_SPLIT, G_FUSED, G_LLAMA_NORM, G_SANDWICH, G_BIAS_QKV, G_BIAS_O, G_QK_NORM };
enum { S_1, S_D, S_Q, S_KV, S_QKV, S_F, S_2F, S_HD };

static int slot_on(const mdesc *d, int when)
{
    switch (when) {
    case G_SPLIT: return !d->fused_qkv;
    case G_FUSED: return d->fused_qkv;
    case G_SANDWICH: return d->sandwich;
    case G_BIAS_QKV: return d->bias_qkv;
    case G_BIAS_O: return d->bias_o;
    case G_QK_NORM: return d->qk_norm;
    default: return 1;
    }
}

static int64_t dim(const model_config *c, int s)
{
    int64_t q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    switch (s) {
    case S_D: return c->hidden_size;
    case S_Q: return q;
    case S_KV: return kv;
    case S_QKV: return q + 2 * kv;
    case S_F: return c->intermediate_size;
    case S_2F: return 2 * (int64_t)c->intermediate_size;
    case S_HD: return c->head_dim;
    default: return 0;
    }
}

#define L_(f) offsetof(model_layer, f)
static const struct gslot {
    const char *name;
    size_t off;
    int rows, cols, heads, when; /* heads: 1 q, 2 k (rows permuted by llama.cpp) */
} gslots[] = {
    {"attn_norm.weight", L_(attn_norm), S_1, S_D, 0, G_ALL},
    {"attn_q.weight", L_(wq), S_Q, S_D, 1, G_SPLIT},
    {"attn_k.weight", L_(wk), S_KV, S_D, 2, G_SPLIT},
    {"attn_v.weight", L_(wv), S_KV, S_D, 0, G_SPLIT},
    {"attn_qkv.weight", L_(wq), S_QKV, S_D, 0, G_FUSED},
    {"attn_output.weight", L_(wo), S_D, S_Q, 0, G_ALL},
    {"attn_q.bias", L_(bq), S_1, S_Q, 1, G_BIAS_QKV},
    {"attn_k.bias", L_(bk), S_1, S_KV, 2, G_BIAS_QKV},
    {"attn_v.bias", L_(bv), S_1, S_KV, 0, G_BIAS_QKV},
    {"attn_output.bias", L_(bo), S_1, S_D, 0, G_BIAS_O},
    {"attn_q_norm.weight", L_(q_norm), S_1, S_HD, 0, G_QK_NORM},
    {"attn_k_norm.weight", L_(k_norm), S_1, S_HD, 0, G_QK_NORM},
    {"post_attention_norm.weight", L_(post_attn_norm), S_1, S_D, 0, G_SANDWICH},
    {"ffn_norm.weight", L_(ffn_norm), S_1, S_D, 0, G_ALL},
    {"post_ffw_norm.weight", L_(post_ffn_norm), S_1, S_D, 0, G_SANDWICH},
    {"ffn_gate.weight", L_(w_gate), S_F, S_D, 0, G_SPLIT},
    {"ffn_up.weight", L_(w_up), S_F, S_D, 0, G_SPLIT},
    {"ffn_up.weight", L_(w_gate), S_2F, S_D, 0, G_FUSED},
    {"ffn_down.weight", L_(w_down), S_D, S_F, 0, G_ALL},
};
#undef L_

static int bind_all(model *m, int permuted, inf_err *err)
{
    const model_config *c = &m->cfg;
    int64_t D = c->hidden_size, V = c->vocab_size;
    int rc;
    if ((rc = bind(m, "token_embd.weight", V, D, 0, 0, -1, &m->embed, err)) ||
        (rc = bind(m, "output_norm.weight", 0, D, 0, 0, -1, &m->norm, err)))
        return rc;
    if (c->tie_word_embeddings)
        m->lm_head = m->embed;
    else if ((rc = bind(m, "output.weight", V, D, 0, 0, -1, &m->lm_head, err)))
        return rc;
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *ly = &m->layers[l];
        for (size_t i = 0; i < sizeof gslots / sizeof gslots[0]; i++) {
            const struct gslot *s = &gslots[i];
            if (!slot_on(&c->desc, s->when))
                continue;
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", l, s->name);
            int heads = !permuted || !s->heads ? 0 : s->heads == 1 ? c->n_heads : c->n_kv_heads;
            /* matrices only (norms and biases are small); not fused ones,
             * whose row views below need their data now */
            int lazy = s->rows != S_1 && !c->desc.fused_qkv ? l : -1;
            if ((rc = bind(m, name, dim(c, s->rows), dim(c, s->cols), heads, s->rows != S_1, lazy,
                           (model_tensor *)((char *)ly + s->off), err)))
                return rc;
        }
        if (c->desc.fused_qkv) { /* [q | k | v] and [gate | up] by rows, as HF's */
            int64_t q = dim(c, S_Q), kv = dim(c, S_KV), F = c->intermediate_size;
            model_tensor qkv = ly->wq, gu = ly->w_gate;
            ly->wq = model__rows(&qkv, 0, q);
            ly->wk = model__rows(&qkv, q, kv);
            ly->wv = model__rows(&qkv, q + kv, kv);
            ly->w_gate = model__rows(&gu, 0, F);
            ly->w_up = model__rows(&gu, F, F);
        }
    }
    return INF_OK;
}

/* Llama 3.1's rope_freqs.weight: llama.cpp divides each rotary pair's
 * angle by its factor; the file's factors replace the config's llama3
 * rescaling (which they were computed from, rounded to f32). */
static int rope_freqs(model *m, inf_err *err)
{
    const gguf_file *f = ((const gguf_weights *)m->src.self)->f;
    const gguf_tensor *t = gguf_find_tensor(f, "rope_freqs.weight");
    mdesc *d = &m->cfg.desc;
    if (!t)
        return INF_OK;
    if (t->type != GGUF_F32 || t->n_dims != 1 || t->ne[0] != d->rot_dim / 2)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor 'rope_freqs.weight' must be F32 of %d "
                        "values (rotary pairs)", gguf_path(f), d->rot_dim / 2);
    for (int i = 0; i < d->rot_dim / 2; i++) {
        float v;
        memcpy(&v, (const char *)t->data + 4 * (size_t)i, 4);
        if (!(v > 0))
            return inf_fail(err, INF_ERR_FORMAT, "%s: rope_freqs.weight[%d] is not positive",
                            gguf_path(f), i);
        for (int r = 0; r < 2; r++)
            d->rope[r].inv_freq[i] /= v;
    }
    d->rope[0].kind = d->rope[1].kind = MD_ROPE_LLAMA3;
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
    (void)err;
    *dir = tokenizer ? tokenizer : model; /* a GGUF file carries its own */
    return INF_OK;
}

static void weights_free(void *w)
{
    gguf_weights_free(w);
}

static void weights_drop_codes(void *w, const void *const *at, int n)
{
    bufs_drop_at(&((gguf_weights *)w)->bufs, at, n);
}

static const char *weights_describe(const void *w)
{
    const char *d = ((const gguf_weights *)w)->desc;
    return *d ? d : NULL; /* none: F32 / F16 / BF16, used as stored */
}

/* The start-up line of what the file's layer matrices became, once bound. */
static void describe(gguf_weights *w)
{
    if (w->n_codes)
        snprintf(w->desc, sizeof w->desc, "GGUF Q4_0 (%d layer matrices' codes run as stored by "
                 "the int4 kernels; activations int8 per token)%s%s%s", w->n_codes,
                 *w->types ? "; " : "", w->types, *w->types ? " dequantized to f32 at load" : "");
    else if (*w->types)
        snprintf(w->desc, sizeof w->desc, "GGUF %s (dequantized to f32 at load)", w->types);
}

static void weights_prefetch(const void *w, void (*progress)(void *user, size_t done, size_t total),
                             void *user)
{
    gguf_weights_prefetch(w, progress, user);
}

int gguf_model_load(const char *path, const model_load_opts *o, model **out, inf_err *err)
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
    m->src = (model_source){.self = w, .free = weights_free, .prefetch = weights_prefetch,
                            .drop_codes = weights_drop_codes, .describe = weights_describe};
    w->lazy_on = o && o->lazy_layers;
    w->codes_on = o && o->packed_q4;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    w->threads = o && o->threads > 0 ? o->threads : cores > 0 ? (int)cores : 1;
    const gguf_arch *arch = NULL;
    if ((rc = gguf_open_model(path, &w->f, err)) || (rc = gguf__config(w->f, &cfg, &arch, err)) ||
        (rc = model__config_parse(cfg, path, &m->cfg, err)))
        goto fail;
    if (arch->norm_plus_one) /* the file's gains are 1 + w already */
        m->cfg.desc.norm = MD_NORM_RMS;
    if ((rc = rope_freqs(m, err)))
        goto fail;
    m->embed_scale = (float)m->cfg.desc.embed_scale;
    if (!(m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers))) {
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if ((rc = bind_all(m, arch->permuted_qk, err)))
        goto fail;
    describe(w);
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
    bufs_free(&w->bufs);
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
