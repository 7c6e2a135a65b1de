/* Tokenizer: encode/decode against real SentencePiece models, BOS/EOS policy,
 * load errors, and the streaming detokenizer's invariants (valid UTF-8 chunks
 * whose concatenation is the whole decode).
 *
 * Models: the fixture $INFERD_TEST_FIXTURES/tiny (made by `make unit`), and,
 * when present, ../shared's Llama 2 tokenizer and stories260K (tests say
 * "skipped: ..." and are reported as skipped where those are absent). */
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
#include "tests/tdir.h"

#define LLAMA_MODEL "../shared/tokenizers/llama2-32000/tokenizer.model"
#define STORIES_DIR "../shared/models/stories260K"

/* ------------------------------------------------------------------ helpers */

static int file_exists(const char *path)
{
    return access(path, R_OK) == 0;
}

/* Strict UTF-8: no overlongs, surrogates, or code points past U+10FFFF. */
static int utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i < len)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

static tok *open_file(const char *path, int add_bos, int add_eos)
{
    tok *t = NULL;
    inf_err e = {0};
    int rc = tok_create_file(path, add_bos, add_eos, &t, &e);
    if (rc)
        print_message("tok_create_file: %s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    return t;
}

static tok *open_dir(const char *dir)
{
    tok *t = NULL;
    inf_err e = {0};
    int rc = tok_create(dir, &t, &e);
    if (rc)
        print_message("tok_create: %s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    return t;
}

/* Meta's Llama 2 tokenizer (32000 pieces), or a skip saying it is absent. */
static tok *open_llama(void)
{
    if (!file_exists(LLAMA_MODEL)) {
        print_message("skipped: " LLAMA_MODEL " not present\n");
        skip();
    }
    return open_file(LLAMA_MODEL, 1, 0);
}

/* stories260K's 512-piece tokenizer with its tokenizer_config.json. */
static tok *open_stories(void)
{
    if (!file_exists(STORIES_DIR "/tokenizer.model")) {
        print_message("skipped: " STORIES_DIR " not present\n");
        skip();
    }
    return open_dir(STORIES_DIR);
}

/* Path of the fixture model dir in buf, or a skip when it is not there. */
static const char *fixture_dir(char *buf, size_t cap)
{
    const char *f = getenv("INFERD_TEST_FIXTURES");
    char model[4096];
    if (f) {
        snprintf(buf, cap, "%s/tiny", f);
        snprintf(model, sizeof model, "%s/tokenizer.model", buf);
    }
    if (!f || !file_exists(model)) {
        print_message("skipped: $INFERD_TEST_FIXTURES/tiny/tokenizer.model not present "
                      "(INFERD_TEST_FIXTURES=%s; `make unit` makes it)\n", f ? f : "unset");
        skip();
    }
    return buf;
}

static tok *open_fixture(void)
{
    char dir[4096];
    return open_dir(fixture_dir(dir, sizeof dir));
}

/* A tokenizer whose vocabulary renders Chinese and emoji as byte pieces:
 * stories260K where present, else the fixture (both have byte fallback). */
static tok *open_byte_tok(void)
{
    if (file_exists(STORIES_DIR "/tokenizer.model"))
        return open_stories();
    print_message("note: " STORIES_DIR " not present; byte-piece cases use the fixture\n");
    return open_fixture();
}

static int32_t *encode(const tok *t, const char *text, int add_special, int *n)
{
    int32_t *ids = NULL;
    inf_err e = {0};
    assert_int_equal(tok_encode(t, text, strlen(text), add_special, &ids, n, &e), INF_OK);
    assert_non_null(ids);
    return ids;
}

static char *decode(const tok *t, const int32_t *ids, int n, size_t *len)
{
    char *s = NULL;
    inf_err e = {0};
    int rc = tok_decode(t, ids, n, &s, len, &e);
    if (rc)
        print_message("tok_decode: %s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    assert_non_null(s);
    return s;
}

/* The id of the byte piece <0xXX>. */
static int32_t byte_id(const tok *t, unsigned b)
{
    char want[8];
    snprintf(want, sizeof want, "<0x%02X>", b);
    for (int i = 0; i < tok_vocab_size(t); i++)
        if (strcmp(tok_piece(t, i), want) == 0)
            return i;
    fail_msg("no byte piece %s", want);
    return -1;
}

/* Whether id is a byte piece for a UTF-8 continuation byte (0x80..0xBF). */
static int is_cont_piece(const tok *t, int32_t id)
{
    const char *p = tok_piece(t, id);
    unsigned v;
    return strlen(p) == 6 && sscanf(p, "<0x%2X>", &v) == 1 && (v & 0xC0) == 0x80;
}

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void buf_add(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

/* Streams ids[k:n] after the prefix ids[0:k]: every chunk is valid UTF-8 and
 * all chunks plus the flush equal decode(ids) minus decode(ids[0:k]). */
static void check_stream(const tok *t, const int32_t *ids, int n, int k)
{
    size_t full_len, pre_len;
    char *full = decode(t, ids, n, &full_len);
    char *pre = decode(t, ids, k, &pre_len);
    assert_true(pre_len <= full_len);
    assert_memory_equal(full, pre, pre_len);

    tok_stream *s = NULL;
    inf_err e = {0};
    assert_int_equal(tok_stream_create(t, ids, k, &s, &e), INF_OK);
    buf got = {0};
    const char *chunk;
    size_t len;
    for (int i = k; i < n; i++) {
        assert_int_equal(tok_stream_push(s, ids[i], &chunk, &len, &e), INF_OK);
        assert_true(utf8_valid(chunk, len));
        buf_add(&got, chunk, len);
    }
    assert_int_equal(tok_stream_flush(s, &chunk, &len, &e), INF_OK);
    assert_true(utf8_valid(chunk, len));
    buf_add(&got, chunk, len);
    if (got.n != full_len - pre_len || (got.n && memcmp(got.p, full + pre_len, got.n))) {
        print_message("stream mismatch (prefix %d of %d ids): got \"%.*s\", want \"%s\"\nids:",
                      k, n, (int)got.n, got.p ? got.p : "", full + pre_len);
        for (int i = 0; i < n; i++)
            print_message(" %d", (int)ids[i]);
        print_message("\n");
        fail();
    }
    tok_stream_destroy(s);
    free(got.p);
    free(pre);
    free(full);
}

/* Whether decode(ids[0:k]) is a prefix of decode(ids[0:n]). */
static int decode_is_prefix(const tok *t, const int32_t *ids, int n, int k)
{
    size_t full_len, pre_len;
    char *full = decode(t, ids, n, &full_len);
    char *pre = decode(t, ids, k, &pre_len);
    int ok = pre_len <= full_len && memcmp(full, pre, pre_len) == 0;
    free(pre);
    free(full);
    return ok;
}

/* Streams text's encoding (with BOS) split into prefix and pushed ids at every
 * point that is not inside a character. */
static void check_stream_text(const tok *t, const char *text)
{
    int n;
    int32_t *ids = encode(t, text, 1, &n);
    for (int k = 0; k <= n; k++)
        if (k == n || !is_cont_piece(t, ids[k]))
            check_stream(t, ids, n, k);
    free(ids);
}

static const struct text {
    const char *s;
    int ws; /* has runs of spaces or leading/trailing spaces */
} texts[] = {
    {"Once upon a time, there was a little girl named Lily.", 0},
    {"你好，世界。今天天气很好", 0},
    {"👩‍👩‍👧", 0},
    {"🇫🇷", 0},
    {"Hello 世界 🌍! Ça va? naïve café 👩‍👩‍👧 and 🇫🇷.", 0},
    {"line one\nline two\n\nline four\n", 0},
    {"\tindented\twith\ttabs\t", 0},
    {"x😀y", 0},
    {"\n", 0},
    {"", 0},
    {"a  b   c    d          e", 1},
    {"  leading and trailing  ", 1},
    {" ", 1},
};
#define N_TEXTS (sizeof texts / sizeof texts[0])

/* decode(encode(x)) == x for every text (with BOS, which decodes to nothing);
 * texts with runs of spaces only where the model keeps whitespace. */
static void check_roundtrips(const tok *t, int keeps_ws)
{
    for (size_t i = 0; i < N_TEXTS; i++) {
        if (texts[i].ws && !keeps_ws)
            continue;
        int n;
        int32_t *ids = encode(t, texts[i].s, 1, &n);
        size_t len;
        char *back = decode(t, ids, n, &len);
        assert_string_equal(back, texts[i].s);
        assert_int_equal(len, strlen(texts[i].s));
        free(back);
        free(ids);
    }
}

/* ------------------------------------------------------------- encode/decode */

/* Llama 2: "Once upon a time" -> [1, 9038, 2501, 263, 931]; pieces, ids and
 * sizes as the model defines them. */
static void test_tok_encode_llama_once_upon_a_time(void **state)
{
    (void)state;
    tok *t = open_llama();
    assert_int_equal(tok_vocab_size(t), 32000);
    assert_int_equal(tok_bos_id(t), 1);
    assert_int_equal(tok_eos_id(t), 2);
    assert_int_equal(tok_adds_bos(t), 1);
    int n;
    int32_t *ids = encode(t, "Once upon a time", 1, &n);
    const int32_t want[] = {1, 9038, 2501, 263, 931};
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    char *s = decode(t, ids, n, NULL);
    assert_string_equal(s, "Once upon a time");
    free(s);
    free(ids);
    ids = encode(t, "Once upon a time", 0, &n);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 9038);
    free(ids);
    assert_string_equal(tok_piece(t, 9038), "▁Once");
    assert_string_equal(tok_piece(t, 13), "<0x0A>");
    assert_null(tok_piece(t, 32000));
    assert_null(tok_piece(t, -1));
    tok_destroy(t);
}

/* stories260K (through its directory and tokenizer_config.json): "Once upon
 * a time" -> [1, 403, 407, 261, 378]. */
static void test_tok_encode_stories_once_upon_a_time(void **state)
{
    (void)state;
    tok *t = open_stories();
    assert_int_equal(tok_vocab_size(t), 512);
    assert_int_equal(tok_adds_bos(t), 1);
    int n;
    int32_t *ids = encode(t, "Once upon a time", 1, &n);
    const int32_t want[] = {1, 403, 407, 261, 378};
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    tok_destroy(t);
}

/* Empty text encodes to just BOS (or nothing without specials) and an empty
 * id list decodes to "". */
static void test_tok_encode_fixture_empty(void **state)
{
    (void)state;
    tok *t = open_fixture();
    int n;
    int32_t *ids = encode(t, "", 1, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], tok_bos_id(t));
    free(ids);
    ids = encode(t, "", 0, &n);
    assert_int_equal(n, 0);
    free(ids);
    size_t len = 99;
    char *s = decode(t, NULL, 0, &len);
    assert_string_equal(s, "");
    assert_int_equal(len, 0);
    free(s);
    tok_destroy(t);
}

/* Llama 2 round-trips English, Chinese, emoji, newlines, tabs, space runs. */
static void test_tok_roundtrip_llama_texts(void **state)
{
    (void)state;
    tok *t = open_llama();
    check_roundtrips(t, 1);
    tok_destroy(t);
}

/* stories260K round-trips everything but space runs, which its normalizer
 * collapses (remove_extra_whitespaces), as a whole decode shows. */
static void test_tok_roundtrip_stories_texts(void **state)
{
    (void)state;
    tok *t = open_stories();
    check_roundtrips(t, 0);
    int n;
    int32_t *ids = encode(t, "a  b", 0, &n);
    char *s = decode(t, ids, n, NULL);
    assert_string_equal(s, "a b");
    free(s);
    free(ids);
    tok_destroy(t);
}

/* The fixture (Llama-style: identity normalization, byte fallback)
 * round-trips every text, whitespace included. */
static void test_tok_roundtrip_fixture_texts(void **state)
{
    (void)state;
    tok *t = open_fixture();
    check_roundtrips(t, 1);
    tok_destroy(t);
}

/* Ids outside [0, vocab) make decode fail with INF_ERR_INVALID naming the id. */
/* skip_special_tokens: false on a SentencePiece model: the control pieces'
 * text in place, the text between them decoded with the word marker after
 * a control piece kept as a space (Hugging Face's fast tokenizer for the
 * model gives "<s> Hello world</s>"); streaming adds up to the same. */
static void test_tok_decode_keep_special_spm(void **state)
{
    (void)state;
    tok *t = open_fixture();
    int bos = tok_bos_id(t), eos = tok_eos_id(t);
    assert_true(bos >= 0 && eos >= 0);
    int32_t *w = NULL, ids[64];
    int n = 0;
    inf_err e = {0};
    assert_int_equal(tok_encode(t, "Hello world", 11, 0, &w, &n, &e), INF_OK);
    assert_true(n > 0 && n < 30);
    /* bos, words, eos, words */
    int k = 0;
    ids[k++] = bos;
    memcpy(ids + k, w, (size_t)n * sizeof *w);
    k += n;
    ids[k++] = eos;
    memcpy(ids + k, w, (size_t)n * sizeof *w);
    k += n;
    char *plain = NULL, *kept = NULL, want[256];
    assert_int_equal(tok_decode(t, w, n, &plain, NULL, &e), INF_OK);
    assert_string_equal(plain, "Hello world");
    assert_int_equal(tok_decode_ex(t, ids, k, TOK_KEEP_SPECIAL, &kept, NULL, &e), INF_OK);
    snprintf(want, sizeof want, "%s Hello world%s Hello world", tok_piece(t, bos), tok_piece(t, eos));
    assert_string_equal(kept, want);
    free(kept);
    /* At the start of the text the dummy prefix goes, as without specials. */
    assert_int_equal(tok_decode_ex(t, ids + 1, n + 1, TOK_KEEP_SPECIAL, &kept, NULL, &e), INF_OK);
    snprintf(want, sizeof want, "Hello world%s", tok_piece(t, eos));
    assert_string_equal(kept, want);
    free(kept);
    /* Without the flag they go, as sentencepiece decodes. */
    assert_int_equal(tok_decode_ex(t, ids, k, 0, &kept, NULL, &e), INF_OK);
    assert_string_equal(kept, "Hello world Hello world");
    free(kept);
    /* Streamed with the flag: the pieces add up to the whole decode. */
    tok_stream *st = NULL;
    inf_buf got = {0};
    assert_int_equal(tok_stream_create_ex(t, NULL, 0, TOK_KEEP_SPECIAL, &st, &e), INF_OK);
    for (int i = 0; i < k; i++) {
        const char *p;
        size_t len;
        assert_int_equal(tok_stream_push(st, ids[i], &p, &len, &e), INF_OK);
        inf_buf_put(&got, p, len);
    }
    const char *p;
    size_t len;
    assert_int_equal(tok_stream_flush(st, &p, &len, &e), INF_OK);
    inf_buf_put(&got, p, len);
    snprintf(want, sizeof want, "%s Hello world%s Hello world", tok_piece(t, bos), tok_piece(t, eos));
    assert_string_equal(got.p, want);
    free(got.p);
    tok_stream_destroy(st);
    free(plain);
    free(w);
    tok_destroy(t);
}

static void test_tok_decode_out_of_range_invalid(void **state)
{
    (void)state;
    tok *t = open_fixture();
    int v = tok_vocab_size(t);
    char want[32];
    int32_t ids[] = {1, v};
    char *s = (char *)1;
    inf_err e = {0};
    assert_int_equal(tok_decode(t, ids, 2, &s, NULL, &e), INF_ERR_INVALID);
    assert_null(s);
    snprintf(want, sizeof want, "%d", v);
    assert_non_null(strstr(e.msg, want));
    ids[1] = -7;
    assert_int_equal(tok_decode(t, ids, 2, &s, NULL, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "-7"));
    tok_destroy(t);
}

/* ----------------------------------------------------------- load and policy */

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long sz = ftell(f);
    assert_true(sz > 0);
    rewind(f);
    void *p = malloc(sz);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return p;
}

/* A fresh directory under $INFERD_TEST_TMP (or /tmp) holding a copy of the
 * fixture's tokenizer.model, in dir. */
static void make_model_dir(char *dir, size_t cap)
{
    char fix[4096], path[4352];
    fixture_dir(fix, sizeof fix);
    tdir t;
    assert_int_equal(tdir_make(&t, "test_tok"), 0);
    snprintf(dir, cap, "%s", t.path);
    snprintf(path, sizeof path, "%s/tokenizer.model", fix);
    size_t n;
    void *model = read_file(path, &n);
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    write_file(path, model, n);
    free(model);
}

static void write_in(const char *dir, const char *name, const char *text)
{
    char path[4352];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_file(path, text, strlen(text));
}

static void remove_model_dir(const char *dir)
{
    tdir t;
    size_t n = strlen(dir);
    assert_true(n < sizeof t.path);
    memcpy(t.path, dir, n + 1);
    tdir_remove(&t);
}

/* tokenizer_config.json decides specials: add_bos_token false -> no BOS,
 * add_eos_token true -> EOS last; add_special 0 adds neither; no config file
 * -> Llama's defaults (BOS, no EOS). */
static void test_tok_create_policy_from_config(void **state)
{
    (void)state;
    char dir[4096];
    make_model_dir(dir, sizeof dir);

    tok *t = open_dir(dir);
    int n;
    int32_t *ids = encode(t, "hello", 1, &n);
    assert_true(n >= 2);
    assert_int_equal(ids[0], 1);
    assert_int_not_equal(ids[n - 1], 2);
    free(ids);
    tok_destroy(t);

    write_in(dir, "tokenizer_config.json",
             "{\"add_bos_token\": false, \"add_eos_token\": true, \"bos_token\": \"<s>\"}");
    t = open_dir(dir);
    assert_int_equal(tok_adds_bos(t), 0);
    ids = encode(t, "hello", 1, &n);
    assert_true(n >= 2);
    assert_int_not_equal(ids[0], 1);
    assert_int_equal(ids[n - 1], 2);
    free(ids);
    int m;
    ids = encode(t, "hello", 0, &m);
    assert_int_equal(m, n - 1);
    assert_int_not_equal(ids[m - 1], 2);
    free(ids);
    tok_destroy(t);
    remove_model_dir(dir);
}

/* A tokenizer_config.json that is not JSON, or whose add_bos_token is not a
 * boolean, is INF_ERR_FORMAT naming the file. */
static void test_tok_create_bad_config_format(void **state)
{
    (void)state;
    char dir[4096];
    make_model_dir(dir, sizeof dir);
    const char *bad[] = {"{", "[true]", "{\"add_bos_token\": \"yes\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_in(dir, "tokenizer_config.json", bad[i]);
        tok *t = (tok *)1;
        inf_err e = {0};
        assert_int_equal(tok_create(dir, &t, &e), INF_ERR_FORMAT);
        assert_null(t);
        assert_non_null(strstr(e.msg, "tokenizer_config.json"));
    }
    remove_model_dir(dir);
}

/* tok_create_file takes the policy from its arguments. */
static void test_tok_create_file_explicit_policy(void **state)
{
    (void)state;
    char dir[4096], path[4352];
    snprintf(path, sizeof path, "%s/tokenizer.model", fixture_dir(dir, sizeof dir));
    tok *t = open_file(path, 0, 1);
    assert_int_equal(tok_adds_bos(t), 0);
    int n;
    int32_t *ids = encode(t, "hi", 1, &n);
    assert_int_not_equal(ids[0], tok_bos_id(t));
    assert_int_equal(ids[n - 1], tok_eos_id(t));
    free(ids);
    tok_destroy(t);
}

/* A directory without tokenizer.model is INF_ERR_IO naming the path. */
static void test_tok_create_missing_dir_io(void **state)
{
    (void)state;
    tok *t = (tok *)1;
    inf_err e = {0};
    assert_int_equal(tok_create("/nonexistent/inferd-tok", &t, &e), INF_ERR_IO);
    assert_null(t);
    assert_non_null(strstr(e.msg, "/nonexistent/inferd-tok/tokenizer.model"));
    assert_int_equal(tok_create_file("/nonexistent/x.model", 1, 0, &t, &e), INF_ERR_IO);
    assert_non_null(strstr(e.msg, "/nonexistent/x.model"));
}

/* Junk, empty, random and truncated tokenizer.model files are errors with a
 * message, not crashes. */
static void test_tok_create_corrupt_model_error(void **state)
{
    (void)state;
    char dir[4096], path[4352];
    make_model_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    size_t n;
    unsigned char *model = read_file(path, &n);
    unsigned char junk[4096];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof junk; i++) {
        x = x * 1664525u + 1013904223u;
        junk[i] = (unsigned char)(x >> 24);
    }
    const char *text = "this is not a sentencepiece model\n";
    struct {
        const void *p;
        size_t n;
    } cases[] = {{text, strlen(text)}, {"", 0}, {junk, sizeof junk}, {model, n / 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(path, cases[i].p, cases[i].n);
        tok *t = (tok *)1;
        inf_err e = {0};
        int rc = tok_create(dir, &t, &e);
        assert_true(rc < 0);
        assert_null(t);
        assert_true(e.msg[0] != '\0');
    }
    free(model);
    remove_model_dir(dir);
}

/* ---------------------------------------------------------------- streaming */

/* Every text streams, split at every point, into valid UTF-8 chunks that add
 * up to the whole decode (Llama 2's vocabulary). */
static void test_tok_stream_llama_texts(void **state)
{
    (void)state;
    tok *t = open_llama();
    for (size_t i = 0; i < N_TEXTS; i++)
        check_stream_text(t, texts[i].s);
    tok_destroy(t);
}

/* The same with a byte-piece-heavy vocabulary (stories260K or the fixture). */
static void test_tok_stream_byte_tok_texts(void **state)
{
    (void)state;
    tok *t = open_byte_tok();
    for (size_t i = 0; i < N_TEXTS; i++)
        check_stream_text(t, texts[i].s);
    tok_destroy(t);
}

/* The same with the fixture's vocabulary. */
static void test_tok_stream_fixture_texts(void **state)
{
    (void)state;
    tok *t = open_fixture();
    for (size_t i = 0; i < N_TEXTS; i++)
        check_stream_text(t, texts[i].s);
    tok_destroy(t);
}

/* After the prompt "Once upon a time", "▁there" streams as " there"; with no
 * prompt, BOS gives nothing and "▁Hello" streams as "Hello". */
static void test_tok_stream_leading_space_llama(void **state)
{
    (void)state;
    tok *t = open_llama();
    const int32_t prompt[] = {1, 9038, 2501, 263, 931};
    tok_stream *s;
    inf_err e = {0};
    const char *c;
    size_t len;
    assert_int_equal(tok_stream_create(t, prompt, 5, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, 727, &c, &len, &e), INF_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(c, " there", 6);
    tok_stream_destroy(s);

    assert_int_equal(tok_stream_create(t, NULL, 0, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, 1, &c, &len, &e), INF_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_push(s, 15043, &c, &len, &e), INF_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(c, "Hello", 5);
    assert_int_equal(tok_stream_push(s, 3186, &c, &len, &e), INF_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(c, " world", 6);
    tok_stream_destroy(s);
    tok_destroy(t);
}

/* Same for stories260K: after its encoded prompt, "▁there" (383) is " there". */
static void test_tok_stream_leading_space_stories(void **state)
{
    (void)state;
    tok *t = open_stories();
    int n;
    int32_t *prompt = encode(t, "Once upon a time", 1, &n);
    tok_stream *s;
    inf_err e = {0};
    const char *c;
    size_t len;
    assert_int_equal(tok_stream_create(t, prompt, n, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, 383, &c, &len, &e), INF_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(c, " there", 6);
    tok_stream_destroy(s);
    free(prompt);
    tok_destroy(t);
}

/* Fixture: a "▁"-led piece pushed after a prompt streams with its space;
 * pushed first with no prompt, without it (as a whole decode). */
static void test_tok_stream_leading_space_fixture(void **state)
{
    (void)state;
    tok *t = open_fixture();
    int n, m;
    int32_t *prompt = encode(t, "Once upon a time", 1, &n);
    int32_t *word = encode(t, "the", 0, &m);
    assert_true(strncmp(tok_piece(t, word[0]), "▁", strlen("▁")) == 0);
    tok_stream *s;
    inf_err e = {0};
    const char *c;
    size_t len;
    assert_int_equal(tok_stream_create(t, prompt, n, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, word[0], &c, &len, &e), INF_OK);
    assert_true(len >= 2 && c[0] == ' ' && c[1] != ' ');
    tok_stream_destroy(s);
    assert_int_equal(tok_stream_create(t, NULL, 0, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, word[0], &c, &len, &e), INF_OK);
    assert_true(len >= 1 && c[0] != ' ');
    tok_stream_destroy(s);
    free(word);
    free(prompt);
    tok_destroy(t);
}

/* Streams a sequence with runs of "▁" pieces, split at every point. */
static void check_space_pieces(const tok *t)
{
    int32_t sp = -1;
    for (int i = 0; i < tok_vocab_size(t) && sp < 0; i++)
        if (strcmp(tok_piece(t, i), "▁") == 0)
            sp = i;
    assert_true(sp >= 0);
    int nw;
    int32_t *w = encode(t, "Once", 0, &nw);
    int32_t once = w[0];
    free(w);
    const int32_t ids[] = {tok_bos_id(t), once, sp, sp, sp, once, sp, sp, sp, sp, sp,
                           sp, sp, sp, once, tok_eos_id(t), sp, byte_id(t, '\n'), sp};
    int n = (int)(sizeof ids / sizeof ids[0]);
    for (int k = 0; k <= n; k++)
        check_stream(t, ids, n, k);
}

/* Runs of single-space pieces keep every space, whatever the split, even
 * where the window would otherwise start on a piece whose space is dropped. */
static void test_tok_stream_space_pieces_llama(void **state)
{
    (void)state;
    tok *t = open_llama();
    check_space_pieces(t);
    tok_destroy(t);
}

/* The same with the fixture's "▁" piece. */
static void test_tok_stream_space_pieces_fixture(void **state)
{
    (void)state;
    tok *t = open_fixture();
    check_space_pieces(t);
    tok_destroy(t);
}

/* The byte pieces of a 4-byte emoji and a 3-byte Chinese character give no
 * output until the character is complete, then exactly that character. */
static void test_tok_stream_byte_piece_held_until_complete(void **state)
{
    (void)state;
    tok *t = open_byte_tok();
    int n;
    int32_t *prompt = encode(t, "Hi", 1, &n);
    tok_stream *s;
    inf_err e = {0};
    const char *c;
    size_t len;
    assert_int_equal(tok_stream_create(t, prompt, n, &s, &e), INF_OK);
    const unsigned char emoji[] = {0xF0, 0x9F, 0x98, 0x80}; /* U+1F600 */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tok_stream_push(s, byte_id(t, emoji[i]), &c, &len, &e), INF_OK);
        assert_int_equal(len, i < 3 ? 0 : 4);
    }
    assert_memory_equal(c, emoji, 4);
    const unsigned char ni[] = {0xE4, 0xBD, 0xA0}; /* 你 */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(tok_stream_push(s, byte_id(t, ni[i]), &c, &len, &e), INF_OK);
        assert_int_equal(len, i < 2 ? 0 : 3);
    }
    assert_memory_equal(c, ni, 3);
    assert_int_equal(tok_stream_flush(s, &c, &len, &e), INF_OK);
    assert_int_equal(len, 0);
    tok_stream_destroy(s);
    free(prompt);
    tok_destroy(t);
}

/* Flushing an unfinished character yields U+FFFD (one per byte, as a whole
 * decode renders it); a second flush yields nothing. */
static void test_tok_stream_flush_incomplete_replacement(void **state)
{
    (void)state;
    tok *t = open_byte_tok();
    int32_t ids[4];
    int n = 0;
    ids[n++] = tok_bos_id(t);
    ids[n++] = byte_id(t, 'A');
    ids[n++] = byte_id(t, 0xF0);
    ids[n++] = byte_id(t, 0x9F);
    tok_stream *s;
    inf_err e = {0};
    const char *c;
    size_t len;
    assert_int_equal(tok_stream_create(t, ids, 1, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, ids[1], &c, &len, &e), INF_OK);
    assert_int_equal(len, 1);
    assert_int_equal(tok_stream_push(s, ids[2], &c, &len, &e), INF_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_push(s, ids[3], &c, &len, &e), INF_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_flush(s, &c, &len, &e), INF_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(c, "\xEF\xBF\xBD\xEF\xBF\xBD", 6);
    char *whole = decode(t, ids, n, NULL);
    assert_string_equal(whole, "A\xEF\xBF\xBD\xEF\xBF\xBD");
    free(whole);
    assert_int_equal(tok_stream_flush(s, &c, &len, &e), INF_OK);
    assert_int_equal(len, 0);
    tok_stream_destroy(s);
    tok_destroy(t);
}

/* A byte that can never start or continue a character (a stray continuation
 * byte) is final at once: it streams as U+FFFD without waiting; a lead byte
 * followed by another lead byte is final when the second arrives. */
static void test_tok_stream_invalid_byte_not_held(void **state)
{
    (void)state;
    tok *t = open_byte_tok();
    tok_stream *s;
    inf_err e = {0};
    const char *c;
    size_t len;
    assert_int_equal(tok_stream_create(t, NULL, 0, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, byte_id(t, 'A'), &c, &len, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, byte_id(t, 0x80), &c, &len, &e), INF_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(c, "\xEF\xBF\xBD", 3);
    assert_int_equal(tok_stream_push(s, byte_id(t, 0xF0), &c, &len, &e), INF_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_push(s, byte_id(t, 0xE4), &c, &len, &e), INF_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(c, "\xEF\xBF\xBD", 3);
    assert_int_equal(tok_stream_push(s, byte_id(t, 0xBD), &c, &len, &e), INF_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_push(s, byte_id(t, 0xA0), &c, &len, &e), INF_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(c, "\xE4\xBD\xA0", 3);
    tok_stream_destroy(s);
    tok_destroy(t);
}

/* A control id between byte pieces ends their run as in a whole decode:
 * <F0><9F></s><98><80> is four U+FFFD, not an emoji (a prefix's U+FFFDs are
 * never streamed); a "▁"-led piece after <0x41></s> keeps its space. */
static void test_tok_stream_control_splits_byte_run(void **state)
{
    (void)state;
    tok *t = open_byte_tok();
    int nw;
    int32_t *w = encode(t, "Once", 0, &nw);
    const int32_t ids[] = {tok_bos_id(t), byte_id(t, 0xF0), byte_id(t, 0x9F), tok_eos_id(t),
                           byte_id(t, 0x98), byte_id(t, 0x80), tok_eos_id(t),
                           tok_bos_id(t), byte_id(t, 'A'), tok_eos_id(t), w[0]};
    free(w);
    int n = (int)(sizeof ids / sizeof ids[0]);
    char *whole = decode(t, ids, n, NULL);
    assert_true(strncmp(whole, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "A ",
                        14) == 0);
    free(whole);
    tok_stream *s;
    inf_err e = {0};
    const char *c;
    size_t len;
    assert_int_equal(tok_stream_create(t, ids, 3, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, ids[3], &c, &len, &e), INF_OK);
    assert_int_equal(len, 0); /* the prefix's own U+FFFDs are not emitted */
    tok_stream_destroy(s);
    for (int k = 0; k <= n; k++)
        if (decode_is_prefix(t, ids, n, k))
            check_stream(t, ids, n, k);
    tok_destroy(t);
}

/* A prefix that ends inside a character (its decode ends in U+FFFDs) and
 * pushes that complete it: the completed character streams whole, as valid
 * UTF-8, and the text after it follows as usual. */
static void test_tok_stream_prefix_ends_inside_char(void **state)
{
    (void)state;
    tok *t = open_byte_tok();
    int n;
    int32_t *hi = encode(t, "Hi", 1, &n);
    int32_t ids[64];
    assert_true(n <= 60);
    memcpy(ids, hi, n * sizeof *ids);
    free(hi);
    ids[n++] = byte_id(t, 0xF0);
    ids[n++] = byte_id(t, 0x9F);
    tok_stream *s;
    inf_err e = {0};
    const char *c;
    size_t len;
    assert_int_equal(tok_stream_create(t, ids, n, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, byte_id(t, 0x98), &c, &len, &e), INF_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_push(s, byte_id(t, 0x80), &c, &len, &e), INF_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(c, "\xF0\x9F\x98\x80", 4);
    assert_int_equal(tok_stream_push(s, byte_id(t, '!'), &c, &len, &e), INF_OK);
    assert_int_equal(len, 1);
    assert_int_equal(c[0], '!');
    tok_stream_destroy(s);

    /* The prefix's U+FFFD (EF BF BD) and the completed U+FF0C (EF BC 8C)
     * share their first byte: the chunk still starts at the character. */
    ids[n - 2] = byte_id(t, 0xEF);
    assert_int_equal(tok_stream_create(t, ids, n - 1, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, byte_id(t, 0xBC), &c, &len, &e), INF_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tok_stream_push(s, byte_id(t, 0x8C), &c, &len, &e), INF_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(c, "\xEF\xBC\x8C", 3);
    tok_stream_destroy(s);
    tok_destroy(t);
}

/* Out-of-range ids are INF_ERR_INVALID naming the id, in the prefix and in a
 * push; the stream goes on working after a rejected push. */
static void test_tok_stream_out_of_range_invalid(void **state)
{
    (void)state;
    tok *t = open_fixture();
    int v = tok_vocab_size(t);
    char want[32];
    snprintf(want, sizeof want, "%d", v);
    tok_stream *s = (tok_stream *)1;
    inf_err e = {0};
    const char *c;
    size_t len;
    int32_t bad[] = {1, v};
    assert_int_equal(tok_stream_create(t, bad, 2, &s, &e), INF_ERR_INVALID);
    assert_null(s);
    assert_non_null(strstr(e.msg, want));
    assert_int_equal(tok_stream_create(t, NULL, 0, &s, &e), INF_OK);
    assert_int_equal(tok_stream_push(s, v, &c, &len, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, want));
    assert_int_equal(tok_stream_push(s, -3, &c, &len, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "-3"));
    assert_int_equal(tok_stream_push(s, byte_id(t, 'Z'), &c, &len, &e), INF_OK);
    assert_int_equal(len, 1);
    assert_int_equal(c[0], 'Z');
    tok_stream_destroy(s);
    tok_destroy(t);
}

/* Random continuations (whole and cut-off characters as byte pieces, stray
 * bytes, random pieces, space pieces, BOS/EOS) after real prompts keep the
 * invariant: valid UTF-8 chunks adding up to the whole decode. Fixed seed. */
static void fuzz_stream(const tok *t, uint64_t seed)
{
    int vocab = tok_vocab_size(t);
    int32_t byte[256];
    for (int b = 0; b < 256; b++)
        byte[b] = byte_id(t, (unsigned)b);
    int32_t spaces[8];
    int n_spaces = 0;
    for (int i = 0; i < vocab && n_spaces < 8; i++) {
        const char *p = tok_piece(t, i);
        size_t l = strlen(p);
        int only = l > 0 && l % 3 == 0;
        for (size_t k = 0; only && k < l; k += 3)
            only = memcmp(p + k, "▁", 3) == 0;
        if (only)
            spaces[n_spaces++] = i;
    }
    assert_true(n_spaces > 0);
    uint64_t x = seed;
#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
    int32_t ids[256];
    for (int trial = 0; trial < 200; trial++) {
        const char *text = texts[RND() % N_TEXTS].s;
        int np;
        int32_t *prompt = encode(t, text, 1, &np);
        int k = RND() % 2 ? np : 0; /* half the trials stream from the start */
        assert_true(k <= 128);
        memcpy(ids, prompt, k * sizeof *ids);
        free(prompt);
        int n = k, steps = 1 + RND() % 30;
        for (int i = 0; i < steps && n < 250; i++) {
            switch (RND() % 10) {
            case 0: case 1: case 2: case 3: { /* a character, maybe cut short */
                static const uint32_t lo[] = {0x20, 0x80, 0x800, 0x10000};
                static const uint32_t span[] = {0x5F, 0x780, 0xD000, 0x10000};
                int len = 1 + RND() % 4;
                uint32_t cp = lo[len - 1] + RND() % span[len - 1];
                unsigned char u[4];
                if (len == 1) {
                    u[0] = cp;
                } else {
                    for (int j = len - 1; j > 0; j--, cp >>= 6)
                        u[j] = 0x80 | (cp & 0x3F);
                    u[0] = (len == 2 ? 0xC0 : len == 3 ? 0xE0 : 0xF0) | cp;
                }
                int keep = RND() % 5 ? len : 1 + (int)(RND() % len);
                for (int j = 0; j < keep; j++)
                    ids[n++] = byte[u[j]];
                break;
            }
            case 4: ids[n++] = byte[RND() % 256]; break;
            case 5: case 6: ids[n++] = RND() % vocab; break;
            case 7: case 8: ids[n++] = spaces[RND() % n_spaces]; break;
            default: ids[n++] = RND() % 2 ? tok_bos_id(t) : tok_eos_id(t); break;
            }
        }
        check_stream(t, ids, n, k);
        /* And from a random split, where the invariant is defined (the
         * prefix's decode is a prefix of the whole's: not inside a char). */
        int k2 = (int)(RND() % (uint64_t)(n + 1));
        if (decode_is_prefix(t, ids, n, k2))
            check_stream(t, ids, n, k2);
    }
#undef RND
}

/* Fuzzed streams keep the invariant over stories260K's (or the fixture's)
 * vocabulary. */
static void test_tok_stream_fuzz_byte_tok(void **state)
{
    (void)state;
    tok *t = open_byte_tok();
    fuzz_stream(t, 0x9E3779B97F4A7C15ull);
    tok_destroy(t);
}

/* The same fuzz over Llama 2's vocabulary. */
static void test_tok_stream_fuzz_llama(void **state)
{
    (void)state;
    tok *t = open_llama();
    fuzz_stream(t, 0xD1B54A32D192ED03ull);
    tok_destroy(t);
}

/* The same fuzz over the fixture's vocabulary. */
static void test_tok_stream_fuzz_fixture(void **state)
{
    (void)state;
    tok *t = open_fixture();
    fuzz_stream(t, 0x2545F4914F6CDD1Dull);
    tok_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tok_encode_llama_once_upon_a_time),
        cmocka_unit_test(test_tok_encode_stories_once_upon_a_time),
        cmocka_unit_test(test_tok_encode_fixture_empty),
        cmocka_unit_test(test_tok_roundtrip_llama_texts),
        cmocka_unit_test(test_tok_roundtrip_stories_texts),
        cmocka_unit_test(test_tok_roundtrip_fixture_texts),
        cmocka_unit_test(test_tok_decode_out_of_range_invalid),
        cmocka_unit_test(test_tok_decode_keep_special_spm),
        cmocka_unit_test(test_tok_create_policy_from_config),
        cmocka_unit_test(test_tok_create_bad_config_format),
        cmocka_unit_test(test_tok_create_file_explicit_policy),
        cmocka_unit_test(test_tok_create_missing_dir_io),
        cmocka_unit_test(test_tok_create_corrupt_model_error),
        cmocka_unit_test(test_tok_stream_llama_texts),
        cmocka_unit_test(test_tok_stream_byte_tok_texts),
        cmocka_unit_test(test_tok_stream_fixture_texts),
        cmocka_unit_test(test_tok_stream_leading_space_llama),
        cmocka_unit_test(test_tok_stream_leading_space_stories),
        cmocka_unit_test(test_tok_stream_leading_space_fixture),
        cmocka_unit_test(test_tok_stream_space_pieces_llama),
        cmocka_unit_test(test_tok_stream_space_pieces_fixture),
        cmocka_unit_test(test_tok_stream_byte_piece_held_until_complete),
        cmocka_unit_test(test_tok_stream_flush_incomplete_replacement),
        cmocka_unit_test(test_tok_stream_invalid_byte_not_held),
        cmocka_unit_test(test_tok_stream_control_splits_byte_run),
        cmocka_unit_test(test_tok_stream_prefix_ends_inside_char),
        cmocka_unit_test(test_tok_stream_out_of_range_invalid),
        cmocka_unit_test(test_tok_stream_fuzz_byte_tok),
        cmocka_unit_test(test_tok_stream_fuzz_llama),
        cmocka_unit_test(test_tok_stream_fuzz_fixture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
