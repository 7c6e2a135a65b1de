#include "spec.h"

#include <stdlib.h>
#include <string.h>

/* ---- n-gram lookup: the definition ------------------------------------------ */

int spec_ngram_lookup(const int32_t *tokens, int n_tokens, int lookup_min, int lookup_max, int k,
                      int32_t *out)
{
    for (int n = lookup_max; n >= lookup_min; n--) {
        if (n < 1 || n_tokens < n + 1)
            continue;
        const int32_t *suffix = tokens + n_tokens - n;
        /* most recent earlier start j: the occurrence begins before the
         * suffix does, and something follows it */
        for (int j = n_tokens - n - 1; j >= 0; j--) {
            if (memcmp(tokens + j, suffix, sizeof(int32_t) * (size_t)n) != 0)
                continue;
            int avail = n_tokens - (j + n);
            int m = avail < k ? avail : k;
            memcpy(out, tokens + j + n, sizeof(int32_t) * (size_t)m);
            return m;
        }
    }
    return 0;
}

/* ---- n-gram lookup with an index --------------------------------------------- */

/* Per sequence and per n: an open-addressed table from an n-gram's hash to
 * the most recent start where it occurs, filled as the sequence grows. A
 * position's n-gram becomes findable once a token follows it. Stored
 * positions are checked against the tokens, so a hash collision only misses. */
typedef struct ngram_table {
    uint64_t *keys;   /* 0: empty                                         */
    int32_t *start;
    uint32_t cap;     /* power of two, >= 2 x entries (grows with them)   */
    uint32_t n;       /* entries                                          */
    int next;         /* next start position to index                     */
} ngram_table;

typedef struct ngram_state {
    ngram_table *t;   /* [lookup_max - lookup_min + 1]                    */
} ngram_state;

typedef struct ngram {
    spec_proposer base;
    spec_ngram_config cfg;
} ngram;

static uint64_t hash_tokens(const int32_t *t, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h | 1; /* never 0: 0 marks an empty slot */
}

static void table_set(ngram_table *t, uint64_t key, int32_t start)
{
    uint32_t i = (uint32_t)key & (t->cap - 1);
    while (t->keys[i] && t->keys[i] != key)
        i = (i + 1) & (t->cap - 1);
    t->n += !t->keys[i];
    t->keys[i] = key;
    t->start[i] = start; /* later starts overwrite: the most recent wins */
}

/* Room for one more entry at most half full: sized by what the sequence
 * has, not by the context it may reach. 0 when out of memory. */
static int table_room(ngram_table *t)
{
    if (2 * (t->n + 1) <= t->cap)
        return 1;
    ngram_table g = {.cap = t->cap ? 2 * t->cap : 64, .next = t->next};
    g.keys = calloc(g.cap, sizeof *g.keys);
    g.start = malloc(g.cap * sizeof *g.start);
    if (!g.keys || !g.start) {
        free(g.keys);
        free(g.start);
        return 0;
    }
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->keys[i])
            table_set(&g, t->keys[i], t->start[i]);
    free(t->keys);
    free(t->start);
    *t = g;
    return 1;
}

static int32_t table_get(const ngram_table *t, uint64_t key)
{
    uint32_t i = (uint32_t)key & (t->cap - 1);
    while (t->keys[i]) {
        if (t->keys[i] == key)
            return t->start[i];
        i = (i + 1) & (t->cap - 1);
    }
    return -1;
}

static void state_free(const ngram *g, ngram_state *s)
{
    if (!s)
        return;
    for (int i = 0; s->t && i <= g->cfg.lookup_max - g->cfg.lookup_min; i++) {
        free(s->t[i].keys);
        free(s->t[i].start);
    }
    free(s->t);
    free(s);
}

static ngram_state *state_new(const ngram *g)
{
    int m = g->cfg.lookup_max - g->cfg.lookup_min + 1;
    ngram_state *s = calloc(1, sizeof *s);
    if (!s || !(s->t = calloc((size_t)m, sizeof *s->t))) {
        free(s);
        return NULL;
    }
    return s; /* tables grow as they fill */
}

static int ngram_propose_one(ngram *g, spec_seq *q, int k, int32_t *out)
{
    ngram_state *s = q->state;
    if (!s && !(s = q->state = state_new(g)))
        return 0; /* no memory: no proposal, never an error */
    const int32_t *t = q->tokens;
    int L = q->n_tokens;
    for (int n = g->cfg.lookup_max; n >= g->cfg.lookup_min; n--) {
        ngram_table *tb = &s->t[n - g->cfg.lookup_min];
        /* index every start j with j + n <= L - 1 (a token follows it) */
        for (; tb->next + n <= L - 1 && table_room(tb); tb->next++)
            table_set(tb, hash_tokens(t + tb->next, n), tb->next);
        if (L < n + 1 || !tb->cap)
            continue;
        int32_t j = table_get(tb, hash_tokens(t + L - n, n));
        if (j < 0 || memcmp(t + j, t + L - n, sizeof(int32_t) * (size_t)n) != 0)
            continue;
        int avail = L - (j + n), m = avail < k ? avail : k;
        memcpy(out, t + j + n, sizeof(int32_t) * (size_t)m);
        return m;
    }
    return 0;
}

static int ngram_propose(spec_proposer *p, spec_seq *const *seqs, int n, const smp_params *params,
                         int kmax, int *k, int32_t *drafts, float *probs, inf_err *err)
{
    (void)params, (void)probs, (void)err;
    for (int i = 0; i < n; i++)
        k[i] = k[i] > 0 ? ngram_propose_one((ngram *)p, seqs[i], k[i], drafts + (size_t)i * kmax)
                        : 0;
    return INF_OK;
}

static void ngram_rollback(spec_proposer *p, spec_seq *s, int n_valid)
{
    /* proposals are made before drafts are appended, so the index holds only
     * final tokens and this never fires in the engine; but an n-gram that
     * reaches past n_valid (indexed starts j < next, tokens j..j+n-1) would be
     * stale: start the index over rather than answer from it */
    ngram *g = (ngram *)p;
    ngram_state *st = s->state;
    for (int i = 0; st && i <= g->cfg.lookup_max - g->cfg.lookup_min; i++)
        if (st->t[i].next + g->cfg.lookup_min + i > n_valid + 1) {
            state_free(g, st);
            s->state = NULL;
            return;
        }
}

static void ngram_release(spec_proposer *p, spec_seq *s)
{
    state_free((ngram *)p, s->state);
    s->state = NULL;
}

static void ngram_destroy(spec_proposer *p)
{
    free(p);
}

static const spec_proposer_ops ngram_ops = {
    .name = "ngram", .propose = ngram_propose, .rollback = ngram_rollback,
    .release = ngram_release, .destroy = ngram_destroy, .deterministic = 1,
};

int spec_ngram_create(const spec_ngram_config *cfg, spec_proposer **out, inf_err *err)
{
    *out = NULL;
    if (cfg->lookup_min < 1 || cfg->lookup_max < cfg->lookup_min || cfg->lookup_max > 64)
        return inf_fail(err, INF_ERR_INVALID,
                        "ngram speculation: prompt_lookup_min %d and prompt_lookup_max %d must "
                        "satisfy 1 <= min <= max <= 64",
                        cfg->lookup_min, cfg->lookup_max);
    ngram *g = calloc(1, sizeof *g);
    if (!g)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    g->base.ops = &ngram_ops;
    g->cfg = *cfg;
    *out = &g->base;
    return INF_OK;
}

/* ---- verification ----------------------------------------------------------- */

spec_result spec_verify(int k, const int32_t *drafts, const float *p, const float *q, int V,
                        smp_rng *rng, float *scratch)
{
    spec_result r = {0, -1, 0};
    for (int i = 0; i < k; i++) {
        const float *pi = p + (size_t)i * V;
        int32_t d = drafts[i];
        double pd = pi[d], qd = q ? q[(size_t)i * V + d] : 1.0;
        /* accept with probability min(1, p(d) / q(d)) */
        if (qd > 0 && smp_rng_uniform(rng) * qd < pd) {
            r.accepted++;
            continue;
        }
        /* rejected: the target's own token from max(0, p - q) (smp_draw
         * normalizes) */
        double sum = 0;
        for (int x = 0; x < V; x++) {
            double qx = q ? q[(size_t)i * V + x] : (x == d);
            double v = pi[x] - qx;
            scratch[x] = v > 0 ? (float)v : 0.0f;
            sum += scratch[x];
        }
        /* p == q to rounding: p itself is right */
        r.next = smp_draw(sum > 0 ? scratch : pi, V, smp_rng_uniform(rng));
        return r;
    }
    r.bonus = 1;
    r.next = smp_draw(p + (size_t)k * V, V, smp_rng_uniform(rng));
    return r;
}
