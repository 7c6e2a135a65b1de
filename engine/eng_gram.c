/* Grammar-constrained requests inside the engine: the vocabulary as bytes
 * (built once, at the first such request), a small cache of compiled
 * grammars and their automata keyed by the GBNF text (requests with the same
 * schema share parser states and cached masks), and one matcher per request
 * that masks its rows and advances on its accepted tokens. Engine thread
 * only. */
#include "eng_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_KEEP 8 /* unused automata kept for later requests */

struct eng_gram_ent {
    char *text;
    gram *g;
    gram_auto *a;
    int users;
    long used; /* step of the last attach, for eviction */
};

static int build_vocab(eng *e, inf_err *err)
{
    int n = e->vocab, nt = tok_vocab_size(e->tk);
    const char **bytes = calloc((size_t)n, sizeof *bytes);
    int *len = calloc((size_t)n, sizeof *len);
    int rc = INF_ERR_NOMEM;
    if (bytes && len) {
        for (int i = 0; i < n; i++) {
            size_t l = 0;
            const char *b = i < nt && !tok_is_special(e->tk, i) ? tok_token_bytes(e->tk, i, &l) : NULL;
            bytes[i] = b ? b : "";
            len[i] = b ? (int)l : 0; /* special tokens never match a grammar */
        }
        rc = gram_vocab_create(n, bytes, len, &e->gvocab, err);
    } else {
        inf_fail(err, rc, "grammar: out of memory");
    }
    free(bytes);
    free(len);
    return rc;
}

static void ent_free(eng_gram_ent *x)
{
    gram_auto_destroy(x->a);
    gram_destroy(x->g);
    free(x->text);
}

static eng_gram_ent *lookup(eng *e, const char *text, inf_err *err)
{
    for (int i = 0; i < e->n_gcache; i++)
        if (!strcmp(e->gcache[i].text, text))
            return &e->gcache[i];
    /* evict the least recently used idle entries beyond CACHE_KEEP */
    while (e->n_gcache >= CACHE_KEEP) {
        int v = -1;
        for (int i = 0; i < e->n_gcache; i++)
            if (!e->gcache[i].users && (v < 0 || e->gcache[i].used < e->gcache[v].used))
                v = i;
        if (v < 0)
            break;
        ent_free(&e->gcache[v]);
        e->gcache[v] = e->gcache[--e->n_gcache];
    }
    if (!eng__grow((void **)&e->gcache, &e->cap_gcache, e->n_gcache + 1, sizeof *e->gcache)) {
        inf_fail(err, INF_ERR_NOMEM, "grammar: out of memory");
        return NULL;
    }
    eng_gram_ent x = {0};
    const model_config *c = &e->m->cfg;
    if (!(x.text = strdup(text)) || gram_parse(text, strlen(text), &x.g, err) ||
        gram_auto_create(x.g, e->gvocab, c->eos_token_ids, c->n_eos, &x.a, err)) {
        if (!x.text)
            inf_fail(err, INF_ERR_NOMEM, "grammar: out of memory");
        ent_free(&x);
        return NULL;
    }
    e->gcache[e->n_gcache] = x;
    return &e->gcache[e->n_gcache++];
}

/* The grammar as a logits processor. accept counts tokens the grammar
 * refuses (drafts past a refused one, which the verifier rejects anyway)
 * without moving the matcher, so rollback takes back exactly what accept
 * gave. After detach (the request finished) it does nothing. */
typedef struct eng_gram_proc {
    lp_proc base;
    gram_match *m;
    int dead;     /* tokens accepted since the first refused one */
} eng_gram_proc;

static void gp_apply(lp_proc *p, float *logits, int n)
{
    eng_gram_proc *g = (eng_gram_proc *)p;
    if (g->m)
        gram_match_apply(g->m, logits, n);
}

static void gp_accept(lp_proc *p, int32_t token)
{
    eng_gram_proc *g = (eng_gram_proc *)p;
    if (g->m && (g->dead || gram_match_accept(g->m, token) != INF_OK))
        g->dead++;
}

static void gp_rollback(lp_proc *p, int n)
{
    eng_gram_proc *g = (eng_gram_proc *)p;
    int d = n < g->dead ? n : g->dead;
    g->dead -= d;
    if (g->m && n > d)
        gram_match_rollback(g->m, n - d);
}

static void gp_destroy(lp_proc *p)
{
    free(p); /* the matcher went at detach, on the engine thread */
}

static const lp_ops gram_ops = {"grammar", gp_apply, gp_accept, gp_rollback, gp_destroy};

int eng__gram_attach(eng *e, eng_req *r, inf_err *err)
{
    if (!r->grammar)
        return INF_OK;
    if (!e->gvocab && build_vocab(e, err))
        return INF_ERR_NOMEM;
    eng_gram_ent *x = lookup(e, r->grammar, err);
    eng_gram_proc *g = calloc(1, sizeof *g);
    if (!g)
        return inf_fail(err, INF_ERR_NOMEM, "grammar: out of memory");
    if (!x || gram_match_create(x->a, &g->m, err)) {
        free(g);
        return INF_ERR_INVALID;
    }
    g->base.ops = &gram_ops;
    x->users++;
    x->used = e->step_no;
    r->gent_text = x->text;
    r->gm = g->m;
    r->gproc = g;
    return lp_chain_add(&r->lp, &g->base, err); /* the chain owns g either way */
}

void eng__gram_detach(eng *e, eng_req *r)
{
    if (!r->gm)
        return;
    gram_match_destroy(r->gm);
    r->gm = NULL;
    r->gproc->m = NULL;
    for (int i = 0; i < e->n_gcache; i++)
        if (e->gcache[i].text == r->gent_text)
            e->gcache[i].users--;
    r->gent_text = NULL;
}

int eng__gram_refused(const eng_req *r)
{
    return r->gm && r->gproc->dead > 0;
}

int eng__gram_only(const eng_req *r)
{
    return lp_chain_empty(&r->lp) ||
           (r->gproc && r->lp.n == 1 && r->lp.procs[0] == &r->gproc->base);
}

void eng__gram_mask(eng_req *r, uint32_t *words)
{
    gram_match_mask(r->gm, words);
}

int eng__gram_must_end(const eng_req *r)
{
    return r->gm && !r->gproc->dead && gram_match_must_end(r->gm);
}

void eng__gram_free(eng *e)
{
    for (int i = 0; i < e->n_gcache; i++)
        ent_free(&e->gcache[i]);
    free(e->gcache);
    gram_vocab_destroy(e->gvocab);
}
