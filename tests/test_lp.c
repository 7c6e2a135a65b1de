/* Logits processors: each built-in changes a row as its definition says
 * (penalties bit for bit as smp_apply_penalties over the same history), and
 * a chain that accepted drafts and rolled back the rejected ones gives the
 * rows of a chain that only ever saw the accepted tokens. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/lp.h"

enum { V = 50 };

static void row_of(unsigned seed, float *row)
{
    for (int i = 0; i < V; i++) {
        seed = seed * 1103515245u + 12345u;
        row[i] = (float)((int)(seed >> 16) % 2001 - 1000) / 250.0f;
    }
}

/* logit_bias adds to the ids named (out-of-range ids ignored), and nothing
 * else changes. */
static void test_lp_bias_adds(void **state)
{
    (void)state;
    int32_t ids[] = {3, 7, -1, V};
    float bias[] = {2.5f, -100.0f, 9.0f, 9.0f};
    lp_chain c = {0};
    lp_proc *p;
    assert_int_equal(lp_bias_create(ids, bias, 4, &p, NULL), INF_OK);
    assert_int_equal(lp_chain_add(&c, p, NULL), INF_OK);
    float a[V], b[V];
    row_of(1, a);
    memcpy(b, a, sizeof a);
    lp_chain_apply(&c, b, V);
    for (int i = 0; i < V; i++)
        assert_true(b[i] == (i == 3 ? a[i] + 2.5f : i == 7 ? a[i] - 100.0f : a[i]));
    lp_chain_clear(&c);
}

/* min_tokens: the ids are -inf until min_tokens tokens are out, counting
 * the ones out at creation; a rollback brings the suppression back. */
static void test_lp_min_tokens_counts_and_rolls_back(void **state)
{
    (void)state;
    int32_t ids[] = {2, 9};
    lp_chain c = {0};
    lp_proc *p;
    assert_int_equal(lp_min_tokens_create(3, 1, ids, 2, &p, NULL), INF_OK);
    assert_int_equal(lp_chain_add(&c, p, NULL), INF_OK);
    float r[V];
    row_of(2, r);
    lp_chain_apply(&c, r, V); /* 1 out */
    assert_true(isinf(r[2]) && r[2] < 0 && isinf(r[9]));
    lp_chain_accept(&c, 5);
    row_of(2, r);
    lp_chain_apply(&c, r, V); /* 2 out */
    assert_true(isinf(r[9]));
    lp_chain_accept(&c, 6);
    row_of(2, r);
    lp_chain_apply(&c, r, V); /* 3 out: free */
    assert_false(isinf(r[2]) || isinf(r[9]));
    lp_chain_rollback(&c, 1);
    row_of(2, r);
    lp_chain_apply(&c, r, V);
    assert_true(isinf(r[2]));
    lp_chain_clear(&c);
}

/* Penalties through the chain equal smp_apply_penalties over prompt +
 * accepted output, bit for bit, after drafts are accepted and rolled back
 * (the history the processor keeps is the sequence's, not the drafts'). */
static void test_lp_penalties_match_smp_after_rollback(void **state)
{
    (void)state;
    smp_ctx *sc;
    assert_int_equal(smp_create(V, &sc, NULL), INF_OK);
    smp_params sp = smp_params_default();
    sp.repetition_penalty = 1.3f;
    sp.frequency_penalty = 0.7f;
    sp.presence_penalty = -0.4f;
    int32_t prompt[] = {1, 4, 4, 9, 30};
    int32_t out[] = {4, 11, 11, 30, 7, 11};
    int32_t drafts[] = {12, 12, 4};
    lp_chain c = {0};
    lp_proc *p;
    assert_int_equal(lp_penalties_create(sc, &sp, prompt, 5, 16, &p, NULL), INF_OK);
    assert_int_equal(lp_chain_add(&c, p, NULL), INF_OK);
    for (int n = 0; n <= 6; n++) {
        float a[V], b[V];
        row_of(10 + (unsigned)n, a);
        memcpy(b, a, sizeof a);
        lp_chain_apply(&c, a, V);
        smp_history h = {.prompt = prompt, .n_prompt = 5, .output = out, .n_output = n};
        smp_apply_penalties(sc, &sp, &h, b);
        assert_memory_equal(a, b, sizeof a);
        if (n == 6)
            break;
        for (int j = 0; j < 3; j++) /* drafts, all rejected */
            lp_chain_accept(&c, drafts[j]);
        lp_chain_rollback(&c, 3);
        lp_chain_accept(&c, out[n]);
    }
    lp_chain_clear(&c);
    smp_destroy(sc);
}

/* A stateful processor of one's own (as a grammar mask will be) plugs in
 * through the ops table: it sees every accept and rollback in order. */
typedef struct ban_last {
    lp_proc base;
    int32_t hist[16];
    int n;
} ban_last;

static void ban_apply(lp_proc *p, float *logits, int n_vocab)
{
    ban_last *b = (ban_last *)p;
    if (b->n > 0 && b->hist[b->n - 1] < n_vocab)
        logits[b->hist[b->n - 1]] = -INFINITY; /* never the same token twice */
}
static void ban_accept(lp_proc *p, int32_t t) { ((ban_last *)p)->hist[((ban_last *)p)->n++] = t; }
static void ban_rollback(lp_proc *p, int n) { ((ban_last *)p)->n -= n; }
static void ban_destroy(lp_proc *p) { free(p); }
static const lp_ops ban_ops = {.name = "ban_last", .apply = ban_apply, .accept = ban_accept,
                               .rollback = ban_rollback, .destroy = ban_destroy};

static void test_lp_custom_processor_follows_accept_and_rollback(void **state)
{
    (void)state;
    ban_last *b = calloc(1, sizeof *b);
    b->base.ops = &ban_ops;
    lp_chain c = {0};
    assert_int_equal(lp_chain_add(&c, &b->base, NULL), INF_OK);
    lp_chain_accept(&c, 5);
    lp_chain_accept(&c, 8);
    lp_chain_accept(&c, 9);
    lp_chain_rollback(&c, 2); /* 8 and 9 rejected: 5 is the last token */
    float r[V];
    row_of(3, r);
    lp_chain_apply(&c, r, V);
    assert_true(isinf(r[5]));
    assert_false(isinf(r[9]));
    lp_chain_clear(&c);
    assert_int_equal(c.n, 0);
}

/* A chain holds LP_MAX_PROCS; one more is refused and destroyed. */
static void test_lp_chain_full_refuses(void **state)
{
    (void)state;
    lp_chain c = {0};
    inf_err err = {0};
    int32_t id = 1;
    float bias = 1.0f;
    for (int i = 0; i <= LP_MAX_PROCS; i++) {
        lp_proc *p;
        assert_int_equal(lp_bias_create(&id, &bias, 1, &p, NULL), INF_OK);
        assert_int_equal(lp_chain_add(&c, p, &err), i < LP_MAX_PROCS ? INF_OK : INF_ERR_INVALID);
    }
    assert_int_equal(c.n, LP_MAX_PROCS);
    lp_chain_clear(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lp_bias_adds),
        cmocka_unit_test(test_lp_min_tokens_counts_and_rolls_back),
        cmocka_unit_test(test_lp_penalties_match_smp_after_rollback),
        cmocka_unit_test(test_lp_custom_processor_follows_accept_and_rollback),
        cmocka_unit_test(test_lp_chain_full_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
