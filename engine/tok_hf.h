/* tok_hf: Hugging Face tokenizer.json in C, private to the tokenizer.
 *
 * The pipeline is the tokenizers library's: added tokens split first, then
 * per piece normalizer -> pre-tokenizer -> BPE model; post-processor on the
 * ids; decoder chain on the token strings. Each stage is a small tagged
 * record built from the JSON by tok_hf.c and run by tok_hf_norm.c (with the
 * regex and Unicode helpers), tok_hf_pre.c, tok_hf_bpe.c and tok_hf_dec.c. */
#ifndef INFERD_TOK_HF_H
#define INFERD_TOK_HF_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/common.h"

/* ---- text pieces --------------------------------------------------------- */

typedef struct hf_split {
    size_t off, len;
    int first; /* starts at offset 0 of the input (Metaspace "first") */
} hf_split;

/* A list of pieces of text, their bytes back to back in buf. */
typedef struct hf_splits {
    inf_buf buf;
    hf_split *v;
    size_t n, cap;
    int oom;
} hf_splits;

void hf_splits_clear(hf_splits *s);
void hf_splits_free(hf_splits *s);
/* Appends a piece (copying p[0:len]); empty pieces are dropped. */
void hf_splits_add(hf_splits *s, const char *p, size_t len, int first);

/* ---- Unicode and regex ----------------------------------------------------- */

/* Decodes the code point at s[0:n] (valid UTF-8); returns its length. */
size_t hf_utf8_next(const char *s, size_t n, int32_t *cp);
size_t hf_utf8_put(int32_t cp, char *out); /* 1..4 bytes */
/* Replaces invalid UTF-8 with U+FFFD; *out NULL when s is valid already. */
int hf_utf8_sanitize(const char *s, size_t n, char **out, size_t *out_len);
/* Whether s[0:n] is valid UTF-8. */
int hf_utf8_valid(const char *s, size_t n);
int hf_is_white(int32_t cp);   /* Unicode White_Space (Rust char::is_whitespace) */
int hf_is_alnum(int32_t cp);   /* Rust char::is_alphanumeric                      */
int hf_is_numeric(int32_t cp); /* Rust char::is_numeric (Nd, Nl, No)              */
int hf_is_punct(int32_t cp);   /* HF's is_punc: ASCII punctuation or P*          */

typedef struct hf_re {
    pcre2_code *code;
} hf_re;

/* Compiles an Oniguruma-style pattern with UTF and UCP (JIT when available),
 * \s and \S rewritten to Oniguruma's White_Space set. *msg gets PCRE2's
 * message on failure. */
int hf_re_compile(hf_re *re, const char *pat, size_t len, char *msg, size_t msg_len);
void hf_re_free(hf_re *re);

/* A pattern of Split / Replace: a literal string or a regex. */
typedef struct hf_pattern {
    int is_re;
    char *lit;
    size_t lit_len;
    hf_re re;
} hf_pattern;

/* Finds the pattern's matches in s[0:n] (valid UTF-8), leftmost first and
 * non-overlapping; empty regex matches advance by a whole character. Calls
 * fn(ctx, start, end) for each; returns INF_OK or INF_ERR_NOMEM. */
int hf_find(const hf_pattern *p, const char *s, size_t n,
            void (*fn)(void *ctx, size_t start, size_t end), void *ctx);

/* ---- normalizers ------------------------------------------------------------ */

typedef enum hf_norm_kind {
    HF_N_SEQ, HF_N_NFC, HF_N_NFD, HF_N_NFKC, HF_N_NFKD, HF_N_LOWER, HF_N_REPLACE,
    HF_N_PREPEND, HF_N_STRIP,
} hf_norm_kind;

typedef struct hf_norm {
    hf_norm_kind kind;
    struct hf_norm *sub; /* SEQ */
    int n_sub;
    hf_pattern pat;      /* REPLACE */
    char *str;           /* REPLACE content, PREPEND text */
    size_t str_len;
    int left, right;     /* STRIP */
} hf_norm;

/* Normalizes s[0:n] into out (cleared first). */
int hf_norm_apply(const hf_norm *nm, const char *s, size_t n, inf_buf *out);
void hf_norm_free(hf_norm *nm);

/* ---- pre-tokenizers ------------------------------------------------------------ */

typedef enum hf_behavior {
    HF_B_REMOVED, HF_B_ISOLATED, HF_B_MERGED_PREV, HF_B_MERGED_NEXT, HF_B_CONTIGUOUS,
} hf_behavior;

typedef enum hf_pre_kind {
    HF_P_SEQ, HF_P_SPLIT, HF_P_BYTELEVEL, HF_P_METASPACE, HF_P_DIGITS, HF_P_PUNCT,
    HF_P_WHITESPACE, HF_P_WSSPLIT,
} hf_pre_kind;

enum { HF_PREPEND_ALWAYS, HF_PREPEND_FIRST, HF_PREPEND_NEVER };

typedef struct hf_pre {
    hf_pre_kind kind;
    struct hf_pre *sub; /* SEQ */
    int n_sub;
    hf_pattern pat;     /* SPLIT; BYTELEVEL (use_regex) and WHITESPACE own one too */
    int has_pat;
    hf_behavior behavior;
    int invert;
    int add_prefix_space; /* BYTELEVEL */
    char repl[8];         /* METASPACE replacement, UTF-8 */
    size_t repl_len;
    int prepend;          /* METASPACE: HF_PREPEND_* */
    int split;            /* METASPACE */
    int individual;       /* DIGITS */
} hf_pre;

/* Runs the pre-tokenizer over every piece of *s (replaced by the result;
 * tmp is scratch). */
int hf_pre_apply(const hf_pre *p, hf_splits *s, hf_splits *tmp);
void hf_pre_free(hf_pre *p);

/* The byte-level alphabet (GPT-2's bytes_to_unicode): byte -> code point. */
int32_t hf_byte_char(unsigned char b);
/* Inverse: code point -> byte, or -1. */
int hf_char_byte(int32_t cp);

/* ---- a JSON reader that builds no tree (tok_hf_json.c) ----------------------- */

/* The cursor over text; msg is set by the first error (the cursor then
 * where it was found). Functions return INF_OK or INF_ERR_FORMAT. */
typedef struct hf_js {
    const char *p, *end;
    const char *msg;
} hf_js;

void hf_js_ws(hf_js *j);
int hf_js_peek(hf_js *j);            /* the next byte after white space, -1 at the end */
int hf_js_expect(hf_js *j, char c);  /* passes c (after white space) */
/* A string, decoded into out (cleared first; NULL: checked only). */
int hf_js_str(hf_js *j, inf_buf *out);
/* A number; *is_int whether it is an integer in +-2^53, then *v. */
int hf_js_num(hf_js *j, long long *v, int *is_int);
/* Iterates an object (close '}', key gets each member's name) or an array
 * (close ']', key NULL) whose opening bracket was passed; *state 0 at first.
 * 1: a value follows at the cursor; 0: the end (passed); <0: an error. */
int hf_js_next(hf_js *j, int *state, char close, inf_buf *key);
/* Passes one value of any kind, checking it; *count (may be NULL) gets the
 * number of members or elements when it is an object or array. */
int hf_js_skip(hf_js *j, size_t *count);

/* ---- the BPE model ------------------------------------------------------------- */

typedef struct hf_vocab hf_vocab; /* string -> id hash */

/* A table for n strings of key_bytes bytes in all (both upper bounds). */
int hf_vocab_create(size_t n, size_t key_bytes, hf_vocab **out);
void hf_vocab_destroy(hf_vocab *v);
/* Adds s -> id; a string already present keeps its first id (returns 1). */
int hf_vocab_put(hf_vocab *v, const char *s, size_t len, int32_t id);
int32_t hf_vocab_get(const hf_vocab *v, const char *s, size_t len); /* -1 if absent */
size_t hf_vocab_count(const hf_vocab *v);
/* For loading many: the hash of a string, a prefetch of its slot, and the
 * lookup given the hash (a batch hides the cache misses of a large table). */
uint32_t hf_vocab_hash(const char *s, size_t len);
void hf_vocab_prefetch(const hf_vocab *v, uint32_t hash);
int32_t hf_vocab_get_hashed(const hf_vocab *v, const char *s, size_t len, uint32_t hash);
/* The i-th string put (i < count): its id, *s and *len its text. */
int32_t hf_vocab_at(const hf_vocab *v, size_t i, const char **s, size_t *len);

typedef struct hf_bpe hf_bpe;

typedef struct hf_bpe_config {
    const hf_vocab *vocab;   /* borrowed */
    int vocab_size;
    int32_t unk;             /* -1: none */
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256];   /* <0xNN> ids for byte_fallback, -1 when absent */
} hf_bpe_config;

int hf_bpe_create(const hf_bpe_config *c, size_t n_merges, hf_bpe **out);
void hf_bpe_destroy(hf_bpe *b);
/* Adds the merge of rank `rank`: a + b -> merged (later duplicates win, as
 * the Rust HashMap insert does). */
int hf_bpe_add_merge(hf_bpe *b, int32_t a, int32_t bb, int32_t merged, uint32_t rank);
void hf_bpe_prefetch_merge(const hf_bpe *b, int32_t a, int32_t bb); /* before adding it */

/* The length of the first piece of word s[0:n] that BPE may encode on its
 * own (the pieces' ids, concatenated, are the word's): n when the word
 * cannot be cut or the vocabulary does not allow it. */
size_t hf_bpe_cut(const hf_bpe *b, const char *s, size_t n);

/* Scratch for one encode call (not shared between threads). */
typedef struct hf_bpe_work hf_bpe_work;
hf_bpe_work *hf_bpe_work_create(void);
void hf_bpe_work_destroy(hf_bpe_work *w);

/* Tokenizes one pre-tokenized word, appending ids to *ids (growing). */
int hf_bpe_word(const hf_bpe *b, hf_bpe_work *w, const char *s, size_t n, int32_t **ids,
                size_t *n_ids, size_t *cap);

/* ---- decoders -------------------------------------------------------------------- */

typedef enum hf_dec_kind {
    HF_D_SEQ, HF_D_BYTELEVEL, HF_D_METASPACE, HF_D_BYTEFALLBACK, HF_D_FUSE, HF_D_STRIP,
    HF_D_REPLACE,
} hf_dec_kind;

typedef struct hf_dec {
    hf_dec_kind kind;
    struct hf_dec *sub;
    int n_sub;
    hf_pattern pat;   /* REPLACE */
    char *str;        /* REPLACE content; METASPACE/STRIP char (UTF-8) */
    size_t str_len;
    int prepend;      /* METASPACE: HF_PREPEND_* */
    int start, stop;  /* STRIP */
} hf_dec;

/* Runs the chain over *s (one piece per token; replaced by the result). */
int hf_dec_apply(const hf_dec *d, hf_splits *s, hf_splits *tmp);
void hf_dec_free(hf_dec *d);

/* ---- added tokens and the whole tokenizer -------------------------------------- */

typedef struct hf_added {
    int32_t id;
    char *content;
    size_t len;
    int single_word, lstrip, rstrip, normalized, special;
} hf_added;

/* A byte trie over added tokens' contents: leftmost-longest matching. */
typedef struct hf_trie hf_trie;
int hf_trie_create(hf_trie **out);
void hf_trie_destroy(hf_trie *t);
int hf_trie_add(hf_trie *t, const char *s, size_t n, int32_t value);
/* The longest key that s[0:n] starts with: its value, *len its length; -1. */
int32_t hf_trie_longest(const hf_trie *t, const char *s, size_t n, size_t *len);
/* Whether any key starts with byte b (a quick filter). */
int hf_trie_first(const hf_trie *t, unsigned char b);

typedef struct hf_impl {
    hf_norm *norm;          /* NULL: none */
    hf_pre *pre;            /* NULL: none */
    hf_dec *dec;            /* NULL: tokens joined with spaces */
    hf_vocab *vocab;
    hf_bpe *bpe;
    hf_added *added;        /* [n_added] */
    int n_added;
    hf_trie *raw_trie;      /* contents matched on the raw text (value: index in added) */
    hf_trie *norm_trie;     /* normalized contents matched after normalization */
    int32_t *pre_ids, *post_ids; /* the post-processor's ids around a sequence */
    int n_pre_ids, n_post_ids;
} hf_impl;

/* ---- loading helpers (tok_hf_load.c), shared with tok_hf_open.c --------------- */

struct cJSON;
typedef struct hf_load {
    const char *file;
    inf_err *err;
} hf_load;

/* "tok: FILE: PATH: message" into L->err; returns code. */
int hf_ld_fail(const hf_load *L, int code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int hf_ld_nomem(const hf_load *L);
/* path + "." + key, or path + "[i]" when key is NULL, into buf. */
const char *hf_ld_sub(char *buf, size_t cap, const char *path, const char *key, int i);
/* Optional members: absent or null leaves the default (*out NULL for strings). */
int hf_ld_str(const hf_load *L, const struct cJSON *o, const char *key, const char *path,
              const char **out);
int hf_ld_bool(const hf_load *L, const struct cJSON *o, const char *key, const char *path,
               int *v);
int hf_ld_int(const hf_load *L, const struct cJSON *o, const char *key, const char *path, int lo,
              int hi, int *v);
char *hf_dup(const char *s, size_t n);
#define HF_MAX_ID ((1 << 24) - 1)

/* model.vocab and model.merges of the file: their text, checked, and sizes. */
typedef struct hf_big {
    const char *vocab, *merges; /* NULL: absent */
    size_t vocab_len, merges_len;
    size_t n_vocab, n_merges;   /* members, elements */
} hf_big;

/* tok_hf_model.c: the file (json[0:len]) checked and parsed as a cJSON
 * tree of everything but model.vocab and model.merges, left in *big. */
int hf_load_root(const hf_load *L, const char *json, size_t len, struct cJSON **root, hf_big *big);
/* The BPE model of root and big into h (vocab, bpe); *max_id raised to
 * the largest id seen. */
int hf_load_model(const hf_load *L, const struct cJSON *root, const hf_big *big, hf_impl *h,
                  int32_t *max_id);
/* normalizer, pre_tokenizer and decoder of root into h. */
int hf_load_stages(const hf_load *L, const struct cJSON *root, hf_impl *h);

/* tok_hf.c: the encode/decode/post operations over an hf_impl. */
extern const struct tok_ops hf_ops;
/* Hands h to t as its implementation (ops, impl, kind): the one ending of
 * every tokenizer built on this engine (tokenizer.json, a GGUF "gpt2"). */
struct tok;
void hf_tok_attach(struct tok *t, hf_impl *h);
void hf_impl_destroy(void *impl);

#endif
