/* tok_: SentencePiece tokenizer behind a C API (the C++ library lives in
 * tok.cpp, the only C++ in inferd).
 *
 * tokenizer_config.json decides whether encode adds BOS (add_bos_token,
 * default true as Llama's) and EOS (add_eos_token, default false). */
#ifndef INFERD_TOK_H
#define INFERD_TOK_H

#include "common.h"

typedef struct tok tok;

/* Loads DIR/tokenizer.model and, when present, DIR/tokenizer_config.json. */
int tok_create(const char *dir, tok **out, inf_err *err);

/* Loads a tokenizer.model file directly, with explicit BOS/EOS policy. */
int tok_create_file(const char *spm_path, int add_bos, int add_eos, tok **out,
                    inf_err *err);

void tok_destroy(tok *t); /* NULL-safe */

int tok_vocab_size(const tok *t);
int tok_bos_id(const tok *t);  /* -1 when the model has none */
int tok_eos_id(const tok *t);  /* -1 when the model has none */
int tok_adds_bos(const tok *t);

/* The piece's text as SentencePiece spells it ("▁the", "<0x0A>"), or NULL
 * for an out-of-range id. Valid for the tokenizer's lifetime. */
const char *tok_piece(const tok *t, int32_t id);

/* Encodes len bytes of UTF-8 text. add_special != 0 adds BOS/EOS as the
 * tokenizer's policy says. *ids is malloc'd (caller frees), *n its length. */
int tok_encode(const tok *t, const char *text, size_t len, int add_special,
               int32_t **ids, int *n, inf_err *err);

/* Decodes ids into a malloc'd NUL-terminated string (caller frees); *len
 * (may be NULL) receives its length. Out-of-range ids are an error. */
int tok_decode(const tok *t, const int32_t *ids, int n, char **text,
               size_t *len, inf_err *err);

/* Incremental detokenizer for streaming: push tokens one at a time and get
 * back only text that is final. Never emits half a UTF-8 character or the
 * bytes of an unfinished byte-piece run; leading-space handling matches what
 * decoding the whole sequence at once gives. The concatenation of every push's
 * output and the final flush equals the decode of all pushed ids in context
 * of the prefix. */
typedef struct tok_stream tok_stream;

/* prefix: tokens already in the sequence before the ones to be streamed (e.g.
 * the prompt); they give context for spacing and are never emitted. */
int tok_stream_create(const tok *t, const int32_t *prefix, int n_prefix,
                      tok_stream **out, inf_err *err);
void tok_stream_destroy(tok_stream *s); /* NULL-safe */

/* Feeds one id. *text is set to the newly final bytes (not NUL-terminated
 * necessarily, valid until the next call on s) and *len to their count,
 * which may be 0. */
int tok_stream_push(tok_stream *s, int32_t id, const char **text, size_t *len,
                    inf_err *err);

/* At the end of a sequence: returns whatever is still held back (an
 * incomplete character decodes as U+FFFD, as a whole-sequence decode would). */
int tok_stream_flush(tok_stream *s, const char **text, size_t *len,
                     inf_err *err);

#endif
