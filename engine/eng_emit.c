/* Tokens into requests: a sampled token appended (or put in the place a step
 * ahead held for it), detokenized, through stop strings and the finish
 * checks, into the request's output; and a request taken out of the engine. */
#include "eng_internal.h"

#include <stdio.h>
#include <string.h>

void eng__touch(eng *e, eng_req *r)
{
    if (r->touched)
        return;
    r->touched = 1;
    r->next_touched = e->touched;
    e->touched = r;
}

void eng__finish(eng *e, eng_req *r, int reason, const char *error)
{
    if (r->n_draft) { /* unverified drafts never count */
        r->seq.n_tokens -= r->n_draft;
        r->n_draft = 0;
    }
    if (e->cfg.spec)
        e->cfg.spec->ops->release(e->cfg.spec, &r->ss);
    eng__gram_detach(e, r);
    if (r->seq.state != SCHED_DONE)
        sched_remove(e->sch, &r->seq);
    pthread_mutex_lock(&r->mu);
    r->out.finish = reason;
    if (error)
        snprintf(r->out.error, sizeof r->out.error, "%s", error);
    pthread_mutex_unlock(&r->mu);
    r->active = 0;
    eng__touch(e, r);
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

void eng__process_row(eng *e, eng_req *r, const float *row, float *lg)
{
    memcpy(lg, row, sizeof(float) * (size_t)e->vocab);
    lp_chain_apply(&r->lp, lg, e->vocab);
}

int eng__emit_token(eng *e, eng_req *r, int32_t t, const float *row)
{
    sched_seq *q = &r->seq;
    if (q->n_tokens && q->tokens[q->n_tokens - 1] < 0) /* the step ahead's placeholder */
        q->tokens[q->n_tokens - 1] = t;
    else
        q->tokens[q->n_tokens++] = t;
    r->n_output++;
    if (e->cfg.met)
        met_add(e->cfg.met, MET_GENERATION_TOKENS, 1);

    int eos, stopped = is_stop_id(e, r, t, &eos);
    const char *text = "";
    size_t len = 0;
    inf_err err = {0};
    if (!stopped && tok_stream_push(r->ts, t, &text, &len, &err) != INF_OK) {
        eng__finish(e, r, ENG_FINISH_ERROR, err.msg);
        return 1;
    }
    int reason = ENG_FINISH_NONE;
    if (eng__gram_refused(r)) { /* its mask makes this a bug */
        char msg[96];
        snprintf(msg, sizeof msg, "the grammar refused token %d", (int)t);
        eng__finish(e, r, ENG_FINISH_ERROR, msg);
        return 1;
    }
    if (stopped || eng__gram_must_end(r)) /* only EOS could follow */
        reason = ENG_FINISH_STOP;
    else if (r->n_output >= r->p.max_tokens || q->n_tokens >= e->cfg.max_model_len)
        reason = ENG_FINISH_LENGTH;

    pthread_mutex_lock(&r->mu);
    eng_out *o = &r->out;
    if (eng__grow((void **)&o->ids, &o->cap_ids, o->n_ids + 1, sizeof *o->ids))
        o->ids[o->n_ids++] = t;
    size_t before = o->len;
    int matched = eng__emit(r, text, len, 0);
    if (reason != ENG_FINISH_NONE && matched < 0) { /* release what is held */
        const char *rest;
        size_t rl;
        if (tok_stream_flush(r->ts, &rest, &rl, &err) == INF_OK)
            matched = eng__emit(r, rest, rl, 1);
    }
    if (matched >= 0) {
        reason = ENG_FINISH_STOP;
        o->stop_index = matched;
    }
    eng__emit_special(r, stopped ? -1 : t, reason != ENG_FINISH_NONE);
    if (r->p.logprobs >= 0)
        eng__record_logprobs(e->tk, e->vocab, r, row, t, o->text ? o->text + before : "", o->len - before);
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
    eng__touch(e, r);
    if (reason != ENG_FINISH_NONE) {
        eng__finish(e, r, reason, NULL);
        return 1;
    }
    return 0;
}

void eng__advance(eng *e, eng_req *r, const float *row)
{
    eng__process_row(e, r, row, e->scratch);
    /* penalties were the chain's: no history for the sampler */
    int32_t t = smp_sample(e->smp, &r->p.sampling, NULL, &r->rng, e->scratch);
    lp_chain_accept(&r->lp, t);
    eng__emit_token(e, r, t, row);
}

void eng__keep_hidden(eng *e, eng_req *r, const float *hid)
{
    if (!hid || !r->hidden)
        return;
    memcpy(r->hidden, hid, sizeof(float) * (size_t)e->hidden_size);
    r->has_hidden = 1;
}
