/* gguf_meta: a GGUF file's metadata as the config.json it stands for,
 * private to gguf_model.c. Architectures (general.architecture): llama
 * (Llama 1/2/3, Mistral), qwen2, qwen3, gemma2, gemma3, phi3, mapped onto
 * the Hugging Face keys the model description reads (docs/quantization.md
 * lists each key and the defaults taken where GGUF has none). */
#ifndef INFERD_GGUF_META_H
#define INFERD_GGUF_META_H

#include <cJSON.h>

#include "gguf.h"

/* What the tensor binder needs beyond the config. */
typedef struct gguf_arch {
    const char *name;      /* general.architecture                          */
    int permuted_qk;       /* llama.cpp's converter interleaved q/k rows    */
    int norm_plus_one;     /* norm gains stored as 1 + w (Gemma)             */
} gguf_arch;

/* *out: a new config.json object; *arch: the architecture's row. Errors
 * name the file and the key (INF_ERR_UNSUPPORTED for another
 * architecture or a setting that is not mapped). */
int gguf__config(const gguf_file *g, cJSON **out, const gguf_arch **arch, inf_err *err);

#endif
