/* One engine step: the scheduler's plan laid out as one batch, the backend's
 * forward, then per sequence a sampled token or the verification of its
 * drafts, each token emitted (detokenized, stop checks, output buffer). */
#include "eng_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Samples r's next token from its logits row and appends it. */
static void advance(eng *e, eng_req *r, const float *row)
{
    eng__process_row(e, r, row, e->scratch);
    /* penalties were the chain's: no history for the sampler */
    int32_t t = smp_sample(e->smp, &r->p.sampling, NULL, &r->rng, e->scratch);
    lp_chain_accept(&r->lp, t);
    eng__emit_token(e, r, t, row);
}

/* Whether the step's logit rows may be sampled on the device, and if so its
 * be_smp_row per row. Only when every row is a plain next-token row: one
 * row per sequence, no drafts to verify (the verifier needs the
 * probabilities), no logprobs or prompt logprobs (they need the logits), and
 * no logits processor but a grammar's mask, which the device applies as the
 * host does (be.h). Otherwise the whole step comes back as logits: a step is
 * sampled in one place. The uniform is drawn here, as smp_sample would
 * draw it, so a seed gives the same draws either way; greedy draws none. */
static int device_step(eng *e, const sched_plan *plan, int n_logits)
{
    if (!e->smp_rows || n_logits == 0)
        return 0;
    for (int i = 0; i < plan->n; i++) {
        eng_req *r = eng__req_of(plan->seqs[i]);
        if (r->plp_rows || (e->nrows[i] &&
                            (e->nrows[i] != 1 || r->n_draft || r->p.logprobs >= 0 ||
                             !eng__gram_only(r))))
            return 0;
    }
    for (int i = 0; i < plan->n; i++) {
        if (!e->nrows[i])
            continue;
        eng_req *r = eng__req_of(plan->seqs[i]);
        const smp_params *p = &r->p.sampling;
        be_smp_row *row = &e->smp_rows[e->row0[i]];
        *row = (be_smp_row){.temperature = p->temperature, .top_k = p->top_k,
                            .top_p = p->top_p, .min_p = p->min_p};
        if (p->temperature > 0.0f)
            row->u = smp_rng_uniform(&r->rng);
        if (r->gm) {
            uint32_t *words = e->dmask + (size_t)i * e->mask_words;
            eng__gram_mask(r, words);
            row->mask = words;
        }
    }
    e->device_steps++;
    if (e->cfg.met)
        met_add(e->cfg.met, MET_DEVICE_SAMPLED_TOKENS, (uint64_t)n_logits);
    return 1;
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
        eng_req *r = eng__req_of((sched_seq *)q);
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

int eng__step(eng *e)
{
    double t0 = inf_now();
    sched_plan *plan;
    sched_schedule(e->sch, &plan);
    e->step_no++;
    for (int i = 0; i < plan->n; i++)
        eng__req_of(plan->seqs[i])->plan_stamp = e->step_no;
    for (int i = 0; e->cfg.spec && i < e->n_active; i++) { /* not run: drafts go */
        eng_req *r = e->active[i];
        if (r->n_draft && (r->plan_stamp != e->step_no || r->seq.state != SCHED_RUNNING))
            eng__strip_drafts(e, r);
    }
    if (plan->n == 0)
        return 0;
    /* the batch: each planned sequence's new tokens; logits from its last
     * real token on (it and each computed draft) */
    batch_builder *bb = e->bb;
    batch_reset(bb);
    inf_err err = {0};
    int rc = INF_OK;
    int plp_left = ENG_PROMPT_LOGPROB_ROWS;
    for (int i = 0; i < plan->n && !rc; i++) {
        sched_seq *q = plan->seqs[i];
        eng_req *r = eng__req_of(q);
        int end = q->n_computed + plan->n_new[i];
        int p0 = 0;
        r->plp_rows = 0;
        if (r->p.prompt_logprobs > 0) { /* rows of prompt positions not yet recorded */
            p0 = q->n_computed > r->plp_next ? q->n_computed : r->plp_next;
            int p1 = end < q->n_prompt - 1 ? end : q->n_prompt - 1;
            if (p1 - p0 > plp_left) { /* the rest next step: a shorter chunk */
                p1 = p0 + plp_left;
                end = p1;
                plan->n_new[i] = end - q->n_computed;
            }
            r->plp_rows = p1 > p0 ? p1 - p0 : 0;
            if (r->plp_rows) /* == plp_next: no cache hit skips a row */
                r->plp_next = p0;
            plp_left -= r->plp_rows;
        }
        e->row0[i] = e->nrows[i] = 0;
        if (plan->n_new[i] == 0) /* its chunk waits for prompt-logprob rows */
            continue;
        int tb = batch_add_seq(bb, e->kv, &q->kv, q->tokens + q->n_computed, q->n_computed,
                               plan->n_new[i]);
        r->plp_row0 = batch_n_logits(bb);
        for (int p = p0; p < p0 + r->plp_rows && tb >= 0; p++)
            if (batch_add_logits(bb, tb + (p - q->n_computed)) < 0)
                tb = -1;
        int first = q->n_tokens - r->n_draft - 1;
        e->row0[i] = batch_n_logits(bb);
        e->nrows[i] = end > first ? end - first : 0;
        for (int p = first; p < end && tb >= 0; p++)
            if (batch_add_logits(bb, tb + (p - q->n_computed)) < 0)
                tb = -1;
        if (tb < 0) /* the scheduler and the buffers disagree: a bug */
            rc = inf_fail(&err, INF_ERR_INVALID, "engine: step %ld does not fit its batch "
                          "buffers", e->step_no);
    }
    int T = batch_n_tokens(bb);
    int dev = !rc && device_step(e, plan, batch_n_logits(bb));
    if (!rc)
        rc = be_submit(e->be, batch_get(bb), dev ? e->smp_rows : NULL, &err);
    if (!rc) { /* host work while the backend runs the step */
        step_metrics(e, plan, T);
        be_out out = {.logits = dev ? NULL : e->logits, .ids = dev ? e->ids : NULL,
                      .hidden = e->hidden};
        rc = be_wait(e->be, &out, &err);
    }
    if (rc != INF_OK) {
        for (int i = 0; i < plan->n; i++)
            eng__finish(e, eng__req_of(plan->seqs[i]), ENG_FINISH_ERROR, err.msg);
        return 1;
    }
    for (int i = 0; i < plan->n; i++)
        plan->seqs[i]->n_computed += plan->n_new[i];
    for (int i = 0; i < plan->n; i++) {
        eng_req *r = eng__req_of(plan->seqs[i]);
        if (r->plp_rows && r->active) { /* before the first output token's */
            const sched_seq *q = &r->seq;
            pthread_mutex_lock(&r->mu);
            for (int j = 0; j < r->plp_rows; j++)
                eng__record_prompt_logprob(e->tk, e->vocab, r,
                                           e->logits + (size_t)(r->plp_row0 + j) * e->vocab,
                                           q->tokens[r->plp_next + j + 1]);
            pthread_mutex_unlock(&r->mu);
            r->plp_next += r->plp_rows;
            r->plp_rows = 0;
            eng__touch(e, r);
        }
        if (!e->nrows[i] || !r->active)
            continue;
        const float *rows = e->logits + (size_t)e->row0[i] * e->vocab;
        const float *hid = e->hidden ? e->hidden + (size_t)e->row0[i] * e->hidden_size : NULL;
        if (r->n_draft) {
            eng__verify(e, r, rows, hid, e->nrows[i] - 1);
        } else if (dev) { /* the device sampled it, mask and all */
            int32_t t = e->ids[e->row0[i]];
            eng__keep_hidden(e, r, hid);
            lp_chain_accept(&r->lp, t);
            eng__emit_token(e, r, t, NULL);
        } else {
            eng__keep_hidden(e, r, hid);
            advance(e, r, rows);
        }
    }
    eng__propose(e);
    /* for --log-level debug: where a slow step comes from (scheduling,
     * forward, sampling and drafting together) */
    log_msg(e->cfg.log, LOG_DEBUG, "engine", NULL, "step %ld: %d seqs, %d tokens, %.1f ms",
            e->step_no, plan->n, T, (inf_now() - t0) * 1e3);
    return 1;
}


void eng__keep_hidden(eng *e, eng_req *r, const float *hid)
{
    if (!hid || !r->hidden)
        return;
    memcpy(r->hidden, hid, sizeof(float) * (size_t)e->hidden_size);
    r->has_hidden = 1;
}

int eng__step_init(eng *e, inf_err *err)
{
    const eng_config *cfg = &e->cfg;
    int S = cfg->max_num_seqs;
    e->kmax = cfg->spec ? cfg->spec_k : 0;
    if (e->kmax < 0 || e->kmax > 32)
        return inf_fail(err, INF_ERR_INVALID, "num_speculative_tokens must be 1..32, got %d",
                        e->kmax);
    e->max_rows = S * (e->kmax + 1) + ENG_PROMPT_LOGPROB_ROWS;
    batch_limits bl = {.max_tokens = cfg->max_num_batched_tokens, .max_seqs = S,
                       .max_rows = e->max_rows,
                       .max_blocks = (cfg->max_model_len + cfg->block_size - 1) /
                                     cfg->block_size};
    int rc = batch_create(&bl, &e->bb, err);
    if (rc)
        return rc;
    if (cfg->spec && cfg->spec->ops->wants_hidden) {
        e->hidden_size = e->be->hidden_size;
        if (e->hidden_size < 1)
            return inf_fail(err, INF_ERR_UNSUPPORTED, "speculation: the %s proposer reads the "
                            "target's hidden states, which the %s backend does not return",
                            cfg->spec->ops->name, e->be->ops->name);
        e->hidden = malloc(sizeof(float) * (size_t)e->max_rows * e->hidden_size);
        if (!e->hidden)
            return inf_fail(err, INF_ERR_NOMEM, "engine: out of memory for hidden states");
        batch_set_want_hidden(e->bb, 1);
    }
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
            !e->tprobs || !e->argmaxes || (!cfg->spec->ops->deterministic && !e->dprobs))
            return inf_fail(err, INF_ERR_NOMEM, "engine: out of memory for speculation buffers");
    }
    if (e->be->device_sampling) {
        e->mask_words = ((size_t)e->vocab + 31) / 32;
        e->smp_rows = malloc(sizeof *e->smp_rows * (size_t)e->max_rows);
        e->ids = malloc(sizeof *e->ids * (size_t)e->max_rows);
        e->dmask = malloc(sizeof *e->dmask * (size_t)S * e->mask_words);
        if (!e->smp_rows || !e->ids || !e->dmask)
            return inf_fail(err, INF_ERR_NOMEM, "engine: out of memory for device sampling");
    }
    if (!e->row0 || !e->nrows || !e->logits || !e->scratch)
        return inf_fail(err, INF_ERR_NOMEM, "engine: out of memory for step buffers");
    return INF_OK;
}

void eng__step_free(eng *e)
{
    batch_destroy(e->bb);
    free(e->logits), free(e->hidden), free(e->scratch), free(e->row0), free(e->nrows);
    free(e->cand), free(e->cand_ss), free(e->cand_params), free(e->cand_k);
    free(e->drafts), free(e->dprobs), free(e->tprobs), free(e->argmaxes);
    free(e->smp_rows), free(e->ids), free(e->dmask);
}
