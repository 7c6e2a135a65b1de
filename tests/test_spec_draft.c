/* The draft-model proposer with sliding windows, on real CPU backends: a
 * greedy generation of about 4x the window, speculated with a draft model,
 * gives exactly the target's non-speculative greedy tokens, and
 *   - a draft whose every layer has a window (fam-mistral, window 8) holds a
 *     flat number of KV blocks once its window has filled;
 *   - a draft without one (tiny) keeps its whole KV, whether or not the
 *     target has a window: nothing breaks, nothing is bounded.
 * The verifier here is the plain greedy rule (accept while the target's
 * argmax equals the draft, then the target's token), with the target's
 * rejected KV truncated and its window's front given back as the engine's
 * scheduler does. Fixtures come from the Makefile (build/fixtures). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "cpu/backend.h"
#include "engine/batch.h"
#include "engine/kv.h"
#include "engine/mdesc.h"
#include "engine/model.h"
#include "engine/smp.h"
#include "engine/spec_draft.h"

enum { BS = 4, NBLOCKS = 64, PROMPT = 5, GEN = 32, K = 3, MAXLEN = 64 };

typedef struct runner { /* one model's backend and KV, for the target */
    model *m;
    be_backend *be;
    kv_pool *kv;
    batch_builder *bb;
    int window; /* mdesc_kv_window */
} runner;

static void fixture_dir(const char *name, char *out, size_t cap)
{
    const char *fx = getenv("INFERD_TEST_FIXTURES");
    snprintf(out, cap, "%s/%s", fx ? fx : "build/fixtures", name);
}

static void open_runner(const char *name, runner *r)
{
    char dir[512];
    struct stat st;
    fixture_dir(name, dir, sizeof dir);
    assert_true(stat(dir, &st) == 0); /* made by the Makefile before the tests */
    inf_err err = {0};
    memset(r, 0, sizeof *r);
    assert_int_equal(model_load(dir, &r->m, &err), INF_OK);
    cpu_config cc = cpu_config_default();
    cc.n_threads = 1;
    cc.num_blocks = NBLOCKS;
    cc.block_size = BS;
    cc.max_tokens = MAXLEN;
    cc.max_context = MAXLEN;
    assert_int_equal(cpu_backend_create(r->m, &cc, &r->be, &err), INF_OK);
    kv_config kc = {.num_blocks = NBLOCKS, .block_size = BS};
    assert_int_equal(kv_create(&kc, &r->kv, &err), INF_OK);
    batch_limits bl = {.max_tokens = MAXLEN, .max_seqs = 1, .max_rows = K + 1,
                       .max_blocks = MAXLEN / BS};
    assert_int_equal(batch_create(&bl, &r->bb, &err), INF_OK);
    r->window = mdesc_kv_window(&r->m->cfg.desc);
}

static void close_runner(runner *r)
{
    batch_destroy(r->bb);
    kv_destroy(r->kv);
    be_destroy(r->be);
    model_destroy(r->m);
}

/* The target computes toks[0..n) from position pos; logits of the last
 * `rows` tokens into logits. */
static void target_step(runner *r, kv_seq *s, const int32_t *toks, int pos, int n, int rows,
                        float *logits)
{
    inf_err err = {0};
    if (r->window > 0) /* as the scheduler does each step */
        kv_seq_drop_front(r->kv, s, pos - r->window + 1);
    assert_int_equal(kv_seq_reserve(r->kv, s, pos + n), INF_OK);
    batch_reset(r->bb);
    int t0 = batch_add_seq(r->bb, r->kv, s, toks, pos, n);
    assert_true(t0 >= 0);
    for (int j = n - rows; j < n; j++)
        assert_true(batch_add_logits(r->bb, t0 + j) >= 0);
    int rc = be_forward(r->be, batch_get(r->bb), logits, &err);
    if (rc)
        print_message("be_forward: %s\n", err.msg);
    assert_int_equal(rc, INF_OK);
}

static void make_prompt(int32_t *p, int vocab)
{
    unsigned seed = 11;
    p[0] = 1;
    for (int i = 1; i < PROMPT; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = 3 + (int32_t)((seed >> 8) % (unsigned)(vocab - 3));
    }
}

/* The target's greedy tokens without speculation: PROMPT + GEN in out. */
static void greedy_reference(runner *t, int32_t *out)
{
    int V = t->m->cfg.vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)V);
    kv_seq s = {0};
    make_prompt(out, V);
    target_step(t, &s, out, 0, PROMPT, 1, logits);
    for (int n = PROMPT; n < PROMPT + GEN; n++) {
        out[n] = smp_argmax(logits, V);
        if (n + 1 < PROMPT + GEN)
            target_step(t, &s, out + n, n, 1, 1, logits);
    }
    kv_seq_release(t->kv, &s);
    free(logits);
}

/* Speculates GEN tokens with `draft` for `target`; asserts the tokens are
 * the reference's and records the draft's KV blocks after each step
 * (used[i] at length len[i]) and the steps whose K drafts were all
 * accepted; returns the step count. */
static int speculate(const char *target, const char *draft, int *used, int *len, int *window,
                     int *all_accepted)
{
    runner t, d;
    open_runner(target, &t);
    open_runner(draft, &d);
    *window = d.window;
    int V = t.m->cfg.vocab_size;
    assert_int_equal(d.m->cfg.vocab_size, V);
    int32_t ref[PROMPT + GEN], toks[PROMPT + GEN + K + 1], drafts[K];
    greedy_reference(&t, ref);

    spec_draft_config dc = {.draft = d.m, .backend = d.be, .num_blocks = NBLOCKS,
                            .block_size = BS, .max_tokens = MAXLEN, .max_seqs = 1,
                            .max_len = MAXLEN, .draft_len = MAXLEN, .vocab = V};
    spec_proposer *p = NULL;
    inf_err err = {0};
    assert_int_equal(spec_draft_create(&dc, &p, &err), INF_OK);
    assert_int_equal(spec_draft_kv_blocks_used(p), 0);
    float *logits = malloc(sizeof(float) * (size_t)(K + 1) * V);
    kv_seq ts = {0};
    memcpy(toks, ref, sizeof(int32_t) * PROMPT);
    int n = PROMPT, steps = 0;
    *all_accepted = 0;
    target_step(&t, &ts, toks, 0, PROMPT - 1, 0, logits); /* all but the last token */
    smp_params sp = smp_params_default();
    sp.temperature = 0;
    spec_seq q = {.tokens = toks, .n_prompt = PROMPT}; /* q.state: the proposer's */
    spec_seq *qs = &q;
    while (n < PROMPT + GEN) {
        q.n_tokens = n;
        int k = K;
        assert_int_equal(p->ops->propose(p, &qs, 1, &sp, K, &k, drafts, NULL, &err), INF_OK);
        assert_true(k >= 1); /* the pool and context hold this sequence */
        memcpy(toks + n, drafts, sizeof(int32_t) * (size_t)k);
        /* the target: the last real token and the drafts, a row each */
        target_step(&t, &ts, toks + n - 1, n - 1, k + 1, k + 1, logits);
        int acc = 0;
        while (acc < k && smp_argmax(logits + (size_t)acc * V, V) == drafts[acc])
            acc++;
        toks[n + acc] = smp_argmax(logits + (size_t)acc * V, V);
        *all_accepted += acc == K;
        int valid = n + acc; /* the tokens with the target's KV */
        n += acc + 1;
        kv_seq_truncate(t.kv, &ts, valid);
        q.n_tokens = n;
        p->ops->rollback(p, &q, valid);
        used[steps] = spec_draft_kv_blocks_used(p);
        len[steps] = n;
        steps++;
    }
    for (int i = 0; i < PROMPT + GEN; i++) /* the non-speculative greedy tokens */
        assert_int_equal(toks[i], ref[i]);
    p->ops->release(p, &q);
    assert_int_equal(spec_draft_kv_blocks_used(p), 0);
    kv_seq_release(t.kv, &ts);
    free(logits);
    p->ops->destroy(p);
    close_runner(&d);
    close_runner(&t);
    return steps;
}

/* Blocks a windowed draft may hold: the window's positions behind the next
 * one (W - 1), the next one and K - 1 drafts, unaligned over blocks. */
static int window_bound(int w)
{
    return (w - 1 + K + BS - 1) / BS + 1;
}

/* After the window has filled (twice over, so the first drops have
 * happened), the draft's blocks never exceed what the window needs and
 * never grow: flat to the end of a generation 4x the window. */
static void assert_flat(const int *used, const int *len, int steps, int w)
{
    int after = 0, max_after = 0, first = -1;
    for (int i = 0; i < steps; i++) {
        if (len[i] < 2 * w)
            continue;
        if (first < 0)
            first = used[i];
        after++;
        max_after = used[i] > max_after ? used[i] : max_after;
        assert_true(used[i] <= window_bound(w));
    }
    assert_true(after >= 4);          /* several steps past the window */
    assert_true(len[steps - 1] >= 4 * w);
    assert_true(max_after <= first + 1); /* block alignment only, no growth */
}

/* A windowed draft (fam-mistral, W = 8) for a target without a window:
 * bounded draft KV, the target's greedy tokens. */
static void test_spec_draft_window_draft_kv_flat(void **state)
{
    (void)state;
    int used[PROMPT + GEN], len[PROMPT + GEN], w, all;
    int steps = speculate("tiny", "fam-mistral", used, len, &w, &all);
    assert_int_equal(w, 8);
    assert_flat(used, len, steps, w);
}

/* Target and draft both windowed (the same model: every draft accepted, so
 * the draft runs K - 1 tokens ahead each step): still bounded and exact, and
 * the draft computes what the target does, so it never read a block it gave
 * back (a dropped block reads as the null block: its drafts would differ). */
static void test_spec_draft_window_both(void **state)
{
    (void)state;
    int used[PROMPT + GEN], len[PROMPT + GEN], w, all;
    int steps = speculate("fam-mistral", "fam-mistral", used, len, &w, &all);
    assert_flat(used, len, steps, w);
    assert_true(all >= steps - 1); /* the last step may be cut by GEN */
}

/* Only the target has a window: the draft keeps its whole KV (one block per
 * BS positions, growing to the end) and the tokens are still the target's. */
static void test_spec_draft_window_target_only(void **state)
{
    (void)state;
    int used[PROMPT + GEN], len[PROMPT + GEN], w, all;
    int steps = speculate("fam-mistral", "tiny", used, len, &w, &all);
    assert_int_equal(w, 0);
    assert_true(used[steps - 1] >= (len[steps - 1] - 1) / BS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_draft_window_draft_kv_flat),
        cmocka_unit_test(test_spec_draft_window_both),
        cmocka_unit_test(test_spec_draft_window_target_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
