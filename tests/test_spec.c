/* Speculative decoding's pure parts: the n-gram proposer on worked
 * examples and against its definition, and the rejection sampler's
 * accepted / recovered / bonus logic, including chi-square tests that
 * speculative sampling reproduces the target distribution exactly. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/spec.h"

/* The most recent earlier occurrence of the longest suffix is used, and
 * what followed it is proposed, capped by k and by what exists. */
static void test_spec_ngram_lookup_worked_examples(void **state)
{
    (void)state;
    int32_t out[8];
    /* suffix [1 2] occurs at 0 -> propose 3 4 1 (k = 3) */
    const int32_t a[] = {1, 2, 3, 4, 1, 2};
    assert_int_equal(spec_ngram_lookup(a, 6, 1, 2, 3, out), 3);
    assert_int_equal(out[0], 3), assert_int_equal(out[1], 4), assert_int_equal(out[2], 1);
    /* most recent occurrence: [5] last seen at 4 -> 9 */
    const int32_t b[] = {5, 7, 0, 0, 5, 9, 5};
    assert_int_equal(spec_ngram_lookup(b, 7, 1, 1, 2, out), 2);
    assert_int_equal(out[0], 9), assert_int_equal(out[1], 5);
    /* the longest n wins over a more recent shorter match */
    const int32_t c[] = {8, 1, 2, 6, 3, 2, 4, 1, 2};
    assert_int_equal(spec_ngram_lookup(c, 9, 1, 2, 1, out), 1);
    assert_int_equal(out[0], 6); /* [1 2] at 1 -> 6, not [2] at 5 -> 4 */
    /* nothing matches, or below lookup_min */
    const int32_t d[] = {1, 2, 3, 4};
    assert_int_equal(spec_ngram_lookup(d, 4, 1, 3, 4, out), 0);
    assert_int_equal(spec_ngram_lookup(a, 6, 3, 3, 4, out), 0);
    /* an occurrence overlapping the suffix still proposes what follows */
    const int32_t e[] = {7, 7, 7};
    assert_int_equal(spec_ngram_lookup(e, 3, 1, 2, 4, out), 1);
    assert_int_equal(out[0], 7);
}

/* The indexed proposer (built up as a sequence grows) proposes exactly
 * what the definition does, at every length, over random sequences. */
static void test_spec_ngram_index_matches_definition(void **state)
{
    (void)state;
    enum { L = 600, K = 5 };
    spec_ngram_config cfg = {.lookup_max = 4, .lookup_min = 1};
    spec_proposer *p = NULL;
    inf_err e = {0};
    assert_int_equal(spec_ngram_create(&cfg, &p, &e), INF_OK);
    unsigned r = 7;
    for (int trial = 0; trial < 8; trial++) {
        int32_t toks[L];
        spec_seq q = {.tokens = toks, .n_tokens = 0};
        for (int len = 1; len <= L; len++) {
            r = r * 1103515245u + 12345u;
            toks[len - 1] = (int32_t)((r >> 16) % (unsigned)(2 + trial)); /* small vocab */
            q.n_tokens = len;
            if (len % 3 && trial % 2)
                continue; /* proposals at irregular lengths too */
            int32_t want[K], got[K];
            int k = K;
            spec_seq *qs = &q;
            assert_int_equal(p->ops->propose(p, &qs, 1, NULL, K, &k, got, NULL, &e), INF_OK);
            int n = spec_ngram_lookup(toks, len, 1, 4, K, want);
            assert_int_equal(k, n);
            assert_memory_equal(got, want, sizeof(int32_t) * (size_t)n);
        }
        p->ops->release(p, &q);
    }
    p->ops->destroy(p);
}

/* Point-mass and sampled proposals: forced outcomes on fixed arrays. */
static void test_spec_verify_accept_recover_bonus(void **state)
{
    (void)state;
    enum { V = 4 };
    float scratch[V];
    smp_rng rng;
    smp_rng_seed(&rng, 1);
    /* the target is sure of each draft: all accepted, bonus from p[k] */
    const int32_t d1[] = {2, 1};
    const float p1[] = {0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1};
    spec_result r = spec_verify(2, d1, p1, NULL, V, &rng, scratch);
    assert_int_equal(r.accepted, 2);
    assert_true(r.bonus);
    assert_int_equal(r.next, 3);
    /* the target never picks the second draft: one accepted, then the
     * recovered token comes from p without the rejected draft */
    const float p2[] = {0, 0, 1, 0, 0.0f, 0, 0.5f, 0.5f, 0, 0, 0, 1};
    for (int i = 0; i < 50; i++) {
        r = spec_verify(2, d1, p2, NULL, V, &rng, scratch);
        assert_int_equal(r.accepted, 1);
        assert_false(r.bonus);
        assert_true(r.next == 2 || r.next == 3);
    }
    /* sampled proposals: q puts all mass on the draft, p none: rejected,
     * recovered from max(0, p - q) = p */
    const int32_t d3[] = {0};
    const float q3[] = {1, 0, 0, 0};
    const float p3[] = {0, 0.25f, 0.75f, 0, 0, 0, 0, 1};
    r = spec_verify(1, d3, p3, q3, V, &rng, scratch);
    assert_int_equal(r.accepted, 0);
    assert_true(r.next == 1 || r.next == 2);
}

/* 0.999 quantiles of chi-square for 5 degrees of freedom. */
#define CHI2_999_DF5 20.515

static double chi2(const int *count, const float *p, int V, int n)
{
    double x = 0;
    for (int i = 0; i < V; i++) {
        double e = (double)n * p[i];
        x += (count[i] - e) * (count[i] - e) / e;
    }
    return x;
}

/* Speculative sampling emits its first token with exactly the target's
 * distribution, for a draft model's proposals (drawn from q) and for
 * point-mass proposals, with k = 1 and k = 3. */
static void test_spec_verify_preserves_target_distribution(void **state)
{
    (void)state;
    enum { V = 6, N = 200000 };
    const float p[4][V] = {{0.05f, 0.30f, 0.10f, 0.25f, 0.20f, 0.10f},
                           {0.20f, 0.20f, 0.20f, 0.10f, 0.10f, 0.20f},
                           {0.50f, 0.10f, 0.10f, 0.10f, 0.10f, 0.10f},
                           {0.10f, 0.10f, 0.10f, 0.10f, 0.10f, 0.50f}};
    const float q[3][V] = {{0.40f, 0.05f, 0.25f, 0.05f, 0.05f, 0.20f},
                           {0.10f, 0.50f, 0.10f, 0.10f, 0.10f, 0.10f},
                           {0.05f, 0.05f, 0.30f, 0.30f, 0.20f, 0.10f}};
    float scratch[V];
    for (int mode = 0; mode < 4; mode++) {
        int k = mode % 2 ? 3 : 1, point = mode >= 2;
        smp_rng draft_rng, rng;
        smp_rng_seed(&draft_rng, 11 + mode);
        smp_rng_seed(&rng, 29 + mode);
        int count[V] = {0};
        for (int n = 0; n < N; n++) {
            int32_t d[3];
            for (int i = 0; i < k; i++) /* the draft samples from q (or a fixed guess) */
                d[i] = point ? (int32_t)((n + i) % V) : smp_draw(q[i], V, smp_rng_uniform(&draft_rng));
            spec_result r = spec_verify(k, d, &p[0][0], point ? NULL : &q[0][0], V, &rng, scratch);
            count[r.accepted > 0 ? d[0] : r.next]++;
        }
        double x = chi2(count, p[0], V, N);
        if (x > CHI2_999_DF5)
            fail_msg("mode %d (k=%d, %s proposals): chi-square %.1f > %.1f", mode, k,
                     point ? "point-mass" : "sampled", x, CHI2_999_DF5);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_ngram_lookup_worked_examples),
        cmocka_unit_test(test_spec_ngram_index_matches_definition),
        cmocka_unit_test(test_spec_verify_accept_recover_bonus),
        cmocka_unit_test(test_spec_verify_preserves_target_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
