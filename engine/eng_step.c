/* One engine step: the scheduler's plan laid out as one batch, the backend's
 * forward, then per sequence a sampled token or the verification of its
 * drafts, each token emitted (eng_emit.c); and running one step ahead where
 * the backend allows it. */
#include "eng_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether the step's logit rows may be sampled on the device, and if so its
 * be_smp_row per row. Only when every row is a plain next-token row: one
 * row per sequence, no drafts to verify (the verifier needs the
 * probabilities), no logprobs or prompt logprobs (they need the logits), and
 * no logits processor but a grammar's mask, which the device applies as the
 * host does (be.h). Otherwise the whole step comes back as logits: a step is
 * sampled in one place. The uniform is drawn here, as smp_sample would
 * draw it, so a seed gives the same draws either way; greedy draws none. */
static int device_step(eng *e, eng_fly *f, int n_logits)
{
    if (!f->smp_rows || n_logits == 0)
        return 0;
    for (int i = 0; i < f->n; i++) {
        eng_req *r = f->reqs[i];
        if (r->plp_rows || (f->nrows[i] &&
                            (f->nrows[i] != 1 || r->n_draft || r->p.logprobs >= 0 ||
                             !eng__gram_only(r))))
            return 0;
    }
    for (int i = 0; i < f->n; i++) {
        if (!f->nrows[i])
            continue;
        eng_req *r = f->reqs[i];
        const smp_params *p = &r->p.sampling;
        be_smp_row *row = &f->smp_rows[f->row0[i]];
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

/* ---- submitting and finishing steps --------------------------------------
 *
 * A step is planned, built and submitted into a record (eng_fly), then waited
 * for and its rows sampled and emitted. Running ahead: when the backend can
 * hold two steps (max_inflight >= 2) and samples on its device, and the step
 * in flight is plain decoding that the next one repeats (see can_go_ahead),
 * and it resolves placeholders (be_backend.placeholders), the next step is
 * queued before this one's tokens are known, each sequence's next token being
 * a placeholder (be.h: -1 - its row in the step before) that the device
 * resolves. The host then samples, detokenizes and plans while the
 * device runs (vLLM's async scheduling). A sequence that this step finishes
 * (EOS, a stop string, a cancel) leaves the step ahead one wasted row; the
 * KV it writes there goes with its blocks. Every token is the one the step
 * without running ahead gives: the same rows, the same uniforms drawn from
 * the request's own generator in the same order. */

static eng_fly *fly_next(eng *e) { return &e->fly[(e->fly_at + e->fly_n) % 2]; }
static eng_fly *fly_oldest(eng *e) { return &e->fly[e->fly_at]; }

/* Waits for the oldest step in flight and takes it off the ring; its record
 * stays readable until the next submit. */
static eng_fly *fly_wait(eng *e, const be_out *out, int *rc, inf_err *err)
{
    eng_fly *f = fly_oldest(e);
    *rc = be_wait(e->be, out, err);
    e->fly_at = (e->fly_at + 1) % 2;
    e->fly_n--;
    return f;
}

/* A record's requests let go (a finished one is notified after the step). */
static void fly_release(eng_fly *f)
{
    for (int i = 0; i < f->n; i++)
        eng_req_unref(f->reqs[i]);
    f->n = 0;
}

/* Plans the next step into a new record and submits it; ahead: the step in
 * flight's sampled ids come in as placeholders. Returns 1 when a step was
 * submitted, 0 when there was nothing to run, -1 when it failed (its
 * sequences finished with the error). */
static int submit_step(eng *e, int ahead)
{
    if (ahead) { /* each sequence's next token: the id its row will hold */
        const eng_fly *x = fly_oldest(e);
        for (int i = 0; i < x->n; i++) {
            eng_req *r = x->reqs[i];
            r->seq.tokens[r->seq.n_tokens++] = -1 - x->row0[i];
        }
    }
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
    eng_fly *f = fly_next(e);
    batch_builder *bb = f->bb;
    batch_reset(bb);
    inf_err err = {0};
    int rc = INF_OK;
    int plp_left = ENG_PROMPT_LOGPROB_ROWS;
    f->n = plan->n;
    for (int i = 0; i < plan->n && !rc; i++) {
        sched_seq *q = plan->seqs[i];
        eng_req *r = eng__req_of(q);
        f->reqs[i] = r;
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
        f->n_new[i] = plan->n_new[i];
        f->row0[i] = f->nrows[i] = 0;
        if (plan->n_new[i] == 0) /* its chunk waits for prompt-logprob rows */
            continue;
        int tb = batch_add_seq(bb, e->kv, &q->kv, q->tokens + q->n_computed, q->n_computed,
                               plan->n_new[i]);
        r->plp_row0 = batch_n_logits(bb);
        for (int p = p0; p < p0 + r->plp_rows && tb >= 0; p++)
            if (batch_add_logits(bb, tb + (p - q->n_computed)) < 0)
                tb = -1;
        int first = q->n_tokens - r->n_draft - 1;
        f->row0[i] = batch_n_logits(bb);
        f->nrows[i] = end > first ? end - first : 0;
        for (int p = first; p < end && tb >= 0; p++)
            if (batch_add_logits(bb, tb + (p - q->n_computed)) < 0)
                tb = -1;
        if (tb < 0) /* the scheduler and the buffers disagree: a bug */
            rc = inf_fail(&err, INF_ERR_INVALID, "engine: step %ld does not fit its batch "
                          "buffers", e->step_no);
    }
    f->dev = !rc && device_step(e, f, batch_n_logits(bb));
    if (!rc)
        rc = be_submit(e->be, batch_get(bb), f->dev ? f->smp_rows : NULL, &err);
    if (rc != INF_OK) {
        for (int i = 0; i < plan->n; i++)
            eng__finish(e, eng__req_of(plan->seqs[i]), ENG_FINISH_ERROR, err.msg);
        return -1;
    }
    /* host work while the backend runs the step */
    f->n_tokens = batch_n_tokens(bb);
    step_metrics(e, plan, f->n_tokens);
    for (int i = 0; i < plan->n; i++) { /* their KV is written (or queued) */
        plan->seqs[i]->n_computed += plan->n_new[i];
        eng_req_ref(f->reqs[i]);
    }
    e->fly_n++;
    e->ahead_steps += ahead;
    return 1;
}

/* Whether the step after the one in flight may be queued now: the backend
 * holds two and samples on its device; every running sequence is in the
 * step in flight, decoding one token sampled there, with no grammar (its
 * mask needs the token), no other logits processor, no speculation, and a
 * token that will not end it by length; nothing waits for admission; and
 * the pool has a block for each, so planning preempts nothing. */
static int can_go_ahead(eng *e)
{
    const eng_fly *x = fly_oldest(e);
    if (e->fly_n != 1 || e->cfg.no_async_scheduling || e->be->max_inflight < 2 ||
        !e->be->placeholders || !x->dev || e->cfg.spec || x->n == 0 ||
        x->n != sched_num_running(e->sch) || sched_num_waiting(e->sch) > 0 ||
        kv_num_free(e->kv) < x->n)
        return 0;
    for (int i = 0; i < x->n; i++) {
        const eng_req *r = x->reqs[i];
        if (!r->active || x->n_new[i] != 1 || x->nrows[i] != 1 || r->gm ||
            !lp_chain_empty(&r->lp) || r->n_output + 1 >= r->p.max_tokens ||
            r->seq.n_tokens + 1 >= e->cfg.max_model_len)
            return 0;
    }
    return 1;
}

/* Waits for the oldest step in flight and samples and emits its rows. */
static void finish_step(eng *e)
{
    int dev = fly_oldest(e)->dev, rc;
    be_out out = {.logits = dev ? NULL : e->logits, .ids = dev ? e->ids : NULL,
                  .hidden = e->hidden};
    inf_err err = {0};
    eng_fly *f = fly_wait(e, &out, &rc, &err);
    for (int i = 0; i < f->n; i++) {
        eng_req *r = f->reqs[i];
        if (rc != INF_OK) {
            if (r->active)
                eng__finish(e, r, ENG_FINISH_ERROR, err.msg);
            continue;
        }
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
        if (!f->nrows[i] || !r->active)
            continue;
        const float *rows = e->logits + (size_t)f->row0[i] * e->vocab;
        const float *hid = e->hidden ? e->hidden + (size_t)f->row0[i] * e->hidden_size : NULL;
        if (r->n_draft) {
            eng__verify(e, r, rows, hid, f->nrows[i] - 1);
        } else if (f->dev) { /* the device sampled it, mask and all */
            int32_t t = e->ids[f->row0[i]];
            eng__keep_hidden(e, r, hid);
            lp_chain_accept(&r->lp, t);
            eng__emit_token(e, r, t, NULL);
        } else {
            eng__keep_hidden(e, r, hid);
            eng__advance(e, r, rows);
        }
    }
    fly_release(f);
}

int eng__step(eng *e)
{
    double t0 = inf_now();
    if (e->fly_n == 0) {
        int rc = submit_step(e, 0);
        if (rc <= 0)
            return rc < 0;
    }
    if (can_go_ahead(e))
        submit_step(e, 1); /* a failure finished its sequences */
    int n = fly_oldest(e)->n, T = fly_oldest(e)->n_tokens;
    finish_step(e);
    if (e->fly_n == 0) /* drafts only between steps that do not overlap */
        eng__propose(e);
    /* for --log-level debug: where a slow step comes from (scheduling,
     * forward, sampling and drafting together; with a step ahead, the host's
     * share of the time between two results) */
    log_msg(e->cfg.log, LOG_DEBUG, "engine", NULL, "step %ld: %d seqs, %d tokens, %.1f ms",
            e->step_no - e->fly_n, n, T, (inf_now() - t0) * 1e3);
    return 1;
}

void eng__step_drain(eng *e)
{
    while (e->fly_n) { /* results dropped: the engine is stopping */
        int rc;
        inf_err err = {0};
        fly_release(fly_wait(e, &(be_out){0}, &rc, &err));
    }
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
    for (int i = 0; i < 2; i++) {
        eng_fly *f = &e->fly[i];
        int rc = batch_create(&bl, &f->bb, err);
        if (rc)
            return rc;
        f->reqs = malloc(sizeof *f->reqs * (size_t)S);
        f->n_new = malloc(sizeof(int) * (size_t)S);
        f->row0 = malloc(sizeof(int) * (size_t)S);
        f->nrows = malloc(sizeof(int) * (size_t)S);
        if (e->be->device_sampling)
            f->smp_rows = malloc(sizeof *f->smp_rows * (size_t)e->max_rows);
        if (!f->reqs || !f->n_new || !f->row0 || !f->nrows ||
            (e->be->device_sampling && !f->smp_rows))
            return inf_fail(err, INF_ERR_NOMEM, "engine: out of memory for step records");
    }
    if (cfg->spec && cfg->spec->ops->wants_hidden) {
        e->hidden_size = e->be->hidden_size;
        if (e->hidden_size < 1)
            return inf_fail(err, INF_ERR_UNSUPPORTED, "speculation: the %s proposer reads the "
                            "target's hidden states, which the %s backend does not return",
                            cfg->spec->ops->name, e->be->ops->name);
        e->hidden = malloc(sizeof(float) * (size_t)e->max_rows * e->hidden_size);
        if (!e->hidden)
            return inf_fail(err, INF_ERR_NOMEM, "engine: out of memory for hidden states");
        batch_set_want_hidden(e->fly[0].bb, 1);
        batch_set_want_hidden(e->fly[1].bb, 1);
    }
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
        e->ids = malloc(sizeof *e->ids * (size_t)e->max_rows);
        e->dmask = malloc(sizeof *e->dmask * (size_t)S * e->mask_words);
        if (!e->ids || !e->dmask)
            return inf_fail(err, INF_ERR_NOMEM, "engine: out of memory for device sampling");
    }
    if (!e->logits || !e->scratch)
        return inf_fail(err, INF_ERR_NOMEM, "engine: out of memory for step buffers");
    return INF_OK;
}

void eng__step_free(eng *e)
{
    for (int i = 0; i < 2; i++) {
        eng_fly *f = &e->fly[i];
        batch_destroy(f->bb);
        free(f->reqs), free(f->n_new), free(f->row0), free(f->nrows), free(f->smp_rows);
    }
    free(e->logits), free(e->hidden), free(e->scratch);
    free(e->cand), free(e->cand_ss), free(e->cand_params), free(e->cand_k);
    free(e->drafts), free(e->dprobs), free(e->tprobs), free(e->argmaxes);
    free(e->ids), free(e->dmask);
}
