/* tokenizer.json: each stage on small hand-made inputs whose expected
 * output follows from the tokenizers library's definitions (the folds of
 * NormalizedString::split, BPE merge ranks, the decoders), the loader's
 * errors, and which file a directory's tokenizer comes from. The real
 * tokenizers are checked against @lenml/tokenizers in
 * tests/e2e/tokenizer.test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/tok.h"
#include "engine/tok_hf.h"
#include "engine/tok_int.h"
#include "tests/tdir.h"

/* ------------------------------------------------------------------ helpers */

/* The pieces of s joined with '|'. */
static char *joined(const hf_splits *s)
{
    inf_buf b = {0};
    for (size_t i = 0; i < s->n; i++) {
        if (i)
            inf_buf_put(&b, "|", 1);
        inf_buf_put(&b, s->buf.p + s->v[i].off, s->v[i].len);
    }
    inf_buf_put(&b, "", 0);
    assert_false(b.oom);
    return b.p;
}

/* Runs pre-tokenizer p over text and checks the pieces. */
static void expect_pre(const hf_pre *p, const char *text, int first, const char *want)
{
    hf_splits s = {0}, tmp = {0};
    hf_splits_add(&s, text, strlen(text), first);
    assert_int_equal(hf_pre_apply(p, &s, &tmp), INF_OK);
    char *got = joined(&s);
    assert_string_equal(got, want);
    free(got);
    hf_splits_free(&s);
    hf_splits_free(&tmp);
}

static tok *open_json(const char *json)
{
    tok *t = NULL;
    inf_err e = {0};
    int rc = tok_hf_open(json, strlen(json), "test.json", NULL, &t, &e);
    if (rc)
        print_message("tok_hf_open: %s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    return t;
}

/* Encodes text and compares with want[0:n]. */
static void expect_ids(const tok *t, const char *text, unsigned flags, const int32_t *want, int n)
{
    int32_t *ids = NULL;
    int k = 0;
    inf_err e = {0};
    assert_int_equal(tok_encode_ex(t, text, strlen(text), flags, &ids, &k, &e), INF_OK);
    if (k != n || memcmp(ids, want, (size_t)n * sizeof *ids) != 0) {
        for (int i = 0; i < k; i++)
            print_message("%d ", ids[i]);
        print_message("<- got for \"%s\"\n", text);
    }
    assert_int_equal(k, n);
    assert_memory_equal(ids, want, (size_t)n * sizeof *ids);
    free(ids);
}

static void expect_decode(const tok *t, const int32_t *ids, int n, const char *want)
{
    char *s = NULL;
    size_t len = 0;
    inf_err e = {0};
    assert_int_equal(tok_decode(t, ids, n, &s, &len, &e), INF_OK);
    assert_int_equal(len, strlen(want));
    assert_string_equal(s, want);
    free(s);
}

/* The load error of json, which must contain each of the strings. */
static void expect_error(const char *json, int code, const char *a, const char *b)
{
    tok *t = NULL;
    inf_err e = {0};
    assert_int_equal(tok_hf_open(json, strlen(json), "x/tokenizer.json", NULL, &t, &e), code);
    assert_null(t);
    if (!strstr(e.msg, a) || (b && !strstr(e.msg, b)))
        print_message("message: %s\n", e.msg);
    assert_non_null(strstr(e.msg, "x/tokenizer.json"));
    assert_non_null(strstr(e.msg, a));
    if (b)
        assert_non_null(strstr(e.msg, b));
}

/* ------------------------------------------------------- pre-tokenizers */

/* Split on "-" with each behaviour: the folds of NormalizedString::split
 * over a|-|b|-|-|c (match / non-match), and invert swapping the two. */
static void test_tok_hf_split_behaviours(void **state)
{
    (void)state;
    hf_pre p = {.kind = HF_P_SPLIT, .pat = {.lit = "-", .lit_len = 1}, .has_pat = 1};
    const struct { hf_behavior b; int invert; const char *want; } cases[] = {
        {HF_B_REMOVED, 0, "a|b|c"},
        {HF_B_ISOLATED, 0, "a|-|b|-|-|c"},
        {HF_B_MERGED_PREV, 0, "a-|b-|-|c"},
        {HF_B_MERGED_NEXT, 0, "a|-b|-|-c"},
        {HF_B_CONTIGUOUS, 0, "a|-|b|--|c"},
        {HF_B_REMOVED, 1, "-|-|-"},
        {HF_B_MERGED_PREV, 1, "a|-b|-|-c"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        p.behavior = cases[i].b;
        p.invert = cases[i].invert;
        expect_pre(&p, "a-b--c", 1, cases[i].want);
    }
}

/* Regexes: \s is Oniguruma's (U+180E is not white space, U+3000 is); an
 * empty match moves on by a whole character, never into one. */
static void test_tok_hf_regex_space_and_empty_matches(void **state)
{
    (void)state;
    char msg[300];
    hf_pre p = {.kind = HF_P_SPLIT, .has_pat = 1, .behavior = HF_B_REMOVED, .pat = {.is_re = 1}};
    assert_int_equal(hf_re_compile(&p.pat.re, "\\s+", 3, msg, sizeof msg), INF_OK);
    expect_pre(&p, "a\xE1\xA0\x8E" "b c\xE3\x80\x80" "d", 1, "a\xE1\xA0\x8E" "b|c|d");
    hf_re_free(&p.pat.re);
    /* [^\s] inside a class, and \S. */
    assert_int_equal(hf_re_compile(&p.pat.re, "[^\\s]+|\\S", 9, msg, sizeof msg), INF_OK);
    p.behavior = HF_B_ISOLATED;
    expect_pre(&p, "x\xE1\xA0\x8E y", 1, "x\xE1\xA0\x8E| |y");
    hf_re_free(&p.pat.re);
    assert_int_equal(hf_re_compile(&p.pat.re, "x*", 2, msg, sizeof msg), INF_OK);
    expect_pre(&p, "\xC3\xA9" "ax\xE6\xBC\xA2", 1, "\xC3\xA9|a|x|\xE6\xBC\xA2");
    hf_re_free(&p.pat.re);
    assert_int_equal(hf_re_compile(&p.pat.re, "(", 1, msg, sizeof msg), INF_ERR_FORMAT);
    assert_non_null(strstr(msg, "PCRE2"));
}

/* Digits, Punctuation, Whitespace, WhitespaceSplit, Metaspace and
 * ByteLevel on one piece each. */
static void test_tok_hf_pretokenizers(void **state)
{
    (void)state;
    hf_pre d = {.kind = HF_P_DIGITS, .individual = 1};
    expect_pre(&d, "ab123c4", 1, "ab|1|2|3|c|4");
    d.individual = 0;
    expect_pre(&d, "ab123c4", 1, "ab|123|c|4");
    hf_pre pu = {.kind = HF_P_PUNCT, .behavior = HF_B_ISOLATED};
    expect_pre(&pu, "hi, there!?", 1, "hi|,| there|!|?");
    hf_pre ws = {.kind = HF_P_WSSPLIT};
    expect_pre(&ws, "  a\tb \n c ", 1, "a|b|c");
    hf_pre w = {.kind = HF_P_WHITESPACE, .has_pat = 1, .pat = {.is_re = 1}};
    char msg[300];
    assert_int_equal(hf_re_compile(&w.pat.re, "\\w+|[^\\w\\s]+", 12, msg, sizeof msg), INF_OK);
    expect_pre(&w, "Hey friend!  How?", 1, "Hey|friend|!|How|?");
    hf_re_free(&w.pat.re);

    hf_pre m = {.kind = HF_P_METASPACE, .repl = "\xE2\x96\x81", .repl_len = 3, .split = 1,
                .prepend = HF_PREPEND_ALWAYS};
    expect_pre(&m, "Hey  you", 0, "\xE2\x96\x81Hey|\xE2\x96\x81|\xE2\x96\x81you");
    m.prepend = HF_PREPEND_FIRST;
    expect_pre(&m, "Hey", 1, "\xE2\x96\x81Hey");
    expect_pre(&m, "Hey", 0, "Hey"); /* not at the start of the input */
    m.split = 0;
    m.prepend = HF_PREPEND_NEVER;
    expect_pre(&m, "a b", 1, "a\xE2\x96\x81" "b");

    hf_pre bl = {.kind = HF_P_BYTELEVEL, .add_prefix_space = 1};
    /* ' ' is U+0120, '\n' U+010A, and 0xC3 0xA9 stay as themselves. */
    expect_pre(&bl, "hi\n\xC3\xA9", 1, "\xC4\xA0hi\xC4\x8A\xC3\x83\xC2\xA9");
    assert_int_equal(hf_byte_char(' '), 0x120);
    assert_int_equal(hf_char_byte(0x120), ' ');
    for (int b = 0; b < 256; b++)
        assert_int_equal(hf_char_byte(hf_byte_char((unsigned char)b)), b);
}

/* ----------------------------------------------------------- normalizers */

static void expect_norm(const hf_norm *n, const char *in, const char *want)
{
    inf_buf out = {0};
    assert_int_equal(hf_norm_apply(n, in, strlen(in), &out), INF_OK);
    assert_int_equal(out.len, strlen(want));
    assert_memory_equal(out.p ? out.p : "", want, out.len);
    free(out.p);
}

static void test_tok_hf_normalizers(void **state)
{
    (void)state;
    hf_norm nfc = {.kind = HF_N_NFC}, nfkc = {.kind = HF_N_NFKC}, lower = {.kind = HF_N_LOWER};
    expect_norm(&nfc, "e\xCC\x81", "\xC3\xA9");          /* e + U+0301 -> é */
    expect_norm(&nfc, "\xEF\xAC\x81", "\xEF\xAC\x81");   /* ﬁ stays under NFC */
    expect_norm(&nfkc, "\xEF\xAC\x81\xE2\x91\xA0", "fi1"); /* ﬁ① -> fi1 */
    expect_norm(&lower, "ÀB\xC3\x9C", "àb\xC3\xBC");
    hf_norm seq[2] = {{.kind = HF_N_PREPEND, .str = "\xE2\x96\x81", .str_len = 3},
                      {.kind = HF_N_REPLACE, .pat = {.lit = " ", .lit_len = 1}, .str = "\xE2\x96\x81",
                       .str_len = 3}};
    hf_norm s = {.kind = HF_N_SEQ, .sub = seq, .n_sub = 2};
    expect_norm(&s, "a b", "\xE2\x96\x81" "a\xE2\x96\x81" "b");
    expect_norm(&s, "", ""); /* Prepend leaves an empty text alone */
    hf_norm strip = {.kind = HF_N_STRIP, .left = 1, .right = 0};
    expect_norm(&strip, " \t a b \n", "a b \n");
}

/* ---------------------------------------------------- whole tokenizers */

/* A byte-fallback BPE over a SentencePiece-style alphabet: Llama 2's
 * tokenizer.json layout in miniature. */
static const char *FALLBACK_JSON =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true},{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
    "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0xE2>\":3,\"<0x82>\":4,\"<0xAC>\":5,\"<0xFF>\":6,"
    "\"\\u2581\":7,\"l\":8,\"o\":9,\"w\":10,\"e\":11,\"r\":12,\"lo\":13,\"low\":14,\"\\u2581low\":15,"
    "\"er\":16,\"\\u2581lower\":17,\"\\u2581l\":18},"
    "\"merges\":[\"l o\",\"lo w\",\"\\u2581 low\",\"e r\",[\"\\u2581low\",\"er\"],\"\\u2581 l\"]}}";

/* Merges apply by rank, not left to right: "▁ l" (rank 5) would pair
 * first from the left, but "l o" (rank 0) wins and leads to ▁lower. A
 * character outside the vocabulary becomes its <0xNN> bytes; one with no
 * byte pieces becomes <unk>, consecutive ones fused into one. */
static void test_tok_hf_bpe_fallback(void **state)
{
    (void)state;
    tok *t = open_json(FALLBACK_JSON);
    assert_string_equal(tok_kind(t), "tokenizer.json");
    assert_int_equal(tok_vocab_size(t), 19);
    expect_ids(t, "lower", 0, (int32_t[]){17}, 1);
    expect_ids(t, "low low", 0, (int32_t[]){15, 15}, 2);
    expect_ids(t, "lower", TOK_ADD_SPECIAL, (int32_t[]){1, 17}, 2);
    /* € is E2 82 AC: all three byte pieces exist. */
    expect_ids(t, "\xE2\x82\xAC", 0, (int32_t[]){7, 3, 4, 5}, 4);
    /* ä (C3 A4) and ö have no byte pieces: one fused <unk>. */
    expect_ids(t, "\xC3\xA4\xC3\xB6l", 0, (int32_t[]){7, 0, 8}, 3);
    /* Special tokens in the text are split out first, the rest normalized
     * on its own (Prepend again after <s>, as Llama 2's file does). */
    expect_ids(t, "<s>low", 0, (int32_t[]){1, 15}, 2);
    /* Decoding: the word marker as a space, the first one stripped; a
     * valid byte run as its character; an invalid one as one U+FFFD per
     * byte; special tokens left out. */
    expect_decode(t, (int32_t[]){1, 15, 17}, 3, "low lower");
    expect_decode(t, (int32_t[]){7, 3, 4, 5, 8}, 5, "\xE2\x82\xAC" "l");
    expect_decode(t, (int32_t[]){8, 3, 6, 8}, 4, "l\xEF\xBF\xBD\xEF\xBF\xBDl");
    /* What each token stands for alone. */
    size_t n = 0;
    const char *b = tok_token_bytes(t, 15, &n);
    assert_int_equal(n, 4);
    assert_memory_equal(b, " low", 4);
    b = tok_token_bytes(t, 6, &n);
    assert_int_equal(n, 1);
    assert_int_equal((unsigned char)b[0], 0xFF);
    assert_true(tok_is_special(t, 1));
    assert_false(tok_is_special(t, 15));
    tok_destroy(t);
}

/* A byte-level BPE (GPT-2 / Llama 3 layout) with added tokens carrying
 * lstrip, rstrip and single_word, ignore_merges and a Metaspace-free
 * decoder. */
static const char *BYTELEVEL_JSON =
    "{\"added_tokens\":[{\"id\":10,\"content\":\"<|eot|>\",\"special\":true},"
    "{\"id\":11,\"content\":\"<m>\",\"lstrip\":true,\"rstrip\":true,\"special\":false},"
    "{\"id\":12,\"content\":\"cat\",\"single_word\":true,\"special\":false}],"
    "\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"post_processor\":{\"type\":\"RobertaProcessing\",\"cls\":[\"<|eot|>\",10],\"sep\":[\"<|eot|>\",10]},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"t\":3,"
    "\"\\u0120\":4,\"ab\":5,\"\\u0120a\":6,\"\\u0120ab\":7,\"abc\":8,\"\\u00c3\":9,"
    "\"\\u00a9\":13,\"\\u00c3\\u00a9\":14},"
    "\"merges\":[[\"a\",\"b\"],[\"\\u0120\",\"a\"],[\"\\u0120a\",\"b\"],\"\\u00c3 \\u00a9\"]}}";

static void test_tok_hf_bytelevel_added(void **state)
{
    (void)state;
    tok *t = open_json(BYTELEVEL_JSON);
    /* "abc" is in the vocabulary: ignore_merges takes it whole, though no
     * merge makes it. */
    expect_ids(t, "abc", 0, (int32_t[]){8}, 1);
    expect_ids(t, "ab ab", 0, (int32_t[]){5, 7}, 2);
    expect_ids(t, "\xC3\xA9", 0, (int32_t[]){14}, 1);
    /* <m> takes the white space on both sides with it. */
    expect_ids(t, "a  <m>  b", 0, (int32_t[]){0, 11, 1}, 3);
    /* "cat" as a single word only: not inside "bcat" or "cats". */
    expect_ids(t, "b cat", 0, (int32_t[]){1, 4, 12}, 3);
    expect_ids(t, "bcat", 0, (int32_t[]){1, 2, 0, 3}, 4);
    /* RobertaProcessing puts cls and sep around. */
    expect_ids(t, "ab", TOK_ADD_SPECIAL, (int32_t[]){10, 5, 10}, 3);
    /* Decoding maps the byte-level alphabet back; specials left out. */
    expect_decode(t, (int32_t[]){10, 5, 7, 14, 10}, 5, "ab ab\xC3\xA9");
    /* Half a character decodes as U+FFFD; token bytes give the byte. */
    expect_decode(t, (int32_t[]){9}, 1, "\xEF\xBF\xBD");
    size_t n = 0;
    const char *b = tok_token_bytes(t, 9, &n);
    assert_int_equal(n, 1);
    assert_int_equal((unsigned char)b[0], 0xC3);
    /* Invalid UTF-8 in the text is U+FFFD's bytes (EF BF BD), none of
     * which this vocabulary has: no ids, and no crash. */
    int32_t *ids = NULL;
    int k = -1;
    inf_err e = {0};
    assert_int_equal(tok_encode(t, "\xFF", 1, 0, &ids, &k, &e), INF_OK);
    assert_int_equal(k, 0);
    free(ids);
    tok_destroy(t);
}

/* An added token whose content is not valid UTF-8 (here the byte A9, the
 * second byte of "é") would match inside a character and cut it in two;
 * the text is valid UTF-8 by then, so it is never matched: "é" encodes as
 * without it. (A GGUF control token did this to the Qwen 2 pre-tokenizer's
 * regex, run on half a character: fuzz/regress/gguf_tok.) */
static void test_tok_hf_added_not_utf8_never_matched(void **state)
{
    (void)state;
    const char *head = "{\"added_tokens\":[";
    size_t hl = strlen(head);
    assert_memory_equal(BYTELEVEL_JSON, head, hl);
    char json[4096];
    snprintf(json, sizeof json, "%s{\"id\":15,\"content\":\"\xA9\",\"special\":true},%s", head,
             BYTELEVEL_JSON + hl);
    tok *t = open_json(json);
    expect_ids(t, "\xC3\xA9", 0, (int32_t[]){14}, 1);
    expect_ids(t, "ab\xC3\xA9 ab", 0, (int32_t[]){5, 14, 7}, 3);
    tok_destroy(t);
}

/* The stream holds a byte-level piece that ends inside a character, and
 * the one before it when the character began there. */
static void test_tok_hf_stream_bytelevel(void **state)
{
    (void)state;
    tok *t = open_json(BYTELEVEL_JSON);
    tok_stream *s = NULL;
    inf_err e = {0};
    const char *c;
    size_t n;
    assert_int_equal(tok_stream_create(t, NULL, 0, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, 5, &c, &n, &e), INF_OK);
    assert_int_equal(n, 2);
    assert_int_equal(tok_stream_push(s, 9, &c, &n, &e), INF_OK); /* C3: held */
    assert_int_equal(n, 0);
    assert_int_equal(tok_stream_push(s, 13, &c, &n, &e), INF_OK); /* A9: é */
    assert_int_equal(n, 2);
    assert_memory_equal(c, "\xC3\xA9", 2);
    assert_int_equal(tok_stream_push(s, 9, &c, &n, &e), INF_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tok_stream_flush(s, &c, &n, &e), INF_OK); /* lone C3 */
    assert_int_equal(n, 3);
    assert_memory_equal(c, "\xEF\xBF\xBD", 3);
    tok_stream_destroy(s);
    tok_destroy(t);
}

/* skip_special_tokens false: special tokens stay, in decode and stream. */
static void test_tok_hf_keep_special(void **state)
{
    (void)state;
    tok *t = open_json(BYTELEVEL_JSON);
    const int32_t ids[] = {10, 5, 10};
    char *s = NULL;
    size_t n = 0;
    inf_err e = {0};
    assert_int_equal(tok_decode_ex(t, ids, 3, TOK_KEEP_SPECIAL, &s, &n, &e), INF_OK);
    assert_string_equal(s, "<|eot|>ab<|eot|>");
    free(s);
    expect_decode(t, ids, 3, "ab");
    tok_stream *st = NULL;
    assert_int_equal(tok_stream_create_ex(t, NULL, 0, TOK_KEEP_SPECIAL, &st, &e), INF_OK);
    inf_buf all = {0};
    for (int i = 0; i <= 3; i++) {
        const char *c;
        size_t cl;
        assert_int_equal(i < 3 ? tok_stream_push(st, ids[i], &c, &cl, &e)
                               : tok_stream_flush(st, &c, &cl, &e), INF_OK);
        inf_buf_put(&all, c, cl);
    }
    assert_string_equal(all.p, "<|eot|>ab<|eot|>");
    free(all.p);
    tok_stream_destroy(st);
    tok_destroy(t);
}

/* Metaspace with prepend_scheme "first": only the start of the input gets
 * the marker, so text after a special token (TOK_AFTER_SPECIAL, or split
 * off one) does not. */
static void test_tok_hf_metaspace_first(void **state)
{
    (void)state;
    const char *json =
        "{\"added_tokens\":[{\"id\":0,\"content\":\"<s>\",\"special\":true}],"
        "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":false},"
        "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\"},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"<s>\":0,\"\\u2581\":1,\"a\":2,\"\\u2581a\":3},"
        "\"merges\":[\"\\u2581 a\"]}}";
    tok *t = open_json(json);
    expect_ids(t, "a", 0, (int32_t[]){3}, 1);
    expect_ids(t, "a", TOK_AFTER_SPECIAL, (int32_t[]){2}, 1);
    expect_ids(t, "<s>a", 0, (int32_t[]){0, 2}, 2);
    expect_ids(t, " a", TOK_AFTER_SPECIAL, (int32_t[]){3}, 1);
    expect_decode(t, (int32_t[]){3, 3}, 2, "a a");
    tok_destroy(t);
}

/* ------------------------------------------------------------- errors */

static void test_tok_hf_errors_name_the_path(void **state)
{
    (void)state;
    expect_error("[1,2]", INF_ERR_FORMAT, "not a JSON object", NULL);
    expect_error("{\"model\":", INF_ERR_FORMAT, "not a JSON object", NULL);
    expect_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", INF_ERR_UNSUPPORTED,
                 "model.type", "WordPiece");
    expect_error("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},"
                 "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Foo\"}]}}",
                 INF_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0].type", "Foo");
    expect_error("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":{\"type\":\"Precompiled\"}}",
                 INF_ERR_UNSUPPORTED, "normalizer.type", "Precompiled");
    expect_error("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"decoder\":{\"type\":\"CTC\"}}",
                 INF_ERR_UNSUPPORTED, "decoder.type", "CTC");
    expect_error("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},"
                 "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}}",
                 INF_ERR_FORMAT, "pre_tokenizer.pattern", "PCRE2");
    expect_error("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}", INF_ERR_FORMAT,
                 "model.merges[0]", "not in model.vocab");
    expect_error("{\"model\":{\"vocab\":{\"a\":-1},\"merges\":[]}}", INF_ERR_FORMAT,
                 "model.vocab[\"a\"]", "token id");
    expect_error("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[\"a a a\"]}}", INF_ERR_FORMAT,
                 "model.merges[0]", "two tokens");
    expect_error("{\"model\":{\"vocab\":{\"a\":0}},\"added_tokens\":[{\"content\":\"x\"}]}",
                 INF_ERR_FORMAT, "added_tokens[0].id", NULL);
    expect_error("{\"model\":{\"vocab\":{}}}", INF_ERR_FORMAT, "model.vocab", "empty");
}

/* ------------------------------------------------------- the JSON reader */

static void expect_js_str(const char *json, const char *want, size_t want_len)
{
    hf_js j = {json, json + strlen(json), NULL};
    inf_buf b = {0};
    assert_int_equal(hf_js_str(&j, &b), INF_OK);
    assert_int_equal(b.len, want_len);
    assert_memory_equal(b.p, want, want_len);
    assert_true(j.p == j.end);
    free(b.p);
}

/* Checks a value with hf_js_skip: INF_OK and its count, or a failure
 * whose message contains msg. */
static void expect_js_skip(const char *json, size_t count, const char *msg)
{
    hf_js j = {json, json + strlen(json), NULL};
    size_t n = 99;
    int rc = hf_js_skip(&j, &n);
    if (msg) {
        assert_int_equal(rc, INF_ERR_FORMAT);
        if (!j.msg || !strstr(j.msg, msg))
            print_message("for %s: %s\n", json, j.msg ? j.msg : "(none)");
        assert_non_null(strstr(j.msg, msg));
        return;
    }
    assert_int_equal(rc, INF_OK);
    assert_int_equal(n, count);
}

/* The tree-less reader of model.vocab and model.merges: RFC 8259 strings
 * (escapes, surrogate pairs) and values, and the errors it names. */
static void test_tok_hf_json_reader(void **state)
{
    (void)state;
    expect_js_str("\"a\\u00e9\\ud83d\\ude00\\n\\\"\\/\\\\x\"", "a\xC3\xA9\xF0\x9F\x98\x80\n\"/\\x", 12);
    expect_js_str("\"\"", "", 0);
    expect_js_str("\"nul\\u0000in\"", "nul\0in", 6);
    expect_js_skip("{\"a\":[1,2,{\"b\":null}],\"c\":true}", 2, NULL);
    expect_js_skip(" [1, -2.5e3, -0, \"x\", false, [], {}] ", 7, NULL);
    expect_js_skip("\"\\ud83d\"", 0, "unpaired surrogate");
    expect_js_skip("\"\\ude00x\"", 0, "unpaired surrogate");
    expect_js_skip("\"\\q\"", 0, "invalid escape");
    expect_js_skip("\"\\u12g4\"", 0, "invalid \\u escape");
    expect_js_skip("\"a\nb\"", 0, "control character");
    expect_js_skip("\"abc", 0, "unterminated");
    expect_js_skip("[1,]", 0, "expected a value");
    expect_js_skip("[1 2]", 0, "expected ','");
    expect_js_skip("{\"a\" 1}", 0, "expected ':'");
    expect_js_skip("{1:2}", 0, "expected a string");
    expect_js_skip("[01]", 0, "expected ','");
    expect_js_skip("[1.]", 0, "invalid number");
    expect_js_skip("tru", 0, "expected a value");
    char deep[1200];
    memset(deep, '[', 600);
    memset(deep + 600, ']', 600);
    deep[1199] = '\0';
    expect_js_skip(deep, 0, "nested too deeply");
    /* Through the loader: syntax errors anywhere, text after the object;
     * the first of two members of one name is the one read (as cJSON). */
    expect_error("{\"model\":{\"vocab\":{\"a\":0,}}}", INF_ERR_FORMAT, "not a JSON object",
                 "expected a string");
    expect_error("{\"model\":{\"vocab\":{\"a\":0}}} x", INF_ERR_FORMAT, "not a JSON object",
                 "text after");
    expect_error("", INF_ERR_FORMAT, "not a JSON object", NULL);
    expect_error("{\"model\":{\"vocab\":{\"a\":0.5}}}", INF_ERR_FORMAT, "model.vocab[\"a\"]",
                 "token id");
    tok *t = open_json("{\"model\":{\"vocab\":{\"a\":0,\"b\":1.0,\"ab\":2},\"merges\":[\"a b\"],"
                       "\"vocab\":{\"z\":0}},\"model\":null}");
    assert_int_equal(tok_vocab_size(t), 3);
    expect_ids(t, "ab", 0, (int32_t[]){2}, 1);
    tok_destroy(t);
}

/* ----------------------------------------------------- cutting long words */

/* A Metaspace vocabulary where "a" and U+2581 itself may precede U+2581
 * inside a token ("a\u2581", "\u2581\u2581"), so a word may be cut before
 * U+2581 only after other characters that are tokens of their own. */
#define M "\\u2581"
static const char *CUT_JSON =
    "{\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" M "\"},"
    "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"fuse_unk\":true,\"unk_token\":\"<unk>\","
    "\"vocab\":{\"<unk>\":0,\"" M "\":1,\"a\":2,\"b\":3,\"x\":4,\"a" M "\":5,\"" M "b\":6,"
    "\"" M "a\":7,\"ab\":8,\"" M "ab\":9,\"" M M "\":10,\"x" M "\":11,\"<0xC3>\":12,\"<0xA4>\":13},"
    "\"merges\":[\"a " M "\",\"" M " b\",\"" M " a\",\"a b\",\"" M " ab\",\"" M " " M "\"]}}";
#undef M

/* Cutting a word before U+2581 gives the ids BPE gives the whole word
 * (hf_bpe_word, which never cuts), and it cuts only where no token of the
 * vocabulary spans the cut. */
static void test_tok_hf_cut_exact(void **state)
{
    (void)state;
    tok *t = open_json(CUT_JSON);
    const hf_impl *h = t->impl;
    const char *s = "x\xE2\x96\x81" "b";
    assert_int_equal(hf_bpe_cut(h->bpe, s, strlen(s)), strlen(s)); /* "x\u2581" is a token */
    s = "b\xE2\x96\x81" "b";
    assert_int_equal(hf_bpe_cut(h->bpe, s, strlen(s)), 1);
    s = "a\xE2\x96\x81" "b";
    assert_int_equal(hf_bpe_cut(h->bpe, s, strlen(s)), strlen(s));
    s = "\xE2\x96\x81\xE2\x96\x81" "b";
    assert_int_equal(hf_bpe_cut(h->bpe, s, strlen(s)), strlen(s));
    s = "\xC3\xA4\xE2\x96\x81" "b"; /* a byte-fallback character before the marker */
    assert_int_equal(hf_bpe_cut(h->bpe, s, strlen(s)), strlen(s));
    inf_buf text = {0}, norm = {0};
    static const char *parts[] = {"a", "b", "x", "ab", "ba", " ", "  ", "\xC3\xA4", "q"};
    unsigned r = 12345;
    for (int i = 0; i < 4000; i++) {
        r = r * 1103515245u + 12345u;
        const char *p = parts[(r >> 16) % (sizeof parts / sizeof *parts)];
        inf_buf_put(&text, p, strlen(p));
    }
    assert_false(text.oom);
    int32_t *ids = NULL, *whole = NULL;
    int n = 0;
    size_t n_whole = 0, cap = 0;
    inf_err e = {0};
    assert_int_equal(tok_encode_ex(t, text.p, text.len, 0, &ids, &n, &e), INF_OK);
    assert_int_equal(hf_norm_apply(h->norm, text.p, text.len, &norm), INF_OK);
    hf_bpe_work *w = hf_bpe_work_create();
    assert_int_equal(hf_bpe_word(h->bpe, w, norm.p, norm.len, &whole, &n_whole, &cap), INF_OK);
    assert_int_equal((size_t)n, n_whole);
    assert_memory_equal(ids, whole, n_whole * sizeof *ids);
    hf_bpe_work_destroy(w);
    free(ids);
    free(whole);
    free(text.p);
    free(norm.p);
    tok_destroy(t);
}

/* ----------------------------------------------------- directory choice */

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_file(const char *dir, const char *name)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p);
}

/* tokenizer.json wins over tokenizer.model (here not a model at all, so
 * reading it would fail); tokenizer_config.json names BOS/EOS and adds
 * BOS once, whatever the post-processor does. */
static void test_tok_hf_dir_prefers_json(void **state)
{
    const char *d = ((tdir *)*state)->path;
    write_file(d, "tokenizer.json", FALLBACK_JSON);
    write_file(d, "tokenizer.model", "not a sentencepiece model");
    write_file(d, "tokenizer_config.json",
               "{\"add_bos_token\":true,\"add_eos_token\":true,\"bos_token\":\"<s>\","
               "\"eos_token\":{\"content\":\"</s>\"}}");
    tok *t = NULL;
    inf_err e = {0};
    assert_int_equal(tok_create(d, &t, &e), INF_OK);
    assert_string_equal(tok_kind(t), "tokenizer.json");
    assert_int_equal(tok_bos_id(t), 1);
    assert_int_equal(tok_eos_id(t), 2);
    assert_true(tok_adds_bos(t));
    expect_ids(t, "low", TOK_ADD_SPECIAL, (int32_t[]){1, 15, 2}, 3);
    tok_destroy(t);
    /* Without tokenizer.json, tokenizer.model is read: here an error. */
    remove_file(d, "tokenizer.json");
    assert_int_not_equal(tok_create(d, &t, &e), INF_OK);
    assert_null(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tok_hf_split_behaviours),
        cmocka_unit_test(test_tok_hf_regex_space_and_empty_matches),
        cmocka_unit_test(test_tok_hf_pretokenizers),
        cmocka_unit_test(test_tok_hf_normalizers),
        cmocka_unit_test(test_tok_hf_bpe_fallback),
        cmocka_unit_test(test_tok_hf_bytelevel_added),
        cmocka_unit_test(test_tok_hf_added_not_utf8_never_matched),
        cmocka_unit_test(test_tok_hf_stream_bytelevel),
        cmocka_unit_test(test_tok_hf_keep_special),
        cmocka_unit_test(test_tok_hf_metaspace_first),
        cmocka_unit_test(test_tok_hf_errors_name_the_path),
        cmocka_unit_test(test_tok_hf_json_reader),
        cmocka_unit_test(test_tok_hf_cut_exact),
        cmocka_unit_test_setup_teardown(test_tok_hf_dir_prefers_json, tdir_setup, tdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
