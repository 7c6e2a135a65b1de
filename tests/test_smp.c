/* Unit tests for smp_ (the sampler): worked examples on small rows, the
 * generator, reproducibility, chi-square fits of the draws against smp_probs,
 * parameter validation, and a 32000-token row against a brute-force filter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/smp.h"

/* Each test gets a sampler for the vocabulary named in its table entry. */
typedef struct fix {
    int vocab;
    smp_ctx *c;
} fix;

static int fix_setup(void **state)
{
    fix *f = *state;
    return smp_create(f->vocab, &f->c, NULL);
}

static int fix_teardown(void **state)
{
    fix *f = *state;
    smp_destroy(f->c);
    f->c = NULL;
    return 0;
}

static void assert_probs(const float *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        assert_float_equal(got[i], want[i], 1e-6);
    for (int i = 0; i < n; i++) /* filtered out means exactly 0 */
        if (want[i] == 0.0)
            assert_true(got[i] == 0.0f);
}

/* Logits whose softmax at T = 1 is p (up to float rounding of logf). */
static void logits_of(const double *p, int n, float *logits)
{
    for (int i = 0; i < n; i++)
        logits[i] = logf((float)p[i]);
}

/* ---- argmax and greedy -------------------------------------------------- */

/* The largest value wins, the lowest index on ties; NaN never wins. */
static void test_smp_argmax_lowest_index_on_ties(void **state)
{
    (void)state;
    const float a[] = {1.0f, 3.0f, 3.0f, 2.0f};
    assert_int_equal(smp_argmax(a, 4), 1);
    const float b[] = {NAN, 1.0f, NAN, 1.0f};
    assert_int_equal(smp_argmax(b, 4), 1);
    const float c[] = {NAN, -INFINITY, 5.0f, NAN};
    assert_int_equal(smp_argmax(c, 4), 2);
    const float d[] = {NAN, NAN, NAN};
    assert_int_equal(smp_argmax(d, 3), 0);
    const float e[] = {-INFINITY, -INFINITY};
    assert_int_equal(smp_argmax(e, 2), 0);
}

/* T = 0: the argmax (lowest id on a tie), a one-hot smp_probs, and no draw
 * taken from the generator. */
static void test_smp_greedy_argmax_tie(void **state)
{
    fix *f = *state;
    smp_params p = smp_params_default();
    p.temperature = 0.0f;
    p.top_k = 1; /* filters are ignored when greedy */
    float logits[4] = {0.5f, 2.0f, 2.0f, -1.0f};
    smp_rng rng, ref;
    smp_rng_seed(&rng, 7);
    ref = rng;
    assert_int_equal(smp_sample(f->c, &p, NULL, &rng, logits), 1);
    assert_memory_equal(&rng, &ref, sizeof rng);
    float probs[4];
    smp_probs(f->c, &p, logits, probs);
    const double want[4] = {0, 1, 0, 0};
    assert_probs(probs, want, 4);
}

/* Greedy picks from the penalized logits: {3, 2.5, 0} with token 0 in the
 * output and frequency 1 becomes {2, 2.5, 0}, so token 1; repetition 2 on
 * token 0 alone gives {1.5, 2.5, 0}, token 1 again. */
static void test_smp_greedy_uses_penalized_logits(void **state)
{
    fix *f = *state;
    const int32_t out[] = {0};
    smp_history h = {.output = out, .n_output = 1};
    smp_params p = smp_params_default();
    p.temperature = 0.0f;
    p.frequency_penalty = 1.0f;
    smp_rng rng;
    smp_rng_seed(&rng, 1);
    float a[3] = {3.0f, 2.5f, 0.0f};
    assert_int_equal(smp_sample(f->c, &p, &h, &rng, a), 1);
    assert_true(a[0] == 2.0f);

    p = smp_params_default();
    p.temperature = 0.0f;
    p.repetition_penalty = 2.0f;
    float b[3] = {3.0f, 2.5f, 0.0f};
    assert_int_equal(smp_sample(f->c, &p, &h, &rng, b), 1);
    assert_true(b[0] == 1.5f);
}

/* ---- penalties ---------------------------------------------------------- */

/* Logits {2, -1, 0.5, 3, -2, 0}, prompt {0, 4, 4}, output {1, 3, 3, 5},
 * repetition 2, each distinct id once: 0: 2/2 = 1 (prompt only); 1: -1*2 = -2
 * (negative: multiplied); 2: unseen, 0.5; 3: 3/2 = 1.5 (twice, once);
 * 4: -2*2 = -4 (prompt only, twice, once); 5: 0*2 = 0. */
static void test_smp_penalty_repetition_prompt_and_output(void **state)
{
    fix *f = *state;
    const int32_t prompt[] = {0, 4, 4}, out[] = {1, 3, 3, 5};
    smp_history h = {prompt, 3, out, 4};
    smp_params p = smp_params_default();
    p.repetition_penalty = 2.0f;
    float l[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};
    smp_apply_penalties(f->c, &p, &h, l);
    const float want[6] = {1.0f, -2.0f, 0.5f, 1.5f, -4.0f, 0.0f};
    assert_memory_equal(l, want, sizeof want);
}

/* Frequency 0.5 with output {1, 3, 3}: 1: -1 - 0.5 = -1.5; 3: 3 - 2*0.5 = 2;
 * prompt-only token 0 untouched. */
static void test_smp_penalty_frequency_per_occurrence(void **state)
{
    fix *f = *state;
    const int32_t prompt[] = {0}, out[] = {1, 3, 3};
    smp_history h = {prompt, 1, out, 3};
    smp_params p = smp_params_default();
    p.frequency_penalty = 0.5f;
    float l[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};
    smp_apply_penalties(f->c, &p, &h, l);
    const float want[6] = {2.0f, -1.5f, 0.5f, 2.0f, -2.0f, 0.0f};
    assert_memory_equal(l, want, sizeof want);
}

/* Presence 0.25 with output {1, 3, 3}: subtracted once per distinct token:
 * 1: -1.25; 3: 2.75; negative presence (-1) adds: 1: 0, 3: 4. */
static void test_smp_penalty_presence_once(void **state)
{
    fix *f = *state;
    const int32_t prompt[] = {0}, out[] = {1, 3, 3};
    smp_history h = {prompt, 1, out, 3};
    smp_params p = smp_params_default();
    p.presence_penalty = 0.25f;
    float l[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};
    smp_apply_penalties(f->c, &p, &h, l);
    const float want[6] = {2.0f, -1.25f, 0.5f, 2.75f, -2.0f, 0.0f};
    assert_memory_equal(l, want, sizeof want);

    p.presence_penalty = -1.0f;
    float m[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};
    smp_apply_penalties(f->c, &p, &h, m);
    const float want2[6] = {2.0f, 0.0f, 0.5f, 4.0f, -2.0f, 0.0f};
    assert_memory_equal(m, want2, sizeof want2);
}

/* All three, in vLLM's order (repetition, then frequency, then presence),
 * prompt {0, 4}, output {1, 3, 3} with repetition 2, frequency 0.5, presence
 * 0.25: 0: 1; 1: -1*2 - 0.5 - 0.25 = -2.75; 2: 0.5; 3: 3/2 - 1 - 0.25 = 0.25;
 * 4: -4; 5: 0. Ids outside the vocabulary are ignored, and a second call
 * gives the same result (the scratch was cleared). */
static void test_smp_penalty_combined_repeatable(void **state)
{
    fix *f = *state;
    const int32_t prompt[] = {0, 4, -1}, out[] = {1, 3, 6, 3};
    smp_history h = {prompt, 3, out, 4};
    smp_params p = smp_params_default();
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    const float want[6] = {1.0f, -2.75f, 0.5f, 0.25f, -4.0f, 0.0f};
    for (int round = 0; round < 2; round++) {
        float l[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};
        smp_apply_penalties(f->c, &p, &h, l);
        assert_memory_equal(l, want, sizeof want);
    }
}

/* Default parameters (or no history) leave the logits untouched. */
static void test_smp_penalty_off_unchanged(void **state)
{
    fix *f = *state;
    const int32_t out[] = {1, 1, 2};
    smp_history h = {out, 3, out, 3};
    smp_params p = smp_params_default();
    float l[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};
    const float want[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};
    smp_apply_penalties(f->c, &p, &h, l);
    assert_memory_equal(l, want, sizeof want);
    p.repetition_penalty = 3.0f;
    smp_apply_penalties(f->c, &p, NULL, l);
    assert_memory_equal(l, want, sizeof want);
}

/* ---- distribution ------------------------------------------------------- */

/* Logits {0, ln 3}: T = 1 gives {1/4, 3/4}; T = 0.5 gives {0, 2 ln 3}, i.e.
 * {1/10, 9/10}; T = 2 gives {0, ln 3 / 2}: {1/(1+sqrt 3), sqrt 3/(1+sqrt 3)}
 * = {0.3660254, 0.6339746}. */
static void test_smp_probs_temperature_scaling(void **state)
{
    fix *f = *state;
    const float l[2] = {0.0f, logf(3.0f)};
    smp_params p = smp_params_default();
    float probs[2];
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0.25, 0.75}, 2);
    p.temperature = 0.5f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0.1, 0.9}, 2);
    p.temperature = 2.0f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0.3660254, 0.6339746}, 2);
}

/* Large logits do not overflow (the max is subtracted first): {1000, 1001}
 * is {1/(1+e), e/(1+e)} = {.2689414, .7310586}. NaN and -inf get 0; a +inf
 * max, or no finite logit at all, goes greedy. */
static void test_smp_probs_stable_and_nonfinite(void **state)
{
    fix *f = *state;
    smp_params p = smp_params_default();
    float probs[4];
    const float big[4] = {1000.0f, 1001.0f, -INFINITY, NAN};
    smp_probs(f->c, &p, big, probs);
    assert_probs(probs, (const double[]){0.2689414, 0.7310586, 0, 0}, 4);
    const float inf[4] = {1.0f, INFINITY, 2.0f, INFINITY};
    smp_probs(f->c, &p, inf, probs);
    assert_probs(probs, (const double[]){0, 1, 0, 0}, 4);
    const float none[4] = {NAN, -INFINITY, -INFINITY, NAN};
    smp_probs(f->c, &p, none, probs);
    assert_probs(probs, (const double[]){0, 1, 0, 0}, 4);
}

/* p = {.1, .4, .2, .3}: top_k 2 keeps {1, 3}: {0, .4/.7, 0, .3/.7} =
 * {0, 4/7, 0, 3/7}; top_k 3 keeps {1, 3, 2}: {0, 4/9, 2/9, 3/9}; top_k 0 and
 * top_k >= vocab are off. */
static void test_smp_probs_top_k_keeps_largest(void **state)
{
    fix *f = *state;
    const double p4[4] = {0.1, 0.4, 0.2, 0.3};
    float l[4], probs[4];
    logits_of(p4, 4, l);
    smp_params p = smp_params_default();
    p.top_k = 2;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 4.0 / 7, 0, 3.0 / 7}, 4);
    p.top_k = 3;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 4.0 / 9, 2.0 / 9, 3.0 / 9}, 4);
    p.top_k = 0;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, p4, 4);
    p.top_k = 4;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, p4, 4);
}

/* Logits {1, 2, 2, 2, 0}, top_k 2: three tokens tie at the boundary; the
 * lower ids 1 and 2 are kept, {0, .5, .5, 0, 0}. */
static void test_smp_probs_top_k_ties_lower_id(void **state)
{
    fix *f = *state;
    const float l[5] = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
    smp_params p = smp_params_default();
    p.top_k = 2;
    float probs[5];
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 0.5, 0.5, 0, 0}, 5);
}

/* p = {.1, .4, .2, .3}, ranked .4 .3 .2 .1 with running mass .4 .7 .9 1:
 * top_p .6 keeps {1, 3}: {0, 4/7, 0, 3/7}; .75 keeps {1, 3, 2}:
 * {0, 4/9, 2/9, 3/9}; .95 keeps all four; .01 keeps only the top token. */
static void test_smp_probs_top_p_smallest_prefix(void **state)
{
    fix *f = *state;
    const double p4[4] = {0.1, 0.4, 0.2, 0.3};
    float l[4], probs[4];
    logits_of(p4, 4, l);
    smp_params p = smp_params_default();
    p.top_p = 0.6f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 4.0 / 7, 0, 3.0 / 7}, 4);
    p.top_p = 0.75f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 4.0 / 9, 2.0 / 9, 3.0 / 9}, 4);
    p.top_p = 0.95f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, p4, 4);
    p.top_p = 0.01f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 1, 0, 0}, 4);
}

/* Four equal logits (exactly .25 each): top_p .5 reaches .5 exactly after
 * ids 0 and 1 (ties rank by lower id), {.5, .5, 0, 0}; top_p .6 needs a
 * third, {1/3, 1/3, 1/3, 0}. */
static void test_smp_probs_top_p_ties_lower_id(void **state)
{
    fix *f = *state;
    const float l[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    smp_params p = smp_params_default();
    float probs[4];
    p.top_p = 0.5f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0.5, 0.5, 0, 0}, 4);
    p.top_p = 0.6f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){1.0 / 3, 1.0 / 3, 1.0 / 3, 0}, 4);
}

/* p = {.1, .4, .2, .3}: min_p .6 cuts below .24, keeping {1, 3}:
 * {0, 4/7, 0, 3/7}; min_p .3 cuts below .12: {0, 4/9, 2/9, 3/9}; min_p 1
 * keeps only the top token. */
static void test_smp_probs_min_p_relative_cut(void **state)
{
    fix *f = *state;
    const double p4[4] = {0.1, 0.4, 0.2, 0.3};
    float l[4], probs[4];
    logits_of(p4, 4, l);
    smp_params p = smp_params_default();
    p.min_p = 0.6f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 4.0 / 7, 0, 3.0 / 7}, 4);
    p.min_p = 0.3f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 4.0 / 9, 2.0 / 9, 3.0 / 9}, 4);
    p.min_p = 1.0f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 1, 0, 0}, 4);
}

/* p = {.05, .3, .1, .25, .2, .1}. top_k 4 keeps {1, 3, 4, 2} (ids 2 and 5
 * tie at .1; 2 is lower): .3 .25 .2 .1 over .85 = .3529 .2941 .2353 .1176.
 * top_p .7 on those: running .3529 .6471 .8824, keeps {1, 3, 4}: over .75,
 * {0, .4, 0, 1/3, 4/15, 0}. min_p .7 then cuts below .7 * .4 = .28:
 * keeps {1, 3}: .3 and .25 over .55, {0, 6/11, 0, 5/11, 0, 0}. */
static void test_smp_probs_filters_combined(void **state)
{
    fix *f = *state;
    const double p6[6] = {0.05, 0.3, 0.1, 0.25, 0.2, 0.1};
    float l[6], probs[6];
    logits_of(p6, 6, l);
    smp_params p = smp_params_default();
    p.top_k = 4;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 6.0 / 17, 2.0 / 17, 5.0 / 17,
                                         4.0 / 17, 0}, 6);
    p.top_p = 0.7f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 0.4, 0, 1.0 / 3, 4.0 / 15, 0}, 6);
    p.min_p = 0.7f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){0, 6.0 / 11, 0, 5.0 / 11, 0, 0}, 6);
}

/* top-p measures mass after top-k's renormalization: p = {.4, .3, .2, .1},
 * top_k 2 leaves {4/7, 3/7}; 4/7 = .571 >= .55 so top_p .55 keeps token 0
 * alone. Without top_k, .4 < .55 and top_p .55 keeps {0, 1}. */
static void test_smp_probs_filters_top_p_after_top_k(void **state)
{
    fix *f = *state;
    const double p4[4] = {0.4, 0.3, 0.2, 0.1};
    float l[4], probs[4];
    logits_of(p4, 4, l);
    smp_params p = smp_params_default();
    p.top_p = 0.55f;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){4.0 / 7, 3.0 / 7, 0, 0}, 4);
    p.top_k = 2;
    smp_probs(f->c, &p, l, probs);
    assert_probs(probs, (const double[]){1, 0, 0, 0}, 4);
}

/* ---- generator and drawing ---------------------------------------------- */

/* xoshiro256** seeded by splitmix64: the state and first outputs match an
 * independent implementation (Python, big integers); splitmix64(0)'s first
 * output 0xe220a8397b1dcdaf is the published reference value. */
static void test_smp_rng_known_values(void **state)
{
    (void)state;
    smp_rng r;
    smp_rng_seed(&r, 0);
    assert_true(r.s[0] == 0xe220a8397b1dcdafu);
    assert_true(r.s[1] == 0x6e789e6aa1b965f4u);
    assert_true(r.s[2] == 0x06c45d188009454fu);
    assert_true(r.s[3] == 0xf88bb8a8724c81ecu);
    assert_true(smp_rng_next(&r) == 0x99ec5f36cb75f2b4u);
    assert_true(smp_rng_next(&r) == 0xbf6e1f784956452au);
    assert_true(smp_rng_next(&r) == 0x1a5f849d4933e6e0u);
    smp_rng_seed(&r, 42);
    assert_true(smp_rng_next(&r) == 0x15780b2e0c2ec716u);
    assert_true(smp_rng_next(&r) == 0x6104d9866d113a7eu);
    smp_rng_seed(&r, 0xdeadbeefcafef00du);
    assert_true(smp_rng_next(&r) == 0x9e32cfb5bb93eebbu);
    /* uniform is the top 53 bits of the next output, times 2^-53. */
    smp_rng a, b;
    smp_rng_seed(&a, 9);
    smp_rng_seed(&b, 9);
    for (int i = 0; i < 1000; i++) {
        double u = smp_rng_uniform(&a);
        assert_true(u >= 0.0 && u < 1.0);
        assert_true(u == (double)(smp_rng_next(&b) >> 11) * 0x1.0p-53);
    }
}

/* Inverse CDF in ascending id order over {.25, 0, .5, .25}: [0, .25) -> 0,
 * [.25, .75) -> 2 (id 1 has no mass), [.75, 1) -> 3; unnormalized input is
 * scaled by its sum; no positive entry gives the argmax. */
static void test_smp_draw_inverse_cdf_ascending(void **state)
{
    (void)state;
    const float q[4] = {0.25f, 0.0f, 0.5f, 0.25f};
    assert_int_equal(smp_draw(q, 4, 0.0), 0);
    assert_int_equal(smp_draw(q, 4, 0.2499), 0);
    assert_int_equal(smp_draw(q, 4, 0.25), 2);
    assert_int_equal(smp_draw(q, 4, 0.7499), 2);
    assert_int_equal(smp_draw(q, 4, 0.75), 3);
    assert_int_equal(smp_draw(q, 4, 1.0 - 0x1.0p-53), 3);
    const float w[3] = {2.0f, 6.0f, 0.0f}; /* sums to 8: {.25, .75, 0} */
    assert_int_equal(smp_draw(w, 3, 0.2), 0);
    assert_int_equal(smp_draw(w, 3, 0.3), 1);
    assert_int_equal(smp_draw(w, 3, 0.9999), 1);
    const float z[3] = {0.0f, 0.0f, 0.0f};
    assert_int_equal(smp_draw(z, 3, 0.5), 0);
}

/* smp_sample takes exactly one uniform and draws by smp_draw from
 * smp_probs's distribution, for plain and filtered parameters. */
static void test_smp_sample_one_uniform_from_probs(void **state)
{
    fix *f = *state;
    const float l[8] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, -0.5f, 0.8f};
    smp_params ps[3] = {smp_params_default(), smp_params_default(),
                        smp_params_default()};
    ps[1].temperature = 0.7f;
    ps[1].top_k = 4;
    ps[2].top_p = 0.8f;
    ps[2].min_p = 0.1f;
    for (int k = 0; k < 3; k++) {
        float probs[8];
        smp_probs(f->c, &ps[k], l, probs);
        for (uint64_t seed = 1; seed <= 50; seed++) {
            smp_rng a, b;
            smp_rng_seed(&a, seed);
            smp_rng_seed(&b, seed);
            float row[8];
            memcpy(row, l, sizeof row);
            int32_t t = smp_sample(f->c, &ps[k], NULL, &a, row);
            assert_int_equal(t, smp_draw(probs, 8, smp_rng_uniform(&b)));
            assert_memory_equal(&a, &b, sizeof a);
        }
    }
}

/* Draws n tokens from a generator seeded with seed over a fixed 8-token row
 * at T = 0.9, feeding each token back as output with penalties on. */
static void draw_sequence(smp_ctx *c, uint64_t seed, int32_t *toks, int n)
{
    const float l[8] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, -0.5f, 0.8f};
    smp_params p = smp_params_default();
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.frequency_penalty = 0.01f;
    p.seed = seed;
    smp_rng rng;
    smp_rng_seed(&rng, p.seed);
    for (int i = 0; i < n; i++) {
        smp_history h = {NULL, 0, toks, i};
        float row[8];
        memcpy(row, l, sizeof row);
        toks[i] = smp_sample(c, &p, &h, &rng, row);
    }
}

/* The same seed gives the same token sequence; another seed a different
 * one. */
static void test_smp_sample_same_seed_same_sequence(void **state)
{
    fix *f = *state;
    enum { N = 500 };
    int32_t a[N], b[N], d[N];
    draw_sequence(f->c, 1234, a, N);
    draw_sequence(f->c, 1234, b, N);
    draw_sequence(f->c, 1235, d, N);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, d, sizeof a);
}

/* ---- statistics --------------------------------------------------------- */

/* Upper 0.999 quantiles of chi-square for 1..7 degrees of freedom (standard
 * tables; checked against the regularized incomplete gamma function). */
static const double chi2_999[8] = {0,      10.828, 13.816, 16.266,
                                   18.467, 20.515, 22.458, 24.322};

/* N draws from smp_sample over the 8-token row must fit smp_probs: a
 * chi-square statistic under the 0.999 quantile over the kept tokens, and
 * never a token smp_probs gives 0. Returns how many tokens were kept. */
static int chi_square_fit(smp_ctx *c, const smp_params *p)
{
    enum { N = 200000 };
    const float l[8] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, -0.5f, 0.8f};
    float probs[8];
    smp_probs(c, p, l, probs);
    long counts[8] = {0};
    smp_rng rng;
    smp_rng_seed(&rng, p->seed);
    for (int i = 0; i < N; i++) {
        float row[8];
        memcpy(row, l, sizeof row);
        int32_t t = smp_sample(c, p, NULL, &rng, row);
        assert_true(t >= 0 && t < 8);
        counts[t]++;
    }
    double total = 0.0;
    for (int i = 0; i < 8; i++)
        total += probs[i];
    double chi2 = 0.0;
    int kept = 0;
    for (int i = 0; i < 8; i++) {
        if (probs[i] == 0.0f) {
            assert_int_equal(counts[i], 0);
            continue;
        }
        double e = N * (probs[i] / total);
        chi2 += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
        kept++;
    }
    assert_true(kept >= 2);
    assert_true(chi2 < chi2_999[kept - 1]);
    return kept;
}

/* T = 0.7, no filters: all 8 tokens (7 degrees of freedom). */
static void test_smp_sample_chi_square_plain(void **state)
{
    fix *f = *state;
    smp_params p = smp_params_default();
    p.temperature = 0.7f;
    p.seed = 101;
    assert_int_equal(chi_square_fit(f->c, &p), 8);
}

/* top_k 3 at T = 1: ids 1, 4, 0 (logits 2, 1.5, 1) only. */
static void test_smp_sample_chi_square_top_k(void **state)
{
    fix *f = *state;
    smp_params p = smp_params_default();
    p.top_k = 3;
    p.seed = 202;
    assert_int_equal(chi_square_fit(f->c, &p), 3);
}

/* top_p .8 at T = 1: ranked mass .3615 .5808 .7138 .8227 keeps 4 tokens. */
static void test_smp_sample_chi_square_top_p(void **state)
{
    fix *f = *state;
    smp_params p = smp_params_default();
    p.top_p = 0.8f;
    p.seed = 303;
    assert_int_equal(chi_square_fit(f->c, &p), 4);
}

/* min_p .2 at T = 1: cut at .2 * .3615 = .0723 keeps logits >= 2 + ln .2 =
 * 0.39: ids 0, 1, 2, 4, 7. */
static void test_smp_sample_chi_square_min_p(void **state)
{
    fix *f = *state;
    smp_params p = smp_params_default();
    p.min_p = 0.2f;
    p.seed = 404;
    assert_int_equal(chi_square_fit(f->c, &p), 5);
}

/* All filters at T = 1.3: top_k 5 then top_p .85 (renormalized running mass
 * .35 .588 .750 .890) keep ids 1, 4, 0, 7; min_p .42 cuts at .165 of those
 * renormalized (.393 .268 .182 .156) and drops id 7. */
static void test_smp_sample_chi_square_combined(void **state)
{
    fix *f = *state;
    smp_params p = smp_params_default();
    p.temperature = 1.3f;
    p.top_k = 5;
    p.top_p = 0.85f;
    p.min_p = 0.42f;
    p.seed = 505;
    assert_int_equal(chi_square_fit(f->c, &p), 3);
}

/* ---- validation --------------------------------------------------------- */

static void expect_invalid(const smp_params *p, const char *msg)
{
    inf_err err = {0};
    assert_int_equal(smp_params_check(p, &err), INF_ERR_INVALID);
    assert_int_equal(err.code, INF_ERR_INVALID);
    assert_string_equal(err.msg, msg);
}

/* Out-of-range values fail with a message naming the field and the value;
 * the range ends themselves pass. */
static void test_smp_params_check_messages(void **state)
{
    (void)state;
    smp_params d = smp_params_default(), p;
    assert_int_equal(smp_params_check(&d, NULL), INF_OK);
    assert_true(d.temperature == 1.0f && d.top_k == 0 && d.top_p == 1.0f &&
                d.min_p == 0.0f && d.presence_penalty == 0.0f &&
                d.frequency_penalty == 0.0f && d.repetition_penalty == 1.0f &&
                d.seed == 0);

    p = d, p.temperature = -1.0f;
    expect_invalid(&p, "temperature must be >= 0 and finite, got -1");
    p = d, p.temperature = INFINITY;
    expect_invalid(&p, "temperature must be >= 0 and finite, got inf");
    p = d, p.temperature = NAN;
    expect_invalid(&p, "temperature must be >= 0 and finite, got nan");
    p = d, p.top_p = 1.5f;
    expect_invalid(&p, "top_p must be in (0, 1], got 1.5");
    p = d, p.top_p = 0.0f;
    expect_invalid(&p, "top_p must be in (0, 1], got 0");
    p = d, p.min_p = -0.25f;
    expect_invalid(&p, "min_p must be in [0, 1], got -0.25");
    p = d, p.min_p = 1.5f;
    expect_invalid(&p, "min_p must be in [0, 1], got 1.5");
    p = d, p.presence_penalty = 2.5f;
    expect_invalid(&p, "presence_penalty must be in [-2, 2], got 2.5");
    p = d, p.frequency_penalty = -3.0f;
    expect_invalid(&p, "frequency_penalty must be in [-2, 2], got -3");
    p = d, p.repetition_penalty = 0.0f;
    expect_invalid(&p, "repetition_penalty must be > 0 and finite, got 0");
    p = d, p.repetition_penalty = INFINITY;
    expect_invalid(&p, "repetition_penalty must be > 0 and finite, got inf");
    expect_invalid(NULL, "sampling parameters are missing");

    p = d;
    p.temperature = 0.0f;
    p.top_k = -1;
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f;
    p.repetition_penalty = 0.01f;
    assert_int_equal(smp_params_check(&p, NULL), INF_OK);
}

/* A sampler needs at least one token. */
static void test_smp_create_invalid_vocab(void **state)
{
    (void)state;
    smp_ctx *c = (smp_ctx *)&c;
    inf_err err = {0};
    assert_int_equal(smp_create(0, &c, &err), INF_ERR_INVALID);
    assert_null(c);
    assert_string_equal(err.msg, "sampler vocabulary size must be > 0, got 0");
    smp_destroy(NULL);
}

/* ---- a real vocabulary -------------------------------------------------- */

typedef struct ranked {
    double p;
    int id;
} ranked;

static int ranked_cmp(const void *va, const void *vb)
{
    const ranked *a = va, *b = vb;
    if (a->p != b->p)
        return a->p > b->p ? -1 : 1;
    return a->id - b->id;
}

/* Brute force: full softmax, a full sort, then top-k, top-p (on the top-k
 * set renormalized) and min-p in that order; want gets the renormalized
 * survivors, the rest 0. Returns how many were kept. */
static int brute_force(const float *l, int n, const smp_params *p,
                       double *want)
{
    ranked *r = malloc((size_t)n * sizeof *r);
    assert_non_null(r);
    double m = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++)
        m = l[i] > m ? l[i] : m;
    for (int i = 0; i < n; i++) {
        r[i].p = exp(((double)l[i] - m) / p->temperature);
        r[i].id = i;
        sum += r[i].p;
    }
    qsort(r, (size_t)n, sizeof *r, ranked_cmp);
    int kept = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    if (p->top_p < 1.0f) {
        double mass = 0.0, acc = 0.0;
        for (int i = 0; i < kept; i++)
            mass += r[i].p;
        int j = 0;
        while (j < kept && (acc += r[j].p / mass) < p->top_p)
            j++;
        kept = j < kept ? j + 1 : kept;
    }
    int last = kept;
    for (int i = 0; i < kept; i++)
        if (r[i].p < p->min_p * r[0].p) {
            last = i;
            break;
        }
    kept = last;
    sum = 0.0;
    for (int i = 0; i < kept; i++)
        sum += r[i].p;
    for (int i = 0; i < n; i++)
        want[i] = 0.0;
    for (int i = 0; i < kept; i++)
        want[r[i].id] = r[i].p / sum;
    free(r);
    return kept;
}

/* 32000 Gaussian logits (sd 3, fixed seed): top_k 50, top_p .9, both, and
 * min_p .01 keep exactly the brute force's set, with its probabilities. */
static void test_smp_probs_large_vocab_matches_brute_force(void **state)
{
    fix *f = *state;
    const int n = f->vocab;
    float *l = malloc((size_t)n * sizeof *l);
    float *probs = malloc((size_t)n * sizeof *probs);
    double *want = malloc((size_t)n * sizeof *want);
    assert_true(l && probs && want);
    smp_rng rng;
    smp_rng_seed(&rng, 2024);
    for (int i = 0; i < n; i++) { /* Box-Muller */
        double u1 = 1.0 - smp_rng_uniform(&rng), u2 = smp_rng_uniform(&rng);
        l[i] = (float)(3.0 * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
    smp_params ps[5] = {smp_params_default(), smp_params_default(),
                        smp_params_default(), smp_params_default(),
                        smp_params_default()};
    ps[0].top_k = 50;
    ps[1].top_p = 0.9f;
    ps[2].top_k = 50;
    ps[2].top_p = 0.9f;
    ps[3].min_p = 0.01f;
    ps[4].temperature = 0.5f;
    ps[4].top_p = 0.9f;
    for (int k = 0; k < 5; k++) {
        int kept = brute_force(l, n, &ps[k], want);
        smp_probs(f->c, &ps[k], l, probs);
        int nonzero = 0;
        for (int i = 0; i < n; i++) {
            nonzero += probs[i] != 0.0f;
            assert_true((probs[i] != 0.0f) == (want[i] != 0.0));
            assert_true(fabs(probs[i] - want[i]) <= 1e-6 * want[i] + 1e-12);
        }
        assert_int_equal(nonzero, kept);
        if (ps[k].top_k == 50)
            assert_true(kept <= 50);
        assert_true(kept > 1 && kept < n);
    }
    free(l);
    free(probs);
    free(want);
}

#define T(fn, v) \
    cmocka_unit_test_prestate_setup_teardown(fn, fix_setup, fix_teardown, \
                                             (&(fix){(v), NULL}))

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smp_argmax_lowest_index_on_ties),
        T(test_smp_greedy_argmax_tie, 4),
        T(test_smp_greedy_uses_penalized_logits, 3),
        T(test_smp_penalty_repetition_prompt_and_output, 6),
        T(test_smp_penalty_frequency_per_occurrence, 6),
        T(test_smp_penalty_presence_once, 6),
        T(test_smp_penalty_combined_repeatable, 6),
        T(test_smp_penalty_off_unchanged, 6),
        T(test_smp_probs_temperature_scaling, 2),
        T(test_smp_probs_stable_and_nonfinite, 4),
        T(test_smp_probs_top_k_keeps_largest, 4),
        T(test_smp_probs_top_k_ties_lower_id, 5),
        T(test_smp_probs_top_p_smallest_prefix, 4),
        T(test_smp_probs_top_p_ties_lower_id, 4),
        T(test_smp_probs_min_p_relative_cut, 4),
        T(test_smp_probs_filters_combined, 6),
        T(test_smp_probs_filters_top_p_after_top_k, 4),
        cmocka_unit_test(test_smp_rng_known_values),
        cmocka_unit_test(test_smp_draw_inverse_cdf_ascending),
        T(test_smp_sample_one_uniform_from_probs, 8),
        T(test_smp_sample_same_seed_same_sequence, 8),
        T(test_smp_sample_chi_square_plain, 8),
        T(test_smp_sample_chi_square_top_k, 8),
        T(test_smp_sample_chi_square_top_p, 8),
        T(test_smp_sample_chi_square_min_p, 8),
        T(test_smp_sample_chi_square_combined, 8),
        cmocka_unit_test(test_smp_params_check_messages),
        cmocka_unit_test(test_smp_create_invalid_vocab),
        T(test_smp_probs_large_vocab_matches_brute_force, 32000),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
