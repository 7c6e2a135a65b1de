/* The engine's step against a fake backend and a fake proposer.
 *
 * The fake backend keeps a "KV cache" of token ids: every batch token is
 * written at its slot, and a logits row is a pseudo-random function of the
 * whole context read back through the sequence's block table (so KV that a
 * step failed to write, or a rejected draft's KV left in place, changes the
 * logits), plus an EOS rule by position. The reference is the same function
 * applied to the true token sequence: greedy output must equal it exactly
 * whatever the chunking, drafting and batching.
 *
 * The fake proposer drafts the reference continuation with one token made
 * wrong at a position that cycles, so every step accepts some drafts and
 * rejects the rest (or accepts them all). The rollback check: a rejected
 * draft whose tokens, n_computed or KV survived would put a wrong token in
 * the context the next logits are read from.
 *
 * Uses the fixture tokenizer $INFERD_TEST_FIXTURES/tiny (the engine streams
 * text through it); skipped, saying so, when absent. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/eng_internal.h"

enum { BS = 4, NBLOCKS = 257, MAXLEN = 160, MAXSEQ = 8 };

/* ---- the fake model: logits from the whole context ---------------------- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

typedef struct fake_model {
    int V;
    int32_t eos;
    int eos_pos;      /* the row at this position predicts EOS (0: never) */
} fake_model;

static uint64_t ctx_hash(const int32_t *ctx, int n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint64_t)(uint32_t)ctx[i]) * 0x100000001b3ull;
    return h;
}

/* The fake's "hidden state" of the row after ctx[0..n): [n, low hash bits],
 * both exact in float. */
enum { FAKE_HIDDEN = 2 };
static void fake_hidden(const int32_t *ctx, int n, float *out)
{
    out[0] = (float)n;
    out[1] = (float)(ctx_hash(ctx, n) & 0xffff);
}

/* The logits row predicting the token after ctx[0..n). */
static void fake_row(const fake_model *fm, const int32_t *ctx, int n, float *row)
{
    uint64_t h = ctx_hash(ctx, n);
    for (int v = 0; v < fm->V; v++)
        row[v] = (float)(mix(h ^ ((uint64_t)v << 32)) >> 40) * (8.0f / 16777216.0f);
    row[fm->eos] = n - 1 == fm->eos_pos ? 100.0f : -100.0f;
}

/* The greedy reference: n_out tokens after prompt, stopping after EOS. */
static int reference(const fake_model *fm, const int32_t *prompt, int n_prompt, int n_out,
                     int32_t *out)
{
    int32_t ctx[MAXLEN];
    float row[4096];
    memcpy(ctx, prompt, sizeof(int32_t) * (size_t)n_prompt);
    int n = n_prompt, k = 0;
    while (k < n_out && n < MAXLEN) {
        fake_row(fm, ctx, n, row);
        int32_t t = smp_argmax(row, fm->V);
        out[k++] = ctx[n++] = t;
        if (t == fm->eos)
            break;
    }
    return k;
}

/* ---- the fake backend --------------------------------------------------- */

typedef struct fake_be {
    be_backend base;
    fake_model fm;
    int32_t kv[NBLOCKS * BS]; /* the token stored at each slot              */
    int n_forward;
    int max_batch;            /* most tokens one forward carried            */
    int chunks_without_logits; /* sequences in a batch with no logits row  */
    int multi_row_seqs;       /* sequences with several logits rows (drafts) */
    /* a gate: forward number hold_at waits until the test releases it */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int hold_at, held, released;
    int queued_at_hold;       /* steps queued behind the held one          */
    /* submitted steps, run by wait in order (two with base.max_inflight 2) */
    const be_batch *pending[2];
    /* device sampling (base.device_sampling): the "device" samples each row
     * as the host's smp_ does, after the row's mask */
    const be_smp_row *pending_smp[2];
    int pending_ph[2];        /* placeholders each may hold: the rows the step
                                 before it sampled (base.placeholders)      */
    int n_pending, max_pending, n_placeholders;
    int last_rows;            /* rows the last submitted step sampled (-1: none) */
    int32_t last_ids[MAXSEQ]; /* the ids the last run step sampled          */
    smp_ctx *smp;
    int n_sampled_steps, n_masked_rows;
} fake_be;

/* Blocks forward number hold_at until release_gate; lets a test act while
 * the engine is inside a step, without timing. */
static void gate(fake_be *f)
{
    if (!f->hold_at || f->n_forward + 1 != f->hold_at)
        return;
    pthread_mutex_lock(&f->mu);
    f->held = 1;
    f->queued_at_hold = f->n_pending;
    pthread_cond_broadcast(&f->cv);
    while (!f->released)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
}

/* What a device sampler does with one row (engine/be.h): the mask's clear
 * bits to -inf, then the argmax or one draw at the row's uniform. */
static int32_t fake_sample(fake_be *f, const be_smp_row *s, float *row)
{
    if (s->mask) {
        f->n_masked_rows++;
        for (int v = 0; v < f->fm.V; v++)
            if (!(s->mask[v >> 5] >> (v & 31) & 1))
                row[v] = -INFINITY;
    }
    if (!(s->temperature > 0.0f))
        return smp_argmax(row, f->fm.V);
    smp_params p = smp_params_default();
    p.temperature = s->temperature;
    p.top_k = s->top_k;
    p.top_p = s->top_p;
    p.min_p = s->min_p;
    float probs[4096];
    smp_probs(f->smp, &p, row, probs);
    return smp_draw(probs, f->fm.V, s->u);
}

static int fake_forward(be_backend *base, const be_batch *b, const be_smp_row *smp, int n_ph,
                        const be_out *out, inf_err *err)
{
    fake_be *f = (fake_be *)base;
    int rc = be_batch_check(base, b, 64, MAXLEN, n_ph, err);
    if (rc)
        return rc;
    gate(f);
    f->n_forward++;
    if (b->n_tokens > f->max_batch)
        f->max_batch = b->n_tokens;
    for (int t = 0; t < b->n_tokens; t++) { /* KV first, as attention does */
        int32_t id = b->tokens[t];
        if (id < 0) { /* a placeholder: what the step before sampled */
            f->n_placeholders++;
            id = f->last_ids[-1 - id];
        }
        f->kv[b->slots[t]] = id;
    }
    for (int s = 0; s < b->n_seqs; s++) {
        int rows = 0;
        for (int r = 0; r < b->n_logits; r++)
            rows += b->logit_rows[r] >= b->seq_start[s] && b->logit_rows[r] < b->seq_start[s + 1];
        f->chunks_without_logits += rows == 0;
        f->multi_row_seqs += rows > 1;
    }
    for (int r = 0; r < b->n_logits; r++) {
        int t = b->logit_rows[r], s = 0;
        while (b->seq_start[s + 1] <= t)
            s++;
        int p = b->positions[t];
        int32_t ctx[MAXLEN];
        const int32_t *table = b->block_table + (size_t)s * b->max_blocks;
        for (int j = 0; j <= p; j++)
            ctx[j] = f->kv[table[j / BS] * BS + j % BS];
        if (smp) {
            float row[4096];
            fake_row(&f->fm, ctx, p + 1, row);
            out->ids[r] = f->last_ids[r] = fake_sample(f, &smp[r], row);
        } else {
            fake_row(&f->fm, ctx, p + 1, out->logits + (size_t)r * f->fm.V);
        }
        if (b->want_hidden && out->hidden)
            fake_hidden(ctx, p + 1, out->hidden + (size_t)r * FAKE_HIDDEN);
    }
    return INF_OK;
}

static int fake_submit(be_backend *base, const be_batch *b, const be_smp_row *smp, inf_err *err)
{
    fake_be *f = (fake_be *)base;
    if ((smp && (!base->device_sampling || b->n_logits > MAXSEQ)) ||
        f->n_pending == base->max_inflight)
        return inf_fail(err, INF_ERR_INVALID, "fake: %d steps queued, or device sampling "
                        "without the backend's", f->n_pending);
    /* the engine must keep each queued step's arrays as they were: the fake
     * reads them only when it runs the step, in wait */
    f->pending[f->n_pending] = b;
    f->pending_smp[f->n_pending] = smp;
    f->pending_ph[f->n_pending] = base->placeholders && f->last_rows > 0 ? f->last_rows : 0;
    f->n_pending++;
    f->max_pending = f->n_pending > f->max_pending ? f->n_pending : f->max_pending;
    f->last_rows = smp ? b->n_logits : -1;
    f->n_sampled_steps += smp != NULL;
    return INF_OK;
}

static int fake_wait(be_backend *base, const be_out *out, inf_err *err)
{
    fake_be *f = (fake_be *)base;
    if (!f->n_pending)
        return inf_fail(err, INF_ERR_INVALID, "fake: no step");
    const be_batch *b = f->pending[0];
    const be_smp_row *smp = f->pending_smp[0];
    int n_ph = f->pending_ph[0];
    f->pending[0] = f->pending[1];
    f->pending_smp[0] = f->pending_smp[1];
    f->pending_ph[0] = f->pending_ph[1];
    f->n_pending--;
    return fake_forward(base, b, smp, n_ph, out, err);
}

static void fake_destroy(be_backend *base)
{
    fake_be *f = (fake_be *)base;
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    smp_destroy(f->smp);
    free(f);
}

static const be_ops fake_ops = {.name = "fake", .submit = fake_submit, .wait = fake_wait,
                                .destroy = fake_destroy};

/* ---- the fake proposer -------------------------------------------------- */

typedef struct fake_spec {
    spec_proposer base;
    fake_model fm;
    int calls;
    int full, partial;  /* proposals later found all accepted / cut short */
    int bad_rollbacks;
    int hidden_ok, hidden_bad; /* spec_seq.hidden was / was not the row of
                                  the last token's (wants_hidden only)    */
} fake_spec;

typedef struct fake_spec_seq {
    int at;             /* n_tokens when it last proposed                 */
    int k;
    int32_t drafts[32];
} fake_spec_seq;

/* What became of the last proposal: compare it with the tokens now there. */
static void score(fake_spec *p, const spec_seq *s)
{
    fake_spec_seq *st = s->state;
    if (!st || !st->k)
        return;
    int acc = 0;
    while (acc < st->k && st->at + acc < s->n_tokens && s->tokens[st->at + acc] == st->drafts[acc])
        acc++;
    if (st->at + st->k < s->n_tokens) /* the sequence moved past it */
        acc == st->k ? p->full++ : p->partial++;
    else if (acc < st->k && st->at + acc < s->n_tokens)
        p->partial++;
    st->k = 0;
}

static int fake_propose(spec_proposer *pp, spec_seq *const *seqs, int n, const smp_params *params,
                        int kmax, int *k, int32_t *drafts, float *probs, inf_err *err)
{
    (void)params, (void)probs, (void)err;
    fake_spec *p = (fake_spec *)pp;
    for (int i = 0; i < n; i++) {
        spec_seq *s = seqs[i];
        if (!s->state)
            s->state = calloc(1, sizeof(fake_spec_seq));
        fake_spec_seq *st = s->state;
        score(p, s);
        if (p->base.ops->wants_hidden) {
            float want[FAKE_HIDDEN];
            fake_hidden(s->tokens, s->n_tokens - 1, want);
            int ok = s->hidden && !memcmp(s->hidden, want, sizeof want);
            p->hidden_ok += ok;
            p->hidden_bad += !ok;
        }
        int32_t ref[32];
        int got = reference(&p->fm, s->tokens, s->n_tokens, k[i], ref);
        int wrong = p->calls++ % (k[i] + 1); /* k[i]: all right */
        for (int j = 0; j < got; j++)
            drafts[(size_t)i * kmax + j] = j == wrong ? (ref[j] + 1) % p->fm.V : ref[j];
        k[i] = got;
        st->at = s->n_tokens;
        st->k = got;
        memcpy(st->drafts, drafts + (size_t)i * kmax, sizeof(int32_t) * (size_t)got);
    }
    return INF_OK;
}

/* Rollback must never claim more valid tokens than the sequence holds. */
static void fake_rollback(spec_proposer *pp, spec_seq *s, int n_valid)
{
    ((fake_spec *)pp)->bad_rollbacks += n_valid > s->n_tokens;
}

static void fake_release(spec_proposer *pp, spec_seq *s)
{
    score((fake_spec *)pp, s);
    free(s->state);
    s->state = NULL;
}

static void fake_spec_destroy(spec_proposer *pp) { (void)pp; }

static const spec_proposer_ops fake_spec_ops = {
    .name = "fake", .propose = fake_propose, .rollback = fake_rollback,
    .release = fake_release, .destroy = fake_spec_destroy, .deterministic = 1,
};

/* The same, reading the target's hidden states (as an MLP speculator). */
static const spec_proposer_ops fake_spec_hidden_ops = {
    .name = "fake-hidden", .propose = fake_propose, .rollback = fake_rollback,
    .release = fake_release, .destroy = fake_spec_destroy, .deterministic = 1,
    .wants_hidden = 1,
};

/* ---- fixture: an engine on the fakes ------------------------------------ */

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int notified;
} waiter;

static void on_notify(void *user, eng_req *r)
{
    (void)r;
    waiter *w = user;
    pthread_mutex_lock(&w->mu);
    w->notified++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

typedef struct fx {
    tok *tk;
    model m;
    fake_be *be;
    fake_spec spec;
    eng *e;
    waiter w;
    int no_async; /* eng_config.no_async_scheduling of the next start */
} fx;

static int setup(void **state)
{
    const char *f = getenv("INFERD_TEST_FIXTURES");
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/tiny", f ? f : "");
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    if (!f || access(path, R_OK) != 0) {
        print_message("skipped: $INFERD_TEST_FIXTURES/tiny/tokenizer.model not present "
                      "(INFERD_TEST_FIXTURES=%s; `make unit` makes it)\n", f ? f : "unset");
        *state = NULL;
        return 0;
    }
    fx *x = calloc(1, sizeof *x);
    inf_err err = {0};
    assert_int_equal(tok_create(dir, &x->tk, &err), INF_OK);
    x->m.cfg.vocab_size = tok_vocab_size(x->tk);
    x->m.cfg.n_eos = 1;
    x->m.cfg.eos_token_ids[0] = tok_eos_id(x->tk);
    pthread_mutex_init(&x->w.mu, NULL);
    pthread_cond_init(&x->w.cv, NULL);
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    fx *x = *state;
    if (!x)
        return 0;
    eng_destroy(x->e);
    if (x->be)
        be_destroy(&x->be->base);
    tok_destroy(x->tk);
    pthread_mutex_destroy(&x->w.mu);
    pthread_cond_destroy(&x->w.cv);
    free(x);
    return 0;
}

#define NEED_FIXTURE(x)                                                                        \
    do {                                                                                       \
        if (!(x))                                                                              \
            skip();                                                                            \
    } while (0)

/* Starts the engine: a step of `budget` tokens, k drafts (0: off); with
 * hidden, the proposer reads hidden states; with device, the fake backend
 * samples on its "device". */
static void start_ahead(fx *x, int budget, int k, int eos_pos, int hidden, int device,
                        int ahead)
{
    x->be = calloc(1, sizeof *x->be);
    pthread_mutex_init(&x->be->mu, NULL);
    pthread_cond_init(&x->be->cv, NULL);
    x->be->base = (be_backend){.ops = &fake_ops, .vocab_size = x->m.cfg.vocab_size,
                               .block_size = BS, .num_blocks = NBLOCKS,
                               .hidden_size = FAKE_HIDDEN, .max_inflight = ahead ? 2 : 1,
                               .device_sampling = device, .placeholders = ahead};
    x->be->last_rows = -1;
    inf_err serr = {0};
    assert_int_equal(smp_create(x->m.cfg.vocab_size, &x->be->smp, &serr), INF_OK);
    x->be->fm = (fake_model){.V = x->m.cfg.vocab_size, .eos = x->m.cfg.eos_token_ids[0],
                             .eos_pos = eos_pos};
    x->spec = (fake_spec){.base = {.ops = hidden ? &fake_spec_hidden_ops : &fake_spec_ops},
                          .fm = x->be->fm};
    eng_config c = {.max_num_seqs = MAXSEQ, .max_num_batched_tokens = budget,
                    .max_model_len = MAXLEN, .block_size = BS, .num_blocks = NBLOCKS,
                    .seed = 7, .spec = k ? &x->spec.base : NULL, .spec_k = k,
                    .spec_min_accept = 0, .notify = on_notify, .notify_user = &x->w,
                    .no_async_scheduling = x->no_async};
    inf_err err = {0};
    int rc = eng_create(&c, &x->m, x->tk, &x->be->base, &x->e, &err);
    if (rc)
        print_message("eng_create: %s\n", err.msg);
    assert_int_equal(rc, INF_OK);
}

static void start_dev(fx *x, int budget, int k, int eos_pos, int hidden, int device)
{
    start_ahead(x, budget, k, eos_pos, hidden, device, 0);
}

static void start_with(fx *x, int budget, int k, int eos_pos, int hidden)
{
    start_dev(x, budget, k, eos_pos, hidden, 0);
}

static void start(fx *x, int budget, int k, int eos_pos)
{
    start_with(x, budget, k, eos_pos, 0);
}

static void make_prompt(const fx *x, unsigned seed, int n, int32_t *p)
{
    p[0] = tok_bos_id(x->tk) >= 0 ? tok_bos_id(x->tk) : 1;
    for (int i = 1; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = 3 + (int32_t)((seed >> 8) % (unsigned)(x->m.cfg.vocab_size - 3));
    }
}

static eng_params greedy(int max_tokens)
{
    eng_params p = {.sampling = smp_params_default(), .max_tokens = max_tokens,
                    .logprobs = -1};
    p.sampling.temperature = 0;
    return p;
}

static eng_req *submit(fx *x, const int32_t *prompt, int n, const eng_params *p)
{
    eng_req *r = NULL;
    inf_err err = {0};
    assert_int_equal(eng_req_create(prompt, n, p, &r, &err), INF_OK);
    int rc = eng_submit(x->e, r, 0, &err);
    if (rc)
        print_message("eng_submit: %s\n", err.msg);
    assert_int_equal(rc, INF_OK);
    return r;
}

/* Waits until r has finished. A request the engine stopped advancing (a
 * broken rollback can leave a sequence with nothing to compute) would hang
 * the test: after 20 s it fails instead (a watchdog, not a timing check). */
static void wait_done(fx *x, eng_req *r)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 20;
    int stuck = 0;
    pthread_mutex_lock(&x->w.mu);
    while (!eng_req_finished(r) && !stuck)
        stuck = pthread_cond_timedwait(&x->w.cv, &x->w.mu, &dl) != 0;
    pthread_mutex_unlock(&x->w.mu);
    if (stuck)
        fail_msg("the request never finished: the engine stopped advancing it");
}

/* The request's generated tokens: its sequence after the prompt (the engine
 * is done with it once it finished and the engine is idle). */
static int out_tokens(const eng_req *r, int32_t *out)
{
    int n = r->seq.n_tokens - r->seq.n_prompt;
    memcpy(out, r->seq.tokens + r->seq.n_prompt, sizeof(int32_t) * (size_t)n);
    return n;
}

/* Waits until the engine thread sleeps with nothing to do (failing after
 * 20 s, as wait_done). */
static void wait_idle(fx *x)
{
    for (int ms = 0;; ms++) {
        if (ms == 20000)
            fail_msg("the engine never went idle");
        pthread_mutex_lock(&x->e->mu);
        int idle = atomic_load(&x->e->idle) && !x->e->inbox_head && x->e->n_active == 0;
        pthread_mutex_unlock(&x->e->mu);
        if (idle)
            return;
        usleep(1000);
    }
}

/* Every KV block is back in the pool (prefix caching is off). */
static void assert_no_blocks_held(fx *x)
{
    wait_idle(x);
    pthread_mutex_lock(&x->e->mu);
    int free_blocks = kv_num_free(x->e->kv), all = kv_num_blocks(x->e->kv);
    pthread_mutex_unlock(&x->e->mu);
    assert_int_equal(free_blocks, all);
}

static void assert_tokens(const int32_t *want, int n_want, const int32_t *got, int n_got)
{
    for (int i = 0; i < n_want && i < n_got; i++)
        if (want[i] != got[i])
            fail_msg("token %d: %d, the reference has %d", i, got[i], want[i]);
    assert_int_equal(n_got, n_want);
}

/* ---- tests ---------------------------------------------------------------- */

/* A prompt of 37 tokens in steps of 8 is prefilled in chunks (batches of at
 * most 8 tokens, chunks without logits rows), and the greedy output equals
 * the reference: every chunk wrote its KV where the next one reads it. */
static void test_step_chunked_prefill_matches_reference(void **state)
{
    fx *x = *state;
    NEED_FIXTURE(x);
    start(x, 8, 0, 0);
    int32_t prompt[37], want[24], got[MAXLEN];
    make_prompt(x, 11, 37, prompt);
    int n_want = reference(&x->be->fm, prompt, 37, 24, want);
    eng_params p = greedy(24);
    eng_req *r = submit(x, prompt, 37, &p);
    wait_done(x, r);
    wait_idle(x);
    eng_out o = {0};
    eng_req_take(r, &o);
    assert_int_equal(o.finish, ENG_FINISH_LENGTH);
    assert_int_equal(o.n_output, 24);
    assert_tokens(want, n_want, got, out_tokens(r, got));
    assert_true(x->be->max_batch <= 8);
    assert_true(x->be->chunks_without_logits >= 4); /* 37 tokens: 5 chunks */
    eng_out_free(&o);
    eng_req_unref(r);
    assert_no_blocks_held(x);
}

/* Drafts, some all accepted and some cut short at every position, over
 * three concurrent sequences whose prompts are prefilled in chunks: the
 * output equals the reference, so every rejected draft was rolled back
 * (tokens, n_computed and KV). Breaking the rollback fails it. The proposer
 * reads hidden states: each proposal gets the one of the row the sequence's
 * last token was sampled from (after a full acceptance, a cut-short run or
 * a plain decode step alike). */
static void test_step_drafts_accepted_and_rejected(void **state)
{
    fx *x = *state;
    NEED_FIXTURE(x);
    start_with(x, 16, 4, 0, 1);
    enum { N = 3, OUT = 40 };
    int32_t prompt[N][20], want[N][OUT], got[MAXLEN];
    int n_want[N];
    eng_req *r[N];
    eng_params p = greedy(OUT);
    for (int i = 0; i < N; i++) {
        make_prompt(x, 100 + (unsigned)i, 20, prompt[i]);
        n_want[i] = reference(&x->be->fm, prompt[i], 20, OUT, want[i]);
        r[i] = submit(x, prompt[i], 20, &p);
    }
    for (int i = 0; i < N; i++) {
        wait_done(x, r[i]);
        eng_out o = {0};
        eng_req_take(r[i], &o);
        assert_int_equal(o.finish, ENG_FINISH_LENGTH);
        assert_int_equal(o.n_output, OUT);
        eng_out_free(&o);
    }
    wait_idle(x);
    for (int i = 0; i < N; i++) {
        assert_tokens(want[i], n_want[i], got, out_tokens(r[i], got));
        eng_req_unref(r[i]);
    }
    /* both outcomes happened, and verification ran (several rows a sequence) */
    assert_true(x->spec.full > 0);
    assert_true(x->spec.partial > 0);
    assert_true(x->be->multi_row_seqs > 0);
    assert_int_equal(x->spec.bad_rollbacks, 0);
    assert_true(x->spec.hidden_ok > 0);
    assert_int_equal(x->spec.hidden_bad, 0);
    assert_no_blocks_held(x);
}

/* A prompt of 17 tokens in steps of 16: the first chunk ends just before
 * the last prompt token, which is the point where an n-gram proposer may
 * already draft; a proposer that reads hidden states must not be asked yet
 * (there is no row to read), and the output still equals the reference. */
static void test_step_hidden_proposer_waits_for_its_row(void **state)
{
    fx *x = *state;
    NEED_FIXTURE(x);
    start_with(x, 16, 4, 0, 1);
    int32_t prompt[17], want[12], got[MAXLEN];
    make_prompt(x, 23, 17, prompt);
    int n_want = reference(&x->be->fm, prompt, 17, 12, want);
    eng_params p = greedy(12);
    eng_req *r = submit(x, prompt, 17, &p);
    wait_done(x, r);
    wait_idle(x);
    assert_tokens(want, n_want, got, out_tokens(r, got));
    eng_req_unref(r);
    assert_true(x->spec.hidden_ok > 0);
    assert_int_equal(x->spec.hidden_bad, 0);
    assert_no_blocks_held(x);
}

/* EOS ends a request with STOP and no text for it; with drafting on, an EOS
 * inside an accepted run ends it there (nothing after it is emitted). */
static void test_step_eos_stops(void **state)
{
    fx *x = *state;
    NEED_FIXTURE(x);
    start(x, 32, 4, 20); /* the row at position 20 predicts EOS */
    int32_t prompt[12], want[40], got[MAXLEN];
    make_prompt(x, 5, 12, prompt);
    int n_want = reference(&x->be->fm, prompt, 12, 40, want);
    assert_int_equal(n_want, 20 - 12 + 2); /* up to and including EOS */
    eng_params p = greedy(40);
    eng_req *r = submit(x, prompt, 12, &p);
    wait_done(x, r);
    wait_idle(x);
    eng_out o = {0};
    eng_req_take(r, &o);
    assert_int_equal(o.finish, ENG_FINISH_STOP);
    assert_int_equal(o.stop_token, -1); /* EOS, not a stop id */
    assert_tokens(want, n_want, got, out_tokens(r, got));
    eng_out_free(&o);
    eng_req_unref(r);

    /* ignore_eos runs to max_tokens through it */
    p.ignore_eos = 1;
    r = submit(x, prompt, 12, &p);
    wait_done(x, r);
    eng_req_take(r, &o);
    assert_int_equal(o.finish, ENG_FINISH_LENGTH);
    assert_int_equal(o.n_output, 40);
    eng_out_free(&o);
    eng_req_unref(r);
    assert_no_blocks_held(x);
}

/* A stop string taken from the middle of a request's text ends the same
 * request run again just before it (the string itself not in the output),
 * with drafting on. */
static void test_step_stop_string(void **state)
{
    fx *x = *state;
    NEED_FIXTURE(x);
    start(x, 32, 3, 0);
    int32_t prompt[10];
    make_prompt(x, 9, 10, prompt);
    eng_params p = greedy(40);
    eng_req *r = submit(x, prompt, 10, &p);
    wait_done(x, r);
    eng_out full = {0};
    eng_req_take(r, &full);
    eng_req_unref(r);
    assert_true(full.len >= 12);
    /* three bytes from the middle, cut on character boundaries */
    size_t at = full.len / 2;
    while (at > 0 && ((unsigned char)full.text[at] & 0xC0) == 0x80)
        at--;
    size_t end = at + 3;
    while (end < full.len && ((unsigned char)full.text[end] & 0xC0) == 0x80)
        end++;
    char stop_s[16] = {0};
    memcpy(stop_s, full.text + at, end - at);
    const char *first = strstr(full.text, stop_s);
    const char *stops[] = {"never appears \x01", stop_s};
    p.stop = stops;
    p.n_stop = 2;
    r = submit(x, prompt, 10, &p);
    wait_done(x, r);
    eng_out o = {0};
    eng_req_take(r, &o);
    assert_int_equal(o.finish, ENG_FINISH_STOP);
    assert_int_equal(o.stop_index, 1);
    assert_int_equal(o.len, (size_t)(first - full.text));
    assert_memory_equal(o.text ? o.text : "", full.text, o.len);
    eng_out_free(&o);
    eng_out_free(&full);
    eng_req_unref(r);
    assert_no_blocks_held(x);
}

/* A request cancelled while the engine is inside a step (the fake holds
 * its sixth forward) finishes with ABORT at the next step, before
 * max_tokens, with drafts pending; what it produced is the reference's
 * beginning, its KV blocks go back to the pool, and the request beside it
 * runs on untouched. */
static void test_step_cancel(void **state)
{
    fx *x = *state;
    NEED_FIXTURE(x);
    start(x, 16, 2, 0);
    x->be->hold_at = 6;
    enum { OUT = 150 };
    int32_t prompt[2][10], want[2][OUT], got[MAXLEN];
    make_prompt(x, 1, 10, prompt[0]);
    make_prompt(x, 2, 10, prompt[1]);
    int n_want1 = reference(&x->be->fm, prompt[1], 10, 30, want[1]);
    reference(&x->be->fm, prompt[0], 10, OUT, want[0]);
    eng_params p = greedy(OUT), p1 = greedy(30);
    eng_req *a = submit(x, prompt[0], 10, &p), *b = submit(x, prompt[1], 10, &p1);
    pthread_mutex_lock(&x->be->mu);
    while (!x->be->held)
        pthread_cond_wait(&x->be->cv, &x->be->mu);
    eng_cancel(x->e, a);
    x->be->released = 1;
    pthread_cond_broadcast(&x->be->cv);
    pthread_mutex_unlock(&x->be->mu);
    wait_done(x, a);
    wait_done(x, b);
    eng_out o = {0};
    eng_req_take(a, &o);
    assert_int_equal(o.finish, ENG_FINISH_ABORT);
    assert_true(o.n_output >= 1);
    assert_true(o.n_output < 30);
    wait_idle(x);
    int n = out_tokens(a, got);
    assert_int_equal(n, o.n_output); /* no draft left behind */
    assert_tokens(want[0], n, got, n);
    eng_req_take(b, &o);
    assert_int_equal(o.finish, ENG_FINISH_LENGTH);
    assert_tokens(want[1], n_want1, got, out_tokens(b, got));
    eng_out_free(&o);
    eng_req_unref(a);
    eng_req_unref(b);
    assert_no_blocks_held(x);
}

/* Logits processors under speculation: with penalties, logit_bias and
 * min_tokens (the EOS the fake predicts at position 16 falls before
 * min_tokens and is suppressed), the output with drafting equals the
 * output without: the chain advanced over drafts and stepped back over the
 * rejected ones. */
static void test_step_processors_same_with_drafts(void **state)
{
    fx *x = *state;
    NEED_FIXTURE(x);
    int32_t prompt[12], got[2][MAXLEN];
    make_prompt(x, 21, 12, prompt);
    int32_t bias_ids[] = {5, 6, 7};
    float bias[] = {3.0f, 2.0f, -50.0f};
    eng_params p = greedy(30);
    p.sampling.repetition_penalty = 1.5f;
    p.sampling.frequency_penalty = 1.0f;
    p.sampling.presence_penalty = 0.5f;
    p.bias_ids = bias_ids;
    p.bias = bias;
    p.n_bias = 3;
    p.min_tokens = 8;
    int n[2];
    for (int run = 0; run < 2; run++) {
        start(x, 16, run ? 4 : 0, 16);
        eng_req *r = submit(x, prompt, 12, &p);
        wait_done(x, r);
        wait_idle(x);
        n[run] = out_tokens(r, got[run]);
        eng_req_unref(r);
        if (run)
            assert_true(x->be->multi_row_seqs > 0);
        eng_destroy(x->e);
        be_destroy(&x->be->base);
        x->e = NULL;
        x->be = NULL;
    }
    assert_true(n[0] >= 8);
    for (int i = 0; i < 7; i++) /* min_tokens: no EOS among the first 7 */
        assert_int_not_equal(got[0][i], x->m.cfg.eos_token_ids[0]);
    assert_tokens(got[0], n[0], got[1], n[1]);
}

/* Device sampling: with a backend that samples on its device, a greedy
 * request, a seeded sampled one, two grammar-constrained ones (greedy and
 * sampled: their masks go with the rows) and one with logprobs (whose steps
 * must come back as logits), all at once, give exactly the tokens the same
 * requests get when every row is sampled on the host. The steps the
 * logprobs request shares go to the host whole; the others to the device,
 * which must have sampled some steps and masked some rows. */
static void test_step_device_sampling_same_as_host(void **state)
{
    fx *x = *state;
    NEED_FIXTURE(x);
    enum { NR = 5 };
    int32_t prompt[NR][10], got[2][NR][MAXLEN];
    int n[2][NR];
    eng_params p[NR];
    for (int i = 0; i < NR; i++) {
        make_prompt(x, 31 + (unsigned)i, 10, prompt[i]);
        p[i] = greedy(i == 4 ? 6 : 24); /* the logprobs one ends early */
    }
    p[1].sampling.temperature = 0.8f;
    p[1].sampling.top_k = 40;
    p[1].sampling.top_p = 0.9f;
    p[1].sampling.seed = 11;
    p[1].has_seed = 1;
    p[2].grammar = "root ::= [a-z ]+";
    p[3] = p[1];
    p[3].grammar = p[2].grammar;
    p[3].sampling.seed = 12;
    p[4].logprobs = 2;
    for (int run = 0; run < 2; run++) {
        start_dev(x, 64, 0, 0, 0, run);
        eng_req *r[NR];
        for (int i = 0; i < NR; i++)
            r[i] = submit(x, prompt[i], 10, &p[i]);
        for (int i = 0; i < NR; i++) {
            wait_done(x, r[i]);
            if (r[i]->out.finish != ENG_FINISH_LENGTH)
                fail_msg("request %d ended with %d: %s", i, r[i]->out.finish, r[i]->out.error);
        }
        wait_idle(x);
        for (int i = 0; i < NR; i++) {
            n[run][i] = out_tokens(r[i], got[run][i]);
            eng_req_unref(r[i]);
        }
        if (run) {
            assert_true(x->be->n_sampled_steps > 0);
            assert_true(x->be->n_masked_rows > 0);
            assert_true(x->be->n_sampled_steps < x->be->n_forward); /* logprobs' steps */
            assert_int_equal(x->e->device_steps, x->be->n_sampled_steps);
        } else {
            assert_int_equal(x->be->n_sampled_steps, 0);
        }
        eng_destroy(x->e);
        be_destroy(&x->be->base);
        x->e = NULL;
        x->be = NULL;
    }
    for (int i = 0; i < NR; i++)
        assert_tokens(got[0][i], n[0][i], got[1][i], n[1][i]);
    /* the grammar held: every token of the constrained ones is [a-z ]+ text */
    for (int i = 2; i <= 3; i++)
        for (int j = 0; j < n[1][i]; j++) {
            size_t len = 0;
            const char *b = tok_token_bytes(x->tk, got[1][i][j], &len);
            assert_non_null(b);
            for (size_t c = 0; c < len; c++)
                assert_true((b[c] >= 'a' && b[c] <= 'z') || b[c] == ' ');
        }
}


/* Running ahead (a backend that holds two steps, samples on its device and
 * resolves placeholders): greedy requests of several lengths (one passing
 * the EOS the fake predicts at position 30 with ignore_eos), a seeded
 * sampled one and one with a stop string, all at once, give exactly the
 * tokens, texts and finishes of the same engine one step at a time (the
 * greedy ones the reference's). While the fake holds its 9th forward (with
 * the next step queued behind it when running ahead), a request is
 * cancelled and another arrives: the cancelled one stops, the new one is admitted (the engine
 * stops running ahead while one waits) and matches the reference, and every
 * block comes back. Steps must have been queued ahead (two in the fake at
 * once, placeholders resolved), and none with no_async_scheduling set. */
static void test_step_ahead_same_as_in_step(void **state)
{
    fx *x = *state;
    NEED_FIXTURE(x);
    enum { NR = 6 };
    int32_t prompt[NR + 1][12], got[2][NR + 1][MAXLEN], want[MAXLEN];
    int n[2][NR + 1], fin[2][NR + 1];
    char *text[2][NR + 1];
    eng_params p[NR + 1];
    const char *stops[] = {"\x01 never", NULL};
    for (int i = 0; i <= NR; i++) {
        make_prompt(x, 61 + (unsigned)i, 6 + i, prompt[i]);
        p[i] = greedy(i == 0 ? 3 : 10 + 7 * i);
    }
    p[2].ignore_eos = 1;
    p[3].sampling.temperature = 0.9f;
    p[3].sampling.top_p = 0.95f;
    p[3].sampling.seed = 5;
    p[3].has_seed = 1;
    p[4].stop = stops;
    p[4].n_stop = 1;
    for (int run = 0; run < 2; run++) {
        /* the stop string: two characters from the middle of run 0's text */
        x->no_async = !run; /* run 0: the same backend, one step at a time */
        start_ahead(x, 64, 0, 30, 0, 1, 1);
        x->be->hold_at = 9;
        eng_req *r[NR + 1];
        for (int i = 0; i < NR; i++)
            r[i] = submit(x, prompt[i], 6 + i, &p[i]);
        pthread_mutex_lock(&x->be->mu);
        while (!x->be->held)
            pthread_cond_wait(&x->be->cv, &x->be->mu);
        eng_cancel(x->e, r[5]);
        r[NR] = submit(x, prompt[NR], 6 + NR, &p[NR]);
        x->be->released = 1;
        pthread_cond_broadcast(&x->be->cv);
        pthread_mutex_unlock(&x->be->mu);
        for (int i = 0; i <= NR; i++)
            wait_done(x, r[i]);
        wait_idle(x);
        for (int i = 0; i <= NR; i++) {
            eng_out o = {0};
            eng_req_take(r[i], &o);
            fin[run][i] = o.finish;
            text[run][i] = strndup(o.text ? o.text : "", o.len);
            n[run][i] = out_tokens(r[i], got[run][i]);
            assert_int_equal(n[run][i], o.n_output);
            eng_out_free(&o);
            eng_req_unref(r[i]);
        }
        if (run == 0 && strlen(text[0][4]) >= 8) /* run 1 stops inside request 4 */
            stops[0] = strndup(text[0][4] + strlen(text[0][4]) / 2, 2);
        /* the cancel and the arrival came with a step queued behind */
        assert_int_equal(x->be->queued_at_hold, run);
        if (run) {
            assert_true(x->e->ahead_steps > 0);
            assert_int_equal(x->be->max_pending, 2);
            assert_true(x->be->n_placeholders > 0);
        } else {
            assert_int_equal(x->e->ahead_steps, 0);
            assert_int_equal(x->be->max_pending, 1);
        }
        assert_no_blocks_held(x);
        eng_destroy(x->e);
        be_destroy(&x->be->base);
        x->e = NULL;
        x->be = NULL;
    }
    for (int i = 0; i <= NR; i++) {
        if (i == 4) /* run 1 had the stop string run 0's text gave it */
            continue;
        if (i == 5) { /* cancelled while held: both stop early, at a prefix */
            assert_int_equal(fin[0][i], ENG_FINISH_ABORT);
            assert_int_equal(fin[1][i], ENG_FINISH_ABORT);
            int m = n[0][i] < n[1][i] ? n[0][i] : n[1][i];
            assert_tokens(got[0][i], m, got[1][i], m);
            continue;
        }
        assert_int_equal(fin[0][i], fin[1][i]);
        assert_string_equal(text[0][i], text[1][i]);
        assert_tokens(got[0][i], n[0][i], got[1][i], n[1][i]);
        if (i != 3) { /* greedy: the reference too */
            int32_t (*g)[MAXLEN] = got[1];
            int nw = reference(&(fake_model){.V = x->m.cfg.vocab_size,
                                             .eos = x->m.cfg.eos_token_ids[0], .eos_pos = 30},
                               prompt[i], 6 + i, p[i].max_tokens, want);
            if (!p[i].ignore_eos)
                assert_tokens(want, nw, g[i], n[1][i]);
        }
    }
    assert_int_equal(fin[0][1], ENG_FINISH_LENGTH); /* 7 + 17 tokens: before the EOS */
    assert_int_equal(fin[0][2], ENG_FINISH_LENGTH); /* through it */
    assert_int_equal(fin[0][6], ENG_FINISH_STOP);   /* the EOS at position 30 */
    /* request 4 in run 1: its text up to the stop string run 0's text held */
    if (stops[0][0] != '\x01') {
        assert_int_equal(fin[1][4], ENG_FINISH_STOP);
        const char *at = strstr(text[0][4], stops[0]);
        assert_non_null(at);
        assert_int_equal(strlen(text[1][4]), (size_t)(at - text[0][4]));
        assert_memory_equal(text[1][4], text[0][4], strlen(text[1][4]));
        free((char *)stops[0]);
    }
    for (int run = 0; run < 2; run++)
        for (int i = 0; i <= NR; i++)
            free(text[run][i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_step_chunked_prefill_matches_reference, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_step_drafts_accepted_and_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_step_hidden_proposer_waits_for_its_row, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_step_eos_stops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_step_stop_string, setup, teardown),
        cmocka_unit_test_setup_teardown(test_step_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_step_processors_same_with_drafts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_step_ahead_same_as_in_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_step_device_sampling_same_as_host, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
