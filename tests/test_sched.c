/* Scheduler: token budgets, chunked prefill, FCFS admission, max_num_seqs,
 * preemption by recompute and resume, and no leaked KV block after any mix
 * of adds, steps and cancels. The "backend" here is a fake: a step just
 * advances n_computed and appends a token when a sequence catches up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/sched.h"

typedef struct fixture {
    kv_pool *kv;
    sched *s;
} fixture;

static fixture make_pc(int blocks, int bs, int seqs, int budget, int max_len, int caching)
{
    fixture f;
    kv_config kc = {.num_blocks = blocks + 1, .block_size = bs, .enable_prefix_caching = caching};
    sched_config sc = {.max_num_seqs = seqs, .max_num_batched_tokens = budget,
                       .max_model_len = max_len};
    inf_err e = {0};
    assert_int_equal(kv_create(&kc, &f.kv, &e), INF_OK);
    assert_int_equal(sched_create(&sc, f.kv, &f.s, &e), INF_OK);
    return f;
}

static fixture make(int blocks, int bs, int seqs, int budget, int max_len)
{
    return make_pc(blocks, bs, seqs, budget, max_len, 0);
}

static void drop(fixture *f)
{
    sched_destroy(f->s);
    kv_destroy(f->kv);
}

static sched_seq *seq_new(int prompt, int cap)
{
    sched_seq *q = calloc(1, sizeof *q);
    q->tokens = calloc((size_t)cap, sizeof(int32_t));
    for (int i = 0; i < prompt; i++)
        q->tokens[i] = i + 1;
    q->n_tokens = q->n_prompt = prompt;
    return q;
}

static void seq_free(sched_seq *q)
{
    free(q->tokens);
    free(q);
}

/* The fake forward pass: computes the plan, then every sequence that caught
 * up with its tokens gets one more (as sampling would append). */
static sched_plan *fake_step(fixture *f)
{
    sched_plan *p;
    sched_schedule(f->s, &p);
    for (int i = 0; i < p->n; i++) {
        sched_seq *q = p->seqs[i];
        assert_true(q->kv.n_blocks * kv_block_size(f->kv) >= q->n_computed + p->n_new[i]);
        q->n_computed += p->n_new[i];
        if (q->n_computed == q->n_tokens)
            q->tokens[q->n_tokens++] = 7;
    }
    return p;
}

static int planned(const sched_plan *p, const sched_seq *q)
{
    for (int i = 0; i < p->n; i++)
        if (p->seqs[i] == q)
            return p->n_new[i];
    return 0;
}

/* A long prompt is cut into budget-sized chunks; decode tokens of running
 * sequences come first, so they are never stalled by it. */
static void test_sched_chunked_prefill_keeps_decode_running(void **state)
{
    (void)state;
    fixture f = make(64, 16, 8, 32, 512);
    sched_seq *a = seq_new(4, 512), *b = seq_new(100, 512);
    inf_err e = {0};
    assert_int_equal(sched_add(f.s, a, &e), INF_OK);
    sched_plan *p = fake_step(&f);
    assert_int_equal(planned(p, a), 4);
    assert_int_equal(sched_add(f.s, b, &e), INF_OK);
    int chunks = 0;
    while (b->n_computed < 100) {
        p = fake_step(&f);
        assert_int_equal(planned(p, a), 1);       /* a decodes every step   */
        assert_true(planned(p, b) <= 31);          /* b gets the rest        */
        assert_true(p->n_tokens <= 32);
        chunks++;
    }
    assert_int_equal(chunks, 4); /* 31 + 31 + 31 + 7 */
    sched_remove(f.s, a);
    sched_remove(f.s, b);
    assert_int_equal(kv_num_free(f.kv), 64);
    seq_free(a), seq_free(b);
    drop(&f);
}

/* While anything decodes, the tokens of long prompts (over 8 x the cap of
 * 8 here) are capped per step over all of them together; short prompts go
 * in whole; alone, a prompt gets the whole budget (64) again; with many
 * decoding, a prompt token per decoding sequence. */
static void test_sched_prefill_capped_while_decoding(void **state)
{
    (void)state;
    kv_config kc = {.num_blocks = 65, .block_size = 16};
    sched_config sc = {.max_num_seqs = 12, .max_num_batched_tokens = 64, .max_model_len = 512,
                       .max_prefill_while_decoding = 8};
    fixture f;
    inf_err e = {0};
    assert_int_equal(kv_create(&kc, &f.kv, &e), INF_OK);
    assert_int_equal(sched_create(&sc, f.kv, &f.s, &e), INF_OK);
    sched_seq *a = seq_new(100, 512), *b = seq_new(80, 512), *c = seq_new(80, 512);
    assert_int_equal(sched_add(f.s, a, &e), INF_OK);
    sched_plan *p = fake_step(&f);
    assert_int_equal(planned(p, a), 64); /* nothing decodes: the whole budget */
    p = fake_step(&f);
    assert_int_equal(planned(p, a), 36);
    assert_int_equal(sched_add(f.s, b, &e), INF_OK);
    assert_int_equal(sched_add(f.s, c, &e), INF_OK);
    int steps = 0;
    while (c->n_computed < 80) {
        int b_pre = b->n_computed < 80;
        p = fake_step(&f);
        assert_int_equal(planned(p, a), 1); /* a decodes every step */
        int pre = (b_pre ? planned(p, b) : 0) + planned(p, c);
        assert_true(pre > 0 && pre <= 8);
        if (!b_pre)
            assert_int_equal(planned(p, b), 1); /* b decodes once its prompt is in */
        steps++;
    }
    assert_int_equal(steps, 20); /* 160 prompt tokens, 8 a step */
    sched_remove(f.s, a);
    sched_remove(f.s, b);
    /* beside c decoding: a long prompt is capped, a short one goes in whole */
    sched_seq *d = seq_new(80, 512), *s40 = seq_new(40, 512);
    assert_int_equal(sched_add(f.s, d, &e), INF_OK);
    assert_int_equal(sched_add(f.s, s40, &e), INF_OK);
    p = fake_step(&f);
    assert_int_equal(planned(p, c), 1);
    assert_int_equal(planned(p, d), 8);
    assert_int_equal(planned(p, s40), 40);
    sched_remove(f.s, c);
    sched_remove(f.s, s40);
    p = fake_step(&f);
    assert_int_equal(planned(p, d), 64); /* alone again: the whole budget */
    sched_remove(f.s, d);
    /* 10 decoding: a prompt token each (10) beats the cap of 8 */
    sched_seq *r[10], *g = seq_new(80, 512);
    for (int i = 0; i < 10; i++) {
        r[i] = seq_new(3, 512);
        assert_int_equal(sched_add(f.s, r[i], &e), INF_OK);
    }
    p = fake_step(&f);
    assert_int_equal(p->n_tokens, 30);
    assert_int_equal(sched_add(f.s, g, &e), INF_OK);
    p = fake_step(&f);
    assert_int_equal(planned(p, g), 10);
    assert_int_equal(p->n_tokens, 20);
    for (int i = 0; i < 10; i++) {
        sched_remove(f.s, r[i]);
        seq_free(r[i]);
    }
    sched_remove(f.s, g);
    seq_free(g);
    assert_int_equal(kv_num_free(f.kv), 64);
    seq_free(a), seq_free(b), seq_free(c), seq_free(d), seq_free(s40);
    drop(&f);
}

/* Waiting sequences are admitted first come, first served, and never more
 * than max_num_seqs run at once. */
static void test_sched_fcfs_and_max_num_seqs(void **state)
{
    (void)state;
    fixture f = make(64, 16, 2, 64, 256);
    sched_seq *q[3];
    inf_err e = {0};
    for (int i = 0; i < 3; i++) {
        q[i] = seq_new(3, 256);
        assert_int_equal(sched_add(f.s, q[i], &e), INF_OK);
    }
    sched_plan *p = fake_step(&f);
    assert_int_equal(p->n, 2);
    assert_int_equal(planned(p, q[0]), 3);
    assert_int_equal(planned(p, q[1]), 3);
    assert_int_equal(planned(p, q[2]), 0);
    assert_int_equal(sched_num_waiting(f.s), 1);
    sched_remove(f.s, q[0]);
    p = fake_step(&f);
    assert_int_equal(planned(p, q[2]), 3);
    for (int i = 1; i < 3; i++)
        sched_remove(f.s, q[i]), seq_free(q[i]);
    seq_free(q[0]);
    assert_int_equal(kv_num_free(f.kv), 64);
    drop(&f);
}

/* When blocks run out, the most recently admitted sequence is preempted
 * (blocks freed, back at the head of the queue) and later resumes from
 * scratch with its generated tokens intact. */
static void test_sched_preempts_newest_and_resumes(void **state)
{
    (void)state;
    fixture f = make(4, 4, 4, 64, 64); /* 16 token slots in all */
    sched_seq *a = seq_new(6, 64), *b = seq_new(6, 64);
    inf_err e = {0};
    assert_int_equal(sched_add(f.s, a, &e), INF_OK);
    assert_int_equal(sched_add(f.s, b, &e), INF_OK);
    fake_step(&f); /* both prefilled: 2 blocks each, pool full */
    assert_int_equal(kv_num_free(f.kv), 0);
    int preempted = 0;
    for (int i = 0; i < 6 && !preempted; i++) {
        sched_plan *p = fake_step(&f);
        preempted = p->n_preempted;
    }
    assert_int_equal(preempted, 1);
    assert_int_equal(b->n_preempt, 1);           /* the newer one          */
    assert_int_equal(b->state, SCHED_WAITING);
    assert_int_equal(b->n_computed, 0);
    assert_int_equal(a->state, SCHED_RUNNING);
    int b_tokens = b->n_tokens;
    assert_true(b_tokens > 6);                   /* it had generated       */
    sched_remove(f.s, a);
    sched_plan *p = fake_step(&f);               /* b recomputes it all    */
    assert_int_equal(planned(p, b), b_tokens);
    assert_int_equal(b->n_tokens, b_tokens + 1);
    sched_remove(f.s, b);
    assert_int_equal(kv_num_free(f.kv), 4);
    seq_free(a), seq_free(b);
    drop(&f);
}

/* A prompt the context or the whole pool can never hold is refused. */
static void test_sched_refuses_what_never_fits(void **state)
{
    (void)state;
    fixture f = make(2, 4, 4, 64, 32);
    sched_seq *big = seq_new(32, 64), *pool = seq_new(9, 64);
    inf_err e = {0};
    assert_int_equal(sched_add(f.s, big, &e), INF_ERR_INVALID);
    assert_int_equal(sched_add(f.s, pool, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "KV blocks"));
    seq_free(big), seq_free(pool);
    drop(&f);
}

/* With prefix caching, a sequence sharing a finished one's prompt starts
 * from its cached blocks: only the rest is computed, the hit is recorded,
 * and a different salt starts from scratch. */
static void test_sched_prefix_hit_skips_cached_blocks(void **state)
{
    (void)state;
    fixture f = make_pc(32, 4, 4, 64, 128, 1);
    sched_seq *a = seq_new(18, 128), *b = seq_new(18, 128), *c = seq_new(18, 128);
    inf_err e = {0};
    assert_int_equal(sched_add(f.s, a, &e), INF_OK);
    fake_step(&f);            /* a computes its 18 prompt tokens */
    fake_step(&f);            /* and one decode token */
    sched_remove(f.s, a);     /* its 4 full prompt blocks stay cached */
    assert_int_equal(sched_add(f.s, b, &e), INF_OK);
    sched_plan *p = fake_step(&f);
    assert_int_equal(b->n_cached, 16);
    assert_int_equal(planned(p, b), 2);  /* 18 - 16 cached */
    assert_int_equal(p->cache_hits, 16);
    assert_int_equal(p->cache_queries, 18);
    c->salt = 42;
    assert_int_equal(sched_add(f.s, c, &e), INF_OK);
    p = fake_step(&f);
    assert_int_equal(c->n_cached, 0);
    assert_int_equal(planned(p, c), 18);
    sched_remove(f.s, b), sched_remove(f.s, c);
    assert_int_equal(kv_num_free(f.kv), 32);
    seq_free(a), seq_free(b), seq_free(c);
    drop(&f);
}

/* Random adds, steps and cancels (fixed seed) on a small pool: the plan
 * always respects the budget and max_num_seqs, every planned token has a
 * block, and every block is back in the pool at the end. */
static void random_no_leak(int caching, int window)
{
    enum { N = 40, STEPS = 4000 };
    fixture f = make_pc(24, 4, 6, 20, 48, caching);
    if (window) { /* the same with a window's front given back each step */
        sched_destroy(f.s);
        sched_config sc = {.max_num_seqs = 6, .max_num_batched_tokens = 20,
                           .max_model_len = 48, .kv_window = window};
        inf_err e0 = {0};
        assert_int_equal(sched_create(&sc, f.kv, &f.s, &e0), INF_OK);
    }
    sched_seq *q[N] = {0};
    int limit[N];
    unsigned r = 2024;
    inf_err e = {0};
    for (int step = 0; step < STEPS; step++) {
        r = r * 1103515245u + 12345u;
        int i = (int)((r >> 8) % N), op = (int)((r >> 16) % 8);
        if (op == 0 && !q[i]) {
            q[i] = seq_new(1 + (int)((r >> 4) % 20), 64);
            for (int k = 0; k < q[i]->n_prompt; k++) /* shared prefixes: cache hits */
                q[i]->tokens[k] = k < 8 ? 1 + (int)((r >> 14) % 2) : k;
            limit[i] = q[i]->n_prompt + 1 + (int)((r >> 12) % 20);
            assert_int_equal(sched_add(f.s, q[i], &e), INF_OK);
        } else if (op == 1 && q[i]) {
            sched_remove(f.s, q[i]);
            seq_free(q[i]);
            q[i] = NULL;
        }
        sched_plan *p = fake_step(&f);
        assert_true(p->n_tokens <= 20);
        assert_true(sched_num_running(f.s) <= 6);
        for (int k = 0; window && k < p->n; k++) { /* planned positions have blocks */
            const sched_seq *s = p->seqs[k];
            for (int pos = s->n_computed - p->n_new[k]; pos < s->n_computed; pos++)
                assert_true(s->kv.blocks[pos / 4] > 0);
        }
        for (int k = 0; k < N; k++) /* done sequences leave */
            if (q[k] && q[k]->n_tokens >= limit[k]) {
                sched_remove(f.s, q[k]);
                seq_free(q[k]);
                q[k] = NULL;
            }
    }
    for (int k = 0; k < N; k++)
        if (q[k]) {
            sched_remove(f.s, q[k]);
            seq_free(q[k]);
        }
    assert_int_equal(kv_num_free(f.kv), 24);
    assert_int_equal(sched_num_running(f.s) + sched_num_waiting(f.s), 0);
    drop(&f);
}

static void test_sched_random_no_leak(void **state)
{
    (void)state;
    random_no_leak(0, 0);
    random_no_leak(0, 5);
}

/* With every layer windowed (kv_window), a sequence decoding to 4x the
 * window holds a flat number of blocks once the window has filled: the
 * blocks behind it go back to the pool each step. Without a window it grows. */
static void test_sched_window_kv_flat(void **state)
{
    (void)state;
    for (int caching = 0; caching < 2; caching++) {
        kv_config kc = {.num_blocks = 65, .block_size = 4, .enable_prefix_caching = caching};
        sched_config sc = {.max_num_seqs = 4, .max_num_batched_tokens = 64,
                           .max_model_len = 256, .kv_window = 16};
        fixture f;
        inf_err e = {0};
        assert_int_equal(kv_create(&kc, &f.kv, &e), INF_OK);
        assert_int_equal(sched_create(&sc, f.kv, &f.s, &e), INF_OK);
        sched_seq *q = seq_new(10, 256);
        assert_int_equal(sched_add(f.s, q, &e), INF_OK);
        int early = 0, late = 0; /* most blocks held in tokens 24-40, 40-64 */
        while (q->n_tokens < 64) {
            fake_step(&f);
            int used = kv_num_blocks(f.kv) - kv_num_free(f.kv);
            if (q->n_computed >= 24 && q->n_computed < 40)
                early = used > early ? used : early;
            else if (q->n_computed >= 40)
                late = used > late ? used : late;
            /* the window's blocks (5 when unaligned) and the next token's */
            assert_true(used <= (16 + 4 - 1) / 4 + 2);
        }
        assert_true(early > 0 && late == early);
        sched_remove(f.s, q);
        assert_int_equal(kv_num_free(f.kv), 64);
        seq_free(q);
        drop(&f);
    }
    fixture g = make(64, 4, 4, 64, 256); /* no window: 64 tokens, 16 blocks */
    sched_seq *q = seq_new(10, 256);
    inf_err e = {0};
    assert_int_equal(sched_add(g.s, q, &e), INF_OK);
    while (q->n_tokens < 64)
        fake_step(&g);
    assert_int_equal(kv_num_blocks(g.kv) - kv_num_free(g.kv), 16);
    sched_remove(g.s, q);
    seq_free(q);
    drop(&g);
}

/* The same with prefix caching on: shared, ref-counted blocks all return. */
static void test_sched_random_no_leak_prefix_caching(void **state)
{
    (void)state;
    random_no_leak(1, 0);
    random_no_leak(1, 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sched_chunked_prefill_keeps_decode_running),
        cmocka_unit_test(test_sched_prefill_capped_while_decoding),
        cmocka_unit_test(test_sched_fcfs_and_max_num_seqs),
        cmocka_unit_test(test_sched_preempts_newest_and_resumes),
        cmocka_unit_test(test_sched_refuses_what_never_fits),
        cmocka_unit_test(test_sched_prefix_hit_skips_cached_blocks),
        cmocka_unit_test(test_sched_window_kv_flat),
        cmocka_unit_test(test_sched_random_no_leak),
        cmocka_unit_test(test_sched_random_no_leak_prefix_caching),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
