/* tok_gguf: the tokenizer and the tokenizer_config a GGUF file's metadata
 * describes (llama.cpp's tokenizer.ggml.* keys), behind tok.h.
 *
 *   tokenizer.ggml.model "llama": SentencePiece (tokens, scores,
 *     token_type; byte pieces for byte fallback). The metadata is written
 *     back into a SentencePiece model (a BPE ModelProto) and run by the
 *     sentencepiece library, as a tokenizer.model is: the same pieces,
 *     scores and types give the same ids. add_space_prefix (default true)
 *     and remove_extra_whitespaces (default false, llama.cpp's) set its
 *     normalizer.
 *   tokenizer.ggml.model "gpt2": byte-level BPE (tokens, merges, token_type)
 *     run by the tokenizer.json engine (tok_hf*.c): tokenizer.ggml.pre names
 *     the pre-tokenizer, mapped to the stages of the model family's
 *     tokenizer.json (llama-bpe, qwen2, gpt-2, deepseek-v3, ...); control
 *     (3) and user-defined (4) tokens are its added tokens, matched in the
 *     text first, control ones special.
 *
 * bos/eos come from tokenizer.ggml.bos_token_id / eos_token_id, add_bos /
 * add_eos from tokenizer.ggml.add_bos_token / add_eos_token (llama.cpp's
 * defaults when absent: llama BOS yes; gpt2 BOS only for llama-bpe). */
#ifndef INFERD_TOK_GGUF_H
#define INFERD_TOK_GGUF_H

#include "common.h"
#include "tok.h"

struct cJSON;

/* The tokenizer of the GGUF file at path. Errors name the file and the key
 * (INF_ERR_FORMAT; INF_ERR_UNSUPPORTED for a tokenizer model or
 * pre-tokenizer inferd does not implement, naming it). */
int tok_gguf_create(const char *path, tok **out, inf_err *err);

/* What tokenizer_config.json would say, from the file's metadata:
 * bos_token, eos_token, unk_token, pad_token, sep_token, cls_token,
 * mask_token (the tokens' strings), add_bos_token, add_eos_token, and
 * chat_template (tokenizer.chat_template; with tokenizer.chat_template.NAME
 * keys, a list of {"name", "template"} with "default" first). *out is a
 * new cJSON object (caller deletes). */
int tok_gguf_config(const char *path, struct cJSON **out, inf_err *err);

#endif
