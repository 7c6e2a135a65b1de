/* Stop strings over streamed text: worked examples of every rule in
 * engine/stop.h, and a randomized comparison with a brute-force reference
 * that looks at the whole text at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/stop.h"

/* ------------------------------------------------------------------ helpers */

/* A matcher over strs (NULL-terminated list). */
static stop *make(const char *const *strs, int include)
{
    int n = 0;
    while (strs && strs[n])
        n++;
    stop_config c = stop_config_default();
    c.strs = strs;
    c.n = n;
    c.include_in_output = include;
    stop *s = NULL;
    inf_err e = {0};
    int rc = stop_create(&c, &s, &e);
    if (rc)
        print_message("stop_create: %s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    return s;
}

/* What a run of feeds has emitted so far. */
typedef struct run {
    char text[4096];
    size_t len;
    int matched; /* the index reported by a feed or the flush, else -1 */
} run;

/* Feeds str and appends the output to r; returns the bytes emitted. The
 * output buffer is exactly the documented size, so ASan sees an overrun. */
static size_t feed(stop *s, run *r, const char *str)
{
    size_t len = strlen(str);
    char *out = malloc(len + stop_max_hold(s) + 1);
    assert_non_null(out);
    int m = -2;
    size_t n = stop_feed(s, str, len, out, &m);
    assert_true(n <= len + stop_max_hold(s));
    assert_true(m >= -1);
    if (m >= 0) {
        assert_int_equal(r->matched, -1);
        r->matched = m;
    }
    assert_true(r->len + n < sizeof r->text);
    memcpy(r->text + r->len, out, n);
    r->len += n;
    r->text[r->len] = 0;
    free(out);
    return n;
}

static size_t flush(stop *s, run *r)
{
    char *out = malloc(stop_max_hold(s) + 1);
    assert_non_null(out);
    int m = -2;
    size_t n = stop_flush(s, out, &m);
    assert_true(n <= stop_max_hold(s));
    if (m >= 0) {
        assert_int_equal(r->matched, -1);
        r->matched = m;
    }
    memcpy(r->text + r->len, out, n);
    r->len += n;
    r->text[r->len] = 0;
    free(out);
    return n;
}

static void run_init(run *r)
{
    r->len = 0;
    r->text[0] = 0;
    r->matched = -1;
}

/* ------------------------------------------------------------ worked cases */

/* No stop strings: every feed comes straight back, nothing is ever held. */
static void test_stop_none_pass_through(void **state)
{
    (void)state;
    stop *s = make(NULL, 0);
    run r;
    run_init(&r);
    assert_int_equal(stop_max_hold(s), 0);
    assert_int_equal(feed(s, &r, "Once upon"), 9);
    assert_int_equal(stop_held(s), 0);
    assert_int_equal(feed(s, &r, ""), 0);
    assert_int_equal(feed(s, &r, " a time"), 7);
    assert_int_equal(flush(s, &r), 0);
    assert_string_equal(r.text, "Once upon a time");
    assert_int_equal(r.matched, -1);
    stop_destroy(s);
}

/* One stop string inside one feed: the text before it is emitted, the stop
 * string is not, and later input is ignored. */
static void test_stop_single_match_in_one_feed(void **state)
{
    (void)state;
    const char *strs[] = {"END", NULL};
    stop *s = make(strs, 0);
    run r;
    run_init(&r);
    assert_int_equal(feed(s, &r, "Hello END world"), 6);
    assert_int_equal(r.matched, 0);
    assert_int_equal(stop_matched(s), 0);
    assert_int_equal(feed(s, &r, "more"), 0);
    assert_int_equal(flush(s, &r), 0);
    assert_string_equal(r.text, "Hello ");
    assert_string_equal(stop_str(s, 0), "END");
    assert_null(stop_str(s, 1));
    stop_destroy(s);
}

/* A possible start is held back, exactly as long as it is a proper prefix
 * of a stop string, and released once it cannot be one. */
static void test_stop_holdback_released(void **state)
{
    (void)state;
    const char *strs[] = {"END", NULL};
    stop *s = make(strs, 0);
    run r;
    run_init(&r);
    assert_int_equal(feed(s, &r, "Hello E"), 6);
    assert_int_equal(stop_held(s), 1);
    assert_int_equal(feed(s, &r, "N"), 0);
    assert_int_equal(stop_held(s), 2);
    assert_int_equal(feed(s, &r, "D"), 0);
    assert_int_equal(r.matched, 0);
    assert_string_equal(r.text, "Hello ");
    stop_destroy(s);

    s = make(strs, 0);
    run_init(&r);
    feed(s, &r, "Hello EN");
    assert_int_equal(stop_held(s), 2);
    /* "ENE": "EN" cannot start a stop string any more, "E" still can. */
    assert_int_equal(feed(s, &r, "E"), 2);
    assert_int_equal(stop_held(s), 1);
    assert_string_equal(r.text, "Hello EN");
    assert_int_equal(feed(s, &r, "x"), 2);
    assert_string_equal(r.text, "Hello ENEx");
    assert_int_equal(r.matched, -1);
    stop_destroy(s);
}

/* The end of a sequence releases what is held. */
static void test_stop_flush_releases_held(void **state)
{
    (void)state;
    const char *strs[] = {"</answer>", NULL};
    stop *s = make(strs, 0);
    run r;
    run_init(&r);
    feed(s, &r, "42 </ans");
    assert_string_equal(r.text, "42 ");
    assert_int_equal(flush(s, &r), 5);
    assert_string_equal(r.text, "42 </ans");
    assert_int_equal(r.matched, -1);
    assert_int_equal(stop_held(s), 0);
    stop_destroy(s);
}

/* A stop string arriving one byte at a time, after a false start. */
static void test_stop_one_byte_feeds(void **state)
{
    (void)state;
    const char *strs[] = {"</answer>", NULL};
    stop *s = make(strs, 0);
    run r;
    run_init(&r);
    const char *text = "abc</answ</answer>zzz";
    for (const char *p = text; *p; p++) {
        char one[2] = {*p, 0};
        feed(s, &r, one);
    }
    flush(s, &r);
    assert_string_equal(r.text, "abc</answ");
    assert_int_equal(r.matched, 0);
    stop_destroy(s);
}

/* Several stop strings: the one that occurs first in the text wins, whatever
 * its place in the list. */
static void test_stop_multiple_earliest_wins(void **state)
{
    (void)state;
    const char *strs[] = {"foo", "bar", NULL};
    stop *s = make(strs, 0);
    run r;
    run_init(&r);
    feed(s, &r, "xxbarxxfoo");
    assert_string_equal(r.text, "xx");
    assert_int_equal(r.matched, 1);
    stop_destroy(s);
}

/* Overlapping stop strings "ab" and "b": "ab" starts earlier in "cab";
 * "b" alone in "cb". */
static void test_stop_overlapping(void **state)
{
    (void)state;
    const char *strs[] = {"b", "ab", NULL};
    stop *s = make(strs, 0);
    run r;
    run_init(&r);
    feed(s, &r, "c");
    feed(s, &r, "a");
    assert_string_equal(r.text, "c");
    feed(s, &r, "b");
    assert_string_equal(r.text, "c");
    assert_int_equal(r.matched, 1);
    stop_destroy(s);

    s = make(strs, 0);
    run_init(&r);
    feed(s, &r, "cb");
    assert_string_equal(r.text, "c");
    assert_int_equal(r.matched, 0);
    stop_destroy(s);
}

/* One stop string a prefix of another: on an equal start the shorter one
 * completes first and wins, without waiting for the longer one. */
static void test_stop_prefix_of_another(void **state)
{
    (void)state;
    const char *strs[] = {"abc", "ab", NULL};
    stop *s = make(strs, 0);
    run r;
    run_init(&r);
    feed(s, &r, "x");
    feed(s, &r, "a");
    assert_int_equal(r.matched, -1);
    feed(s, &r, "b");
    assert_int_equal(r.matched, 1);
    assert_string_equal(r.text, "x");
    stop_destroy(s);
}

/* A complete occurrence inside a possible longer one that starts earlier
 * waits for it: stop strings "bcd" and "c". */
static void test_stop_inner_match_waits(void **state)
{
    (void)state;
    const char *strs[] = {"bcd", "c", NULL};
    stop *s = make(strs, 0);
    run r;
    /* "bcd" completes: it starts first. */
    run_init(&r);
    feed(s, &r, "ab");
    feed(s, &r, "c");
    assert_int_equal(r.matched, -1);
    assert_string_equal(r.text, "a");
    assert_int_equal(stop_held(s), 2);
    feed(s, &r, "d");
    assert_int_equal(r.matched, 0);
    assert_string_equal(r.text, "a");
    stop_destroy(s);
    /* "bcd" fails: the waiting "c" is final. */
    s = make(strs, 0);
    run_init(&r);
    feed(s, &r, "abc");
    feed(s, &r, "x");
    assert_int_equal(r.matched, 1);
    assert_string_equal(r.text, "ab");
    stop_destroy(s);
    /* The sequence ends while "c" waits: the flush makes it final. */
    s = make(strs, 0);
    run_init(&r);
    feed(s, &r, "abc");
    assert_int_equal(flush(s, &r), 1); /* "b" */
    assert_int_equal(r.matched, 1);
    assert_string_equal(r.text, "ab");
    stop_destroy(s);
}

/* A stop string at the very start: nothing at all is emitted. */
static void test_stop_at_start(void **state)
{
    (void)state;
    const char *strs[] = {"###", NULL};
    stop *s = make(strs, 0);
    run r;
    run_init(&r);
    assert_int_equal(feed(s, &r, "#"), 0);
    assert_int_equal(feed(s, &r, "##rest"), 0);
    assert_int_equal(r.matched, 0);
    assert_int_equal(flush(s, &r), 0);
    assert_int_equal(r.len, 0);
    stop_destroy(s);
}

/* include_in_output (vLLM's include_stop_str_in_output): the matched stop
 * string is emitted too, nothing after it. */
static void test_stop_include_in_output(void **state)
{
    (void)state;
    const char *strs[] = {"END", NULL};
    stop *s = make(strs, 1);
    run r;
    run_init(&r);
    feed(s, &r, "Hello E");
    feed(s, &r, "ND and more");
    assert_string_equal(r.text, "Hello END");
    assert_int_equal(r.matched, 0);
    stop_destroy(s);
}

/* Multi-byte stop strings, fed one character at a time. */
static void test_stop_utf8(void **state)
{
    (void)state;
    const char *strs[] = {"。", "\xF0\x9F\x9B\x91", NULL}; /* U+3002, U+1F6D1 */
    stop *s = make(strs, 0);
    run r;
    run_init(&r);
    const char *chars[] = {"你", "好", "。", "再", "见"};
    for (int i = 0; i < 5; i++)
        feed(s, &r, chars[i]);
    assert_string_equal(r.text, "你好");
    assert_int_equal(r.matched, 0);
    stop_destroy(s);

    s = make(strs, 0);
    run_init(&r);
    feed(s, &r, "stop \xF0\x9F\x98\x80 ");
    feed(s, &r, "\xF0\x9F\x9B\x91");
    assert_string_equal(r.text, "stop \xF0\x9F\x98\x80 ");
    assert_int_equal(r.matched, 1);
    stop_destroy(s);

    /* A two-emoji stop string: one emoji is held whole, then released. */
    const char *two[] = {"\xF0\x9F\x98\x80\xF0\x9F\x98\x80", NULL};
    s = make(two, 0);
    run_init(&r);
    feed(s, &r, "a\xF0\x9F\x98\x80");
    assert_string_equal(r.text, "a");
    assert_int_equal(stop_held(s), 4);
    feed(s, &r, "b");
    assert_string_equal(r.text, "a\xF0\x9F\x98\x80" "b");
    stop_destroy(s);
}

/* Empty stop strings never match; a list of only empty ones passes through. */
static void test_stop_empty_strings_ignored(void **state)
{
    (void)state;
    const char *only[] = {"", NULL};
    stop *s = make(only, 0);
    run r;
    run_init(&r);
    assert_int_equal(stop_max_hold(s), 0);
    feed(s, &r, "abc");
    assert_string_equal(r.text, "abc");
    stop_destroy(s);

    const char *mixed[] = {"", "c", NULL};
    s = make(mixed, 0);
    run_init(&r);
    feed(s, &r, "abc");
    assert_string_equal(r.text, "ab");
    assert_int_equal(r.matched, 1);
    stop_destroy(s);
}

/* reset: a matcher serves a new sequence from scratch. */
static void test_stop_reset(void **state)
{
    (void)state;
    const char *strs[] = {"xy", NULL};
    stop *s = make(strs, 0);
    run r;
    run_init(&r);
    feed(s, &r, "axy");
    assert_int_equal(r.matched, 0);
    stop_reset(s);
    assert_int_equal(stop_matched(s), -1);
    run_init(&r);
    feed(s, &r, "bx");
    stop_reset(s);
    assert_int_equal(stop_held(s), 0);
    feed(s, &r, "y");
    assert_string_equal(r.text, "by");
    assert_int_equal(r.matched, -1);
    stop_destroy(s);
}

/* Bad arguments are INF_ERR_INVALID with a message. */
static void test_stop_create_invalid(void **state)
{
    (void)state;
    stop *s = (stop *)1;
    inf_err e = {0};
    stop_config c = stop_config_default();
    c.n = -1;
    assert_int_equal(stop_create(&c, &s, &e), INF_ERR_INVALID);
    const char *strs[] = {"a", NULL};
    c.strs = strs;
    c.n = 2;
    e.msg[0] = 0;
    assert_int_equal(stop_create(&c, &s, &e), INF_ERR_INVALID);
    assert_null(s);
    assert_true(strlen(e.msg) > 0);
    stop_destroy(NULL);
}

/* ------------------------------------------------------------- randomized */

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static int rng_int(uint64_t *x, int n)
{
    return (int)(rng_next(x) % (uint64_t)n);
}

/* Units text and stop strings are made of: few, so occurrences and overlaps
 * are common; multi-byte ones so byte-level prefixes appear. */
static const char *const UNITS[] = {"a", "b", "c", "\xC3\xA9", "\xF0\x9F\x98\x80"};
#define N_UNITS 5

/* The reference: the earliest occurrence in t[0:m], shortest first on an
 * equal start, lower index on equal strings. Returns its index or -1. */
static int ref_earliest(const char *t, size_t m, char strs[][32], int n, size_t *at)
{
    for (size_t i = 0; i < m; i++) {
        int best = -1;
        for (int k = 0; k < n; k++) {
            size_t l = strlen(strs[k]);
            if (l && l <= m - i && memcmp(t + i, strs[k], l) == 0 &&
                (best < 0 || l < strlen(strs[best])))
                best = k;
        }
        if (best >= 0) {
            *at = i;
            return best;
        }
    }
    return -1;
}

/* The reference hold-back: where the longest suffix of t[0:m] that is a
 * proper prefix of some stop string starts (m when none). */
static size_t ref_hold(const char *t, size_t m, char strs[][32], int n)
{
    for (size_t j = 0; j < m; j++)
        for (int k = 0; k < n; k++)
            if (strlen(strs[k]) > m - j && memcmp(t + j, strs[k], m - j) == 0)
                return j;
    return m;
}

/* Whole UTF-8 characters: no chunk starts or ends inside one. */
static int utf8_whole(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
        if (l == 0 || i + l > n)
            return 0;
        i += l;
    }
    return 1;
}

/* Random stop lists and texts, fed in random chunks (at character
 * boundaries, or at any byte when bytewise): after every feed the output so
 * far is exactly what the reference says (the text up to the hold-back, or
 * up to the match once it is final), a prefix of the final answer; after the
 * flush the output is the whole text cut at its earliest occurrence. */
static void test_stop_random_vs_reference(void **state)
{
    (void)state;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (int iter = 0; iter < 20000; iter++) {
        char strs[4][32];
        const char *ptrs[5];
        int n = rng_int(&rng, 5);
        for (int k = 0; k < n; k++) {
            int units = 1 + rng_int(&rng, 4);
            strs[k][0] = 0;
            for (int u = 0; u < units; u++)
                strcat(strs[k], UNITS[rng_int(&rng, N_UNITS)]);
            ptrs[k] = strs[k];
        }
        ptrs[n] = NULL;
        int include = rng_int(&rng, 2);
        int bytewise = rng_int(&rng, 2);

        /* The text, with its character boundaries. */
        char text[256];
        size_t bounds[64], m = 0;
        int n_units = rng_int(&rng, 40);
        bounds[0] = 0;
        for (int u = 0; u < n_units; u++) {
            const char *unit = UNITS[rng_int(&rng, N_UNITS)];
            memcpy(text + m, unit, strlen(unit));
            m += strlen(unit);
            bounds[u + 1] = m;
        }
        text[m] = 0;

        /* The final answer. */
        size_t at = 0, want_len = m;
        int want = ref_earliest(text, m, strs, n, &at);
        if (want >= 0)
            want_len = at + (include ? strlen(strs[want]) : 0);

        stop *s = make(n ? ptrs : NULL, include);
        run r;
        run_init(&r);
        size_t fed = 0;
        int u = 0, done = 0;
        while (fed < m) {
            size_t next;
            if (bytewise) {
                next = fed + (size_t)rng_int(&rng, 7);
                if (next > m)
                    next = m;
            } else {
                u += rng_int(&rng, 4);
                if (u > n_units)
                    u = n_units;
                next = bounds[u];
            }
            char chunk[256];
            memcpy(chunk, text + fed, next - fed);
            chunk[next - fed] = 0;
            size_t before = r.len;
            feed(s, &r, chunk);
            fed = next;
            if (!bytewise)
                assert_true(utf8_whole(r.text + before, r.len - before));

            /* Exactly the reference state after this feed. */
            if (!done) {
                size_t a = 0, h = ref_hold(text, fed, strs, n);
                int k = ref_earliest(text, fed, strs, n, &a);
                if (k >= 0 && a <= h) {
                    assert_int_equal(r.matched, k);
                    assert_int_equal(r.len, a + (include ? strlen(strs[k]) : 0));
                    done = 1;
                } else {
                    assert_int_equal(r.matched, -1);
                    assert_int_equal(r.len, h);
                    assert_int_equal(stop_held(s), fed - h);
                }
            }
            assert_true(r.len <= want_len);
            assert_memory_equal(r.text, text, r.len);
        }
        size_t before = r.len;
        flush(s, &r);
        if (!bytewise)
            assert_true(utf8_whole(r.text + before, r.len - before));
        assert_int_equal(r.matched, want);
        assert_int_equal(r.len, want_len);
        assert_memory_equal(r.text, text, want_len);
        stop_destroy(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_none_pass_through),
        cmocka_unit_test(test_stop_single_match_in_one_feed),
        cmocka_unit_test(test_stop_holdback_released),
        cmocka_unit_test(test_stop_flush_releases_held),
        cmocka_unit_test(test_stop_one_byte_feeds),
        cmocka_unit_test(test_stop_multiple_earliest_wins),
        cmocka_unit_test(test_stop_overlapping),
        cmocka_unit_test(test_stop_prefix_of_another),
        cmocka_unit_test(test_stop_inner_match_waits),
        cmocka_unit_test(test_stop_at_start),
        cmocka_unit_test(test_stop_include_in_output),
        cmocka_unit_test(test_stop_utf8),
        cmocka_unit_test(test_stop_empty_strings_ignored),
        cmocka_unit_test(test_stop_reset),
        cmocka_unit_test(test_stop_create_invalid),
        cmocka_unit_test(test_stop_random_vs_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
