/* gguf_model: a model (engine/model.h) from one GGUF file.
 *
 * The metadata (general.architecture llama, qwen2, qwen3, gemma2, gemma3 or
 * phi3, as llama.cpp writes them) is mapped onto a config.json-shaped record
 * (gguf_meta.c) and read by the same code as config.json (model
 * description included); the tensors by llama.cpp's names (token_embd,
 * blk.N.attn_q, ...). Gemma's norm gains are stored as 1 + w (llama.cpp's
 * converter adds the 1), so they are used as plain RMSNorm gains; Llama
 * 3.1's rope_freqs.weight divides each rotary pair's frequency, as
 * llama.cpp does; Phi-3's rope_factors_short / _long are its LongRoPE
 * factors.
 *
 * F32, F16 and BF16 tensors are used in place from the mapping. Q8_0, Q4_0,
 * Q4_K, Q5_K and Q6_K are dequantized once to f32 (at load, or a layer at a
 * time with model_load_opts.lazy_layers: model.h), exactly (their
 * values are f32 products of f16 scales and small integers, computed as
 * ggml does), so the model computes the file's own function; `--quantization
 * int8|int4` then requantizes them like any checkpoint (docs/engine.md gives
 * the error that adds). For llama, attn_q and attn_k are stored with each
 * head's rotary pairs interleaved (its converter permutes HF's rows); their
 * rows are put back in HF's rotate-half order (a copy). Any other tensor
 * type is refused, naming the tensor and its type. */
#ifndef INFERD_GGUF_MODEL_H
#define INFERD_GGUF_MODEL_H

#include "gguf.h"
#include "model.h"

typedef struct gguf_weights gguf_weights;

/* 1 when path names a file (not a directory): what model_load reads as
 * GGUF. */
int gguf_model_path(const char *path);

/* Where the tokenizer and chat template come from: tokenizer (--tokenizer)
 * when set, else model itself (a directory, or a GGUF file whose metadata
 * tok_create and tmpl_from_config read). */
int gguf_model_tokenizer_dir(const char *model, const char *tokenizer, const char **dir,
                             inf_err *err);

/* Loads path as above. Errors name the file and the key or tensor. */
int gguf_model_load(const char *path, const model_load_opts *o, model **out, inf_err *err);

/* Frees the mapping and the converted tensors; NULL-safe. */
void gguf_weights_free(gguf_weights *w);

/* model_prefetch for a GGUF file: reads every page of its tensor data. */
void gguf_weights_prefetch(const gguf_weights *w,
                           void (*progress)(void *user, size_t done, size_t total), void *user);

#endif
