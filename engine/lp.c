#include "lp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the chain ----------------------------------------------------------- */

int lp_chain_add(lp_chain *c, lp_proc *p, inf_err *err)
{
    if (c->n == LP_MAX_PROCS) {
        p->ops->destroy(p);
        return inf_fail(err, INF_ERR_INVALID, "more than %d logits processors on one request",
                        LP_MAX_PROCS);
    }
    c->procs[c->n++] = p;
    return INF_OK;
}

void lp_chain_apply(lp_chain *c, float *logits, int n_vocab)
{
    for (int i = 0; i < c->n; i++)
        c->procs[i]->ops->apply(c->procs[i], logits, n_vocab);
}

void lp_chain_accept(lp_chain *c, int32_t token)
{
    for (int i = 0; i < c->n; i++)
        if (c->procs[i]->ops->accept)
            c->procs[i]->ops->accept(c->procs[i], token);
}

void lp_chain_rollback(lp_chain *c, int n_tokens)
{
    if (n_tokens <= 0)
        return;
    for (int i = 0; i < c->n; i++)
        if (c->procs[i]->ops->rollback)
            c->procs[i]->ops->rollback(c->procs[i], n_tokens);
}

void lp_chain_clear(lp_chain *c)
{
    for (int i = 0; i < c->n; i++)
        c->procs[i]->ops->destroy(c->procs[i]);
    c->n = 0;
}

/* ---- logit_bias ------------------------------------------------------------ */

typedef struct lp_bias {
    lp_proc base;
    int n;
    int32_t *ids;
    float *bias;
} lp_bias;

static void bias_apply(lp_proc *p, float *logits, int V)
{
    lp_bias *b = (lp_bias *)p;
    for (int i = 0; i < b->n; i++)
        if (b->ids[i] >= 0 && b->ids[i] < V)
            logits[b->ids[i]] += b->bias[i];
}

static void bias_destroy(lp_proc *p)
{
    lp_bias *b = (lp_bias *)p;
    free(b->ids);
    free(b->bias);
    free(b);
}

static const lp_ops bias_ops = {.name = "logit_bias", .apply = bias_apply,
                                .destroy = bias_destroy};

int lp_bias_create(const int32_t *ids, const float *bias, int n, lp_proc **out, inf_err *err)
{
    *out = NULL;
    lp_bias *b = calloc(1, sizeof *b);
    if (b) {
        b->base.ops = &bias_ops;
        b->n = n;
        b->ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
        b->bias = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    }
    if (!b || !b->ids || !b->bias) {
        if (b)
            bias_destroy(&b->base);
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    }
    memcpy(b->ids, ids, sizeof(int32_t) * (size_t)n);
    memcpy(b->bias, bias, sizeof(float) * (size_t)n);
    *out = &b->base;
    return INF_OK;
}

/* ---- min_tokens ------------------------------------------------------------ */

typedef struct lp_min {
    lp_proc base;
    int min_tokens, n_out;
    int n;
    int32_t *ids;
} lp_min;

static void min_apply(lp_proc *p, float *logits, int V)
{
    lp_min *m = (lp_min *)p;
    if (m->n_out >= m->min_tokens)
        return;
    for (int i = 0; i < m->n; i++)
        if (m->ids[i] >= 0 && m->ids[i] < V)
            logits[m->ids[i]] = -INFINITY;
}

static void min_accept(lp_proc *p, int32_t token)
{
    (void)token;
    ((lp_min *)p)->n_out++;
}

static void min_rollback(lp_proc *p, int n)
{
    ((lp_min *)p)->n_out -= n;
}

static void min_destroy(lp_proc *p)
{
    free(((lp_min *)p)->ids);
    free(p);
}

static const lp_ops min_ops = {.name = "min_tokens", .apply = min_apply, .accept = min_accept,
                               .rollback = min_rollback, .destroy = min_destroy};

int lp_min_tokens_create(int min_tokens, int n_out, const int32_t *ids, int n_ids,
                         lp_proc **out, inf_err *err)
{
    *out = NULL;
    lp_min *m = calloc(1, sizeof *m);
    if (m) {
        m->base.ops = &min_ops;
        m->min_tokens = min_tokens;
        m->n_out = n_out;
        m->n = n_ids;
        m->ids = malloc(sizeof(int32_t) * (size_t)(n_ids > 0 ? n_ids : 1));
    }
    if (!m || !m->ids) {
        if (m)
            min_destroy(&m->base);
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    }
    memcpy(m->ids, ids, sizeof(int32_t) * (size_t)n_ids);
    *out = &m->base;
    return INF_OK;
}

/* ---- penalties ------------------------------------------------------------- */

typedef struct lp_pen {
    lp_proc base;
    smp_ctx *scratch;
    smp_params p;
    const int32_t *prompt;
    int n_prompt;
    int32_t *output;   /* [cap] the output accepted so far */
    int n_output, cap;
} lp_pen;

static void pen_apply(lp_proc *pp, float *logits, int V)
{
    (void)V;
    lp_pen *q = (lp_pen *)pp;
    smp_history h = {.prompt = q->prompt, .n_prompt = q->n_prompt, .output = q->output,
                     .n_output = q->n_output < q->cap ? q->n_output : q->cap};
    smp_apply_penalties(q->scratch, &q->p, &h, logits);
}

static void pen_accept(lp_proc *pp, int32_t token)
{
    lp_pen *q = (lp_pen *)pp;
    if (q->n_output < q->cap) /* the engine never goes past max_tokens */
        q->output[q->n_output] = token;
    q->n_output++;
}

static void pen_rollback(lp_proc *pp, int n)
{
    ((lp_pen *)pp)->n_output -= n;
}

static void pen_destroy(lp_proc *pp)
{
    free(((lp_pen *)pp)->output);
    free(pp);
}

static const lp_ops pen_ops = {.name = "penalties", .apply = pen_apply, .accept = pen_accept,
                               .rollback = pen_rollback, .destroy = pen_destroy};

int lp_penalized(const smp_params *p)
{
    return p->repetition_penalty != 1.0f || p->frequency_penalty != 0.0f ||
           p->presence_penalty != 0.0f;
}

int lp_penalties_create(smp_ctx *scratch, const smp_params *p, const int32_t *prompt,
                        int n_prompt, int max_output, lp_proc **out, inf_err *err)
{
    *out = NULL;
    lp_pen *q = calloc(1, sizeof *q);
    if (q) {
        q->base.ops = &pen_ops;
        q->scratch = scratch;
        q->p = *p;
        q->prompt = prompt;
        q->n_prompt = n_prompt;
        q->cap = max_output > 0 ? max_output : 1;
        q->output = malloc(sizeof(int32_t) * (size_t)q->cap);
    }
    if (!q || !q->output) {
        if (q)
            pen_destroy(&q->base);
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    }
    *out = &q->base;
    return INF_OK;
}
