/* tok internals shared by the generic layer (tok.c, tok_stream.c) and the
 * implementations behind it: SentencePiece (tok_spm.cpp) and tokenizer.json
 * (tok_hf*.c). Not part of the public API. */
#ifndef INFERD_TOK_INT_H
#define INFERD_TOK_INT_H

#include <stdint.h>

#include "tok.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-token flags of the generic vocabulary table. */
enum {
    TOK_F_SPECIAL = 1, /* control/special: dropped by decode, never streamed */
    TOK_F_BYTE = 2,    /* stands for one raw byte (<0xNN>, byte fallback)   */
};

/* What an implementation provides. encode sees plain text only (the
 * generic layer adds BOS/EOS); decode gets ids already range-checked and
 * returns a malloc'd string, special tokens left out unless keep_special
 * (an implementation may not support keeping them: SentencePiece). */
typedef struct tok_ops {
    int (*encode)(const tok *t, const char *text, size_t len, int flags, int32_t **ids,
                  size_t *n, inf_err *err);
    int (*decode)(const tok *t, const int32_t *ids, size_t n, int keep_special, char **text,
                  size_t *len, inf_err *err);
    /* Applies the implementation's special-token policy (the post-processor
     * of a tokenizer.json); NULL means the generic BOS/EOS policy. */
    int (*post)(const tok *t, int32_t **ids, size_t *n, inf_err *err);
    void (*destroy)(void *impl);
} tok_ops;

struct tok {
    const tok_ops *ops;
    void *impl;
    int vocab;
    char *blob;         /* every token's piece and bytes, NUL after each */
    size_t blob_len, blob_cap;
    uint32_t *piece;    /* [vocab] offset of the piece's spelling in blob  */
    uint32_t *bytes;    /* [vocab] offset of what the token stands for     */
    uint32_t *n_bytes;  /* [vocab] its length                              */
    uint8_t *flags;     /* [vocab] TOK_F_*                                  */
    int bos, eos;       /* -1 when absent                                  */
    int add_bos, add_eos;
    /* SentencePiece: a control piece between byte pieces ends their run
     * (the bytes on either side are not joined into one character);
     * tokenizer.json drops special tokens before decoding, so they do not. */
    int special_splits_bytes;
    const char *kind;   /* "sentencepiece" or "tokenizer.json"            */
};

/* A new tok with room for vocab tokens, every one empty until set. */
int tok__new(int vocab, tok **out, inf_err *err);

/* Sets token id's piece spelling, the bytes it stands for and its flags. */
int tok__set(tok *t, int32_t id, const char *piece, size_t piece_len, const char *bytes,
             size_t n_bytes, unsigned flags, inf_err *err);

/* Frees the generic tables (and calls ops->destroy on impl). */
void tok__free(tok *t);

/* The SentencePiece implementation over a serialized model (path names it
 * in messages). Sets ops, the vocabulary table, bos and eos. */
int tok_spm_open(const char *blob, size_t len, const char *path, tok **out, inf_err *err);

/* The tokenizer.json implementation over the file's text. Sets ops, the
 * vocabulary table (added tokens included) and the bos/eos its
 * post-processor names; config (may be NULL) is tokenizer_config.json's
 * parsed root, for bos_token / eos_token. */
struct cJSON;
int tok_hf_open(const char *json, size_t len, const char *path, const struct cJSON *config,
                tok **out, inf_err *err);

#ifdef __cplusplus
}
#endif

#endif
