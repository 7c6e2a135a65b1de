/* tok_gguf: a tok from a GGUF file's tokenizer.ggml.* metadata (tok_gguf.h).
 * "llama" becomes a SentencePiece model proto for tok_spm.cpp; "gpt2"
 * becomes the tokenizer.json engine's records (tok_hf.h) built from the
 * arrays, with the pre-tokenizer's stages from a table by
 * tokenizer.ggml.pre. */
#include "tok_gguf.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tok_hf.h"
#include "tok_int.h"

/* llama.cpp's token types (the same numbers as SentencePiece's). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* The metadata the builders read. */
typedef struct gmeta {
    const gguf_file *g;
    const char *path;
    int n;                 /* tokens                                        */
    const char **str;      /* [n] token strings, in the mapping              */
    uint32_t *len;         /* [n] their lengths                              */
    uint8_t *type;         /* [n] TT_* (NORMAL where the file has none)      */
    const uint8_t *scores; /* [n] f32, little-endian, or NULL                */
    int32_t bos, eos, unk, pad, sep, cls, mask; /* -1 when absent            */
    int add_bos, add_eos;  /* -1 when absent                                 */
    char model[32], pre[64];
} gmeta;

static uint64_t le64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

static int meta_fail(const gmeta *m, inf_err *err, const char *key, const char *what)
{
    return inf_fail(err, INF_ERR_FORMAT, "tok: %s: metadata '%s' %s", m->path, key, what);
}

/* A string key into buf (truncated); 0 when absent, 1 when read, an
 * INF_ERR_* (negative) when not a string. */
static int meta_str(const gmeta *m, const char *key, char *buf, size_t cap, inf_err *err)
{
    const gguf_kv *kv = gguf_find_kv(m->g, key);
    if (!kv)
        return 0;
    if (kv->type != GGUF_V_STRING)
        return meta_fail(m, err, key, "must be a string");
    size_t n = kv->str_len < cap - 1 ? (size_t)kv->str_len : cap - 1;
    memcpy(buf, kv->str, n);
    buf[n] = 0;
    return 1;
}

static int meta_id(const gmeta *m, const char *key, int32_t *id, inf_err *err)
{
    const gguf_kv *kv = gguf_find_kv(m->g, key);
    *id = -1;
    if (!kv)
        return INF_OK;
    if (kv->type == GGUF_V_STRING || kv->type == GGUF_V_ARRAY || kv->type == GGUF_V_F32 ||
        kv->type == GGUF_V_F64 || kv->type == GGUF_V_BOOL)
        return meta_fail(m, err, key, "must be an integer");
    /* llama.cpp writes -1 (or an out-of-range id) for "none" in some files */
    if (kv->inum >= 0 && kv->inum < m->n)
        *id = (int32_t)kv->inum;
    return INF_OK;
}

static int meta_bool(const gmeta *m, const char *key, int *v, inf_err *err)
{
    const gguf_kv *kv = gguf_find_kv(m->g, key);
    if (!kv)
        return INF_OK;
    if (kv->type != GGUF_V_BOOL)
        return meta_fail(m, err, key, "must be a bool");
    *v = kv->inum != 0;
    return INF_OK;
}

static void meta_free(gmeta *m)
{
    free(m->str);
    free(m->len);
    free(m->type);
}

/* Reads the token list, types, scores, special ids and flags. */
static int meta_read(const gguf_file *g, gmeta *m, inf_err *err)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    m->path = gguf_path(g);
    m->add_bos = m->add_eos = -1;
    int rc = meta_str(m, "tokenizer.ggml.model", m->model, sizeof m->model, err);
    if (rc < 0)
        return rc;
    if (!rc)
        return inf_fail(err, INF_ERR_FORMAT, "tok: %s has no tokenizer (no tokenizer.ggml.model); "
                        "pass --tokenizer DIR", m->path);
    if ((rc = meta_str(m, "tokenizer.ggml.pre", m->pre, sizeof m->pre, err)) < 0)
        return rc;
    const gguf_kv *tk = gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!tk || tk->type != GGUF_V_ARRAY || tk->elem != GGUF_V_STRING || tk->n == 0 ||
        tk->n > (1 << 24))
        return meta_fail(m, err, "tokenizer.ggml.tokens", "must be a non-empty array of strings");
    m->n = (int)tk->n;
    m->str = malloc((size_t)m->n * sizeof *m->str);
    m->len = malloc((size_t)m->n * sizeof *m->len);
    m->type = malloc((size_t)m->n);
    if (!m->str || !m->len || !m->type)
        return inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    const uint8_t *p = tk->data; /* the reader checked every length */
    for (int i = 0; i < m->n; i++) {
        uint64_t l = le64(p);
        if (l > UINT32_MAX)
            return meta_fail(m, err, "tokenizer.ggml.tokens", "holds a token over 4 GB");
        m->str[i] = (const char *)p + 8;
        m->len[i] = (uint32_t)l;
        m->type[i] = TT_NORMAL;
        p += 8 + l;
    }
    const gguf_kv *ty = gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (ty) {
        if (ty->type != GGUF_V_ARRAY || ty->n != tk->n ||
            (ty->elem != GGUF_V_I32 && ty->elem != GGUF_V_U32))
            return meta_fail(m, err, "tokenizer.ggml.token_type",
                             "must be an array of int32, one per token");
        const uint8_t *b = ty->data;
        for (int i = 0; i < m->n; i++) {
            uint32_t v = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                         (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
            m->type[i] = v >= TT_NORMAL && v <= TT_BYTE ? (uint8_t)v : TT_NORMAL;
        }
    }
    const gguf_kv *sc = gguf_find_kv(g, "tokenizer.ggml.scores");
    if (sc) {
        if (sc->type != GGUF_V_ARRAY || sc->n != tk->n || sc->elem != GGUF_V_F32)
            return meta_fail(m, err, "tokenizer.ggml.scores",
                             "must be an array of float32, one per token");
        m->scores = sc->data;
    }
    static const char *const ids[] = {"bos", "eos", "unknown", "padding", "seperator", "cls",
                                      "mask"};
    int32_t *dst[] = {&m->bos, &m->eos, &m->unk, &m->pad, &m->sep, &m->cls, &m->mask};
    for (int i = 0; i < 7; i++) {
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", ids[i]);
        if ((rc = meta_id(m, key, dst[i], err)))
            return rc;
    }
    if ((rc = meta_bool(m, "tokenizer.ggml.add_bos_token", &m->add_bos, err)) ||
        (rc = meta_bool(m, "tokenizer.ggml.add_eos_token", &m->add_eos, err)))
        return rc;
    return INF_OK;
}

/* ---- "llama": a SentencePiece model proto ---------------------------------------- */

static void pb_varint(inf_buf *b, uint64_t v)
{
    char c[10];
    size_t n = 0;
    do {
        c[n++] = (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    inf_buf_put(b, c, n);
}

static void pb_bytes(inf_buf *b, int field, const char *s, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, n);
    inf_buf_put(b, s, n);
}

static void pb_int(inf_buf *b, int field, int64_t v)
{
    pb_varint(b, (uint64_t)field << 3);
    pb_varint(b, (uint64_t)v);
}

/* ModelProto { repeated SentencePiece pieces = 1 {piece = 1, score = 2,
 * type = 3}; TrainerSpec trainer_spec = 2 {model_type = 3 (BPE = 2),
 * vocab_size = 4, byte_fallback = 35}; NormalizerSpec normalizer_spec = 3
 * {name = 1, add_dummy_prefix = 3, remove_extra_whitespaces = 4,
 * escape_whitespaces = 5} } (sentencepiece_model.proto). */
static int spm_create(const gmeta *m, tok **out, inf_err *err)
{
    int prefix = 1, remove_ws = 0;
    int rc = meta_bool(m, "tokenizer.ggml.add_space_prefix", &prefix, err);
    if (!rc)
        rc = meta_bool(m, "tokenizer.ggml.remove_extra_whitespaces", &remove_ws, err);
    if (rc)
        return rc;
    inf_buf b = {0}, piece = {0};
    int byte_fallback = 0;
    char empty[32];
    for (int i = 0; i < m->n; i++) {
        piece.len = 0;
        const char *s = m->str[i];
        size_t n = m->len[i];
        if (!n) { /* SentencePiece refuses empty pieces; llama.cpp renames them */
            n = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
            s = empty;
        }
        pb_bytes(&piece, 1, s, n);
        if (m->scores) {
            pb_varint(&piece, 2 << 3 | 5);
            inf_buf_put(&piece, (const char *)m->scores + 4 * i, 4);
        }
        pb_int(&piece, 3, m->type[i]);
        byte_fallback |= m->type[i] == TT_BYTE;
        pb_bytes(&b, 1, piece.p, piece.len);
    }
    inf_buf spec = {0};
    pb_int(&spec, 3, 2);
    pb_int(&spec, 4, m->n);
    pb_int(&spec, 35, byte_fallback);
    pb_bytes(&b, 2, spec.p, spec.len);
    spec.len = 0;
    pb_bytes(&spec, 1, "identity", 8);
    pb_int(&spec, 3, prefix);
    pb_int(&spec, 4, remove_ws);
    pb_int(&spec, 5, 1);
    pb_bytes(&b, 3, spec.p, spec.len);
    if (b.oom || piece.oom || spec.oom)
        rc = inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    else
        rc = tok_spm_open(b.p, b.len, m->path, out, err);
    free(b.p);
    free(piece.p);
    free(spec.p);
    if (rc)
        return rc;
    (*out)->bos = m->bos;
    (*out)->eos = m->eos;
    (*out)->add_bos = m->add_bos < 0 ? 1 : m->add_bos;
    (*out)->add_eos = m->add_eos < 0 ? 0 : m->add_eos;
    return INF_OK;
}

/* ---- "gpt2": byte-level BPE through the tokenizer.json engine ------------------------- */

#define BL_DEC "\"decoder\":{\"type\":\"ByteLevel\"}"
#define BL_SPLIT(re) "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[" re \
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}"
#define RE(s) "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" s "\"},\"behavior\":\"Isolated\"},"
/* The contractions-letters-digits-punctuation-newlines-spaces regex of
 * Llama 3 (digits in threes) and Qwen 2 (digits one by one), as their
 * tokenizer.json files spell it. */
#define RE_L3(d) "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|" d \
    "| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

/* tokenizer.ggml.pre -> the stages of that family's tokenizer.json. */
static const struct pre_def {
    const char *names; /* space-separated: llama.cpp's names for one recipe */
    int ignore_merges;
    const char *stages;
} pre_defs[] = {
    {"llama-bpe llama3 llama-v3 falcon3", 1,
     "{" BL_SPLIT(RE(RE_L3("\\\\p{N}{1,3}"))) "," BL_DEC "}"},
    {"qwen2 deepseek-r1-qwen megrez", 0,
     "{\"normalizer\":{\"type\":\"NFC\"}," BL_SPLIT(RE(RE_L3("\\\\p{N}"))) "," BL_DEC "}"},
    {"deepseek-v3", 0,
     "{" BL_SPLIT(RE("\\\\p{N}{1,3}") RE("[\\u4e00-\\u9fa5\\u3040-\\u309f\\u30a0-\\u30ff]+")
                  RE("[!\\\"#$%&'()*+,\\\\-./:;<=>?@\\\\[\\\\\\\\\\\\]^_`{|}~][A-Za-z]+|"
                     "[^\\r\\n\\\\p{L}\\\\p{P}\\\\p{S}]?[\\\\p{L}\\\\p{M}]+| ?[\\\\p{P}\\\\p{S}]+"
                     "[\\r\\n]*|\\\\s*[\\r\\n]+|\\\\s+(?!\\\\S)|\\\\s+"))
     "," BL_DEC "}"},
    {"gpt-4o", 1,
     "{" BL_SPLIT(RE("[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*"
                     "[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                     "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+"
                     "[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
                     "\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n/]*|\\\\s*[\\\\r\\\\n]+|"
                     "\\\\s+(?!\\\\S)|\\\\s+"))
     "," BL_DEC "}"},
    /* GPT-2's own: ByteLevel with its built-in regex */
    {"default gpt-2 phi-2 roberta-bpe", 0,
     "{\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
     "\"use_regex\":true}," BL_DEC "}"},
};

static const struct pre_def *pre_find(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0]; i++)
        for (const char *s = pre_defs[i].names; *s;) {
            size_t k = strcspn(s, " ");
            if (k == n && memcmp(s, name, n) == 0)
                return &pre_defs[i];
            s += k + (s[k] == ' ');
        }
    return NULL;
}

/* What a byte-level token stands for: its characters mapped back to bytes
 * (kept as it is when one is not in GPT-2's alphabet, as tok_hf_open does). */
static void byte_level_bytes(const char *s, size_t n, inf_buf *out)
{
    out->len = 0;
    for (size_t j = 0; j < n;) {
        int32_t cp;
        j += hf_utf8_next(s + j, n - j, &cp);
        int b = hf_char_byte(cp);
        if (b < 0) {
            out->len = 0;
            inf_buf_put(out, s, n);
            return;
        }
        char c = (char)b;
        inf_buf_put(out, &c, 1);
    }
}

static int bpe_merges(const gmeta *m, hf_impl *h, const hf_bpe_config *c, inf_err *err)
{
    const gguf_kv *mg = gguf_find_kv(m->g, "tokenizer.ggml.merges");
    if (mg && (mg->type != GGUF_V_ARRAY || mg->elem != GGUF_V_STRING))
        return meta_fail(m, err, "tokenizer.ggml.merges", "must be an array of strings");
    uint64_t n = mg ? mg->n : 0;
    if (hf_bpe_create(c, (size_t)n, &h->bpe))
        return inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    const uint8_t *p = mg ? mg->data : NULL;
    inf_buf cat = {0};
    int rc = INF_OK;
    for (uint64_t r = 0; r < n && !rc; r++) {
        uint64_t l = le64(p);
        const char *s = (const char *)p + 8, *sp = memchr(s, ' ', (size_t)l);
        p += 8 + l;
        if (!sp || memchr(sp + 1, ' ', (size_t)(s + l - sp - 1)) || r > UINT32_MAX) {
            rc = inf_fail(err, INF_ERR_FORMAT, "tok: %s: tokenizer.ggml.merges[%llu] must be two "
                          "tokens, \"a b\"", m->path, (unsigned long long)r);
            break;
        }
        size_t al = (size_t)(sp - s), bl = (size_t)l - al - 1;
        cat.len = 0;
        inf_buf_put(&cat, s, al);
        inf_buf_put(&cat, sp + 1, bl);
        if (cat.oom) {
            rc = inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
            break;
        }
        int32_t ia = hf_vocab_get(h->vocab, s, al), ib = hf_vocab_get(h->vocab, sp + 1, bl);
        int32_t im = hf_vocab_get(h->vocab, cat.p, cat.len);
        if (ia < 0 || ib < 0 || im < 0)
            rc = inf_fail(err, INF_ERR_FORMAT, "tok: %s: tokenizer.ggml.merges[%llu] \"%.*s\" "
                          "joins tokens that are not in tokenizer.ggml.tokens", m->path,
                          (unsigned long long)r, (int)(l > 200 ? 200 : l), s);
        else if (hf_bpe_add_merge(h->bpe, ia, ib, im, (uint32_t)r))
            rc = inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    }
    free(cat.p);
    return rc;
}

/* Control and user-defined tokens, matched in the raw text before BPE. */
static int bpe_added(const gmeta *m, hf_impl *h, inf_err *err)
{
    int n = 0;
    for (int i = 0; i < m->n; i++)
        n += m->type[i] == TT_CONTROL || m->type[i] == TT_USER;
    h->added = calloc(n ? (size_t)n : 1, sizeof *h->added);
    if (!h->added || hf_trie_create(&h->raw_trie))
        return inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    for (int i = 0; i < m->n; i++) {
        if (m->type[i] != TT_CONTROL && m->type[i] != TT_USER)
            continue;
        hf_added *a = &h->added[h->n_added];
        a->id = i;
        a->len = m->len[i];
        a->special = m->type[i] == TT_CONTROL;
        /* only valid UTF-8 is matched in the text (tok_hf_open.c says why) */
        if (!(a->content = hf_dup(m->str[i], a->len)) ||
            (hf_utf8_valid(a->content, a->len) &&
             hf_trie_add(h->raw_trie, a->content, a->len, h->n_added)))
            return inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
        h->n_added++;
    }
    return INF_OK;
}

static int bpe_create(const gmeta *m, tok **out, inf_err *err)
{
    const struct pre_def *pd = pre_find(m->pre[0] ? m->pre : "default");
    if (!pd)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "tok: %s: tokenizer.ggml.pre '%s' is not "
                        "supported (llama-bpe, qwen2, deepseek-v3, gpt-4o, gpt-2; or pass "
                        "--tokenizer DIR)", m->path, m->pre);
    hf_impl *h = calloc(1, sizeof *h);
    tok *t = NULL;
    inf_buf bytes = {0};
    cJSON *stages = cJSON_Parse(pd->stages);
    hf_load L = {m->path, err};
    int rc = h && stages ? INF_OK : inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    if (!rc)
        rc = hf_load_stages(&L, stages, h);
    size_t key_bytes = 0;
    for (int i = 0; i < m->n; i++)
        key_bytes += m->len[i];
    if (!rc && hf_vocab_create((size_t)m->n, key_bytes, &h->vocab))
        rc = inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    for (int i = 0; i < m->n && !rc; i++)
        if (hf_vocab_put(h->vocab, m->str[i], m->len[i], i) < 0)
            rc = inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    hf_bpe_config c = {.vocab = h ? h->vocab : NULL, .vocab_size = m->n, .unk = -1,
                       .ignore_merges = pd->ignore_merges};
    for (int b = 0; b < 256; b++)
        c.byte_ids[b] = -1;
    if (!rc)
        rc = bpe_merges(m, h, &c, err);
    if (!rc)
        rc = bpe_added(m, h, err);
    if (!rc)
        rc = tok__new(m->n, &t, err);
    for (int i = 0; i < m->n && !rc; i++) {
        int added = m->type[i] == TT_CONTROL || m->type[i] == TT_USER;
        if (added) {
            bytes.len = 0;
            inf_buf_put(&bytes, m->str[i], m->len[i]);
        } else {
            byte_level_bytes(m->str[i], m->len[i], &bytes);
        }
        if (bytes.oom)
            rc = inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
        else
            rc = tok__set(t, i, m->str[i], m->len[i], bytes.p ? bytes.p : "", bytes.len,
                          m->type[i] == TT_CONTROL ? TOK_F_SPECIAL : 0, err);
    }
    cJSON_Delete(stages);
    free(bytes.p);
    if (rc) {
        tok__free(t);
        hf_impl_destroy(h);
        return rc;
    }
    hf_tok_attach(t, h);
    t->bos = m->bos;
    t->eos = m->eos;
    t->add_bos = m->add_bos < 0 ? pd->ignore_merges && strstr(pd->names, "llama") : m->add_bos;
    t->add_eos = m->add_eos < 0 ? 0 : m->add_eos;
    *out = t;
    return INF_OK;
}

int tok_gguf_create(const char *path, tok **out, inf_err *err)
{
    *out = NULL;
    gguf_file *g = NULL;
    gmeta m;
    int rc = gguf_open(path, &g, err);
    if (!rc)
        rc = meta_read(g, &m, err);
    if (!rc && strcmp(m.model, "llama") == 0)
        rc = spm_create(&m, out, err);
    else if (!rc && strcmp(m.model, "gpt2") == 0)
        rc = bpe_create(&m, out, err);
    else if (!rc)
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "tok: %s: tokenizer.ggml.model '%s' is not "
                      "supported (llama, gpt2; or pass --tokenizer DIR)", path, m.model);
    if (g)
        meta_free(&m);
    gguf_close(g);
    return rc;
}

/* ---- tokenizer_config.json's equivalent --------------------------------------------- */

static void add_token(cJSON *c, const gmeta *m, const char *key, int32_t id)
{
    if (id < 0)
        return;
    char *s = hf_dup(m->str[id], m->len[id]);
    if (s)
        cJSON_AddStringToObject(c, key, s);
    free(s);
}

static char *kv_strdup(const gguf_kv *kv)
{
    return kv && kv->type == GGUF_V_STRING ? hf_dup(kv->str, (size_t)kv->str_len) : NULL;
}

int tok_gguf_config(const char *path, cJSON **out, inf_err *err)
{
    *out = NULL;
    gguf_file *g = NULL;
    gmeta m;
    int rc = gguf_open(path, &g, err);
    if (!rc)
        rc = meta_read(g, &m, err);
    cJSON *c = rc ? NULL : cJSON_CreateObject();
    if (!rc && !c)
        rc = inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    if (!rc) {
        add_token(c, &m, "bos_token", m.bos);
        add_token(c, &m, "eos_token", m.eos);
        add_token(c, &m, "unk_token", m.unk);
        add_token(c, &m, "pad_token", m.pad);
        add_token(c, &m, "sep_token", m.sep);
        add_token(c, &m, "cls_token", m.cls);
        add_token(c, &m, "mask_token", m.mask);
        if (m.add_bos >= 0)
            cJSON_AddBoolToObject(c, "add_bos_token", m.add_bos);
        if (m.add_eos >= 0)
            cJSON_AddBoolToObject(c, "add_eos_token", m.add_eos);
        const gguf_kv *dk = gguf_find_kv(g, "tokenizer.chat_template");
        if (dk && dk->type != GGUF_V_STRING)
            rc = meta_fail(&m, err, "tokenizer.chat_template", "must be a string");
        /* named ones (tokenizer.chat_template.tool_use, ...) make a list */
        cJSON *list = cJSON_CreateArray();
        for (int i = 0; i < gguf_kv_count(g) && !rc && list; i++) {
            const gguf_kv *kv = gguf_kv_at(g, i);
            const char *pfx = "tokenizer.chat_template.";
            if (strncmp(kv->key, pfx, strlen(pfx)) || kv->type != GGUF_V_STRING)
                continue;
            char *s = kv_strdup(kv);
            cJSON *e = cJSON_CreateObject();
            if (s && e) {
                cJSON_AddStringToObject(e, "name", kv->key + strlen(pfx));
                cJSON_AddStringToObject(e, "template", s);
            }
            cJSON_AddItemToArray(list, e);
            free(s);
        }
        char *def = kv_strdup(dk);
        if (!rc && list && cJSON_GetArraySize(list) > 0) {
            if (def) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "name", "default");
                cJSON_AddStringToObject(e, "template", def);
                cJSON_InsertItemInArray(list, 0, e);
            }
            cJSON_AddItemToObject(c, "chat_template", list);
            list = NULL;
        } else if (!rc && def) {
            cJSON_AddStringToObject(c, "chat_template", def);
        }
        cJSON_Delete(list);
        free(def);
    }
    if (g)
        meta_free(&m);
    gguf_close(g);
    if (rc) {
        cJSON_Delete(c);
        return rc;
    }
    *out = c;
    return INF_OK;
}
