#include "spec_mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "spec_mlp_load.h"

#define MLP_EPS 1e-6

/* emb, head [vocab][inner]; proj [inner][in] (in = emb_dim at stage 0,
 * else inner); ln_w, ln_b [inner] */
typedef spec_mlp_stage_w mlp_stage;

typedef struct mlp_seq {
    smp_rng rng;        /* its own draws: the target's stream is untouched */
    int seeded;
} mlp_seq;

typedef struct mlp {
    spec_proposer base;
    spec_mlp_ckpt ck;   /* the checkpoint: sizes, f32 weights, stages     */
    double sw, ew;
    smp_ctx *smp;
    double *s, *t;      /* [max(emb_dim, inner)] the state, and scratch    */
    float *row;         /* [vocab] one stage's logits                      */
    spec_mlp_device dev; /* stages on a device when dev.stage is set       */
    int *didx, dcap;    /* [dcap] the sequences a device call carries      */
    float *ds0, *dlog;  /* [dcap][emb_dim] states, [dcap][vocab] logits    */
    int32_t *dtok;      /* [dcap] each row's token                         */
} mlp;

/* ---- the computation ---------------------------------------------------------- */

/* y[r] = sum_c w[r][c] x[c], in double. */
static void matvec(const float *w, int rows, int cols, const double *x, double *y)
{
    for (int r = 0; r < rows; r++) {
        const float *wr = w + (size_t)r * cols;
        double acc = 0;
        for (int c = 0; c < cols; c++)
            acc += (double)wr[c] * x[c];
        y[r] = acc;
    }
}

static double inv_rms(const double *x, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    return 1.0 / sqrt(ss / n + MLP_EPS);
}

/* The state from the hidden state, before stage 0. */
static void mlp_begin(mlp *m, const float *hidden)
{
    for (int i = 0; i < m->ck.emb_dim; i++)
        m->s[i] = hidden[i];
    if (!m->ck.scale_input)
        return;
    double k = inv_rms(m->s, m->ck.emb_dim) / sqrt(2.0);
    for (int i = 0; i < m->ck.emb_dim; i++)
        m->s[i] *= k;
}

/* Stage i from the state and token t: the new state, and its logits in m->row. */
static void mlp_stage_run(mlp *m, int i, int32_t t)
{
    const mlp_stage *st = &m->ck.stage[i];
    int I = m->ck.inner;
    matvec(st->proj, I, i == 0 ? m->ck.emb_dim : I, m->s, m->t);
    const float *z = st->emb + (size_t)t * I;
    for (int j = 0; j < I; j++)
        m->t[j] = m->t[j] * m->sw + (double)z[j] * m->ew;
    double k = inv_rms(m->t, I);
    for (int j = 0; j < I; j++) {
        double v = m->t[j] * k * st->ln_w[j] + st->ln_b[j];
        m->s[j] = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    }
    for (int r = 0; r < m->ck.vocab; r++) {
        const float *hr = st->head + (size_t)r * I;
        double acc = 0;
        for (int j = 0; j < I; j++)
            acc += (double)hr[j] * m->s[j];
        m->row[r] = (float)acc;
    }
}

void spec_mlp_run(spec_proposer *pp, const float *hidden, int32_t token, int k, int32_t *toks,
                  float *logits)
{
    mlp *m = (mlp *)pp;
    mlp_begin(m, hidden);
    for (int i = 0; i < k && i < m->ck.n_predict; i++) {
        mlp_stage_run(m, i, token);
        if (logits)
            memcpy(logits + (size_t)i * m->ck.vocab, m->row, sizeof(float) * (size_t)m->ck.vocab);
        toks[i] = token = smp_argmax(m->row, m->ck.vocab);
    }
}

int spec_mlp_n_predict(const spec_proposer *pp) { return ((const mlp *)pp)->ck.n_predict; }
int spec_mlp_vocab(const spec_proposer *pp) { return ((const mlp *)pp)->ck.vocab; }

/* ---- the proposer ------------------------------------------------------------ */

/* Sequence i's next draft token from its stage-j logits row: the argmax,
 * or a draw from the request's distribution (whose probabilities go to the
 * verifier). */
static int32_t pick(mlp *m, spec_seq *q, const smp_params *p, int sample, const float *row,
                    float *probs, int i, int j, int kmax)
{
    if (!sample)
        return smp_argmax(row, m->ck.vocab);
    float *pr = probs + ((size_t)i * kmax + j) * m->ck.vocab;
    smp_probs(m->smp, p, row, pr);
    return smp_draw(pr, m->ck.vocab, smp_rng_uniform(&((mlp_seq *)q->state)->rng));
}

/* Whether sequence i drafts (k[i] capped by n_predict), its sampler state
 * made when it samples. */
static int ready(mlp *m, spec_seq *q, const smp_params *p, int sample, int *k)
{
    if (!q->hidden || q->n_tokens < 1) { /* no hidden state yet */
        *k = 0;
        return 0;
    }
    if (*k > m->ck.n_predict)
        *k = m->ck.n_predict;
    if (sample && !q->state) {
        mlp_seq *s = calloc(1, sizeof *s);
        if (!s) {
            *k = 0;
            return 0;
        }
        smp_rng_seed(&s->rng, p->seed ^ 0x6d6c7073u);
        q->state = s;
    }
    return *k > 0;
}

/* Room for n rows of device calls. */
static int device_room(mlp *m, int n)
{
    if (n <= m->dcap)
        return 1;
    int *idx = realloc(m->didx, sizeof *idx * (size_t)n);
    if (idx)
        m->didx = idx;
    float *s0 = realloc(m->ds0, sizeof *s0 * (size_t)n * m->ck.emb_dim);
    if (s0)
        m->ds0 = s0;
    float *lg = realloc(m->dlog, sizeof *lg * (size_t)n * m->ck.vocab);
    if (lg)
        m->dlog = lg;
    int32_t *tk = realloc(m->dtok, sizeof *tk * (size_t)n);
    if (tk)
        m->dtok = tk;
    if (!idx || !s0 || !lg || !tk)
        return 0;
    m->dcap = n;
    return 1;
}

/* The stages of every drafting sequence at once on the device: stage j
 * for all rows, then each row's token picked on the host. */
static int propose_device(mlp *m, spec_seq *const *seqs, int n, const smp_params *params,
                          int kmax, int *k, int32_t *drafts, float *probs, inf_err *err)
{
    if (!device_room(m, n))
        return inf_fail(err, INF_ERR_NOMEM, "mlp_speculator: out of memory for %d rows", n);
    int na = 0, kk = 0;
    for (int i = 0; i < n; i++) {
        const smp_params *p = &params[i];
        if (!ready(m, seqs[i], p, p->temperature > 0 && probs, &k[i]))
            continue;
        mlp_begin(m, seqs[i]->hidden);
        for (int c = 0; c < m->ck.emb_dim; c++)
            m->ds0[(size_t)na * m->ck.emb_dim + c] = (float)m->s[c];
        m->dtok[na] = seqs[i]->tokens[seqs[i]->n_tokens - 1];
        m->didx[na++] = i;
        if (k[i] > kk)
            kk = k[i];
    }
    for (int j = 0; j < kk; j++) {
        int rc = m->dev.stage(m->dev.user, j, na, m->ds0, m->dtok, m->dlog, err);
        if (rc)
            return rc;
        for (int a = 0; a < na; a++) {
            int i = m->didx[a];
            if (j >= k[i])
                continue;
            const smp_params *p = &params[i];
            int32_t t = pick(m, seqs[i], p, p->temperature > 0 && probs,
                             m->dlog + (size_t)a * m->ck.vocab, probs, i, j, kmax);
            drafts[(size_t)i * kmax + j] = m->dtok[a] = t;
        }
    }
    return INF_OK;
}

static int mlp_propose(spec_proposer *pp, spec_seq *const *seqs, int n, const smp_params *params,
                       int kmax, int *k, int32_t *drafts, float *probs, inf_err *err)
{
    mlp *m = (mlp *)pp;
    if (m->dev.stage)
        return propose_device(m, seqs, n, params, kmax, k, drafts, probs, err);
    for (int i = 0; i < n; i++) {
        spec_seq *q = seqs[i];
        const smp_params *p = &params[i];
        int sample = p->temperature > 0 && probs;
        if (!ready(m, q, p, sample, &k[i]))
            continue;
        int32_t t = q->tokens[q->n_tokens - 1];
        mlp_begin(m, q->hidden);
        for (int j = 0; j < k[i]; j++) {
            mlp_stage_run(m, j, t);
            t = pick(m, q, p, sample, m->row, probs, i, j, kmax);
            drafts[(size_t)i * kmax + j] = t;
        }
    }
    return INF_OK;
}

void spec_mlp_weights_of(const spec_proposer *pp, spec_mlp_weights *out)
{
    const mlp *m = (const mlp *)pp;
    *out = (spec_mlp_weights){.vocab = m->ck.vocab, .emb_dim = m->ck.emb_dim, .inner = m->ck.inner,
                              .n_predict = m->ck.n_predict, .sw = m->sw, .ew = m->ew,
                              .stage = m->ck.stage};
}

void spec_mlp_set_device(spec_proposer *pp, const spec_mlp_device *dev)
{
    mlp *m = (mlp *)pp;
    if (m->dev.destroy)
        m->dev.destroy(m->dev.user);
    m->dev = *dev;
}

static void mlp_rollback(spec_proposer *pp, spec_seq *s, int n_valid)
{
    (void)pp, (void)s, (void)n_valid; /* no state beyond the hidden state it is handed */
}

static void mlp_release(spec_proposer *pp, spec_seq *s)
{
    (void)pp;
    free(s->state);
    s->state = NULL;
}

static void mlp_destroy(spec_proposer *pp)
{
    mlp *m = (mlp *)pp;
    if (!m)
        return;
    if (m->dev.destroy)
        m->dev.destroy(m->dev.user);
    free(m->didx), free(m->ds0), free(m->dlog), free(m->dtok);
    spec_mlp_ckpt_free(&m->ck);
    free(m->s);
    free(m->t);
    free(m->row);
    smp_destroy(m->smp);
    free(m);
}

static const spec_proposer_ops mlp_ops = {
    .name = "mlp_speculator", .propose = mlp_propose, .rollback = mlp_rollback,
    .release = mlp_release, .destroy = mlp_destroy, .deterministic = 0, .wants_hidden = 1,
};

int spec_mlp_create(const spec_mlp_config *cfg, spec_proposer **out, inf_err *err)
{
    *out = NULL;
    mlp *m = calloc(1, sizeof *m);
    if (!m)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    m->base.ops = &mlp_ops;
    int rc = spec_mlp_ckpt_load(cfg->dir, &m->ck, err);
    if (!rc && cfg->target_vocab > 0 && m->ck.vocab != cfg->target_vocab)
        rc = inf_fail(err, INF_ERR_INVALID, "%s: the speculator's vocabulary has %d tokens, the "
                      "target's %d", cfg->dir, m->ck.vocab, cfg->target_vocab);
    if (!rc && cfg->target_hidden > 0 && m->ck.emb_dim != cfg->target_hidden)
        rc = inf_fail(err, INF_ERR_INVALID, "%s: the speculator reads hidden states of %d "
                      "(emb_dim), the target's hidden size is %d", cfg->dir, m->ck.emb_dim,
                      cfg->target_hidden);
    if (!rc)
        rc = smp_create(m->ck.vocab, &m->smp, err);
    if (!rc) {
        int w = m->ck.emb_dim > m->ck.inner ? m->ck.emb_dim : m->ck.inner;
        m->s = malloc(sizeof(double) * (size_t)w);
        m->t = malloc(sizeof(double) * (size_t)w);
        m->row = malloc(sizeof(float) * (size_t)m->ck.vocab);
        if (!m->s || !m->t || !m->row)
            rc = inf_fail(err, INF_ERR_NOMEM, "out of memory");
    }
    if (rc) {
        mlp_destroy(&m->base);
        return rc;
    }
    m->sw = pow(0.5, 0.5 / m->ck.n_predict);
    m->ew = sqrt((1.0 - m->sw * m->sw) * m->ck.inner / 2.0);
    *out = &m->base;
    return INF_OK;
}
