/* Requests and their output buffers: what a request asked for (copied at
 * create), and the output the engine thread appends and the front end takes. */
#include "eng_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *dup_mem(const void *src, size_t n)
{
    if (!n)
        return NULL;
    void *d = malloc(n);
    if (d)
        memcpy(d, src, n);
    return d;
}

void eng_out_free(eng_out *o)
{
    free(o->text);
    free(o->stext);
    free(o->lps);
    free(o->plps);
    free(o->alts);
    free(o->pool);
    free(o->ids);
    memset(o, 0, sizeof *o);
}

static void req_free(eng_req *r)
{
    for (int i = 0; r->stop && i < r->p.n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    free(r->bias_ids);
    free(r->bias);
    free(r->grammar);
    free(r->seq.tokens);
    lp_chain_clear(&r->lp);
    free(r->hidden);
    tok_stream_destroy(r->ts);
    stop_destroy(r->stopper);
    tok_stream_destroy(r->sts);
    stop_destroy(r->sstopper);
    free(r->sbuf);
    eng_out_free(&r->out);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int eng_req_create(const int32_t *prompt, int n_prompt, const eng_params *p, eng_req **out,
                   inf_err *err)
{
    *out = NULL;
    eng_req *r = NULL;
    int bad = n_prompt < 1 || p->max_tokens < 1 || p->prompt_logprobs < 0 ||
              p->prompt_logprobs > ENG_MAX_LOGPROBS + 1;
    if (bad || !(r = calloc(1, sizeof *r))) {
        for (int i = 0; i < p->n_procs; i++)
            p->procs[i]->ops->destroy(p->procs[i]);
        return bad ? inf_fail(err, INF_ERR_INVALID, "a request needs a prompt, max_tokens >= 1 "
                              "and prompt logprobs 0..%d", ENG_MAX_LOGPROBS)
                   : inf_fail(err, INF_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < p->n_procs; i++) /* the request owns them now */
        if (lp_chain_add(&r->lp, p->procs[i], err) != INF_OK) {
            for (int j = i + 1; j < p->n_procs; j++)
                p->procs[j]->ops->destroy(p->procs[j]);
            lp_chain_clear(&r->lp);
            free(r);
            return INF_ERR_INVALID;
        }
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->mu, NULL);
    r->p = *p;
    r->p.stop = NULL;
    r->p.stop_ids = NULL;
    r->p.bias_ids = NULL;
    r->p.bias = NULL;
    r->p.grammar = NULL;
    r->p.procs = NULL;
    r->p.n_procs = 0;
    int ok = 1;
    if (p->grammar)
        ok = (r->grammar = strdup(p->grammar)) != NULL;
    if (ok && p->n_stop > 0) {
        r->stop = calloc((size_t)p->n_stop, sizeof *r->stop);
        ok = r->stop != NULL;
        for (int i = 0; ok && i < p->n_stop; i++)
            ok = (r->stop[i] = strdup(p->stop[i])) != NULL;
    }
    r->stop_ids = dup_mem(p->stop_ids, sizeof(int32_t) * (size_t)p->n_stop_ids);
    r->bias_ids = dup_mem(p->bias_ids, sizeof(int32_t) * (size_t)p->n_bias);
    r->bias = dup_mem(p->bias, sizeof(float) * (size_t)p->n_bias);
    /* room for the whole sequence: prompt plus every token it may generate */
    r->seq.tokens = malloc(sizeof(int32_t) * ((size_t)n_prompt + (size_t)p->max_tokens));
    if (!ok || (p->n_stop_ids && !r->stop_ids) || (p->n_bias && (!r->bias_ids || !r->bias)) ||
        !r->seq.tokens) {
        r->p.n_stop = p->n_stop; /* free what was copied */
        req_free(r);
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    }
    memcpy(r->seq.tokens, prompt, sizeof(int32_t) * (size_t)n_prompt);
    r->p.cache_salt = NULL;
    if (p->cache_salt) { /* FNV-1a: a salt only has to separate, not hide */
        uint64_t h = 0xcbf29ce484222325ull;
        for (const unsigned char *c = (const unsigned char *)p->cache_salt; *c; c++)
            h = (h ^ *c) * 0x100000001b3ull;
        r->seq.salt = h;
    }
    r->seq.n_tokens = r->seq.n_prompt = n_prompt;
    r->seq.no_prefix_hit = p->prompt_logprobs > 0; /* as vLLM: every row computed */
    r->out.stop_index = -1;
    r->out.stop_token = -1;
    r->out.n_prompt = n_prompt;
    *out = r;
    return INF_OK;
}

int eng__req_lp_init(eng_req *r, smp_ctx *scratch, const model_config *c, inf_err *err)
{
    lp_chain extra = r->lp; /* the caller's: they go last */
    r->lp.n = 0;
    lp_proc *p;
    int rc = INF_OK;
    if (r->p.n_bias > 0 && !(rc = lp_bias_create(r->bias_ids, r->bias, r->p.n_bias, &p, err)))
        rc = lp_chain_add(&r->lp, p, err);
    if (!rc && r->p.min_tokens > r->n_output) {
        int n_eos = r->p.ignore_eos ? 0 : c->n_eos, n = n_eos + r->p.n_stop_ids;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
        if (!ids) {
            rc = inf_fail(err, INF_ERR_NOMEM, "out of memory");
        } else {
            memcpy(ids, c->eos_token_ids, sizeof(int32_t) * (size_t)n_eos);
            if (r->p.n_stop_ids > 0) /* stop_ids is NULL without any */
                memcpy(ids + n_eos, r->stop_ids, sizeof(int32_t) * (size_t)r->p.n_stop_ids);
            if (!(rc = lp_min_tokens_create(r->p.min_tokens, r->n_output, ids, n, &p, err)))
                rc = lp_chain_add(&r->lp, p, err);
            free(ids);
        }
    }
    /* +1: a verified run may accept the token past max_tokens' last before
     * the engine sees the limit */
    if (!rc && lp_penalized(&r->p.sampling) &&
        !(rc = lp_penalties_create(scratch, &r->p.sampling, r->seq.tokens, r->seq.n_prompt,
                                   r->p.max_tokens + 1, &p, err)))
        rc = lp_chain_add(&r->lp, p, err);
    for (int i = 0; i < extra.n; i++)
        if (rc)
            extra.procs[i]->ops->destroy(extra.procs[i]);
        else
            rc = lp_chain_add(&r->lp, extra.procs[i], err);
    return rc;
}

void eng_req_ref(eng_req *r) { atomic_fetch_add(&r->refs, 1); }

void eng_req_unref(eng_req *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1)
        req_free(r);
}

void eng_req_set_user(eng_req *r, void *user) { r->user = user; }
void *eng_req_user(const eng_req *r) { return r->user; }

int eng__grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 1;
    int c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *n = realloc(*p, (size_t)c * elem);
    if (!n)
        return 0;
    *p = n;
    *cap = c;
    return 1;
}

static int grow_bytes(char **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 1;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    char *n = realloc(*p, c);
    if (!n)
        return 0;
    *p = n;
    *cap = c;
    return 1;
}

void eng_req_take(eng_req *r, eng_out *dst)
{
    pthread_mutex_lock(&r->mu);
    eng_out fresh = *dst; /* reuse dst's buffers for the next round */
    *dst = r->out;
    fresh.len = fresh.slen = 0;
    fresh.n_lps = fresh.n_plps = fresh.n_alts = 0;
    fresh.pool_len = 0;
    fresh.n_ids = 0;
    /* counters and the finish state stay current in both */
    fresh.finish = dst->finish;
    fresh.stop_index = dst->stop_index;
    fresh.stop_token = dst->stop_token;
    fresh.n_prompt = dst->n_prompt;
    fresh.n_output = dst->n_output;
    fresh.n_cached = dst->n_cached;
    fresh.t_first = dst->t_first;
    memcpy(fresh.error, dst->error, sizeof fresh.error);
    r->out = fresh;
    pthread_mutex_unlock(&r->mu);
}

int eng_req_finished(eng_req *r)
{
    pthread_mutex_lock(&r->mu);
    int f = r->out.finish != ENG_FINISH_NONE;
    pthread_mutex_unlock(&r->mu);
    return f;
}

int eng_req_started(eng_req *r)
{
    pthread_mutex_lock(&r->mu);
    int s = r->out.n_output > 0 || r->out.finish != ENG_FINISH_NONE;
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* ---- output (engine thread, under r->mu) ---------------------------------- */

/* Appends n bytes to a NUL-terminated output buffer. */
static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (!grow_bytes(buf, cap, *len + n + 1))
        return 0;
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 1;
}

static int out_pool(eng_out *o, const char *s, size_t n, size_t *off)
{
    if (!grow_bytes(&o->pool, &o->pool_cap, o->pool_len + n + 1))
        return 0;
    memcpy(o->pool + o->pool_len, s, n);
    *off = o->pool_len;
    o->pool_len += n;
    o->pool[o->pool_len] = '\0';
    return 1;
}

/* log-softmax of the raw logits for token tokid and the top n, appended to
 * *arr (the output's lps or plps). */
static void record_lp(const tok *tk, int V, eng_out *o, eng_lp **arr, int *n_arr, int *cap,
                      int n, const float *logits, int32_t tokid, const char *text,
                      size_t text_len)
{
    float mx = logits[smp_argmax(logits, V)];
    double sum = 0;
    int above = 0;
    for (int i = 0; i < V; i++) {
        sum += exp((double)logits[i] - mx);
        above += logits[i] > logits[tokid];
    }
    double lse = mx + log(sum);
    int32_t top[ENG_MAX_LOGPROBS];
    int nt = 0;
    for (int i = 0; i < V && n > 0; i++) { /* insertion into a sorted top-n */
        if (nt == n && logits[i] <= logits[top[nt - 1]])
            continue;
        int j = nt < n ? nt++ : nt - 1;
        while (j > 0 && logits[top[j - 1]] < logits[i]) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = i;
    }
    if (!eng__grow((void **)arr, cap, *n_arr + 1, sizeof **arr) ||
        !eng__grow((void **)&o->alts, &o->cap_alts, o->n_alts + nt, sizeof *o->alts))
        return;
    eng_lp *lp = &(*arr)[*n_arr];
    if (!out_pool(o, text, text_len, &lp->off))
        return;
    lp->len = text_len;
    lp->logprob = (float)(logits[tokid] - lse);
    lp->id = tokid;
    lp->rank = above + 1;
    lp->alt0 = o->n_alts;
    lp->n_alt = 0;
    for (int i = 0; i < nt; i++) {
        size_t bl = 0;
        const char *buf = tok_token_bytes(tk, top[i], &bl);
        eng_lp_alt *a = &o->alts[o->n_alts];
        if (!out_pool(o, buf ? buf : "", bl, &a->off))
            return;
        a->len = bl;
        a->logprob = (float)(logits[top[i]] - lse);
        a->id = top[i];
        o->n_alts++;
        lp->n_alt++;
    }
    (*n_arr)++;
}

void eng__record_logprobs(const tok *tk, int vocab, eng_req *r, const float *logits,
                          int32_t tokid, const char *text, size_t text_len)
{
    eng_out *o = &r->out;
    record_lp(tk, vocab, o, &o->lps, &o->n_lps, &o->cap_lps, r->p.logprobs, logits, tokid,
              text, text_len);
}

void eng__record_prompt_logprob(const tok *tk, int vocab, eng_req *r, const float *logits,
                                int32_t tokid)
{
    size_t bl = 0;
    const char *piece = tok_token_bytes(tk, tokid, &bl);
    eng_out *o = &r->out;
    record_lp(tk, vocab, o, &o->plps, &o->n_plps, &o->cap_plps, r->p.prompt_logprobs - 1,
              logits, tokid, piece ? piece : "", piece ? bl : 0);
}

/* text through stopper (when there is one) onto *dst (o->text or
 * o->stext); the matched stop string's index or -1. */
static int emit_into(eng_req *r, stop *stopper, char **dst, size_t *dlen, size_t *dcap,
                     const char *text, size_t len, int final)
{
    if (!stopper) {
        append(dst, dlen, dcap, text, len);
        return -1;
    }
    size_t need = len + stop_max_hold(stopper) + 1;
    if (need > r->sbuf_cap) {
        char *b = realloc(r->sbuf, need);
        if (!b)
            return -1;
        r->sbuf = b;
        r->sbuf_cap = need;
    }
    int m = -1;
    size_t n = stop_feed(stopper, text, len, r->sbuf, &m);
    append(dst, dlen, dcap, r->sbuf, n);
    if (m < 0 && final) {
        n = stop_flush(stopper, r->sbuf, &m);
        append(dst, dlen, dcap, r->sbuf, n);
    }
    return m;
}

/* Output passes through the stop strings first, when there are any. */
int eng__emit(eng_req *r, const char *text, size_t len, int final)
{
    eng_out *o = &r->out;
    return emit_into(r, r->stopper, &o->text, &o->len, &o->cap, text, len, final);
}

void eng__emit_special(eng_req *r, int32_t t, int final)
{
    const char *text = "";
    size_t len = 0;
    inf_err err = {0};
    /* t went through r->ts already: the decoder cannot refuse it */
    if (!r->sts || r->s_stopped || (t >= 0 && tok_stream_push(r->sts, t, &text, &len, &err)))
        return;
    eng_out *o = &r->out;
    int m = emit_into(r, r->sstopper, &o->stext, &o->slen, &o->scap, text, len, 0);
    if (m < 0 && final && tok_stream_flush(r->sts, &text, &len, &err) == INF_OK)
        m = emit_into(r, r->sstopper, &o->stext, &o->slen, &o->scap, text, len, 1);
    r->s_stopped = m >= 0;
}
