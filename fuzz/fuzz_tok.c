/* tokenizer.json through the loader, and text and ids through encode,
 * decode and the streaming detokenizer. The first byte picks the mode:
 *   0: the rest is a tokenizer.json; when it loads, a fixed text goes
 *      through it (every stage the file names runs);
 *   1, 2: the rest is text for a built-in byte-level tokenizer (1) or a
 *      byte-fallback one with Metaspace-style spaces (2), then the same
 *      bytes as token ids. */
#include <stdlib.h>
#include <string.h>

#include "engine/tok.h"
#include "engine/tok_int.h"

/* GPT-2's byte alphabet as the vocabulary, a few merges, added tokens with
 * every flag, NFC, a Split regex and ByteLevel, a template post-processor. */
static char *bytelevel_json(void)
{
    inf_buf b = {0};
    inf_buf_printf(&b, "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{");
    for (int i = 0; i < 256; i++) {
        int cp = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE ? i : -1;
        if (cp < 0) {
            int n = 0;
            for (int j = 0; j < i; j++)
                n += !((j >= '!' && j <= '~') || (j >= 0xA1 && j <= 0xAC) || j >= 0xAE);
            cp = 256 + n;
        }
        if (cp == '"' || cp == '\\')
            inf_buf_printf(&b, "\"\\%c\":%d,", cp, i);
        else
            inf_buf_printf(&b, "\"\\u%04x\":%d,", cp, i);
    }
    inf_buf_printf(&b, "\"\\u0120t\":256,\"he\":257,\"\\u0120the\":258,\"\\u0120th\":259,"
                       "\"in\":260,\"ing\":261},\"merges\":[\"\\u0120 t\",\"h e\",[\"\\u0120t\",\"h\"],"
                       "\"\\u0120th e\",\"i n\",\"in g\"]},"
                       "\"added_tokens\":["
                       "{\"id\":262,\"content\":\"<|end|>\",\"special\":true},"
                       "{\"id\":263,\"content\":\"<mask>\",\"lstrip\":true,\"rstrip\":true},"
                       "{\"id\":264,\"content\":\"word\",\"single_word\":true,\"normalized\":true}],"
                       "\"normalizer\":{\"type\":\"NFC\"},"
                       "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
                       "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{N}{1,3}\"},\"behavior\":\"Isolated\"},"
                       "{\"type\":\"Punctuation\"},"
                       "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}]},"
                       "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
                       "{\"SpecialToken\":{\"id\":\"<|end|>\"}},{\"Sequence\":{\"id\":\"A\"}}],"
                       "\"special_tokens\":{\"<|end|>\":{\"ids\":[262]}}},"
                       "\"decoder\":{\"type\":\"ByteLevel\"}}");
    return b.oom ? NULL : b.p;
}

/* <0xNN> byte pieces, a few words with U+2581, unk, Metaspace, Digits,
 * Lowercase, and the Llama 2 decoder chain. */
static char *fallback_json(void)
{
    inf_buf b = {0};
    inf_buf_printf(&b, "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"fuse_unk\":true,"
                       "\"unk_token\":\"<unk>\",\"vocab\":{\"<unk>\":0,\"<s>\":1,");
    for (int i = 0; i < 256; i++)
        inf_buf_printf(&b, "\"<0x%02X>\":%d,", i, 2 + i);
    inf_buf_printf(&b, "\"\\u2581\":258,\"a\":259,\"b\":260,\"\\u2581a\":261,\"ab\":262,"
                       "\"\\u2581ab\":263,\"1\":264,\"\\u00e9\":265},"
                       "\"merges\":[\"\\u2581 a\",\"a b\",\"\\u2581a b\"]},"
                       "\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true}],"
                       "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
                       "{\"type\":\"NFKC\"},{\"type\":\"Lowercase\"},"
                       "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"content\":\" \"}]},"
                       "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
                       "{\"type\":\"Digits\",\"individual_digits\":true},"
                       "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\"}]},"
                       "\"post_processor\":{\"type\":\"RobertaProcessing\",\"cls\":[\"<s>\",1],\"sep\":[\"<s>\",1]},"
                       "\"decoder\":{\"type\":\"Sequence\",\"decoders\":["
                       "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
                       "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
                       "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}");
    return b.oom ? NULL : b.p;
}

static const char SAMPLE[] = "Hello wörld 123 <|end|> x <mask> y word\tcafe\xCC\x81 \xF0\x9F\x91\x8D\xFF ab ab";

static void exercise(const tok *t, const char *text, size_t len)
{
    int32_t *ids = NULL;
    int n = 0;
    inf_err err;
    if (tok_encode_ex(t, text, len, TOK_ADD_SPECIAL, &ids, &n, &err) == INF_OK) {
        char *s = NULL;
        size_t sl = 0;
        if (tok_decode(t, ids, n, &s, &sl, &err) == INF_OK)
            free(s);
        tok_stream *st = NULL;
        if (tok_stream_create(t, ids, n / 2, &st, &err) == INF_OK) {
            const char *c;
            size_t cl;
            for (int i = n / 2; i < n; i++)
                tok_stream_push(st, ids[i], &c, &cl, &err);
            tok_stream_flush(st, &c, &cl, &err);
            tok_stream_destroy(st);
        }
        free(ids);
    }
    if (tok_encode_ex(t, text, len, TOK_AFTER_SPECIAL, &ids, &n, &err) == INF_OK)
        free(ids);
}

/* The bytes as ids (two bytes each, modulo the vocabulary), through decode
 * and the stream. */
static void exercise_ids(const tok *t, const unsigned char *d, size_t n)
{
    size_t k = n / 2;
    int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
    if (!ids)
        return;
    for (size_t i = 0; i < k; i++)
        ids[i] = (int32_t)((d[2 * i] | d[2 * i + 1] << 8) % tok_vocab_size(t));
    char *s = NULL;
    size_t sl;
    inf_err err;
    if (tok_decode(t, ids, (int)k, &s, &sl, &err) == INF_OK)
        free(s);
    tok_stream *st = NULL;
    if (tok_stream_create(t, NULL, 0, &st, &err) == INF_OK) {
        const char *c;
        size_t cl;
        for (size_t i = 0; i < k; i++)
            tok_stream_push(st, ids[i], &c, &cl, &err);
        tok_stream_flush(st, &c, &cl, &err);
        tok_stream_destroy(st);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    /* Built once: libFuzzer runs inputs one after another in one thread. */
    static tok *builtin[2];
    if (!builtin[0]) {
        char *j[2] = {bytelevel_json(), fallback_json()};
        for (int i = 0; i < 2; i++) {
            inf_err err;
            if (!j[i] || tok_hf_open(j[i], strlen(j[i]), "builtin", NULL, &builtin[i], &err))
                abort(); /* the harness itself is broken */
            free(j[i]);
        }
    }
    if (size < 1)
        return 0;
    unsigned mode = data[0] % 3;
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;
    if (mode == 0) {
        tok *t = NULL;
        inf_err err;
        if (tok_hf_open(rest, n, "fuzz", NULL, &t, &err) == INF_OK) {
            exercise(t, SAMPLE, sizeof SAMPLE - 1);
            tok_destroy(t);
        }
        return 0;
    }
    exercise(builtin[mode - 1], rest, n);
    exercise_ids(builtin[mode - 1], (const unsigned char *)rest, n);
    return 0;
}
