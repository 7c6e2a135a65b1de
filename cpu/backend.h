/* cpu_backend: the model's forward pass on the CPU, behind the be_ seam.
 *
 * Weights are used in place (f32, f16 or bf16 straight from the mapped
 * checkpoint; only the 1-D norm gains are copied to f32), or with
 * CPU_QUANT_INT8 / CPU_QUANT_INT4 the seven matrices of each layer are
 * quantized once at creation (cpu/qw.h, cpu/q4.h). Activations and the paged KV cache are f32 and
 * allocated once, at creation. */
#ifndef INFERD_CPU_BACKEND_H
#define INFERD_CPU_BACKEND_H

#include "engine/be.h"
#include "engine/model.h"

/* Weight formats of the layers' linear maps (--quantization). */
typedef enum cpu_quant {
    CPU_QUANT_NONE = 0, /* the checkpoint's dtype, used in place            */
    CPU_QUANT_INT8 = 1, /* W8A8: int8 per output row, activations per token */
    CPU_QUANT_INT4 = 2, /* W4A8: int4 in groups of 32 (cpu/q4.h)            */
} cpu_quant;

typedef struct cpu_config {
    int n_threads;        /* <= 0: one per online CPU                         */
    int num_blocks;       /* KV blocks, including the null block              */
    int block_size;       /* tokens per KV block                              */
    int max_tokens;       /* most tokens one forward may carry                */
    int max_context;      /* longest sequence; <= 0: model_context()          */
    const char *kernels;  /* "auto" (default), "avx512", "avx2", "generic"     */
    int quant;            /* cpu_quant; embeddings and lm_head stay as stored;
                           * a W8A8 checkpoint (model_is_w8a8) runs int8 with
                           * NONE too, and refuses INT4                       */
    /* With quant, the layers are packed into the backend's own layout one
     * at a time: layer_need is called before layer `layer` is read (a model
     * with lazy layers converts it then: model_layer_need, ctx the model),
     * layer_packed once it is packed, so the caller can free the model's
     * copy at once (its 4-bit codes, its conversion: model_layer_packed).
     * NULL: not called; a model with lazy layers needs layer_need. */
    int (*layer_need)(void *ctx, int layer, inf_err *err);
    void (*layer_packed)(void *ctx, int layer);
    void *layer_ctx;
} cpu_config;

cpu_config cpu_config_default(void);

/* Builds a backend for m (which must outlive it). Fails with a message for
 * unsupported kernels or memory that cannot be allocated. */
int cpu_backend_create(const model *m, const cpu_config *cfg, be_backend **out,
                       inf_err *err);

/* CPU_QUANT_NONE for NULL or "none", CPU_QUANT_INT8 for "int8",
 * CPU_QUANT_INT4 for "int4"; -1 for another name. */
int cpu_quant_parse(const char *name);

/* Bytes of weights one token's forward reads: model_weight_bytes(), with the
 * int8 copies in place of the layers' matrices when quantized. */
size_t cpu_backend_weight_bytes(const be_backend *be);

/* Name of the kernel table in use ("avx512", ...). */
const char *cpu_backend_kernels(const be_backend *be);

/* Bytes of KV cache one token takes (all layers, K and V). */
size_t cpu_kv_bytes_per_token(const model *m);

#endif
