/* tok_: the tokenizer interface. Behind it: Hugging Face tokenizer.json
 * (BPE, in C: tok_hf*.c) and SentencePiece tokenizer.model (the C++ library
 * behind a shim, tok_spm.cpp, the only C++ in inferd). Above them, in
 * generic C: the vocabulary table (id -> piece, id -> bytes, special
 * flags), BOS/EOS policy and the streaming detokenizer (tok.c,
 * tok_stream.c). Nothing outside these files knows how an implementation
 * spells its pieces.
 *
 * tokenizer_config.json decides whether encode adds BOS (add_bos_token) and
 * EOS (add_eos_token). Defaults: SentencePiece BOS yes, EOS no (Llama's);
 * tokenizer.json whatever its post-processor adds. */
#ifndef INFERD_TOK_H
#define INFERD_TOK_H

#include "common.h"

typedef struct tok tok;

/* Loads DIR/tokenizer.json when present (preferred, as Hugging Face's fast
 * tokenizers are), else DIR/tokenizer.model, and DIR/tokenizer_config.json
 * when present. Errors name the file and, for tokenizer.json, the JSON path
 * of what is wrong (INF_ERR_FORMAT / INF_ERR_UNSUPPORTED). dir may also
 * be a GGUF file: its tokenizer.ggml.* metadata (tok_gguf.h). */
int tok_create(const char *dir, tok **out, inf_err *err);

/* Loads a tokenizer.model file directly, with explicit BOS/EOS policy. */
int tok_create_file(const char *spm_path, int add_bos, int add_eos, tok **out,
                    inf_err *err);

void tok_destroy(tok *t); /* NULL-safe */

int tok_vocab_size(const tok *t);
int tok_bos_id(const tok *t);  /* -1 when the model has none */
int tok_eos_id(const tok *t);  /* -1 when the model has none */
int tok_adds_bos(const tok *t);

/* "sentencepiece" or "tokenizer.json". */
const char *tok_kind(const tok *t);

/* The piece's spelling in the model's vocabulary (for comparing two
 * vocabularies and for diagnostics; its form is the implementation's), or
 * NULL for an out-of-range id. Valid for the tokenizer's lifetime. */
const char *tok_piece(const tok *t, int32_t id);

/* The bytes token id stands for on its own: what it adds to a decoded text
 * (word markers as spaces, byte pieces as their byte; a special token as
 * its text). Not NUL-terminated UTF-8 necessarily (a byte-level piece may
 * hold part of a character). NULL and *len = 0 for an out-of-range id.
 * Valid for the tokenizer's lifetime. */
const char *tok_token_bytes(const tok *t, int32_t id, size_t *len);

/* 1 when id is a special/control token (decode leaves it out). */
int tok_is_special(const tok *t, int32_t id);

/* Encodes len bytes of UTF-8 text. add_special != 0 adds BOS/EOS as the
 * tokenizer's policy says. *ids is malloc'd (caller frees), *n its length.
 * tokenizer.json: the text is split on the added tokens first (special ones
 * included, as Hugging Face and so vLLM do). */
int tok_encode(const tok *t, const char *text, size_t len, int add_special,
               int32_t **ids, int *n, inf_err *err);

/* Flags of tok_encode_ex. */
enum {
    TOK_ADD_SPECIAL = 1,   /* BOS/EOS as the policy says (tok_encode's)      */
    /* The text continues a prompt right after a special token (a chat
     * template's text between markers). SentencePiece: a leading space is
     * the word-start marker itself, so the dummy prefix is not added on top
     * of it (" [INST]" gives "▁[INST]", as Mistral's tokenizer does, not
     * "▁▁[INST]"). tokenizer.json: the text is not at the start of the
     * input (Metaspace's prepend_scheme "first" does not prepend). */
    TOK_AFTER_SPECIAL = 2,
};

int tok_encode_ex(const tok *t, const char *text, size_t len, unsigned flags,
                  int32_t **ids, int *n, inf_err *err);

/* Decodes ids into a malloc'd NUL-terminated string (caller frees); *len
 * (may be NULL) receives its length. Out-of-range ids are an error.
 * Special tokens are left out (vLLM's skip_special_tokens default). */
int tok_decode(const tok *t, const int32_t *ids, int n, char **text,
               size_t *len, inf_err *err);

/* Flags of tok_decode_ex and tok_stream_create_ex. */
enum {
    /* Special tokens stay in the text (skip_special_tokens: false).
     * tokenizer.json: they go through the decoder like any token, as
     * Hugging Face's decode does; SentencePiece: their text in place, as the
     * fast tokenizer converted from the model gives ("<s> Hello</s>"). */
    TOK_KEEP_SPECIAL = 4,
};

int tok_decode_ex(const tok *t, const int32_t *ids, int n, unsigned flags, char **text,
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
/* The same with tok_decode_ex's flags (TOK_KEEP_SPECIAL). */
int tok_stream_create_ex(const tok *t, const int32_t *prefix, int n_prefix, unsigned flags,
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
