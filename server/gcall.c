#include "server/gcall.h"

#include "server/gtools.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One choice: an engine request and what the client has been sent. */
typedef struct choice {
    eng_req *r;
    eng_out out;       /* its last eng_req_take (counters always current); a
                          waiting call takes once, at the end, since the
                          engine keeps appending until someone takes      */
    int finished;      /* finish seen on the loop thread                     */
    size_t text_sent;  /* bytes of output text sent (completions offsets)    */
    int prompt;        /* index of its prompt                                */
    gtools *gt;        /* reasoning and tool calls, when the request has them */
    int hold;          /* a stream with prompt logprobs (prompt_logprobs, or
                          echo with logprobs): nothing is taken before the
                          first token, whose chunk carries them (vLLM's way) */
} choice;

typedef struct gcall {
    atomic_int refs;   /* the connection's + one per live engine request     */
    srv *srv;
    srv_conn *conn;    /* NULL: an offline call (gcall_submit)               */
    void (*wake)(void *user); /* an offline call's wake-up, and its argument */
    void *wake_user;
    eng *e;
    const tok *tk;
    oai_request *req;
    gcall_prompt *prompts;
    int n_prompts;
    choice *ch;
    int n_ch;
    char id[48];
    oai_meta meta;
    /* streaming: SSE bytes queued, off of them sent */
    inf_buf out;
    size_t off;
    int done_queued;
    /* /v1/responses: its stream's items and sequence; failed: the stream
     * ended in an error event */
    int resp, failed;
    oai_resp_stream rs;
} gcall;

static const srv_call_ops stream_ops, wait_ops;

static void gcall_free(gcall *g)
{
    for (int i = 0; i < g->n_ch; i++) {
        eng_req_unref(g->ch[i].r);
        eng_out_free(&g->ch[i].out);
        gtools_destroy(g->ch[i].gt);
    }
    free(g->ch);
    for (int i = 0; i < g->n_prompts; i++) {
        free(g->prompts[i].ids);
        free(g->prompts[i].echo);
    }
    free(g->prompts);
    if (g->req)
        oai_request_free(g->req);
    free(g->req);
    free(g->out.p);
    oai_resp_stream_free(&g->rs);
    if (g->conn)
        srv_conn_unref(g->conn);
    free(g);
}

static void gcall_unref(gcall *g)
{
    if (atomic_fetch_sub(&g->refs, 1) == 1)
        gcall_free(g);
}

void gcall_on_engine_output(void *user, eng_req *r)
{
    (void)user;
    gcall *g = eng_req_user(r);
    int last = eng_req_finished(r); /* this request's last notify */
    /* a stream sends as tokens come; a waiting call answers once, at the end */
    if (g->conn && (last || g->req->stream))
        srv_wake(g->srv, g->conn);
    else if (!g->conn && last)
        g->wake(g->wake_user);
    if (last)
        gcall_unref(g);
}

/* One oai record of an engine one; its alternatives are in tops. */
static void lp_rec(const eng_out *o, const eng_lp *e, const oai_top *tops, oai_token_lp *l)
{
    l->token = o->pool + e->off;
    l->token_len = e->len;
    l->logprob = e->logprob;
    l->top = tops + e->alt0;
    l->n_top = e->n_alt;
    l->id = e->id;
    l->rank = e->rank;
}

/* oai logprob records for o's tokens; *tops receives the alternatives'
 * storage (free both; also made, with no records, when o has only prompt
 * logprobs). Offsets start at text_base. With echo (first: the
 * prompt's first token and its piece) the prompt's records come first: the
 * first token without a logprob, then o's prompt logprobs. */
static oai_token_lp *to_oai_lps(const eng_out *o, size_t text_base, const int32_t *first,
                                const char *piece, size_t piece_len, oai_top **tops,
                                int *n_out)
{
    int np = first ? 1 + o->n_plps : 0, n = np + o->n_lps;
    *tops = NULL;
    *n_out = 0;
    if (!n && !o->n_plps)
        return NULL;
    oai_token_lp *l = calloc((size_t)(n ? n : 1), sizeof *l);
    *tops = calloc((size_t)(o->n_alts ? o->n_alts : 1), sizeof **tops);
    if (!l || !*tops) {
        free(l);
        free(*tops);
        *tops = NULL;
        return NULL;
    }
    for (int i = 0; i < o->n_alts; i++) {
        (*tops)[i].token = o->pool + o->alts[i].off;
        (*tops)[i].token_len = o->alts[i].len;
        (*tops)[i].logprob = o->alts[i].logprob;
        (*tops)[i].id = o->alts[i].id;
    }
    if (first) {
        l[0] = (oai_token_lp){.token = piece, .token_len = piece_len, .logprob = NAN,
                              .id = *first};
        for (int i = 0; i < o->n_plps; i++)
            lp_rec(o, &o->plps[i], *tops, &l[1 + i]);
        size_t off = 0; /* pieces (a BOS's) may not be in the echoed text */
        for (int i = 0; i < np; i++) {
            l[i].text_offset = (int)(off < text_base ? off : text_base);
            off += l[i].token_len;
        }
    }
    size_t off = text_base;
    for (int i = 0; i < o->n_lps; i++) {
        lp_rec(o, &o->lps[i], *tops, &l[np + i]);
        l[np + i].text_offset = (int)off;
        off += o->lps[i].len;
    }
    *n_out = n;
    return l;
}

/* vLLM's prompt_logprobs records of o (alternatives in tops, from
 * to_oai_lps); NULL when there are none. */
static oai_token_lp *to_oai_plps(const eng_out *o, const oai_top *tops)
{
    oai_token_lp *l = o->n_plps && tops ? calloc((size_t)o->n_plps, sizeof *l) : NULL;
    for (int i = 0; l && i < o->n_plps; i++)
        lp_rec(o, &o->plps[i], tops, &l[i]);
    return l;
}

static const char *finish_name(int f)
{
    return f == ENG_FINISH_LENGTH ? "length" : f == ENG_FINISH_NONE ? NULL : "stop";
}

static void fill_choice(const gcall *g, const choice *c, const eng_out *o, oai_choice *oc)
{
    memset(oc, 0, sizeof *oc);
    oc->index = (int)(c - g->ch);
    oc->text = o->text ? o->text : "";
    oc->text_len = o->len;
    oc->finish_reason = finish_name(o->finish);
    oc->want_logprobs = g->req->logprobs >= 0;
    oc->stop_reason_id = o->stop_token;
    if (o->stop_index >= 0 && o->stop_index < g->req->n_stop)
        oc->stop_reason_str = g->req->stop[o->stop_index];
}

/* What a choice's parsers read: the text with special tokens kept when
 * they need it (harmony's <|channel|>, [TOOL_CALLS]), else the text. */
static const char *parse_text(const choice *c, const eng_out *o, const char *text)
{
    return gtools_special(c->gt) ? (o->stext ? o->stext : "") : text;
}

static size_t parse_len(const choice *c, const eng_out *o, size_t len)
{
    return gtools_special(c->gt) ? o->slen : len;
}

static void usage_of(const gcall *g, oai_usage *u)
{
    memset(u, 0, sizeof *u);
    for (int p = 0; p < g->n_prompts; p++)
        u->prompt_tokens += g->prompts[p].n;
    for (int i = 0; i < g->n_ch; i++) {
        u->completion_tokens += g->ch[i].out.n_output;
        if (i % g->req->n == 0) /* the prompt once per prompt */
            u->cached_tokens += g->ch[i].out.n_cached;
    }
}

/* A choice that ended in an error or a cancellation, as an error object
 * (0 when it ended normally). */
static int finish_error(const eng_out *o, oai_error *e)
{
    if (o->finish == ENG_FINISH_ERROR)
        return oai_fail(e, 500, "internal_error", "", "%s", o->error);
    if (o->finish == ENG_FINISH_ABORT)
        return oai_fail(e, 503, "service_unavailable", "", "the request was cancelled");
    return 0;
}

/* ---- non-streaming ------------------------------------------------------------ */

static int wait_done(void *call, int *status, char **body, size_t *len)
{
    gcall *g = call;
    int all = 1;
    for (int i = 0; i < g->n_ch; i++) {
        choice *c = &g->ch[i];
        if (!c->finished && eng_req_finished(c->r)) {
            eng_req_take(c->r, &c->out); /* all of it: nobody took before */
            c->finished = 1;
        }
        all &= c->finished;
    }
    if (!all)
        return 0;
    for (int i = 0; i < g->n_ch; i++) {
        oai_error e;
        if (finish_error(&g->ch[i].out, &e)) {
            *status = e.status;
            *body = oai_error_json(&e);
            *len = *body ? strlen(*body) : 0;
            return 1;
        }
    }
    oai_choice *cs = calloc((size_t)g->n_ch, sizeof *cs);
    oai_token_lp **lps = calloc((size_t)g->n_ch, sizeof *lps);
    oai_token_lp **plps = calloc((size_t)g->n_ch, sizeof *plps);
    oai_top **tops = calloc((size_t)g->n_ch, sizeof *tops);
    char **texts = calloc((size_t)g->n_ch, sizeof *texts);
    if (!cs || !lps || !plps || !tops || !texts) {
        free(cs), free(lps), free(plps), free(tops), free(texts);
        oai_error e;
        oai_fail(&e, 500, "internal_error", "", "out of memory");
        *status = 500;
        *body = oai_error_json(&e);
        *len = *body ? strlen(*body) : 0;
        return 1;
    }
    for (int i = 0; i < g->n_ch; i++) {
        choice *c = &g->ch[i];
        const char *echo = g->prompts[c->prompt].echo;
        size_t echo_len = echo ? strlen(echo) : 0;
        fill_choice(g, c, &c->out, &cs[i]);
        if (echo_len) {
            inf_buf t = {0};
            inf_buf_put(&t, echo, echo_len);
            inf_buf_put(&t, cs[i].text, cs[i].text_len);
            texts[i] = t.p;
            cs[i].text = t.oom ? "" : t.p;
            cs[i].text_len = t.oom ? 0 : t.len;
        }
        if (c->gt && gtools_feed(c->gt, parse_text(c, &c->out, cs[i].text),
                                 parse_len(c, &c->out, cs[i].text_len), 1, &cs[i])) {
            cs[i].text = "";
            cs[i].text_len = 0;
        }
        const gcall_prompt *gp = &g->prompts[c->prompt];
        const int32_t *first = NULL; /* echo with logprobs: the prompt's too */
        size_t pl = 0;
        const char *piece = NULL;
        if (g->req->echo && g->req->logprobs >= 0 && gp->n > 0) {
            first = gp->ids;
            piece = tok_token_bytes(g->tk, gp->ids[0], &pl);
        }
        lps[i] = to_oai_lps(&c->out, echo_len, first, piece ? piece : "", piece ? pl : 0,
                            &tops[i], &cs[i].n_lps);
        cs[i].lps = lps[i];
        if (g->req->prompt_logprobs >= 0) {
            plps[i] = to_oai_plps(&c->out, tops[i]);
            cs[i].plps = plps[i];
            cs[i].n_plps = plps[i] ? c->out.n_plps : 0;
            cs[i].want_prompt_logprobs = 1;
        }
    }
    oai_usage u;
    usage_of(g, &u);
    if (g->conn)
        srv_conn_set_request(g->conn, g->id, u.prompt_tokens, u.completion_tokens);
    *body = g->resp ? oai_resp_json(&g->meta, &cs[0], &u)
                    : oai_response_json(&g->meta, cs, g->n_ch, &u);
    *len = *body ? strlen(*body) : 0;
    *status = *body ? 200 : 500;
    for (int i = 0; i < g->n_ch; i++)
        free(lps[i]), free(plps[i]), free(tops[i]), free(texts[i]);
    free(cs), free(lps), free(plps), free(tops), free(texts);
    return 1;
}

/* ---- streaming ------------------------------------------------------------------ */

static void queue_sse(gcall *g, char *s)
{
    if (s)
        inf_buf_put(&g->out, s, strlen(s));
    free(s);
}

/* A delta as a chunk, or a /v1/responses text delta event. */
static void queue_chunk(gcall *g, const oai_choice *oc)
{
    if (!g->resp) {
        queue_sse(g, oai_chunk_sse(&g->meta, oc, 0, NULL));
        return;
    }
    char *s = oai_resp_delta_sse(&g->meta, &g->rs, oc);
    if (!s)
        g->out.oom = 1; /* an event lost: the stream ends rather than skip it */
    queue_sse(g, s);
}

/* Echo with logprobs in a stream: the prompt's text and records lead the
 * first chunk (vLLM's way), not a chunk of their own. */
static int echo_with_first(const gcall *g)
{
    return g->req->echo && g->req->logprobs >= 0;
}

/* New output of one choice as chunks. */
static void stream_choice(gcall *g, choice *c)
{
    if (c->hold && !eng_req_started(c->r))
        return;
    eng_req_take(c->r, &c->out);
    eng_out *o = &c->out;
    int first = c->hold; /* the chunk that carries the prompt's logprobs */
    c->hold = 0;
    c->finished = o->finish != ENG_FINISH_NONE;
    oai_error err;
    int failed = finish_error(o, &err) != 0;
    if (!o->len && !o->slen && !o->n_lps && !first && !c->finished)
        return;
    oai_choice oc;
    fill_choice(g, c, o, &oc);
    if (failed) { /* the status line is out: the text so far, then an error event */
        if (o->len || o->n_lps) {
            oc.finish_reason = NULL;
            oai_top *tops;
            oai_token_lp *lps = to_oai_lps(o, c->text_sent, NULL, NULL, 0, &tops, &oc.n_lps);
            oc.lps = lps;
            queue_chunk(g, &oc);
            c->text_sent += o->len;
            free(lps);
            free(tops);
        }
        if (g->resp) { /* a typed error event, then response.failed */
            if (!g->failed)
                queue_sse(g, oai_resp_fail_sse(&g->meta, &g->rs, &err));
            g->failed = 1;
            return;
        }
        char *e = oai_error_json(&err);
        if (e)
            inf_buf_printf(&g->out, "data: %s\n\n", e);
        free(e);
        return;
    }
    if (c->gt) {
        if (gtools_feed(c->gt, parse_text(c, o, oc.text), parse_len(c, o, oc.text_len),
                        c->finished, &oc))
            oc.text_len = 0, oc.n_calls = 0, oc.reasoning = NULL;
        if (!oc.text_len && !oc.reasoning && !oc.n_calls && !o->n_lps && !first &&
            !c->finished) {
            c->text_sent += o->len;
            return; /* all of it held back (a marker's start) or nothing to say yet */
        }
    }
    inf_buf echoed = {0};
    const gcall_prompt *gp = &g->prompts[c->prompt];
    const int32_t *first_id = NULL;
    const char *piece = NULL;
    size_t pl = 0, echo_len = 0;
    if (first && echo_with_first(g)) { /* the prompt, then the first token(s) */
        echo_len = gp->echo ? strlen(gp->echo) : 0;
        inf_buf_put(&echoed, gp->echo ? gp->echo : "", echo_len);
        inf_buf_put(&echoed, oc.text, oc.text_len);
        oc.text = echoed.oom ? "" : echoed.p;
        oc.text_len = echoed.oom ? 0 : echoed.len;
        if (gp->n > 0) {
            first_id = gp->ids;
            piece = tok_token_bytes(g->tk, gp->ids[0], &pl);
        }
    }
    oai_top *tops;
    oai_token_lp *lps = to_oai_lps(o, c->text_sent + echo_len, first_id, piece ? piece : "",
                                   piece ? pl : 0, &tops, &oc.n_lps);
    oai_token_lp *plps = NULL;
    oc.lps = lps;
    if (first && g->req->prompt_logprobs >= 0) {
        plps = to_oai_plps(o, tops);
        oc.plps = plps;
        oc.n_plps = plps ? o->n_plps : 0;
        /* chat: at the chunk's top level, once (the prompt is the same for
         * every choice), as a response has it */
        oc.want_prompt_logprobs = g->req->kind != OAI_CHAT || oc.index == 0;
    }
    queue_chunk(g, &oc); /* the role went first */
    c->text_sent += echo_len + o->len;
    free(echoed.p);
    free(lps);
    free(plps);
    free(tops);
}

static long stream_read(void *call, char *buf, size_t max)
{
    gcall *g = call;
    if (g->off == g->out.len) {
        g->off = g->out.len = 0;
        int all = 1;
        for (int i = 0; i < g->n_ch; i++) {
            if (!g->ch[i].finished)
                stream_choice(g, &g->ch[i]);
            all &= g->ch[i].finished;
        }
        if (all && !g->done_queued) {
            oai_usage u;
            usage_of(g, &u);
            srv_conn_set_request(g->conn, g->id, u.prompt_tokens, u.completion_tokens);
            if (g->resp) { /* OpenAI's events end with response.completed, no [DONE] */
                if (!g->failed)
                    queue_sse(g, oai_resp_end_sse(&g->meta, &g->rs,
                                                  finish_name(g->ch[0].out.finish), &u));
            } else {
                if (g->req->include_usage)
                    queue_sse(g, oai_chunk_sse(&g->meta, NULL, 0, &u));
                const char *done = oai_sse_done();
                inf_buf_put(&g->out, done, strlen(done));
            }
            g->done_queued = 1;
        }
    }
    if (g->out.oom) /* output was lost: end the stream rather than skip it */
        return -1;
    if (g->off == g->out.len)
        return g->done_queued ? -1 : 0;
    size_t n = g->out.len - g->off < max ? g->out.len - g->off : max;
    memcpy(buf, g->out.p + g->off, n);
    g->off += n;
    return (long)n;
}

static void call_closed(void *call, int client_gone)
{
    gcall *g = call;
    if (client_gone) { /* what it got before leaving */
        oai_usage u;
        usage_of(g, &u);
        srv_conn_set_request(g->conn, g->id, u.prompt_tokens, u.completion_tokens);
    }
    for (int i = 0; i < g->n_ch; i++)
        if (!g->ch[i].finished)
            eng_cancel(g->e, g->ch[i].r);
    gcall_unref(g);
}

static const srv_call_ops stream_ops = {.read = stream_read, .closed = call_closed};
static const srv_call_ops wait_ops = {.done = wait_done, .closed = call_closed};

/* ---- starting -------------------------------------------------------------------- */

void gcall_reply_error(srv_conn *c, const oai_error *e, const char *hdr)
{
    char *b = oai_error_json(e);
    srv_reply(c, e->status, "application/json", b, b ? strlen(b) : 0, hdr);
}

/* max_tokens, or its default: the rest of the context for chat (as vLLM),
 * 16 for completions (as OpenAI). */
static int want_tokens(const gcall_env *env, const oai_request *r, int n_prompt)
{
    return r->max_tokens >= 0 ? r->max_tokens
           : r->kind == OAI_CHAT ? env->max_model_len - n_prompt : 16;
}

/* Prompt-dependent checks (the prompt ids were checked as they came in);
 * 0 or an HTTP status with err filled. */
static int check_lengths(const gcall_env *env, oai_request *r, const gcall_prompt *p, int n,
                         oai_error *err)
{
    int V = env->m->cfg.vocab_size;
    for (int i = 0; i < n; i++) {
        if (p[i].n < 1)
            return oai_fail(err, 400, "invalid_request_error", "prompt", "the prompt is empty");
        int want = want_tokens(env, r, p[i].n);
        if (want < 1 || p[i].n + want > env->max_model_len)
            return oai_fail(err, 400, "invalid_request_error",
                            r->kind == OAI_CHAT ? "messages" : "prompt",
                            "This model's maximum context length is %d tokens. However, you "
                            "requested %d tokens (%d in the %s, %d in the completion). Please "
                            "reduce the length of the %s or completion.",
                            env->max_model_len, p[i].n + (want > 0 ? want : 0), p[i].n,
                            r->kind == OAI_CHAT ? "messages" : "prompt", want > 0 ? want : 0,
                            r->kind == OAI_CHAT ? "messages" : "prompt");
    }
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] >= V)
            return oai_fail(err, 400, "invalid_request_error", "logit_bias",
                            "token id %d in logit_bias is out of vocabulary (0..%d)",
                            r->bias_ids[i], V - 1);
    for (int i = 0; i < r->n_stop_token_ids; i++)
        if (r->stop_token_ids[i] < 0 || r->stop_token_ids[i] >= V)
            return oai_fail(err, 400, "invalid_request_error", "stop_token_ids",
                            "token id %d in stop_token_ids is out of vocabulary (0..%d)",
                            r->stop_token_ids[i], V - 1);
    return 0;
}

static eng_params params_of(const oai_request *r, int max_tokens, int choice)
{
    eng_params p = {0};
    p.sampling = smp_params_default();
    p.sampling.temperature = r->temperature;
    p.sampling.top_p = r->top_p;
    p.sampling.top_k = r->top_k;
    p.sampling.min_p = r->min_p;
    p.sampling.presence_penalty = r->presence_penalty;
    p.sampling.frequency_penalty = r->frequency_penalty;
    p.sampling.repetition_penalty = r->repetition_penalty;
    p.has_seed = r->has_seed;
    /* n > 1 with a seed: each choice its own stream, still reproducible */
    p.sampling.seed = (uint64_t)r->seed + (uint64_t)choice;
    p.max_tokens = max_tokens;
    p.min_tokens = r->min_tokens;
    p.ignore_eos = r->ignore_eos;
    p.keep_special = !r->skip_special_tokens;
    p.stop = (const char *const *)r->stop;
    p.n_stop = r->n_stop;
    p.stop_ids = r->stop_token_ids;
    p.n_stop_ids = r->n_stop_token_ids;
    p.bias_ids = r->bias_ids;
    p.bias = r->bias_values;
    p.n_bias = r->n_bias;
    p.logprobs = r->logprobs;
    /* echo with logprobs scores the prompt too (as prompt_logprobs does) */
    int plp = r->prompt_logprobs;
    if (r->echo && r->logprobs > plp)
        plp = r->logprobs;
    p.prompt_logprobs = plp >= 0 ? plp + 1 : 0;
    p.grammar = r->grammar;
    p.cache_salt = r->cache_salt;
    p.no_speculation = !r->speculative;
    return p;
}

/* Builds the call and submits its engine requests (all, or none). c NULL:
 * an offline call. Returns 0 with *out set, or the status with err filled
 * (r and prompts freed; the retry header, for a 503, is the caller's). */
static int start(const gcall_env *env, srv_conn *c, void (*wake)(void *), void *wake_user,
                 oai_request *r, gcall_prompt *prompts, int n_prompts, gcall **out,
                 oai_error *err)
{
    gcall *g = calloc(1, sizeof *g);
    if (!g) {
        for (int i = 0; i < n_prompts; i++)
            free(prompts[i].ids), free(prompts[i].echo);
        free(prompts);
        oai_request_free(r);
        free(r);
        return oai_fail(err, 500, "internal_error", "", "out of memory");
    }
    atomic_init(&g->refs, 1);
    g->srv = env->srv;
    g->e = env->e;
    g->tk = env->tk;
    g->req = r;
    g->prompts = prompts;
    g->n_prompts = n_prompts;
    if (c)
        srv_conn_ref(c);
    g->conn = c;
    g->wake = wake;
    g->wake_user = wake_user;
    g->resp = env->responses;
    oai_resp_stream_init(&g->rs);
    snprintf(g->id, sizeof g->id, "%s%016llx",
             g->resp ? "resp_" : r->kind == OAI_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)env->id_seq * 0x9e3779b97f4a7c15ull);
    g->meta.kind = r->kind;
    g->meta.id = g->id;
    g->meta.created = (long)time(NULL);
    g->meta.model = env->model_id;
    g->meta.usage_null = r->stream && r->include_usage; /* as OpenAI's stream chunks */

    int n_in = 0;
    for (int i = 0; i < n_prompts; i++)
        n_in += prompts[i].n;
    if (c)
        srv_conn_set_request(c, g->id, n_in, 0);
    if (check_lengths(env, r, prompts, n_prompts, err)) {
        if (g->resp)
            oai_resp_rename_error(err);
        gcall_unref(g);
        return err->status;
    }
    g->n_ch = n_prompts * r->n;
    g->ch = calloc((size_t)g->n_ch, sizeof *g->ch);
    if (!g->ch) {
        gcall_unref(g);
        return oai_fail(err, 500, "internal_error", "", "out of memory");
    }
    for (int i = 0; i < g->n_ch; i++) {
        choice *ch = &g->ch[i];
        ch->prompt = i / r->n;
        ch->out.stop_index = ch->out.stop_token = -1;
        ch->hold = r->stream && (r->prompt_logprobs >= 0 || echo_with_first(g));
        const gcall_prompt *p = &prompts[ch->prompt];
        char prefix[48];
        snprintf(prefix, sizeof prefix, "%.16s%d", g->id + strlen(g->id) - 16, i);
        if (gtools_create(r, env->tool_parser, env->reasoning_parser, prefix, &ch->gt)) {
            oai_fail(err, 500, "internal_error", "", "out of memory");
            break;
        }
        eng_params ep = params_of(r, want_tokens(env, r, p->n), i % r->n);
        ep.parse_special = ch->gt && gtools_special(ch->gt);
        inf_err ie = {0};
        if (eng_req_create(p->ids, p->n, &ep, &ch->r, &ie) != INF_OK) {
            oai_fail(err, 500, "internal_error", "", "%s", ie.msg);
            break;
        }
        eng_req_set_user(ch->r, g);
    }
    /* submit all, or none */
    int submitted = 0;
    for (int i = 0; i < g->n_ch && !err->status; i++) {
        inf_err ie = {0};
        atomic_fetch_add(&g->refs, 1); /* dropped on the request's last notify */
        int rc = eng_submit(env->e, g->ch[i].r, env->max_waiting, &ie);
        if (rc != INF_OK) {
            atomic_fetch_sub(&g->refs, 1);
            if (rc == INF_ERR_NOSPACE)
                oai_fail(err, 503, "service_unavailable", "", "%s", ie.msg);
            else
                oai_fail(err, 400, "invalid_request_error", "prompt", "%s", ie.msg);
            break;
        }
        submitted++;
    }
    if (err->status) {
        for (int i = 0; i < submitted; i++)
            eng_cancel(env->e, g->ch[i].r);
        gcall_unref(g);
        return err->status;
    }
    *out = g;
    return 0;
}

void gcall_start(const gcall_env *env, srv_conn *c, oai_request *r, gcall_prompt *prompts,
                 int n_prompts)
{
    oai_error err = {0};
    gcall *g = NULL;
    if (start(env, c, NULL, NULL, r, prompts, n_prompts, &g, &err)) {
        gcall_reply_error(c, &err, err.status == 503 ? "Retry-After: 1" : NULL);
        return;
    }
    if (r->stream) {
        if (g->resp)
            queue_sse(g, oai_resp_start_sse(&g->meta, &g->rs));
        else if (r->kind == OAI_CHAT) /* the role first, before any token */
            for (int i = 0; i < g->n_ch; i++) {
                oai_choice oc = {.index = i, .text = "", .stop_reason_id = -1};
                queue_sse(g, oai_chunk_sse(&g->meta, &oc, 1, NULL));
            }
        else
            for (int i = 0; i < g->n_ch; i++) { /* completions echo the prompt first */
                const char *echo = prompts[g->ch[i].prompt].echo;
                if (!echo || !*echo || echo_with_first(g))
                    continue;
                oai_choice oc = {.index = i, .text = echo, .text_len = strlen(echo),
                                 .stop_reason_id = -1};
                queue_sse(g, oai_chunk_sse(&g->meta, &oc, 0, NULL));
                g->ch[i].text_sent = strlen(echo);
            }
        srv_stream(c, &stream_ops, g);
    } else {
        srv_wait(c, &wait_ops, g);
    }
}

/* ---- offline calls (run-batch) ------------------------------------------------ */

int gcall_submit(const gcall_env *env, oai_request *r, gcall_prompt *prompts, int n_prompts,
                 void (*wake)(void *user), void *user, gcall **out, oai_error *err)
{
    if (r->stream) {
        for (int i = 0; i < n_prompts; i++)
            free(prompts[i].ids), free(prompts[i].echo);
        free(prompts);
        oai_request_free(r);
        free(r);
        return oai_fail(err, 400, "invalid_request_error", "stream",
                        "stream is not supported in a batch: send stream false");
    }
    return start(env, NULL, wake, user, r, prompts, n_prompts, out, err);
}

int gcall_poll(gcall *g, int *status, char **body, size_t *len)
{
    return wait_done(g, status, body, len);
}

void gcall_release(gcall *g)
{
    if (g)
        call_closed(g, 0);
}
