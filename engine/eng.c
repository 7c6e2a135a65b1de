#include "eng.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "sched.h"
#include "stop.h"

#define MAX_LOGPROBS 20

struct eng_req {
    atomic_int refs;
    atomic_int cancelled;
    void *user;
    /* parameters (immutable after create) */
    eng_params p;
    char **stop;
    int32_t *stop_ids, *bias_ids;
    float *bias;
    /* engine-thread state */
    sched_seq seq;
    int n_output;
    smp_rng rng;
    tok_stream *ts;
    stop *stopper;            /* stop strings, when the request has any     */
    char *sbuf;               /* stop_feed's output                         */
    size_t sbuf_cap;
    int active;               /* inside the engine                         */
    double t_arrival, t_last;  /* submit time; last token (for latencies)    */
    /* speculation */
    spec_seq ss;              /* the proposer's view and state             */
    int n_draft;              /* drafted tokens appended after the last real */
    int draft_slot;           /* row block of their probs in eng.dprobs     */
    double accept_avg;        /* recent acceptance (moving average)        */
    int spec_pause, spec_backoff; /* steps without drafting, next pause     */
    int spec_k;               /* draft length now: shrinks on rejections    */
    long plan_stamp;          /* step in which it was last planned          */
    int scheduled;            /* has been scheduled once (queue time)      */
    int touched;              /* on eng.touched this step                  */
    struct eng_req *next_touched;
    struct eng_req *next_in;  /* inbox link                                */
    /* output handed to the front end, under mu */
    pthread_mutex_t mu;
    eng_out out;
};

struct eng {
    eng_config cfg;
    const model *m;
    const tok *tk;
    be_backend *be;
    kv_pool *kv;
    sched *sch;
    smp_ctx *smp;
    int vocab;
    pthread_t thread;
    pthread_mutex_t mu;         /* inbox, stop, wake-ups                    */
    pthread_cond_t cv;
    eng_req *inbox_head, *inbox_tail;
    int inbox_n;
    int stop;
    atomic_int pending_cancel;
    atomic_int queued;          /* submitted, not yet running               */
    _Atomic double beat;        /* inf_now() at the loop's last turn        */
    atomic_int idle;            /* waiting for work                         */
    /* engine-thread state */
    eng_req **active;           /* requests inside the engine               */
    int n_active, cap_active;
    eng_req *touched;           /* to notify after this step (a list: adding
                                   never fails, so no finish goes unsaid)  */
    smp_rng seeds;              /* seeds for requests that bring none       */
    /* step buffers */
    int32_t *tokens, *positions, *slots, *seq_start, *seq_len, *table, *rows;
    int *row0, *nrows;          /* [max_num_seqs] logits rows of each plan entry */
    int max_blocks;
    float *logits;              /* [rows][vocab]: rows = max_num_seqs * (k+1) */
    float *scratch;             /* [vocab]                                  */
    int max_rows;
    /* speculation */
    int kmax;                   /* spec_k, or 0                             */
    eng_req **cand;             /* [max_num_seqs] sequences drafting        */
    spec_seq **cand_ss;
    smp_params *cand_params;
    int *cand_k;
    int32_t *drafts;            /* [max_num_seqs][kmax]                     */
    float *dprobs;              /* [max_num_seqs][kmax][vocab] or NULL      */
    float *tprobs;              /* [kmax+1][vocab] target distributions     */
    int32_t *argmaxes;          /* [kmax+1]                                 */
    long step_no;
    /* stats, under mu */
    /* the periodic log line */
    met_snap log_prev;
    double log_at;
};

/* What a step leaves behind, for the gauges and the stats line. */
typedef struct eng_stats {
    int running, waiting;
    double kv_usage; /* 0..1 */
} eng_stats;

/* ---- requests ------------------------------------------------------------ */

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
    free(o->lps);
    free(o->alts);
    free(o->pool);
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
    free(r->seq.tokens);
    tok_stream_destroy(r->ts);
    stop_destroy(r->stopper);
    free(r->sbuf);
    eng_out_free(&r->out);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int eng_req_create(const int32_t *prompt, int n_prompt, const eng_params *p, eng_req **out,
                   inf_err *err)
{
    *out = NULL;
    if (n_prompt < 1 || p->max_tokens < 1)
        return inf_fail(err, INF_ERR_INVALID, "a request needs a prompt and max_tokens >= 1");
    eng_req *r = calloc(1, sizeof *r);
    if (!r)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->mu, NULL);
    r->p = *p;
    r->p.stop = NULL;
    r->p.stop_ids = NULL;
    r->p.bias_ids = NULL;
    r->p.bias = NULL;
    int ok = 1;
    if (p->n_stop > 0) {
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
    r->out.stop_index = -1;
    r->out.stop_token = -1;
    r->out.n_prompt = n_prompt;
    *out = r;
    return INF_OK;
}

void eng_req_ref(eng_req *r) { atomic_fetch_add(&r->refs, 1); }

void eng_req_unref(eng_req *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1)
        req_free(r);
}

void eng_req_set_user(eng_req *r, void *user) { r->user = user; }
void *eng_req_user(const eng_req *r) { return r->user; }

static int grow(void **p, int *cap, int need, size_t elem)
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
    fresh.len = 0;
    fresh.n_lps = fresh.n_alts = 0;
    fresh.pool_len = 0;
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

/* ---- output (engine thread, under r->mu) ---------------------------------- */

static int out_text(eng_out *o, const char *s, size_t n)
{
    if (!grow_bytes(&o->text, &o->cap, o->len + n + 1))
        return 0;
    memcpy(o->text + o->len, s, n);
    o->len += n;
    o->text[o->len] = '\0';
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

/* The text a vocabulary piece stands for on its own: SentencePiece's word
 * marker as a space, byte pieces as their byte. */
static size_t piece_text(const tok *tk, int32_t id, char *buf, size_t cap)
{
    const char *p = tok_piece(tk, id);
    if (!p)
        return 0;
    unsigned v;
    if (strlen(p) == 6 && sscanf(p, "<0x%2X>", &v) == 1) {
        buf[0] = (char)v;
        return 1;
    }
    size_t n = 0;
    for (; *p && n + 1 < cap; p++) {
        if ((unsigned char)p[0] == 0xE2 && (unsigned char)p[1] == 0x96 &&
            (unsigned char)p[2] == 0x81) { /* U+2581 */
            buf[n++] = ' ';
            p += 2;
        } else {
            buf[n++] = *p;
        }
    }
    return n;
}

/* ---- the step ------------------------------------------------------------ */

static eng_req *req_of(sched_seq *q)
{
    return (eng_req *)((char *)q - offsetof(eng_req, seq));
}

static void touch(eng *e, eng_req *r)
{
    if (r->touched)
        return;
    r->touched = 1;
    r->next_touched = e->touched;
    e->touched = r;
}

/* Takes r out of the engine with the given finish; its owner is notified. */
static void finish(eng *e, eng_req *r, int reason, const char *error)
{
    if (r->n_draft) { /* unverified drafts never count */
        r->seq.n_tokens -= r->n_draft;
        r->n_draft = 0;
    }
    if (e->cfg.spec)
        e->cfg.spec->ops->release(e->cfg.spec, &r->ss);
    if (r->seq.state != SCHED_DONE)
        sched_remove(e->sch, &r->seq);
    pthread_mutex_lock(&r->mu);
    r->out.finish = reason;
    if (error)
        snprintf(r->out.error, sizeof r->out.error, "%s", error);
    pthread_mutex_unlock(&r->mu);
    r->active = 0;
    touch(e, r);
    met_registry *m = e->cfg.met;
    if (m) {
        static const met_finish why[] = {[ENG_FINISH_STOP] = MET_FINISH_STOP,
                                         [ENG_FINISH_LENGTH] = MET_FINISH_LENGTH,
                                         [ENG_FINISH_ABORT] = MET_FINISH_ABORT,
                                         [ENG_FINISH_ERROR] = MET_FINISH_ERROR};
        met_request_finished(m, why[reason]);
        met_observe(m, MET_E2E_SECONDS, inf_now() - r->t_arrival);
        met_observe(m, MET_REQUEST_PROMPT_TOKENS, r->seq.n_prompt);
        met_observe(m, MET_REQUEST_GENERATION_TOKENS, r->n_output);
    }
}

/* log-softmax of the raw logits for the sampled token and the top n. */
static void record_logprobs(eng *e, eng_req *r, const float *logits, int32_t tokid,
                            const char *text, size_t text_len)
{
    int V = e->vocab, n = r->p.logprobs;
    float mx = logits[smp_argmax(logits, V)];
    double sum = 0;
    for (int i = 0; i < V; i++)
        sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    int32_t top[MAX_LOGPROBS];
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
    eng_out *o = &r->out;
    if (!grow((void **)&o->lps, &o->cap_lps, o->n_lps + 1, sizeof *o->lps) ||
        !grow((void **)&o->alts, &o->cap_alts, o->n_alts + nt, sizeof *o->alts))
        return;
    eng_lp *lp = &o->lps[o->n_lps];
    if (!out_pool(o, text, text_len, &lp->off))
        return;
    lp->len = text_len;
    lp->logprob = (float)(logits[tokid] - lse);
    lp->alt0 = o->n_alts;
    lp->n_alt = 0;
    for (int i = 0; i < nt; i++) {
        char buf[64];
        size_t bl = piece_text(e->tk, top[i], buf, sizeof buf);
        eng_lp_alt *a = &o->alts[o->n_alts];
        if (!out_pool(o, buf, bl, &a->off))
            return;
        a->len = bl;
        a->logprob = (float)(logits[top[i]] - lse);
        o->n_alts++;
        lp->n_alt++;
    }
    o->n_lps++;
}

static int is_stop_id(const eng *e, const eng_req *r, int32_t t, int *eos)
{
    *eos = 0;
    for (int i = 0; i < r->p.n_stop_ids; i++)
        if (r->stop_ids[i] == t)
            return 1;
    if (r->p.ignore_eos)
        return 0;
    const model_config *c = &e->m->cfg;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] == t)
            return *eos = 1;
    return 0;
}

/* Appends detokenized text to r's output through its stop strings (under
 * r->mu). final: the sequence ends here, release what stop matching holds.
 * Returns the index of a stop string that matched, or -1. */
static int emit(eng_req *r, const char *text, size_t len, int final)
{
    eng_out *o = &r->out;
    if (!r->stopper) {
        out_text(o, text, len);
        return -1;
    }
    size_t need = len + stop_max_hold(r->stopper) + 1;
    if (need > r->sbuf_cap) {
        char *b = realloc(r->sbuf, need);
        if (!b)
            return -1;
        r->sbuf = b;
        r->sbuf_cap = need;
    }
    int m = -1;
    size_t n = stop_feed(r->stopper, text, len, r->sbuf, &m);
    out_text(o, r->sbuf, n);
    if (m < 0 && final) {
        n = stop_flush(r->stopper, r->sbuf, &m);
        out_text(o, r->sbuf, n);
    }
    return m;
}

/* A logits row as the request samples from it, before penalties: logit_bias
 * added, and EOS / stop ids masked while fewer than min_tokens are out
 * (n_out: output tokens before this row's). */
static void mask_row(eng *e, const eng_req *r, const float *row, int n_out, float *lg)
{
    int V = e->vocab;
    memcpy(lg, row, sizeof(float) * (size_t)V);
    for (int i = 0; i < r->p.n_bias; i++)
        if (r->bias_ids[i] >= 0 && r->bias_ids[i] < V)
            lg[r->bias_ids[i]] += r->bias[i];
    if (n_out < r->p.min_tokens) { /* no stopping before min_tokens */
        const model_config *c = &e->m->cfg;
        for (int i = 0; i < c->n_eos && !r->p.ignore_eos; i++)
            lg[c->eos_token_ids[i]] = -INFINITY;
        for (int i = 0; i < r->p.n_stop_ids; i++)
            if (r->stop_ids[i] >= 0 && r->stop_ids[i] < V)
                lg[r->stop_ids[i]] = -INFINITY;
    }
}

/* Appends token t (sampled from raw logits row) to r and its output:
 * detokenized, through stop strings, EOS / stop ids / max_tokens checked.
 * Returns 1 when r finished. */
static int emit_token(eng *e, eng_req *r, int32_t t, const float *row)
{
    sched_seq *q = &r->seq;
    q->tokens[q->n_tokens++] = t;
    r->n_output++;
    if (e->cfg.met)
        met_add(e->cfg.met, MET_GENERATION_TOKENS, 1);

    int eos, stopped = is_stop_id(e, r, t, &eos);
    const char *text = "";
    size_t len = 0;
    inf_err err = {0};
    if (!stopped && tok_stream_push(r->ts, t, &text, &len, &err) != INF_OK) {
        finish(e, r, ENG_FINISH_ERROR, err.msg);
        return 1;
    }
    int reason = ENG_FINISH_NONE;
    if (stopped)
        reason = ENG_FINISH_STOP;
    else if (r->n_output >= r->p.max_tokens || q->n_tokens >= e->cfg.max_model_len)
        reason = ENG_FINISH_LENGTH;

    pthread_mutex_lock(&r->mu);
    eng_out *o = &r->out;
    size_t before = o->len;
    int matched = emit(r, text, len, 0);
    if (reason != ENG_FINISH_NONE && matched < 0) { /* release what is held */
        const char *rest;
        size_t rl;
        if (tok_stream_flush(r->ts, &rest, &rl, &err) == INF_OK)
            matched = emit(r, rest, rl, 1);
    }
    if (matched >= 0) {
        reason = ENG_FINISH_STOP;
        o->stop_index = matched;
    }
    if (r->p.logprobs >= 0)
        record_logprobs(e, r, row, t, o->text ? o->text + before : "", o->len - before);
    o->n_output = r->n_output;
    o->n_cached = q->n_cached;
    double now = inf_now();
    if (r->n_output == 1)
        o->t_first = now;
    if (e->cfg.met)
        met_observe(e->cfg.met, r->n_output == 1 ? MET_TTFT_SECONDS : MET_ITL_SECONDS,
                    now - (r->n_output == 1 ? r->t_arrival : r->t_last));
    r->t_last = now;
    if (stopped && !eos)
        o->stop_token = t;
    pthread_mutex_unlock(&r->mu);
    touch(e, r);
    if (reason != ENG_FINISH_NONE) {
        finish(e, r, reason, NULL);
        return 1;
    }
    return 0;
}

/* Samples r's next token from its logits row and appends it. */
static void advance(eng *e, eng_req *r, const float *row)
{
    sched_seq *q = &r->seq;
    mask_row(e, r, row, r->n_output, e->scratch);
    smp_history h = {.prompt = q->tokens, .n_prompt = q->n_prompt,
                     .output = q->tokens + q->n_prompt, .n_output = r->n_output};
    emit_token(e, r, smp_sample(e->smp, &r->p.sampling, &h, &r->rng, e->scratch), row);
}

/* ---- speculation ------------------------------------------------------------- */

/* Takes r's unverified drafts off its tokens (and the proposer's state). */
static void strip_drafts(eng *e, eng_req *r)
{
    if (!r->n_draft)
        return;
    r->seq.n_tokens -= r->n_draft;
    r->n_draft = 0;
    r->ss.tokens = r->seq.tokens;
    r->ss.n_tokens = r->seq.n_tokens;
    e->cfg.spec->ops->rollback(e->cfg.spec, &r->ss, r->seq.n_tokens);
}

/* Verifies r's first m drafts against the target's rows (row j predicts the
 * token after the last real one plus j drafts) and emits what survives. */
static void verify(eng *e, eng_req *r, const float *rows, int m)
{
    int V = e->vocab;
    sched_seq *q = &r->seq;
    int L0 = q->n_tokens - r->n_draft; /* real length: drafts start here */
    const int32_t *d = q->tokens + L0;
    const smp_params *sp = &r->p.sampling;
    int greedy = sp->temperature == 0;
    /* the distribution the request samples from at each row; penalties see
     * the drafts before it as output */
    for (int j = 0; j <= m; j++) {
        mask_row(e, r, rows + (size_t)j * V, r->n_output + j, e->scratch);
        smp_history h = {.prompt = q->tokens, .n_prompt = q->n_prompt,
                         .output = q->tokens + q->n_prompt, .n_output = L0 + j - q->n_prompt};
        smp_apply_penalties(e->smp, sp, &h, e->scratch);
        if (greedy)
            e->argmaxes[j] = smp_argmax(e->scratch, V);
        else
            smp_probs(e->smp, sp, e->scratch, e->tprobs + (size_t)j * V);
    }
    spec_result res;
    if (greedy) {
        res.accepted = 0;
        while (res.accepted < m && d[res.accepted] == e->argmaxes[res.accepted])
            res.accepted++;
        res.next = e->argmaxes[res.accepted];
    } else {
        const float *qp = e->dprobs && !e->cfg.spec->ops->deterministic
                              ? e->dprobs + (size_t)r->draft_slot * e->kmax * V
                              : NULL;
        res = spec_verify(m, d, e->tprobs, qp, V, &r->rng, e->scratch);
    }
    int32_t out[64];
    int n_out = res.accepted + 1;
    memcpy(out, d, sizeof(int32_t) * (size_t)res.accepted);
    out[res.accepted] = res.next;
    if (e->cfg.met && m > 0)
        met_spec_draft(e->cfg.met, m, res.accepted);
    /* acceptance controller. The draft length follows the runs being
     * accepted (doubles after a full acceptance, falls to what was accepted
     * plus one), since every rejected draft is a row computed for nothing;
     * when even short drafts keep failing (moving average below the
     * floor), drafting pauses, backing off 4, 8, 16 steps: a one-token
     * probe then costs little, and a text that starts repeating is caught
     * soon. */
    if (m > 0)
        r->spec_k = res.accepted == m ? (2 * m < e->kmax ? 2 * m : e->kmax) : res.accepted + 1;
    double rate = m ? (double)res.accepted / m : 1.0;
    r->accept_avg = 0.7 * r->accept_avg + 0.3 * rate;
    if (r->accept_avg < e->cfg.spec_min_accept) {
        r->spec_backoff = r->spec_backoff ? (r->spec_backoff < 16 ? 2 * r->spec_backoff : 16) : 4;
        r->spec_pause = r->spec_backoff;
        r->accept_avg = e->cfg.spec_min_accept; /* probe again after the pause */
    } else {
        r->spec_backoff = 0;
    }
    /* the rejected drafts' KV is discarded by shortening the sequence */
    q->n_tokens = L0;
    r->n_draft = 0;
    int valid = L0 + res.accepted;
    if (q->n_computed > valid)
        q->n_computed = valid;
    for (int i = 0; i < n_out; i++)
        if (emit_token(e, r, out[i], rows + (size_t)i * V))
            return; /* finished inside the accepted run: the rest is dropped */
    kv_seq_truncate(e->kv, &q->kv, q->n_tokens);
    r->ss.tokens = q->tokens;
    r->ss.n_tokens = q->n_tokens;
    e->cfg.spec->ops->rollback(e->cfg.spec, &r->ss, valid);
}

/* Drafts tokens for next step's decode tokens. */
static void propose(eng *e)
{
    spec_proposer *sp = e->cfg.spec;
    if (!sp)
        return;
    int running = sched_num_running(e->sch);
    if (e->cfg.spec_disable_batch > 0 && running >= e->cfg.spec_disable_batch)
        return; /* big batches: verification costs more than it saves */
    int n = 0;
    for (int i = 0; i < e->n_active && n < e->cfg.max_num_seqs; i++) {
        eng_req *r = e->active[i];
        sched_seq *q = &r->seq;
        if (!r->active || q->state != SCHED_RUNNING || q->n_computed != q->n_tokens - 1 ||
            r->n_draft || r->p.no_speculation)
            continue;
        /* a seeded sampled request keeps its sample path whatever the load */
        if (r->p.sampling.temperature > 0 && r->p.has_seed)
            continue;
        if (r->spec_pause > 0) {
            r->spec_pause--;
            continue;
        }
        int k = r->spec_k; /* in [1, kmax]: set by admit, kept there by verify */
        int room = r->p.max_tokens - r->n_output - 1;
        int ctx = e->cfg.max_model_len - q->n_tokens - 1;
        k = k < room ? k : room;
        k = k < ctx ? k : ctx;
        if (k < 1)
            continue;
        r->ss.tokens = q->tokens;
        r->ss.n_tokens = q->n_tokens;
        r->ss.n_prompt = q->n_prompt;
        e->cand[n] = r;
        e->cand_ss[n] = &r->ss;
        e->cand_params[n] = r->p.sampling;
        e->cand_k[n] = k;
        n++;
    }
    if (!n)
        return;
    inf_err err = {0};
    if (sp->ops->propose(sp, e->cand_ss, n, e->cand_params, e->kmax, e->cand_k, e->drafts,
                         e->dprobs, &err) != INF_OK) {
        log_msg(e->cfg.log, LOG_WARN, "engine", NULL, "speculation: %s (no drafts this step)",
                err.msg);
        return;
    }
    for (int i = 0; i < n; i++) {
        eng_req *r = e->cand[i];
        sched_seq *q = &r->seq;
        int k = e->cand_k[i];
        memcpy(q->tokens + q->n_tokens, e->drafts + (size_t)i * e->kmax, sizeof(int32_t) * (size_t)k);
        q->n_tokens += k;
        r->n_draft = k;
        r->draft_slot = i;
    }
}

/* Token counts of a planned step, and queue times of first-scheduled ones. */
static void step_metrics(eng *e, const sched_plan *plan, int T)
{
    met_registry *m = e->cfg.met;
    if (!m)
        return;
    uint64_t prompt = 0;
    double now = inf_now();
    for (int i = 0; i < plan->n; i++) {
        const sched_seq *q = plan->seqs[i];
        int end = q->n_computed + plan->n_new[i];
        int p_end = end < q->n_prompt ? end : q->n_prompt;
        if (p_end > q->n_computed)
            prompt += (uint64_t)(p_end - q->n_computed);
        eng_req *r = req_of((sched_seq *)q);
        if (!r->scheduled) {
            r->scheduled = 1;
            met_observe(m, MET_QUEUE_SECONDS, now - r->t_arrival);
        }
    }
    met_add(m, MET_PROMPT_TOKENS, prompt);
    met_add(m, MET_NUM_PREEMPTIONS, (uint64_t)plan->n_preempted);
    met_add(m, MET_PREFIX_CACHE_QUERIES, (uint64_t)plan->cache_queries);
    met_add(m, MET_PREFIX_CACHE_HITS, (uint64_t)plan->cache_hits);
    met_observe(m, MET_ITERATION_TOKENS, T);
}

/* One scheduler step through the backend. Returns 0 when idle. */
static int step(eng *e)
{
    double t0 = inf_now();
    sched_plan *plan;
    sched_schedule(e->sch, &plan);
    e->step_no++;
    for (int i = 0; i < plan->n; i++)
        req_of(plan->seqs[i])->plan_stamp = e->step_no;
    for (int i = 0; e->cfg.spec && i < e->n_active; i++) { /* not run: drafts go */
        eng_req *r = e->active[i];
        if (r->n_draft && (r->plan_stamp != e->step_no || r->seq.state != SCHED_RUNNING))
            strip_drafts(e, r);
    }
    if (plan->n == 0)
        return 0;
    int T = 0, R = 0;
    for (int i = 0; i < plan->n; i++) {
        sched_seq *q = plan->seqs[i];
        eng_req *r = req_of(q);
        int n = plan->n_new[i];
        e->seq_start[i] = T;
        for (int p = q->n_computed; p < q->n_computed + n; p++, T++) {
            e->tokens[T] = q->tokens[p];
            e->positions[T] = p;
            e->slots[T] = kv_seq_slot(e->kv, &q->kv, p);
        }
        e->seq_len[i] = q->n_computed + n;
        memcpy(e->table + (size_t)i * e->max_blocks, q->kv.blocks,
               sizeof(int32_t) * (size_t)q->kv.n_blocks);
        /* logits from the last real token on: it and each computed draft */
        int first = q->n_tokens - r->n_draft - 1;
        int end = q->n_computed + n;
        e->row0[i] = R;
        e->nrows[i] = end > first ? end - first : 0;
        for (int p = first; p < end; p++) {
            e->rows[R] = e->seq_start[i] + (p - q->n_computed);
            R++;
        }
    }
    e->seq_start[plan->n] = T;
    step_metrics(e, plan, T);
    be_batch b = {.n_tokens = T, .tokens = e->tokens, .positions = e->positions,
                  .slots = e->slots, .n_seqs = plan->n, .seq_start = e->seq_start,
                  .seq_len = e->seq_len, .block_table = e->table, .max_blocks = e->max_blocks,
                  .logit_rows = e->rows, .n_logits = R};
    inf_err err = {0};
    if (be_forward(e->be, &b, e->logits, &err) != INF_OK) {
        for (int i = 0; i < plan->n; i++)
            finish(e, req_of(plan->seqs[i]), ENG_FINISH_ERROR, err.msg);
        return 1;
    }
    for (int i = 0; i < plan->n; i++)
        plan->seqs[i]->n_computed += plan->n_new[i];
    for (int i = 0; i < plan->n; i++) {
        eng_req *r = req_of(plan->seqs[i]);
        if (!e->nrows[i] || !r->active)
            continue;
        const float *rows = e->logits + (size_t)e->row0[i] * e->vocab;
        if (r->n_draft)
            verify(e, r, rows, e->nrows[i] - 1);
        else
            advance(e, r, rows);
    }
    propose(e);
    /* for --log-level debug: where a slow step comes from (scheduling,
     * forward, sampling and drafting together) */
    log_msg(e->cfg.log, LOG_DEBUG, "engine", NULL, "step %ld: %d seqs, %d tokens, %.1f ms",
            e->step_no, plan->n, T, (inf_now() - t0) * 1e3);
    return 1;
}

/* ---- the thread ------------------------------------------------------------ */

/* Moves a submitted request into the scheduler. */
static void admit(eng *e, eng_req *r)
{
    inf_err err = {0};
    if (!r->p.has_seed)
        r->p.sampling.seed = smp_rng_next(&e->seeds);
    smp_rng_seed(&r->rng, r->p.sampling.seed);
    if (!grow((void **)&e->active, &e->cap_active, e->n_active + 1, sizeof *e->active) ||
        tok_stream_create(e->tk, r->seq.tokens, r->seq.n_prompt, &r->ts, &err) != INF_OK ||
        (r->p.n_stop > 0 &&
         stop_create(&(stop_config){.strs = (const char *const *)r->stop, .n = r->p.n_stop},
                     &r->stopper, &err) != INF_OK) ||
        sched_add(e->sch, &r->seq, &err) != INF_OK) {
        r->seq.state = SCHED_DONE;
        finish(e, r, ENG_FINISH_ERROR, err.msg[0] ? err.msg : "out of memory");
        return;
    }
    r->active = 1;
    r->accept_avg = 1.0; /* optimistic: a request must show low acceptance */
    r->spec_k = e->kmax;
    e->active[e->n_active++] = r;
}

/* Finishes the requests whose owners cancelled them. */
static void reap_cancelled(eng *e)
{
    for (int i = 0; i < e->n_active; i++) {
        eng_req *r = e->active[i];
        if (r->active && atomic_load(&r->cancelled))
            finish(e, r, ENG_FINISH_ABORT, NULL);
    }
}

/* Drops finished requests from the active list. */
static void compact(eng *e)
{
    int k = 0;
    for (int i = 0; i < e->n_active; i++)
        if (e->active[i]->active)
            e->active[k++] = e->active[i];
    e->n_active = k;
}

static void notify_all(eng *e)
{
    for (eng_req *r = e->touched, *next; r; r = next) {
        next = r->next_touched; /* r may be freed below */
        r->touched = 0;
        if (e->cfg.notify)
            e->cfg.notify(e->cfg.notify_user, r);
        if (!r->active) /* its last output is out: the engine lets go */
            eng_req_unref(r);
    }
    e->touched = NULL;
}

/* Gauges after every step; a stats line every log_interval_s while busy. */
static void publish(eng *e, const eng_stats *st)
{
    met_registry *m = e->cfg.met;
    if (!m)
        return;
    met_set(m, MET_NUM_REQUESTS_RUNNING, st->running);
    met_set(m, MET_NUM_REQUESTS_WAITING, st->waiting);
    met_set(m, MET_KV_CACHE_USAGE, st->kv_usage);
    double now = inf_now();
    if (e->cfg.log_interval_s <= 0)
        return;
    if (e->log_at == 0) {
        met_snapshot(m, &e->log_prev);
        e->log_at = now;
    } else if (now - e->log_at >= e->cfg.log_interval_s) {
        met_snap cur;
        char line[512];
        met_snapshot(m, &cur);
        met_log_line(&e->log_prev, &cur, now - e->log_at, e->kmax, line, sizeof line);
        log_msg(e->cfg.log, LOG_INFO, "engine", NULL, "%s", line);
        e->log_prev = cur;
        e->log_at = now;
    }
}

static void *eng_main(void *arg)
{
    eng *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        if (!e->stop && !e->inbox_head && e->n_active == 0)
            e->log_at = 0; /* idle: the line is for busy periods */
        atomic_store(&e->idle, 1);
        while (!e->stop && !e->inbox_head && e->n_active == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        atomic_store(&e->idle, 0);
        atomic_store(&e->beat, inf_now());
        eng_req *in = e->inbox_head;
        e->inbox_head = e->inbox_tail = NULL;
        e->inbox_n = 0;
        int stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        for (eng_req *r = in, *next; r; r = next) {
            next = r->next_in;
            admit(e, r);
        }
        if (stop) {
            for (int i = 0; i < e->n_active; i++)
                finish(e, e->active[i], ENG_FINISH_ABORT, NULL);
            e->n_active = 0;
            notify_all(e);
            return NULL;
        }
        if (atomic_exchange(&e->pending_cancel, 0))
            reap_cancelled(e);
        step(e);
        atomic_store(&e->beat, inf_now());
        compact(e);
        notify_all(e);
        eng_stats st = {.running = sched_num_running(e->sch),
                        .waiting = sched_num_waiting(e->sch),
                        .kv_usage = sched_kv_usage(e->sch)};
        pthread_mutex_lock(&e->mu); /* only the inbox is shared */
        st.waiting += e->inbox_n;
        pthread_mutex_unlock(&e->mu);
        atomic_store(&e->queued, st.waiting);
        publish(e, &st);
    }
}

int eng_submit(eng *e, eng_req *r, int max_waiting, inf_err *err)
{
    if (r->seq.n_prompt + 1 > e->cfg.max_model_len)
        return inf_fail(err, INF_ERR_INVALID,
                        "the prompt has %d tokens; the context holds %d",
                        r->seq.n_prompt, e->cfg.max_model_len);
    long longest = (long)r->seq.n_prompt + r->p.max_tokens;
    if (longest > e->cfg.max_model_len)
        longest = e->cfg.max_model_len;
    long blocks = (longest + e->cfg.block_size - 1) / e->cfg.block_size;
    if (blocks > e->cfg.num_blocks - 1)
        return inf_fail(err, INF_ERR_INVALID,
                        "the request needs up to %ld tokens of KV cache but the pool holds %d "
                        "(see --kv-cache-memory)",
                        longest, (e->cfg.num_blocks - 1) * e->cfg.block_size);
    for (int i = 0; i < r->seq.n_prompt; i++)
        if (r->seq.tokens[i] < 0 || r->seq.tokens[i] >= e->vocab)
            return inf_fail(err, INF_ERR_INVALID, "token id %d is outside the vocabulary (%d)",
                            r->seq.tokens[i], e->vocab);
    if (max_waiting > 0 && atomic_fetch_add(&e->queued, 1) >= max_waiting) {
        atomic_fetch_sub(&e->queued, 1);
        return inf_fail(err, INF_ERR_NOSPACE, "the server is overloaded (%d requests waiting)",
                        max_waiting);
    }
    eng_req_ref(r);
    r->t_arrival = inf_now();
    pthread_mutex_lock(&e->mu);
    r->next_in = NULL;
    if (e->inbox_tail)
        e->inbox_tail->next_in = r;
    else
        e->inbox_head = r;
    e->inbox_tail = r;
    e->inbox_n++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return INF_OK;
}

void eng_cancel(eng *e, eng_req *r)
{
    atomic_store(&r->cancelled, 1);
    atomic_store(&e->pending_cancel, 1);
    pthread_mutex_lock(&e->mu);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

int eng_alive(eng *e, double max_age)
{
    return atomic_load(&e->idle) || inf_now() - atomic_load(&e->beat) < max_age;
}

/* ---- lifecycle ------------------------------------------------------------- */

static void free_buffers(eng *e)
{
    free(e->tokens), free(e->positions), free(e->slots), free(e->seq_start);
    free(e->seq_len), free(e->table), free(e->rows);
    free(e->logits), free(e->scratch), free(e->active);
    free(e->row0), free(e->nrows), free(e->cand), free(e->cand_ss), free(e->cand_params);
    free(e->cand_k), free(e->drafts), free(e->dprobs), free(e->tprobs), free(e->argmaxes);
}

/* Everything but the thread (stopped or never started). */
static void teardown(eng *e)
{
    sched_destroy(e->sch);
    kv_destroy(e->kv);
    smp_destroy(e->smp);
    free_buffers(e);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

int eng_create(const eng_config *cfg, const model *m, const tok *tk, be_backend *be, eng **out,
               inf_err *err)
{
    *out = NULL;
    eng *e = calloc(1, sizeof *e);
    if (!e)
        return inf_fail(err, INF_ERR_NOMEM, "engine: out of memory");
    e->cfg = *cfg;
    e->m = m;
    e->tk = tk;
    e->be = be;
    e->vocab = m->cfg.vocab_size;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    smp_rng_seed(&e->seeds, cfg->seed);
    kv_config kc = {.num_blocks = cfg->num_blocks, .block_size = cfg->block_size,
                    .enable_prefix_caching = cfg->enable_prefix_caching};
    sched_config sc = {.max_num_seqs = cfg->max_num_seqs,
                       .max_num_batched_tokens = cfg->max_num_batched_tokens,
                       .max_model_len = cfg->max_model_len,
                       .max_prefill_while_decoding = cfg->max_prefill_while_decoding,
                       .kv_window = mdesc_kv_window(&m->cfg.desc)};
    int rc;
    if ((rc = kv_create(&kc, &e->kv, err)) || (rc = sched_create(&sc, e->kv, &e->sch, err)) ||
        (rc = smp_create(e->vocab, &e->smp, err)))
        goto fail;
    int T = cfg->max_num_batched_tokens, S = cfg->max_num_seqs;
    e->kmax = cfg->spec ? cfg->spec_k : 0;
    if (e->kmax < 0 || e->kmax > 32) {
        rc = inf_fail(err, INF_ERR_INVALID, "num_speculative_tokens must be 1..32, got %d",
                      e->kmax);
        goto fail;
    }
    e->max_rows = S * (e->kmax + 1);
    e->max_blocks = (cfg->max_model_len + cfg->block_size - 1) / cfg->block_size;
    e->tokens = malloc(sizeof(int32_t) * (size_t)T);
    e->positions = malloc(sizeof(int32_t) * (size_t)T);
    e->slots = malloc(sizeof(int32_t) * (size_t)T);
    e->seq_start = malloc(sizeof(int32_t) * (size_t)(S + 1));
    e->seq_len = malloc(sizeof(int32_t) * (size_t)S);
    e->table = calloc((size_t)S * e->max_blocks, sizeof(int32_t));
    e->rows = malloc(sizeof(int32_t) * (size_t)e->max_rows);
    e->row0 = malloc(sizeof(int) * (size_t)S);
    e->nrows = malloc(sizeof(int) * (size_t)S);
    e->logits = malloc(sizeof(float) * (size_t)e->max_rows * e->vocab);
    e->scratch = malloc(sizeof(float) * (size_t)e->vocab);
    if (e->kmax) {
        e->cand = malloc(sizeof *e->cand * (size_t)S);
        e->cand_ss = malloc(sizeof *e->cand_ss * (size_t)S);
        e->cand_params = malloc(sizeof *e->cand_params * (size_t)S);
        e->cand_k = malloc(sizeof *e->cand_k * (size_t)S);
        e->drafts = malloc(sizeof *e->drafts * (size_t)S * e->kmax);
        e->tprobs = malloc(sizeof(float) * (size_t)(e->kmax + 1) * e->vocab);
        e->argmaxes = malloc(sizeof *e->argmaxes * (size_t)(e->kmax + 1));
        if (!cfg->spec->ops->deterministic)
            e->dprobs = malloc(sizeof(float) * (size_t)S * e->kmax * e->vocab);
        if (!e->cand || !e->cand_ss || !e->cand_params || !e->cand_k || !e->drafts ||
            !e->tprobs || !e->argmaxes || (!cfg->spec->ops->deterministic && !e->dprobs)) {
            rc = inf_fail(err, INF_ERR_NOMEM, "engine: out of memory for speculation buffers");
            goto fail;
        }
    }
    if (!e->tokens || !e->positions || !e->slots || !e->seq_start || !e->seq_len || !e->table ||
        !e->rows || !e->row0 || !e->nrows || !e->logits || !e->scratch) {
        rc = inf_fail(err, INF_ERR_NOMEM, "engine: out of memory for step buffers");
        goto fail;
    }
    atomic_store(&e->beat, inf_now());
    if (pthread_create(&e->thread, NULL, eng_main, e) != 0) {
        rc = inf_fail(err, INF_ERR_NOMEM, "engine: cannot start its thread");
        goto fail;
    }
    *out = e;
    return INF_OK;
fail:
    teardown(e);
    return rc;
}

void eng_destroy(eng *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    teardown(e);
}
