/* The decoder forward pass on the CPU over one flattened batch, as the
 * model description (engine/mdesc.h) says: every family's settings.
 *
 * Every step is either a matmul (cpu_kern.mm, columns split across threads),
 * a per-token elementwise op, or attention for one (token, KV head) pair; none
 * of them lets one row's numbers depend on the other rows in the batch. */
#include "cpu/backend.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kern.h"
#include "cpu/pool.h"
#include "cpu/q4.h"
#include "cpu/qw.h"
#include "engine/qdef.h"

/* A layer's norms, in this order in cpu_be.norms. */
enum { NORM_ATTN, NORM_FFN, NORM_POST_ATTN, NORM_POST_FFN, NORM_N };

/* A layer's seven matrices, in this order wherever they are listed. */
enum { QW_Q, QW_K, QW_V, QW_O, QW_GATE, QW_UP, QW_DOWN, QW_N };

static const model_tensor *layer_matrix(const model_layer *w, int i)
{
    const model_tensor *ts[QW_N] = {&w->wq, &w->wk, &w->wv, &w->wo,
                                    &w->w_gate, &w->w_up, &w->w_down};
    return ts[i];
}

typedef struct cpu_be {
    be_backend base;
    const model *m;
    const cpu_kern *k;
    cpu_pool *pool;
    int nt;                   /* threads                                    */
    int max_tokens, max_ctx;
    int D, H, KV, hd, F, V, L, qdim, kvdim, group;
    const mdesc *md;          /* the recipe (m->cfg.desc)                   */
    unsigned feat;            /* its mdesc_features                         */
    int rot, n_rope;          /* rotated dims per head; RoPE tables (1, 2)  */
    float eps;
    float *norms;             /* [L][NORM_N][D] gains (1 + w folded in where
                                 the family says); then [D] final           */
    float *qkn;               /* [L][2][hd] q_norm, k_norm gains, or NULL   */
    float *bias;              /* [L][qdim + 2 kvdim + D] q|k|v|o biases, or
                                 NULL                                       */
    float *kc, *vc;           /* [L][num_blocks*block_size][kvdim]          */
    size_t layer_kv;          /* floats per layer in kc / vc                */
    float *x;                 /* [T][D] residual stream                     */
    float *h;                 /* [T][max(D, qdim)] normed input / outputs   */
    float *q;                 /* [T][qdim]                                  */
    float *kb, *vb;           /* [T][kvdim] this step's keys and values     */
    float *att;               /* [T][qdim] attention output                 */
    float *gate, *up;         /* [T][F]                                     */
    float *cosv, *sinv;       /* [n_rope][T][rot/2] RoPE rotation per token */
    int32_t *tok_seq;         /* [T] sequence index of each token           */
    const be_batch *pending;  /* submitted, run by the next wait            */
    float *pack;              /* [nt][CPU_PACK_FLOATS]                      */
    float *scores;            /* [nt][group][max_ctx]                       */
    cpu_qw **qw;              /* [L][QW_N] with --quantization int8, or NULL */
    uint8_t *xq;              /* [T][ldq] quantized matmul input (+128)     */
    size_t ldq;
    float *xs;                /* [T] its scales                             */
    cpu_q4w **q4;             /* [L][QW_N] with --quantization int4, or NULL */
    const cpu_q4k *k4;        /* the int4 kernels that go with k            */
    int32_t *xs8;             /* [T][ldxs] int4: 8 * group sums of xq        */
    size_t ldxs;
    int8_t *xqp;              /* [3][T][ldq] int4: xq in up to three matrices'
                                 orders of inputs (cpu_q4w.perm), or NULL   */
    int32_t *xs8p;            /* [3][T][ldxs] their group sums              */
} cpu_be;

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

/* ---- parallel jobs ---------------------------------------------------- */

/* The MLP's activation over columns [lo, hi) of gate and up, rows t < T:
 * gate = act(gate) * up. */
typedef void (*glu_fn)(const cpu_be *be, int T, int lo, int hi);

/* Work is handed out in items claimed from a shared counter, so a thread
 * that runs slow (these VMs lose a core for milliseconds at a time) takes
 * fewer items instead of holding everyone up. Which thread computes what never
 * changes a result. */
typedef struct mm_job {
    const cpu_be *be;
    cpu_mm mm[3];
    cpu_mmq mq[3];    /* instead of mm with int8                        */
    cpu_mm4 m4[3];    /* instead of mm with int4                        */
    int quant;        /* cpu_quant                                      */
    int n;
    int items[4];     /* items[i]: first item of matmul i; items[n]: total */
    /* set: matmuls 0 and 1 are gate and up (same N); an item computes the
     * same columns of both and then glu over them, so the activation runs
     * on every thread inside the matmul's job (GeGLU's tanhf alone took
     * 7% of a Gemma-3-1B decode step on one thread) */
    glu_fn glu;
    atomic_int next;  /* next unclaimed item                               */
} mm_job;

/* Columns per item (a whole number of packed blocks, and of CPU_QN). */
#define MM_ITEM 128

static int job_cols(const mm_job *j, int i)
{
    return j->quant == CPU_QUANT_INT4 ? j->m4[i].N : j->quant ? j->mq[i].N : j->mm[i].N;
}

static int job_rows(const mm_job *j, int i)
{
    return j->quant == CPU_QUANT_INT4 ? j->m4[i].M : j->quant ? j->mq[i].M : j->mm[i].M;
}

/* Columns [lo, hi) of matmul i. */
static void job_mm(const mm_job *j, int i, int lo, int hi, float *pack)
{
    if (j->quant == CPU_QUANT_INT4)
        j->be->k4->mm4(&j->m4[i], lo, hi);
    else if (j->quant)
        j->be->k->mmq(&j->mq[i], lo, hi, (int32_t *)pack);
    else
        j->be->k->mm(&j->mm[i], lo, hi, pack);
}

static void mm_run(void *ctx, int t, int nt)
{
    mm_job *j = ctx;
    (void)nt;
    float *pack = j->be->pack + (size_t)t * CPU_PACK_FLOATS;
    for (;;) {
        int it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->items[j->n])
            break;
        int i = 0;
        while (it >= j->items[i + 1])
            i++;
        int N = job_cols(j, i);
        int lo = (it - j->items[i]) * MM_ITEM;
        int hi = lo + MM_ITEM < N ? lo + MM_ITEM : N;
        job_mm(j, i, lo, hi, pack);
        if (j->glu) {
            job_mm(j, 1, lo, hi, pack);
            j->glu(j->be, job_rows(j, 0), lo, hi);
        }
    }
}

static cpu_mm mm_args(const float *x, size_t ldx, const model_tensor *w, float *y,
                      size_t ldy, int M)
{
    cpu_mm a = {.x = x, .ldx = ldx, .w = w->data, .ldw = (size_t)w->cols,
                .wt = w->dtype, .y = y, .ldy = ldy, .M = M, .N = (int)w->rows,
                .K = (int)w->cols};
    return a;
}

/* Runs the job's n matmuls (mm, or mq when quant), their columns split into
 * items. */
static void run_job(cpu_be *be, mm_job *j)
{
    long work = 0;
    for (int i = 0; i < j->n; i++) {
        int M = j->quant ? j->mq[i].M : j->mm[i].M, K = j->quant ? 4 * j->mq[i].K4 : j->mm[i].K;
        if (j->quant == CPU_QUANT_INT4)
            M = j->m4[i].M, K = j->m4[i].G * CPU_Q4_GROUP;
        work += (long)M * job_cols(j, i) * K;
        j->items[i + 1] = j->items[i] + (job_cols(j, i) + MM_ITEM - 1) / MM_ITEM;
    }
    if (j->glu) /* up's columns go with gate's items */
        j->items[2] = j->items[1];
    atomic_init(&j->next, 0);
    if (work < 64 * 1024) /* tiny: threads cost more than they save */
        mm_run(j, 0, 1);
    else
        cpu_pool_run(be->pool, mm_run, j);
}

typedef void (*row_fn)(cpu_be *be, int t, const void *arg);

typedef struct rows_job {
    cpu_be *be;
    row_fn fn;
    const void *arg;
    int T;
} rows_job;

static void rows_run(void *ctx, int t, int nt)
{
    rows_job *j = ctx;
    int lo, hi;
    cpu_pool_split(j->T, 1, t, nt, &lo, &hi);
    for (int i = lo; i < hi; i++)
        j->fn(j->be, i, j->arg);
}

/* fn(be, t, arg) for every token t. */
static void per_token(cpu_be *be, int T, row_fn fn, const void *arg)
{
    rows_job j = {.be = be, .fn = fn, .arg = arg, .T = T};
    if ((long)T * be->D < 32 * 1024) /* tiny: waking a worker costs more */
        rows_run(&j, 0, 1);
    else
        cpu_pool_run(be->pool, rows_run, &j);
}

/* ---- int8 matmuls ------------------------------------------------------- */

typedef struct quant_arg {
    const float *x;
    size_t ldx;
    int K;
    float in_scale; /* > 0: static (compressed-tensors), else per token */
} quant_arg;

/* Row t of the input into be->xq (as qx + 128), K padded with zeros (128). */
static void op_quant(cpu_be *be, int t, const void *arg)
{
    const quant_arg *qa = arg;
    uint8_t *q = be->xq + (size_t)t * be->ldq;
    if (qa->in_scale > 0) {
        qdef_i8_static(qa->x + (size_t)t * qa->ldx, qa->K, qa->in_scale, (int8_t *)q, 1);
        be->xs[t] = qa->in_scale;
    } else {
        be->xs[t] = be->k->quant(qa->x + (size_t)t * qa->ldx, qa->K, (int8_t *)q, 1);
    }
    for (int k = qa->K; k % 4; k++)
        q[k] = 128;
}

/* Row t of the input into be->xq (signed) and its group sums, for int4. */
static void op_quant4(cpu_be *be, int t, const void *arg)
{
    const quant_arg *qa = arg;
    be->xs[t] = cpu_q4_quant_act(be->k, qa->x + (size_t)t * qa->ldx, qa->K,
                                 (int8_t *)be->xq + (size_t)t * be->ldq,
                                 be->xs8 + (size_t)t * be->ldxs);
}

/* Row t of be->xq gathered into order set of be->xqp, for int4. */
typedef struct gather_arg {
    const int32_t *perm;
    int K, set;
} gather_arg;

static void op_gather4(cpu_be *be, int t, const void *arg)
{
    const gather_arg *ga = arg;
    size_t row = (size_t)ga->set * be->max_tokens + (size_t)t;
    cpu_q4_gather_act((const int8_t *)be->xq + (size_t)t * be->ldq, ga->perm, ga->K,
                      be->xqp + row * be->ldq, be->xs8p + row * be->ldxs);
}

/* The int4 arguments of matrix w on the input quantized in be->xq: as it
 * is, or gathered into w's order of inputs (once per distinct order among
 * the up to three matrices sharing it; sorted lists those gathered). */
static cpu_mm4 args4(cpu_be *be, const cpu_q4w *w, const int32_t *sorted[3], int T, float *y,
                     size_t ldy)
{
    if (!w->perm)
        return cpu_q4w_args(w, (const int8_t *)be->xq, be->ldq, be->xs8, be->ldxs, be->xs, y, ldy,
                            T);
    int s = 0;
    while (sorted[s] && sorted[s] != w->perm)
        s++;
    if (!sorted[s]) {
        sorted[s] = w->perm;
        gather_arg ga = {.perm = w->perm, .K = w->K, .set = s};
        per_token(be, T, op_gather4, &ga);
    }
    size_t row = (size_t)s * be->max_tokens;
    return cpu_q4w_args(w, be->xqp + row * be->ldq, be->ldq, be->xs8p + row * be->ldxs, be->ldxs,
                        be->xs, y, ldy, T);
}

/* y_i = x . w_i^T for the n matrices of layer l from index first on (QW_*),
 * which share the input x [T][K]: as stored, or int8 (the input quantized
 * once for all n). glu: see mm_job (first is QW_GATE), or NULL. */
static void linears(cpu_be *be, int l, int T, const float *x, size_t ldx, int first, int n,
                    float *const *y, const size_t *ldy, glu_fn glu)
{
    mm_job j = {.be = be, .n = n, .quant = be->q4 ? CPU_QUANT_INT4 : be->qw != NULL,
                .glu = glu};
    if (j.quant == CPU_QUANT_INT4) {
        quant_arg qa = {.x = x, .ldx = ldx, .K = be->q4[(size_t)l * QW_N + first]->K};
        per_token(be, T, op_quant4, &qa);
        const int32_t *sorted[3] = {NULL, NULL, NULL};
        for (int i = 0; i < n; i++)
            j.m4[i] = args4(be, be->q4[(size_t)l * QW_N + first + i], sorted, T, y[i], ldy[i]);
        run_job(be, &j);
        return;
    }
    if (j.quant) {
        quant_arg qa = {.x = x, .ldx = ldx, .K = be->qw[(size_t)l * QW_N + first]->K};
        for (int i = 0; i < n; i++) { /* vLLM's rule for linears fused on one input */
            float s = layer_matrix(&be->m->layers[l], first + i)->q8_in_scale;
            qa.in_scale = s > qa.in_scale ? s : qa.in_scale;
        }
        per_token(be, T, op_quant, &qa);
    }
    for (int i = 0; i < n; i++) {
        if (j.quant)
            j.mq[i] = cpu_qw_args(be->qw[(size_t)l * QW_N + first + i], be->xq, be->ldq,
                                  be->xs, y[i], ldy[i], T);
        else
            j.mm[i] = mm_args(x, ldx, layer_matrix(&be->m->layers[l], first + i), y[i],
                              ldy[i], T);
    }
    run_job(be, &j);
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

    per_token(be, T, op_norm, g_attn);
    float *qkv[3] = {be->q, be->kb, be->vb};
    size_t ld_qkv[3] = {ld_q, ld_kv, ld_kv};
    linears(be, l, T, be->h, ld_d, QW_Q, 3, qkv, ld_qkv, NULL);
    rope_arg ra = {.b = b, .layer = l};
    per_token(be, T, op_rope_store, &ra);
    attn_job aj = {.be = be, .b = b, .layer = l};
    atomic_init(&aj.next, 0);
    if (!spread_attn)
        attn_run(&aj, 0, 1);
    else
        cpu_pool_run(be->pool, attn_run, &aj);
    linears(be, l, T, be->att, ld_q, QW_O, 1, &be->h, &ld_d, NULL);
    if (be->md->bias_o) /* the last D of the layer's biases */
        per_token(be, T, op_bias_o,
                  be->bias + (size_t)(l + 1) * (be->qdim + 2 * be->kvdim + be->D) - be->D);
    if (be->md->sandwich)
        per_token(be, T, op_norm_h, g + NORM_POST_ATTN * be->D);
    per_token(be, T, op_residual, NULL);

    per_token(be, T, op_norm, g_ffn);
    float *gu[2] = {be->gate, be->up};
    size_t ld_gu[2] = {ld_f, ld_f};
    linears(be, l, T, be->h, ld_d, QW_GATE, 2, gu, ld_gu,
            be->md->act == MD_ACT_GELU_TANH ? glu_gelu : glu_silu);
    linears(be, l, T, be->gate, ld_f, QW_DOWN, 1, &be->h, &ld_d, NULL);
    if (be->md->sandwich)
        per_token(be, T, op_norm_h, g + NORM_POST_FFN * be->D);
    per_token(be, T, op_residual, NULL);
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
    mm_job lm = {.be = be, .n = 1,
                 .mm = {mm_args(be->h, (size_t)be->D, &be->m->lm_head, out->logits,
                                (size_t)be->V, b->n_logits)}};
    run_job(be, &lm);
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

size_t cpu_backend_weight_bytes(const be_backend *base)
{
    const cpu_be *be = (const cpu_be *)base;
    size_t n = model_weight_bytes(be->m);
    if (be->qw) /* the int8 copies are read instead of the stored matrices */
        for (int l = 0; l < be->L; l++)
            for (int i = 0; i < QW_N; i++) {
                const model_tensor *t = layer_matrix(&be->m->layers[l], i);
                n += cpu_qw_bytes(be->qw[(size_t)l * QW_N + i]);
                n -= model_tensor_bytes(t);
            }
    if (be->q4)
        for (int l = 0; l < be->L; l++)
            for (int i = 0; i < QW_N; i++) {
                const model_tensor *t = layer_matrix(&be->m->layers[l], i);
                n += cpu_q4w_bytes(be->q4[(size_t)l * QW_N + i]);
                n -= model_tensor_bytes(t);
            }
    return n;
}

/* Quantizes every layer's seven matrices (int8 or int4). */
static int quantize_layers(cpu_be *be, int quant, inf_err *err)
{
    if (quant == CPU_QUANT_INT4) {
        be->q4 = calloc((size_t)be->L * QW_N, sizeof *be->q4);
        if (!be->q4)
            return inf_fail(err, INF_ERR_NOMEM, "cpu: out of memory for int4 buffers");
    } else {
        be->qw = calloc((size_t)be->L * QW_N, sizeof *be->qw);
    }
    size_t widest = (size_t)(be->D > be->qdim ? be->D : be->qdim);
    widest = widest > (size_t)be->F ? widest : (size_t)be->F;
    be->ldq = (widest + 63) & ~(size_t)63;
    be->xq = aligned_alloc(64, (size_t)be->max_tokens * be->ldq);
    be->xs = malloc((size_t)be->max_tokens * sizeof(float));
    be->ldxs = (widest + CPU_Q4_GROUP - 1) / CPU_Q4_GROUP;
    if (quant == CPU_QUANT_INT4)
        be->xs8 = malloc((size_t)be->max_tokens * be->ldxs * sizeof(int32_t));
    if ((!be->qw && !be->q4) || !be->xq || !be->xs || (be->q4 && !be->xs8))
        return inf_fail(err, INF_ERR_NOMEM, "cpu: out of memory for int8 buffers");
    for (int l = 0; l < be->L; l++)
        for (int i = 0; i < QW_N; i++) {
            const model_tensor *t = layer_matrix(&be->m->layers[l], i);
            int rc = be->q4 ? cpu_q4w_create(t, be->k, be->pool, &be->q4[(size_t)l * QW_N + i], err)
                            : cpu_qw_create(t, be->k, be->pool, &be->qw[(size_t)l * QW_N + i], err);
            if (rc)
                return rc;
        }
    int sorted = 0; /* a desc_act checkpoint's codes: room to gather inputs */
    for (size_t i = 0; be->q4 && i < (size_t)be->L * QW_N; i++)
        sorted |= be->q4[i]->perm != NULL;
    if (sorted) {
        be->xqp = aligned_alloc(64, 3 * (size_t)be->max_tokens * be->ldq);
        be->xs8p = malloc(3 * (size_t)be->max_tokens * be->ldxs * sizeof(int32_t));
        if (!be->xqp || !be->xs8p)
            return inf_fail(err, INF_ERR_NOMEM, "cpu: out of memory for int4 buffers");
    }
    return INF_OK;
}

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
                        "after a backend packed them (model_drop_codes)");
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
    if (quant != CPU_QUANT_NONE && (rc = quantize_layers(be, quant, err))) {
        cpu_destroy(&be->base);
        return rc;
    }
    *out = &be->base;
    return INF_OK;
}
