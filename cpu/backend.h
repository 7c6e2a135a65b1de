/* cpu_backend: the model's forward pass on the CPU, behind the be_ seam.
 *
 * Weights are used in place (f32, f16 or bf16 straight from the mapped
 * checkpoint; only the 1-D norm gains are copied to f32). Activations and the
 * paged KV cache are f32 and allocated once, at creation. */
#ifndef INFERD_CPU_BACKEND_H
#define INFERD_CPU_BACKEND_H

#include "engine/be.h"
#include "engine/model.h"

typedef struct cpu_config {
    int n_threads;        /* <= 0: one per online CPU                         */
    int num_blocks;       /* KV blocks, including the null block              */
    int block_size;       /* tokens per KV block                              */
    int max_tokens;       /* most tokens one forward may carry                */
    int max_context;      /* longest sequence; <= 0: model_context()          */
    const char *kernels;  /* "auto" (default), "avx512", "avx2", "generic"     */
} cpu_config;

cpu_config cpu_config_default(void);

/* Builds a backend for m (which must outlive it). Fails with a message for
 * unsupported kernels or memory that cannot be allocated. */
int cpu_backend_create(const model *m, const cpu_config *cfg, be_backend **out,
                       inf_err *err);

/* Name of the kernel table in use ("avx512", ...). */
const char *cpu_backend_kernels(const be_backend *be);

/* Bytes of KV cache one token takes (all layers, K and V). */
size_t cpu_kv_bytes_per_token(const model *m);

#endif
