/* The engine thread and its inbox: requests submitted from any thread wait
 * in the inbox; the thread admits them, runs steps (eng_step.c) while there
 * is work, notifies owners, and sleeps when there is none. */
#include "eng_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a step leaves behind, for the gauges and the stats line. */
typedef struct eng_stats {
    int running, waiting;
    double kv_usage; /* 0..1 */
} eng_stats;

/* ---- the thread ------------------------------------------------------------ */

/* Moves a submitted request into the scheduler. */
static void admit(eng *e, eng_req *r)
{
    inf_err err = {0};
    if (!r->p.has_seed)
        r->p.sampling.seed = smp_rng_next(&e->seeds);
    smp_rng_seed(&r->rng, r->p.sampling.seed);
    if (!eng__grow((void **)&e->active, &e->cap_active, e->n_active + 1, sizeof *e->active) ||
        tok_stream_create_ex(e->tk, r->seq.tokens, r->seq.n_prompt,
                             r->p.keep_special ? TOK_KEEP_SPECIAL : 0, &r->ts, &err) != INF_OK ||
        (r->p.n_stop > 0 &&
         stop_create(&(stop_config){.strs = (const char *const *)r->stop, .n = r->p.n_stop},
                     &r->stopper, &err) != INF_OK) ||
        (r->p.parse_special &&
         tok_stream_create_ex(e->tk, r->seq.tokens, r->seq.n_prompt, TOK_KEEP_SPECIAL, &r->sts,
                              &err) != INF_OK) ||
        (r->p.parse_special && r->p.n_stop > 0 &&
         stop_create(&(stop_config){.strs = (const char *const *)r->stop, .n = r->p.n_stop},
                     &r->sstopper, &err) != INF_OK) ||
        eng__req_lp_init(r, e->smp, &e->m->cfg, &err) != INF_OK ||
        (e->hidden && !(r->hidden = malloc(sizeof(float) * (size_t)e->hidden_size))) ||
        eng__gram_attach(e, r, &err) != INF_OK ||
        sched_add(e->sch, &r->seq, &err) != INF_OK) {
        r->seq.state = SCHED_DONE;
        eng__finish(e, r, ENG_FINISH_ERROR, err.msg[0] ? err.msg : "out of memory");
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
            eng__finish(e, r, ENG_FINISH_ABORT, NULL);
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
        if (!e->stop && !e->inbox_head && e->n_active == 0 && e->fly_n == 0)
            e->log_at = 0; /* idle: the line is for busy periods */
        atomic_store(&e->idle, 1);
        /* a step still in flight (its requests finished) is waited for first */
        while (!e->stop && !e->inbox_head && e->n_active == 0 && e->fly_n == 0)
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
            eng__step_drain(e);
            for (int i = 0; i < e->n_active; i++)
                eng__finish(e, e->active[i], ENG_FINISH_ABORT, NULL);
            e->n_active = 0;
            notify_all(e);
            return NULL;
        }
        if (atomic_exchange(&e->pending_cancel, 0))
            reap_cancelled(e);
        eng__step(e);
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

/* Everything but the thread (stopped or never started). */
static void teardown(eng *e)
{
    sched_destroy(e->sch);
    kv_destroy(e->kv);
    smp_destroy(e->smp);
    eng__step_free(e);
    eng__gram_free(e);
    free(e->active);
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
    if ((rc = eng__step_init(e, err)))
        goto fail;
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
