/* The CPU backend's matmuls (backend_int.h): work split across threads in
 * items claimed from a counter (columns of a matmul, or tokens), and the
 * int8 / int4 paths' quantized inputs. Which thread computes what never
 * changes a result. */
#include "cpu/backend_int.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/qdef.h"

/* ---- parallel jobs ---------------------------------------------------- */

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

void cpu__matmul(cpu_be *be, const float *x, size_t ldx, const model_tensor *w, float *y,
                 size_t ldy, int M)
{
    mm_job j = {.be = be, .n = 1, .mm = {mm_args(x, ldx, w, y, ldy, M)}};
    run_job(be, &j);
}

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

void cpu__per_token(cpu_be *be, int T, row_fn fn, const void *arg)
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
        cpu__per_token(be, T, op_gather4, &ga);
    }
    size_t row = (size_t)s * be->max_tokens;
    return cpu_q4w_args(w, be->xqp + row * be->ldq, be->ldq, be->xs8p + row * be->ldxs, be->ldxs,
                        be->xs, y, ldy, T);
}

void cpu__linears(cpu_be *be, int l, int T, const float *x, size_t ldx, int first, int n,
                  float *const *y, const size_t *ldy, glu_fn glu)
{
    mm_job j = {.be = be, .n = n, .quant = be->q4 ? CPU_QUANT_INT4 : be->qw != NULL,
                .glu = glu};
    if (j.quant == CPU_QUANT_INT4) {
        quant_arg qa = {.x = x, .ldx = ldx, .K = be->q4[(size_t)l * QW_N + first]->K};
        cpu__per_token(be, T, op_quant4, &qa);
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
        cpu__per_token(be, T, op_quant, &qa);
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

int cpu__quantize_layers(cpu_be *be, int quant, const cpu_config *cfg, inf_err *err)
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
    for (int l = 0; l < be->L; l++) {
        int rc = cfg->layer_need ? cfg->layer_need(cfg->layer_ctx, l, err) : INF_OK;
        for (int i = 0; i < QW_N && !rc; i++) {
            const model_tensor *t = layer_matrix(&be->m->layers[l], i);
            rc = be->q4 ? cpu_q4w_create(t, be->k, be->k4, be->pool,
                                         &be->q4[(size_t)l * QW_N + i], err)
                        : cpu_qw_create(t, be->k, be->pool, &be->qw[(size_t)l * QW_N + i], err);
        }
        if (rc)
            return rc;
        if (cfg->layer_packed) /* the model's copy is no longer read */
            cfg->layer_packed(cfg->layer_ctx, l);
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
