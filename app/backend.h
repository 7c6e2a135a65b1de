/* app_backend: the one place a backend is chosen and built. The server's
 * target and draft model and `inferd generate` all open theirs here, so the
 * device, threads, kernels, quantization and KV memory budget mean the same
 * everywhere, and nothing outside app/ includes cpu/ or cuda/. */
#ifndef INFERD_APP_BACKEND_H
#define INFERD_APP_BACKEND_H

#include <stddef.h>

#include "engine/be.h"
#include "engine/model.h"

typedef struct app_backend_config {
    const char *device;   /* "cpu" or "cuda"                                 */
    int threads;          /* CPU threads; <= 0: one per online CPU           */
    const char *kernels;  /* CPU kernel table: auto, avx512bf16, avx512, ... */
    int quant;            /* cpu_quant (app_backend_quant), cuda_config.quant */
    int block_size;       /* tokens per KV block                             */
    int max_tokens;       /* tokens of one step                              */
    int max_context;      /* longest sequence                                */
    int max_seqs;         /* sequences running at once                       */
    int spec_k;           /* tokens drafted per step (logits rows per
                             sequence: spec_k + 1); 0: none                  */
    size_t kv_bytes;      /* KV cache budget; 0: the default (CPU: 4 GiB;
                             CUDA: what gpu_mem leaves)                      */
    int num_blocks;       /* > 0: exactly this many KV blocks, null block
                             included (a draft shares the target's count)    */
    float gpu_mem;        /* CUDA: share of each GPU's memory; <= 0: 0.9     */
    int tp;               /* CUDA: tensor-parallel size; <= 0: 1             */
    const model *draft;   /* target only: the draft that will run beside it
                             (on CUDA its share comes out of the budget)     */
    int is_draft;         /* this is the draft: unquantized, one thread, its
                             context capped by its own, num_blocks required  */
    /* cpu_config's and cuda_config's hooks, so a checkpoint's 4-bit codes
     * or a GGUF file's conversion go layer by layer as they are packed or
     * uploaded (model_layer_need / model_layer_packed, ctx the model); NULL */
    int (*layer_need)(void *ctx, int layer, inf_err *err);
    void (*layer_packed)(void *ctx, int layer);
    void *layer_ctx;
} app_backend_config;

/* cpu, one sequence of the model's context, the step of 512 tokens in
 * blocks of 16, auto kernels, no quantization. */
app_backend_config app_backend_config_default(void);

typedef struct app_backend {
    be_backend *be;       /* owned by the caller: be_destroy                 */
    int num_blocks;       /* KV blocks it holds, null block included         */
    int max_context;      /* the context it was sized for                    */
    char kernels[32];     /* "avx2", ..., or "cuda"                          */
    char note[384];       /* where it placed itself (CUDA), else ""          */
} app_backend;

/* Opens m's backend as c says (m must outlive it). Errors name the flag at
 * fault: a device this build lacks, kernels the CPU lacks, no memory. */
int app_backend_open(const model *m, const app_backend_config *c, app_backend *out,
                     inf_err *err);

/* How the target model for c is loaded: a GPTQ / AWQ / W4A16 checkpoint's
 * 4-bit codes are kept as stored for the CPU's int4 kernels (--quantization
 * int4 on the CPU), a W8A16 one's int8 rows for the int8 kernels
 * (--quantization int8), else they are dequantized to f32. c->device NULL:
 * cpu. */
model_load_opts app_backend_load_opts(const app_backend_config *c);

/* The device a run uses when none is named: cuda when this is a CUDA build
 * and a usable GPU is visible, else cpu. */
const char *app_backend_default_device(void);

/* CPU_QUANT_NONE for NULL or "none", CPU_QUANT_INT8 for "int8", -1 for
 * another name; APP_QUANT_NONE is the former's value. */
int app_backend_quant(const char *name);
enum { APP_QUANT_NONE = 0 };

#endif
