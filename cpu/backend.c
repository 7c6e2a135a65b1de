/* The decoder forward pass on the CPU over one flattened batch, as the
 * model description (engine/mdesc.h) says: every family's settings.
 *
 * Every step is either a matmul (cpu_kern.mm, columns split across threads),
 * a per-token elementwise op, or attention for one (token, KV head) pair; none
 * of them lets one row's numbers depend on the other rows in the batch. */
#include "cpu/backend_int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>


cpu_config cpu_config_default(void)
{
    cpu_config c = {.n_threads = 0, .num_blocks = 256, .block_size = 16,
                    .max_tokens = 512, .max_context = 0, .kernels = "auto",
                    .quant = CPU_QUANT_NONE};
    return c;
}

int cpu_quant_parse(const char *name)
{
    if (!name || !strcmp(name, "none"))
        return CPU_QUANT_NONE;
    if (!strcmp(name, "int8"))
        return CPU_QUANT_INT8;
    if (!strcmp(name, "int4"))
        return CPU_QUANT_INT4;
    return -1;
}


size_t cpu_kv_bytes_per_token(const model *m)
{
    const model_config *c = &m->cfg;
    return (size_t)c->n_layers * 2 * c->n_kv_heads * c->head_dim * sizeof(float);
}

/* ---- per-token ops ------------------------------------------------------ */

/* out = x / rms(x) * g over n values (out may be x). */
static void rmsnorm(const cpu_be *be, const float *x, const float *g, float *out, int n)
{
    float ss = be->k->dot(x, x, n);
    float inv = 1.0f / sqrtf(ss / (float)n + be->eps);
    for (int i = 0; i < n; i++)
        out[i] = (x[i] * inv) * g[i];
}

static void op_norm(cpu_be *be, int t, const void *gain)
{
    rmsnorm(be, be->x + (size_t)t * be->D, gain, be->h + (size_t)t * be->D, be->D);
}

/* Gemma's norm of a sublayer's output, in place, before the residual add. */
static void op_norm_h(cpu_be *be, int t, const void *gain)
{
    float *h = be->h + (size_t)t * be->D;
    rmsnorm(be, h, gain, h, be->D);
}

static void add_vec(float *y, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += b[i];
}

/* The o projection's bias (attention_bias). */
static void op_bias_o(cpu_be *be, int t, const void *bias)
{
    add_vec(be->h + (size_t)t * be->D, bias, be->D);
}

static float softcap(float x, float cap)
{
    return cap * tanhf(x / cap);
}

/* HF's rotate-half: pairs (i, i + rot/2) of the first rot dims of every
 * head, with RoPE table r (global or local layers). */
static void rope_vec(const cpu_be *be, int t, int r, float *v, int n_heads)
{
    int half = be->rot / 2;
    size_t at = ((size_t)r * be->max_tokens + t) * half;
    const float *c = be->cosv + at, *s = be->sinv + at;
    for (int hh = 0; hh < n_heads; hh++) {
        float *p = v + (size_t)hh * be->hd;
        for (int i = 0; i < half; i++) {
            float a = p[i], b = p[i + half];
            p[i] = a * c[i] - b * s[i];
            p[i + half] = b * c[i] + a * s[i];
        }
    }
}

typedef struct rope_arg {
    const be_batch *b;
    int layer;
} rope_arg;

/* Biases, QK-norm and RoPE on q and k, then k and v into the paged cache
 * at the token's slot. */
static void op_rope_store(cpu_be *be, int t, const void *arg)
{
    const rope_arg *ra = arg;
    int l = ra->layer, r = be->n_rope > 1 ? be->md->local[l] : 0;
    float *q = be->q + (size_t)t * be->qdim, *k = be->kb + (size_t)t * be->kvdim;
    float *v = be->vb + (size_t)t * be->kvdim;
    if (be->bias) {
        const float *b = be->bias + (size_t)l * (be->qdim + 2 * be->kvdim + be->D);
        add_vec(q, b, be->qdim);
        add_vec(k, b + be->qdim, be->kvdim);
        add_vec(v, b + be->qdim + be->kvdim, be->kvdim);
    }
    if (be->qkn) {
        const float *g = be->qkn + (size_t)l * 2 * be->hd;
        for (int h = 0; h < be->H; h++)
            rmsnorm(be, q + (size_t)h * be->hd, g, q + (size_t)h * be->hd, be->hd);
        for (int h = 0; h < be->KV; h++)
            rmsnorm(be, k + (size_t)h * be->hd, g + be->hd, k + (size_t)h * be->hd, be->hd);
    }
    rope_vec(be, t, r, q, be->H);
    rope_vec(be, t, r, k, be->KV);
    size_t off = (size_t)ra->layer * be->layer_kv + (size_t)ra->b->slots[t] * be->kvdim;
    memcpy(be->kc + off, k, (size_t)be->kvdim * sizeof(float));
    memcpy(be->vc + off, be->vb + (size_t)t * be->kvdim, (size_t)be->kvdim * sizeof(float));
}

/* SwiGLU (a glu_fn), elementwise: its columns in any order or split give
 * the same values. */
static void glu_silu(const cpu_be *be, int T, int lo, int hi)
{
    for (int t = 0; t < T; t++)
        be->k->swiglu(be->gate + (size_t)t * be->F + lo, be->up + (size_t)t * be->F + lo,
                      hi - lo);
}

/* GeGLU (a glu_fn): gelu_tanh(g) * u, PyTorch's tanh approximation in the
 * kernel table's sigmoid form (kern.h), the same bits in every table. */
static void glu_gelu(const cpu_be *be, int T, int lo, int hi)
{
    for (int t = 0; t < T; t++)
        be->k->geglu(be->gate + (size_t)t * be->F + lo, be->up + (size_t)t * be->F + lo,
                     hi - lo);
}

static void op_residual(cpu_be *be, int t, const void *arg)
{
    (void)arg;
    float *x = be->x + (size_t)t * be->D;
    const float *h = be->h + (size_t)t * be->D;
    for (int i = 0; i < be->D; i++)
        x[i] += h[i];
}

/* ---- attention ---------------------------------------------------------- */

typedef struct attn_job {
    cpu_be *be;
    const be_batch *b;
    int layer;
    atomic_int next; /* next unclaimed (token, KV head) item */
} attn_job;

/* Causal attention of token t's query heads that share KV head g over
 * positions 0..pos of its sequence, read through the block table. */
static void attend(cpu_be *be, const be_batch *b, int layer, int t, int g,
                   float *scores, float *pack)
{
    const cpu_kern *k = be->k;
    int s = be->tok_seq[t], n = b->positions[t] + 1, bs = be->base.block_size;
    int G = be->group, hd = be->hd, W = mdesc_window(be->md, layer);
    int lo = W > 0 && n > W ? n - W : 0, m = n - lo; /* positions lo..n-1 */
    const int32_t *table = b->block_table + (size_t)s * b->max_blocks;
    const float *kc = be->kc + (size_t)layer * be->layer_kv + (size_t)g * hd;
    const float *vc = be->vc + (size_t)layer * be->layer_kv + (size_t)g * hd;
    const float *q = be->q + (size_t)t * be->qdim + (size_t)g * G * hd;
    float *out = be->att + (size_t)t * be->qdim + (size_t)g * G * hd;
    /* scores[j][p - lo] = q_j . k_p, one block (or the window's part of
     * one) of keys at a time */
    for (int p = lo, cnt; p < n; p += cnt) {
        int off = p % bs;
        cnt = n - p < bs - off ? n - p : bs - off;
        cpu_mm a = {.x = q, .ldx = (size_t)hd,
                    .w = kc + ((size_t)table[p / bs] * bs + off) * be->kvdim,
                    .ldw = (size_t)be->kvdim, .wt = INF_F32, .y = scores + (p - lo),
                    .ldy = (size_t)be->max_ctx, .M = G, .N = cnt, .K = hd};
        k->mm(&a, 0, cnt, pack);
    }
    float scale = be->feat & MD_F_ATTN_SCALE ? (float)be->md->attn_scale : 1.0f / sqrtf((float)hd);
    float cap = (float)be->md->attn_softcap;
    for (int j = 0; j < G; j++) {
        float *sc = scores + (size_t)j * be->max_ctx;
        if (cap > 0) { /* Gemma 2: cap * tanh(s * scale / cap), then softmax */
            for (int p = 0; p < m; p++)
                sc[p] = softcap(sc[p] * scale, cap);
            k->softmax_exp(sc, m, 1.0f);
        } else {
            k->softmax_exp(sc, m, scale);
        }
    }
    /* out[j] = sum_p sc[j][p] * v_p, in p order, one block of values at a
     * time with all G rows in registers */
    memset(out, 0, (size_t)G * hd * sizeof *out);
    for (int p = lo, cnt; p < n; p += cnt) {
        int off = p % bs;
        cnt = n - p < bs - off ? n - p : bs - off;
        k->wsum(scores + (p - lo), (size_t)be->max_ctx, G,
                vc + ((size_t)table[p / bs] * bs + off) * be->kvdim, (size_t)be->kvdim, cnt,
                out, (size_t)hd, hd);
    }
    for (int j = 0; j < G; j++) {
        /* softmax denominator: four interleaved sums (position p into
         * s[p % 4]), then (s0 + s1) + (s2 + s3); fixed by m alone, and four
         * independent chains instead of one long one */
        const float *sc = scores + (size_t)j * be->max_ctx;
        double s4[4] = {0, 0, 0, 0};
        int p = 0;
        for (; p + 4 <= m; p += 4)
            for (int i = 0; i < 4; i++)
                s4[i] += sc[p + i];
        for (; p < m; p++)
            s4[p % 4] += sc[p];
        double sum = (s4[0] + s4[1]) + (s4[2] + s4[3]);
        float inv = (float)(1.0 / sum), *o = out + (size_t)j * hd;
        for (int d = 0; d < hd; d++)
            o[d] *= inv;
    }
}

/* Items from the last token back: in a prompt the late tokens attend to the
 * most positions, so the long items go first and the short ones even out
 * the end. */
static void attn_run(void *ctx, int t, int nt)
{
    attn_job *j = ctx;
    cpu_be *be = j->be;
    (void)nt;
    int T = j->b->n_tokens;
    float *scores = be->scores + (size_t)t * be->group * be->max_ctx;
    float *pack = be->pack + (size_t)t * CPU_PACK_FLOATS;
    for (;;) {
        int i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (i >= T * be->KV)
            break;
        attend(be, j->b, j->layer, T - 1 - i / be->KV, i % be->KV, scores, pack);
    }
}

/* ---- the forward pass --------------------------------------------------- */

static void embed(cpu_be *be, const be_batch *b)
{
    const model_tensor *e = &be->m->embed;
    size_t es = inf_dtype_size(e->dtype);
    float sc = be->m->embed_scale;
    for (int t = 0; t < b->n_tokens; t++) {
        float *x = be->x + (size_t)t * be->D;
        be->k->to_f32((const char *)e->data + (size_t)b->tokens[t] * be->D * es, e->dtype, x,
                      be->D);
        if (be->feat & MD_F_EMBED_SCALE) /* Gemma: times sqrt(hidden_size) */
            for (int i = 0; i < be->D; i++)
                x[i] *= sc;
    }
}

/* cos and sin of every token's angles, per RoPE of the description (its
 * frequencies computed once, at load). */
static void rope_tables(cpu_be *be, const be_batch *b)
{
    int half = be->rot / 2;
    for (int r = 0; r < be->n_rope; r++) {
        const md_rope *rp = &be->md->rope[r];
        for (int t = 0; t < b->n_tokens; t++) {
            int pos = b->positions[t];
            const double *f = pos >= rp->long_from ? rp->inv_freq_long : rp->inv_freq;
            size_t at = ((size_t)r * be->max_tokens + t) * half;
            for (int i = 0; i < half; i++) {
                double ang = (double)pos * f[i];
                be->cosv[at + i] = (float)(cos(ang) * rp->attn_factor);
                be->sinv[at + i] = (float)(sin(ang) * rp->attn_factor);
            }
        }
    }
    for (int s = 0; s < b->n_seqs; s++)
        for (int t = b->seq_start[s]; t < b->seq_start[s + 1]; t++)
            be->tok_seq[t] = s;
}

/* spread_attn: attention is worth the pool (tiny work costs less than
 * waking a worker) */
static void layer_forward(cpu_be *be, const be_batch *b, int l, int spread_attn)
{
    int T = b->n_tokens;
    const float *g = be->norms + (size_t)l * NORM_N * be->D;
    const float *g_attn = g + NORM_ATTN * be->D, *g_ffn = g + NORM_FFN * be->D;

    size_t ld_d = (size_t)be->D, ld_kv = (size_t)be->kvdim, ld_f = (size_t)be->F;
    size_t ld_q = (size_t)be->qdim;

    cpu__per_token(be, T, op_norm, g_attn);
    float *qkv[3] = {be->q, be->kb, be->vb};
    size_t ld_qkv[3] = {ld_q, ld_kv, ld_kv};
    cpu__linears(be, l, T, be->h, ld_d, QW_Q, 3, qkv, ld_qkv, NULL);
    rope_arg ra = {.b = b, .layer = l};
    cpu__per_token(be, T, op_rope_store, &ra);
    attn_job aj = {.be = be, .b = b, .layer = l};
    atomic_init(&aj.next, 0);
    if (!spread_attn)
        attn_run(&aj, 0, 1);
    else
        cpu_pool_run(be->pool, attn_run, &aj);
    cpu__linears(be, l, T, be->att, ld_q, QW_O, 1, &be->h, &ld_d, NULL);
    if (be->md->bias_o) /* the last D of the layer's biases */
        cpu__per_token(be, T, op_bias_o,
                  be->bias + (size_t)(l + 1) * (be->qdim + 2 * be->kvdim + be->D) - be->D);
    if (be->md->sandwich)
        cpu__per_token(be, T, op_norm_h, g + NORM_POST_ATTN * be->D);
    cpu__per_token(be, T, op_residual, NULL);

    cpu__per_token(be, T, op_norm, g_ffn);
    float *gu[2] = {be->gate, be->up};
    size_t ld_gu[2] = {ld_f, ld_f};
    cpu__linears(be, l, T, be->h, ld_d, QW_GATE, 2, gu, ld_gu,
            be->md->act == MD_ACT_GELU_TANH ? glu_gelu : glu_silu);
    cpu__linears(be, l, T, be->gate, ld_f, QW_DOWN, 1, &be->h, &ld_d, NULL);
    if (be->md->sandwich)
        cpu__per_token(be, T, op_norm_h, g + NORM_POST_FFN * be->D);
    cpu__per_token(be, T, op_residual, NULL);
}

static int cpu_forward(be_backend *base, const be_batch *b, const be_out *out, inf_err *err)
{
    cpu_be *be = (cpu_be *)base;
    int rc = be_batch_check(base, b, be->max_tokens, be->max_ctx, 0, err);
    if (rc)
        return rc;
    embed(be, b);
    rope_tables(be, b);
    long attn_work = 0; /* multiply-adds of one layer's attention */
    for (int t = 0; t < b->n_tokens; t++)
        attn_work += 2L * (b->positions[t] + 1) * be->qdim;
    /* one (token, KV head) item (decode with one KV head: Gemma 3 1B) gives
     * the pool nothing to share */
    int spread = attn_work >= 64 * 1024 && (long)b->n_tokens * be->KV > 1;
    for (int l = 0; l < be->L; l++)
        layer_forward(be, b, l, spread);
    if (b->n_logits == 0)
        return INF_OK;
    const float *g = be->norms + (size_t)be->L * NORM_N * be->D;
    for (int i = 0; i < b->n_logits; i++)
        rmsnorm(be, be->x + (size_t)b->logit_rows[i] * be->D, g, be->h + (size_t)i * be->D, be->D);
    if (b->want_hidden && out->hidden) /* the LM head's input, as it is */
        memcpy(out->hidden, be->h, sizeof(float) * (size_t)b->n_logits * be->D);
    if (!out->logits)
        return INF_OK;
    cpu__matmul(be, be->h, (size_t)be->D, &be->m->lm_head, out->logits, (size_t)be->V,
                b->n_logits);
    if (be->md->logit_softcap > 0) { /* Gemma 2's final soft-cap */
        float cap = (float)be->md->logit_softcap;
        for (size_t i = 0; i < (size_t)b->n_logits * be->V; i++)
            out->logits[i] = softcap(out->logits[i], cap);
    }
    return INF_OK;
}

/* Submit only remembers the batch: the forward runs in wait, on the
 * caller's thread (there is nothing to overlap with on the CPU). */
static int cpu_submit(be_backend *base, const be_batch *b, const be_smp_row *smp, inf_err *err)
{
    cpu_be *be = (cpu_be *)base;
    if (smp)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "cpu: no device sampling; sample the logits "
                        "on the host");
    if (be->pending)
        return inf_fail(err, INF_ERR_INVALID, "cpu: a step is already submitted; wait for it "
                        "first");
    be->pending = b;
    return INF_OK;
}

static int cpu_wait(be_backend *base, const be_out *out, inf_err *err)
{
    cpu_be *be = (cpu_be *)base;
    const be_batch *b = be->pending;
    if (!b)
        return inf_fail(err, INF_ERR_INVALID, "cpu: no step submitted");
    be->pending = NULL;
    return cpu_forward(base, b, out, err);
}

static void cpu_destroy(be_backend *base)
{
    cpu_be *be = (cpu_be *)base;
    if (!be)
        return;
    cpu_pool_destroy(be->pool);
    free(be->norms);
    free(be->qkn);
    free(be->bias);
    free(be->kc);
    free(be->vc);
    free(be->x);
    free(be->h);
    free(be->q);
    free(be->kb);
    free(be->vb);
    free(be->att);
    free(be->gate);
    free(be->up);
    free(be->cosv);
    free(be->sinv);
    free(be->tok_seq);
    free(be->pack);
    free(be->scores);
    if (be->qw)
        for (int i = 0; i < be->L * QW_N; i++)
            cpu_qw_destroy(be->qw[i]);
    free(be->qw);
    if (be->q4)
        for (int i = 0; i < be->L * QW_N; i++)
            cpu_q4w_destroy(be->q4[i]);
    free(be->q4);
    free(be->xs8);
    free(be->xs8p);
    free(be->xqp);
    free(be->xq);
    free(be->xs);
    free(be);
}

static const be_ops cpu_ops = {.name = "cpu", .submit = cpu_submit, .wait = cpu_wait,
                               .destroy = cpu_destroy};

const char *cpu_backend_kernels(const be_backend *base)
{
    return ((const cpu_be *)base)->k->name;
}

/* A 1-D weight as f32 into out (absent: left alone); a norm gain (is_gain)
 * gets Gemma's 1 + w folded in. */
static void gain_f32(const cpu_be *be, const model_tensor *t, float *out, int is_gain)
{
    if (!t->data)
        return;
    int n = (int)t->cols;
    be->k->to_f32(t->data, t->dtype, out, n);
    if (is_gain && be->md->norm == MD_NORM_RMS_1P)
        for (int i = 0; i < n; i++)
            out[i] = 1.0f + out[i];
}

/* 64-byte aligned: the kernels' zmm loads must not straddle cache lines. */
static float *falloc(size_t n)
{
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    return n ? aligned_alloc(64, bytes) : NULL;
}

int cpu_backend_create(const model *m, const cpu_config *cfg, be_backend **out, inf_err *err)
{
    *out = NULL;
    const model_config *c = &m->cfg;
    const cpu_kern *k = cpu_kern_select(cfg->kernels);
    if (!k)
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "cpu: kernels '%s' are unknown or not supported by this CPU "
                        "(auto, avx512bf16, avx512, avx2, generic, generic-bf16)", cfg->kernels ? cfg->kernels : "");
    if (cfg->quant != CPU_QUANT_NONE && cfg->quant != CPU_QUANT_INT8 &&
        cfg->quant != CPU_QUANT_INT4)
        return inf_fail(err, INF_ERR_INVALID, "cpu: unknown quantization %d", cfg->quant);
    /* a W8A8 checkpoint's own scheme is int8: none means it as stored */
    int quant = model_is_w8a8(m) && cfg->quant == CPU_QUANT_NONE ? CPU_QUANT_INT8 : cfg->quant;
    if (model_is_w8a8(m) && quant != CPU_QUANT_INT8)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "cpu: a compressed-tensors int8 checkpoint "
                        "runs with --quantization int8 (or none), not int4");
    if (m->codes_dropped) /* another backend packed them and the model let them go */
        return inf_fail(err, INF_ERR_INVALID, "cpu: the model's 4-bit codes were released "
                        "after a backend packed them (model_drop_layer_codes)");
    if (model_has_lazy(m) && (quant == CPU_QUANT_NONE || !cfg->layer_need))
        return inf_fail(err, INF_ERR_INVALID, "cpu: the model's layer matrices are converted "
                        "one layer at a time as a backend packs them (lazy layers): that "
                        "needs --quantization int8 or int4 and cpu_config.layer_need");
    if (model_has_q4(m) && quant != CPU_QUANT_INT4) /* the loader was told int4 */
        return inf_fail(err, INF_ERR_INVALID, "cpu: the model's 4-bit codes were bound for "
                        "--quantization int4, not %s", quant == CPU_QUANT_INT8 ? "int8" : "none");
    int max_ctx = cfg->max_context > 0 ? cfg->max_context : model_context(c);
    int rc; /* every setting of the description is computed here */
    if ((rc = mdesc_require(&c->desc, MD_F_ALL, "cpu", err)))
        return rc;
    if (cfg->max_tokens < 1 || cfg->block_size < 1 || cfg->num_blocks < 2)
        return inf_fail(err, INF_ERR_INVALID, "cpu: bad sizes (max_tokens %d, block_size %d, "
                        "num_blocks %d)", cfg->max_tokens, cfg->block_size, cfg->num_blocks);
    cpu_be *be = calloc(1, sizeof *be);
    if (!be)
        return inf_fail(err, INF_ERR_NOMEM, "cpu: out of memory");
    be->base.ops = &cpu_ops;
    be->base.vocab_size = c->vocab_size;
    be->base.block_size = cfg->block_size;
    be->base.num_blocks = cfg->num_blocks;
    be->base.hidden_size = c->hidden_size;
    be->base.max_inflight = 1;
    be->m = m;
    be->k = k;
    be->k4 = cpu_q4k_select(cfg->kernels);
    be->D = c->hidden_size;
    be->H = c->n_heads;
    be->KV = c->n_kv_heads;
    be->hd = c->head_dim;
    be->F = c->intermediate_size;
    be->V = c->vocab_size;
    be->L = c->n_layers;
    be->qdim = be->H * be->hd;
    be->kvdim = be->KV * be->hd;
    be->group = be->H / be->KV;
    be->eps = (float)c->rms_norm_eps;
    be->md = &c->desc;
    be->feat = mdesc_features(be->md);
    be->rot = be->md->rot_dim;
    be->n_rope = be->feat & MD_F_LOCAL_ROPE ? 2 : 1;
    be->max_tokens = cfg->max_tokens;
    be->max_ctx = max_ctx;
    rc = cpu_pool_create(cfg->n_threads, &be->pool, err);
    if (rc) {
        cpu_destroy(&be->base);
        return rc;
    }
    be->nt = cpu_pool_size(be->pool);

    size_t T = (size_t)cfg->max_tokens, D = (size_t)be->D;
    size_t wide = D > (size_t)be->qdim ? D : (size_t)be->qdim;
    be->layer_kv = (size_t)cfg->num_blocks * cfg->block_size * be->kvdim;
    be->norms = falloc((size_t)be->L * NORM_N * D + D);
    size_t nb = (size_t)be->qdim + 2 * (size_t)be->kvdim + D;
    if (be->md->qk_norm)
        be->qkn = falloc((size_t)be->L * 2 * be->hd);
    if (be->md->bias_qkv || be->md->bias_o)
        be->bias = falloc((size_t)be->L * nb);
    be->kc = falloc((size_t)be->L * be->layer_kv);
    be->vc = falloc((size_t)be->L * be->layer_kv);
    be->x = falloc(T * D);
    be->h = falloc(T * wide);
    be->q = falloc(T * be->qdim);
    be->kb = falloc(T * be->kvdim);
    be->vb = falloc(T * be->kvdim);
    be->att = falloc(T * be->qdim);
    be->gate = falloc(T * be->F);
    be->up = falloc(T * be->F);
    be->cosv = falloc((size_t)be->n_rope * T * (be->rot / 2));
    be->sinv = falloc((size_t)be->n_rope * T * (be->rot / 2));
    be->tok_seq = malloc(T * sizeof(int32_t));
    be->pack = falloc((size_t)be->nt * CPU_PACK_FLOATS);
    be->scores = falloc((size_t)be->nt * be->group * be->max_ctx);
    if (!be->norms || !be->kc || !be->vc || !be->x || !be->h || !be->q || !be->kb ||
        !be->vb || !be->att || !be->gate || !be->up || !be->cosv || !be->sinv ||
        !be->tok_seq || !be->pack || !be->scores || (be->md->qk_norm && !be->qkn) ||
        ((be->md->bias_qkv || be->md->bias_o) && !be->bias)) {
        size_t kv_mb = 2 * (size_t)be->L * be->layer_kv * sizeof(float) >> 20;
        cpu_destroy(&be->base);
        return inf_fail(err, INF_ERR_NOMEM,
                        "cpu: cannot allocate buffers (KV cache %zu MiB for %d blocks "
                        "of %d tokens, activations for %d tokens)",
                        kv_mb, cfg->num_blocks, cfg->block_size, cfg->max_tokens);
    }
    /* Fresh KV storage reads as zeros; touching it now also makes the pool's
     * memory resident up front rather than on the first long request. */
    memset(be->kc, 0, (size_t)be->L * be->layer_kv * sizeof(float));
    memset(be->vc, 0, (size_t)be->L * be->layer_kv * sizeof(float));
    for (int l = 0; l < be->L; l++) {
        const model_layer *ly = &m->layers[l];
        const model_tensor *ns[NORM_N] = {&ly->attn_norm, &ly->ffn_norm, &ly->post_attn_norm,
                                          &ly->post_ffn_norm};
        for (int i = 0; i < NORM_N; i++)
            gain_f32(be, ns[i], be->norms + ((size_t)l * NORM_N + i) * D, 1);
        if (be->qkn) {
            gain_f32(be, &ly->q_norm, be->qkn + (size_t)l * 2 * be->hd, 1);
            gain_f32(be, &ly->k_norm, be->qkn + (size_t)l * 2 * be->hd + be->hd, 1);
        }
        if (be->bias) {
            float *b = be->bias + (size_t)l * nb;
            memset(b, 0, nb * sizeof(float));
            gain_f32(be, &ly->bq, b, 0);
            gain_f32(be, &ly->bk, b + be->qdim, 0);
            gain_f32(be, &ly->bv, b + be->qdim + be->kvdim, 0);
            gain_f32(be, &ly->bo, b + nb - D, 0);
        }
    }
    gain_f32(be, &m->norm, be->norms + (size_t)be->L * NORM_N * D, 1);
    if (quant != CPU_QUANT_NONE && (rc = cpu__quantize_layers(be, quant, cfg, err))) {
        cpu_destroy(&be->base);
        return rc;
    }
    *out = &be->base;
    return INF_OK;
}
