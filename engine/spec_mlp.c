#include "spec_mlp.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfgjson.h"
#include "st.h"

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
    int vocab, emb_dim, inner, n_predict, tie, scale_input;
    double sw, ew;
    float *arena;       /* every weight, as f32                           */
    mlp_stage *stage;   /* [n_predict]                                    */
    smp_ctx *smp;
    double *s, *t;      /* [max(emb_dim, inner)] the state, and scratch    */
    float *row;         /* [vocab] one stage's logits                      */
    spec_mlp_device dev; /* stages on a device when dev.stage is set       */
    int *didx, dcap;    /* [dcap] the sequences a device call carries      */
    float *ds0, *dlog;  /* [dcap][emb_dim] states, [dcap][vocab] logits    */
    int32_t *dtok;      /* [dcap] each row's token                         */
} mlp;

/* ---- loading -------------------------------------------------------------- */

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

static int read_config(mlp *m, const char *dir, inf_err *err)
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
static int walk_weights(mlp *m, const st_set *st, const char *dir, float *p, inf_err *err)
{
    int n_sets = m->tie ? 1 : m->n_predict, n_proj = m->tie ? 2 : m->n_predict;
    size_t V = (size_t)m->vocab, I = (size_t)m->inner;
    int rc = INF_OK;
    for (int i = 0; i < n_sets && !rc; i++) {
        mlp_stage *s = &m->stage[i];
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

static int load_weights(mlp *m, const char *dir, inf_err *err)
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
    for (int i = 0; i < m->emb_dim; i++)
        m->s[i] = hidden[i];
    if (!m->scale_input)
        return;
    double k = inv_rms(m->s, m->emb_dim) / sqrt(2.0);
    for (int i = 0; i < m->emb_dim; i++)
        m->s[i] *= k;
}

/* Stage i from the state and token t: the new state, and its logits in m->row. */
static void mlp_stage_run(mlp *m, int i, int32_t t)
{
    const mlp_stage *st = &m->stage[i];
    int I = m->inner;
    matvec(st->proj, I, i == 0 ? m->emb_dim : I, m->s, m->t);
    const float *z = st->emb + (size_t)t * I;
    for (int j = 0; j < I; j++)
        m->t[j] = m->t[j] * m->sw + (double)z[j] * m->ew;
    double k = inv_rms(m->t, I);
    for (int j = 0; j < I; j++) {
        double v = m->t[j] * k * st->ln_w[j] + st->ln_b[j];
        m->s[j] = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    }
    for (int r = 0; r < m->vocab; r++) {
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
    for (int i = 0; i < k && i < m->n_predict; i++) {
        mlp_stage_run(m, i, token);
        if (logits)
            memcpy(logits + (size_t)i * m->vocab, m->row, sizeof(float) * (size_t)m->vocab);
        toks[i] = token = smp_argmax(m->row, m->vocab);
    }
}

int spec_mlp_n_predict(const spec_proposer *pp) { return ((const mlp *)pp)->n_predict; }
int spec_mlp_vocab(const spec_proposer *pp) { return ((const mlp *)pp)->vocab; }

/* ---- the proposer ------------------------------------------------------------ */

/* Sequence i's next draft token from its stage-j logits row: the argmax,
 * or a draw from the request's distribution (whose probabilities go to the
 * verifier). */
static int32_t pick(mlp *m, spec_seq *q, const smp_params *p, int sample, const float *row,
                    float *probs, int i, int j, int kmax)
{
    if (!sample)
        return smp_argmax(row, m->vocab);
    float *pr = probs + ((size_t)i * kmax + j) * m->vocab;
    smp_probs(m->smp, p, row, pr);
    return smp_draw(pr, m->vocab, smp_rng_uniform(&((mlp_seq *)q->state)->rng));
}

/* Whether sequence i drafts (k[i] capped by n_predict), its sampler state
 * made when it samples. */
static int ready(mlp *m, spec_seq *q, const smp_params *p, int sample, int *k)
{
    if (!q->hidden || q->n_tokens < 1) { /* no hidden state yet */
        *k = 0;
        return 0;
    }
    if (*k > m->n_predict)
        *k = m->n_predict;
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
    float *s0 = realloc(m->ds0, sizeof *s0 * (size_t)n * m->emb_dim);
    if (s0)
        m->ds0 = s0;
    float *lg = realloc(m->dlog, sizeof *lg * (size_t)n * m->vocab);
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
        for (int c = 0; c < m->emb_dim; c++)
            m->ds0[(size_t)na * m->emb_dim + c] = (float)m->s[c];
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
                             m->dlog + (size_t)a * m->vocab, probs, i, j, kmax);
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
    *out = (spec_mlp_weights){.vocab = m->vocab, .emb_dim = m->emb_dim, .inner = m->inner,
                              .n_predict = m->n_predict, .sw = m->sw, .ew = m->ew,
                              .stage = m->stage};
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
    free(m->arena);
    free(m->stage);
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
    int rc = read_config(m, cfg->dir, err);
    if (!rc && cfg->target_vocab > 0 && m->vocab != cfg->target_vocab)
        rc = inf_fail(err, INF_ERR_INVALID, "%s: the speculator's vocabulary has %d tokens, the "
                      "target's %d", cfg->dir, m->vocab, cfg->target_vocab);
    if (!rc && cfg->target_hidden > 0 && m->emb_dim != cfg->target_hidden)
        rc = inf_fail(err, INF_ERR_INVALID, "%s: the speculator reads hidden states of %d "
                      "(emb_dim), the target's hidden size is %d", cfg->dir, m->emb_dim,
                      cfg->target_hidden);
    if (!rc)
        rc = load_weights(m, cfg->dir, err);
    if (!rc)
        rc = smp_create(m->vocab, &m->smp, err);
    if (!rc) {
        int w = m->emb_dim > m->inner ? m->emb_dim : m->inner;
        m->s = malloc(sizeof(double) * (size_t)w);
        m->t = malloc(sizeof(double) * (size_t)w);
        m->row = malloc(sizeof(float) * (size_t)m->vocab);
        if (!m->s || !m->t || !m->row)
            rc = inf_fail(err, INF_ERR_NOMEM, "out of memory");
    }
    if (rc) {
        mlp_destroy(&m->base);
        return rc;
    }
    m->sw = pow(0.5, 0.5 / m->n_predict);
    m->ew = sqrt((1.0 - m->sw * m->sw) * m->inner / 2.0);
    *out = &m->base;
    return INF_OK;
}
