/* One sequence's cursor in a gram_auto: a stack of positions, one per
 * accepted step, so rolling back a rejected draft is popping. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gram_int.h"

struct gram_match {
    gram_auto *a;
    gram__pos *hist; /* [n + 1]: hist[0] the start, hist[n] now */
    int n, cap;
    uint32_t *scratch; /* one mask, for apply */
};

int gram_match_create(gram_auto *a, gram_match **out, inf_err *err)
{
    *out = NULL;
    gram_match *m = calloc(1, sizeof *m);
    if (!m || !(m->hist = malloc(sizeof *m->hist * 64))) {
        free(m);
        return inf_fail(err, INF_ERR_NOMEM, "grammar: out of memory");
    }
    m->a = a;
    m->cap = 64;
    m->hist[0] = gram__start(a);
    *out = m;
    return INF_OK;
}

void gram_match_destroy(gram_match *m)
{
    if (!m)
        return;
    free(m->hist);
    free(m->scratch);
    free(m);
}

static int push(gram_match *m, gram__pos p)
{
    if (m->n + 1 == m->cap) {
        gram__pos *h = realloc(m->hist, sizeof *h * (size_t)m->cap * 2);
        if (!h)
            return INF_ERR_NOMEM;
        m->hist = h;
        m->cap *= 2;
    }
    m->hist[++m->n] = p;
    return INF_OK;
}

static int is_eos(const gram_match *m, int32_t token)
{
    int n;
    const int32_t *eos = gram__eos(m->a, &n);
    for (int i = 0; i < n; i++)
        if (eos[i] == token)
            return 1;
    return 0;
}

int gram_match_accept_bytes(gram_match *m, const char *s, size_t len)
{
    gram__pos p = m->hist[m->n];
    for (size_t i = 0; i < len && p.sid >= 0; i++)
        p = gram__step_byte(m->a, p, (uint8_t)s[i]);
    if (p.sid < 0)
        return INF_ERR_INVALID;
    return push(m, p);
}

int gram_match_accept(gram_match *m, int32_t token)
{
    gram__pos p = m->hist[m->n];
    if (p.sid < 0)
        return INF_ERR_INVALID;
    if (is_eos(m, token)) {
        if (p.need || !gram__state_accepts(m->a, p.sid))
            return INF_ERR_INVALID;
        return push(m, (gram__pos){GRAM__ENDED, 0, 0, 0});
    }
    const gram_vocab *v = gram__vocab(m->a);
    if (!v || token < 0 || token >= v->n || !v->len[token])
        return INF_ERR_INVALID;
    return gram_match_accept_bytes(m, v->bytes[token], (size_t)v->len[token]);
}

void gram_match_rollback(gram_match *m, int n)
{
    m->n = n >= m->n ? 0 : m->n - (n > 0 ? n : 0);
}

int gram_match_steps(const gram_match *m)
{
    return m->n;
}

int gram_match_can_end(const gram_match *m)
{
    gram__pos p = m->hist[m->n];
    return !p.need && gram__state_accepts(m->a, p.sid);
}

int gram_match_must_end(gram_match *m)
{
    gram__pos p = m->hist[m->n];
    return gram_match_can_end(m) && !gram__state_open(m->a, p.sid);
}

static int popcount_words(const uint32_t *w, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += __builtin_popcount(w[i]);
    return c;
}

int gram_match_mask(gram_match *m, uint32_t *words)
{
    const gram_vocab *v = gram__vocab(m->a);
    size_t nw = ((size_t)v->n + 31) / 32;
    gram__pos p = m->hist[m->n];
    const uint32_t *c = p.need ? NULL : gram__mask_get(m->a, p.sid);
    if (c) {
        memcpy(words, c, nw * sizeof *words);
        return popcount_words(words, nw);
    }
    int count = gram__walk(m->a, p, words);
    if (count < 0) { /* out of memory: refuse everything but what is certain */
        memset(words, 0, nw * sizeof *words);
        return 0;
    }
    if (!p.need && p.sid >= 0) {
        uint32_t *keep = malloc(nw * sizeof *keep);
        if (keep) {
            memcpy(keep, words, nw * sizeof *keep);
            gram__mask_put(m->a, p.sid, keep);
        }
    }
    return count;
}

void gram_match_apply(gram_match *m, float *logits, int n)
{
    const gram_vocab *v = gram__vocab(m->a);
    size_t nw = ((size_t)v->n + 31) / 32;
    if (!m->scratch && !(m->scratch = malloc(nw * sizeof *m->scratch))) {
        for (int i = 0; i < n; i++)
            logits[i] = -INFINITY;
        return;
    }
    gram_match_mask(m, m->scratch);
    for (int i = 0; i < n; i++)
        if (i >= v->n || !(m->scratch[i >> 5] >> (i & 31) & 1))
            logits[i] = -INFINITY;
}
