/* cuda_backend: the model's forward pass on NVIDIA GPUs, behind the be_ seam.
 *
 * Weights are uploaded once as bf16 (f32 and f16 checkpoints converted on the
 * host on the way), or with cuda_config.quant the layer matrices as int8 or
 * int4; the paged KV cache is bf16 in device memory, sized from
 * gpu_memory_utilization after weights and activation buffers. GEMMs run in
 * our batch-invariant kernels (cuBLAS with batch_invariant 0; quantized ones
 * always ours), everything else in our kernels too (the .cu files).
 * Decode steps replay CUDA graphs; tensor_parallel_size > 1 shards the model
 * over that many GPUs with NCCL (docs/cuda.md: what has run on a GPU and what
 * has not).
 *
 * Compiled only with `make CUDA=1` (which defines INFERD_CUDA); this header
 * includes no CUDA header, so callers need none. */
#ifndef INFERD_CUDA_BACKEND_H
#define INFERD_CUDA_BACKEND_H

#include "engine/be.h"
#include "engine/model.h"

/* How the layer matrices are held (the values of cpu/backend.h's cpu_quant,
 * so `--quantization` means the same on both devices). */
enum {
    CUDA_QUANT_NONE = 0, /* bf16                                             */
    CUDA_QUANT_INT8 = 1, /* W8A8: int8 per output row, activations per token */
    CUDA_QUANT_INT4 = 2  /* W4A8: int4 in groups of 32, f16 scales           */
};

typedef struct cuda_config {
    int device;                    /* first GPU; rank r uses device + r        */
    double gpu_memory_utilization; /* (0, 1]: share of each GPU's memory this
                                      backend may hold (vLLM's meaning); 0.9  */
    int block_size;                /* tokens per KV block; 16                  */
    int max_tokens;                /* most tokens one forward carries; 2048    */
    int max_context;               /* longest sequence; <= 0: the model's
                                      (model_context: positions, capped by a
                                      sliding window)                         */
    int max_seqs;                  /* most sequences in one forward; 256       */
    int max_logits;                /* most logit rows one forward returns; 0:
                                      max_tokens. Sizes the logits buffers
                                      ([max_logits][vocab] f32 on the device
                                      and pinned on the host); raised to
                                      max_seqs                                */
    int tensor_parallel_size;      /* GPUs, one rank each; 1                   */
    int num_blocks;                /* > 0: exactly this many KV blocks (tests);
                                      0: as many as the memory budget allows  */
    size_t reserve_bytes;          /* left free on each GPU for another backend
                                      (a draft's weights and activations); 0 */
    size_t extra_block_bytes;      /* bytes another backend allocates per KV
                                      block of ours (a draft's cache for the
                                      same blocks): the budget pays for both;
                                      0                                       */
    int cuda_graphs;               /* 1: replay decode steps as graphs; 1      */
    int batch_invariant;           /* 1: our GEMM (cuda_k_gemm) and one
                                      attention kernel (cuda_k_attn_tiles, or
                                      split-K for shapes it does not take) for
                                      every token, so a sequence's logits are
                                      the same bits whatever else is in the
                                      batch, and chunked, cached or verified
                                      tokens equal decoded ones; 0: cuBLAS
                                      GEMMs and prefill tiles (results vary
                                      with the batch: cuBLAS picks kernels
                                      by the number of rows); 1               */
    int gemm_wgmma;                /* 1 (measurement, Hopper): bf16 GEMMs of
                                      more than 64 rows through
                                      cuda_k_gemm_wg rather than mma.sync;
                                      batch-invariant only if its bits equal
                                      mma.sync's (test_cuda_kern_gemm_wgmma
                                      says), so off until a GPU has shown it;
                                      refused off compute capability 9.0; 0  */
    int quant;                     /* CUDA_QUANT_*: the attention and MLP
                                      matrices quantized at upload as the CPU
                                      quantizes them (a compressed-tensors
                                      int8 checkpoint: as stored), their GEMMs
                                      exact integer sums (cuda/kern.h); one
                                      GPU only; CUDA_QUANT_NONE               */
    /* Each layer's matrices go to the device one layer at a time (each
     * rank's): layer_need is called before layer `layer` is read (a model
     * with lazy layers converts it then: model_layer_need, ctx the model),
     * layer_packed once it is uploaded (model_layer_packed frees the
     * conversion). NULL: not called; a model with lazy layers needs them. */
    int (*layer_need)(void *ctx, int layer, inf_err *err);
    void (*layer_packed)(void *ctx, int layer);
    void *layer_ctx;
} cuda_config;

cuda_config cuda_config_default(void);

/* cuda_config_default() for steps of max_tokens tokens from up to max_seqs
 * sequences of up to max_context tokens, in KV blocks of block_size: the
 * step shape the server gives the CPU backend too. */
cuda_config cuda_config_for(int block_size, int max_tokens, int max_context, int max_seqs);

/* 1 when a CUDA driver is present and at least one device of compute
 * capability 8.0 or newer is visible, else 0; why gets one line either way
 * ("NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90" or the reason there is none).
 * Safe on machines without a driver: it never crashes or exits. */
int cuda_available(char *why, size_t len);

/* Builds a backend for m (which must outlive it): uploads the weights, then
 * allocates activations and as many KV blocks as the memory budget allows,
 * reported in be->num_blocks (including the null block 0) for the engine's
 * kv_ pool. Errors: INF_ERR_UNSUPPORTED (no device, shape or tp the kernels
 * do not handle), INF_ERR_NOMEM (a message with the sizes involved),
 * INF_ERR_INVALID (bad config), INF_ERR_IO (any other CUDA, cuBLAS or NCCL
 * failure, naming the call and its source line). */
int cuda_backend_create(const model *m, const cuda_config *cfg, be_backend **out,
                        inf_err *err);

/* What a backend of m with cfg would hold on each GPU, computed on the host
 * without a device: *fixed = weights + activation buffers (fixed may be
 * NULL), *per_block = the KV cache of one block. For sizing a draft beside a target, and a pool
 * from a byte budget. Errors as cuda_backend_create's shape checks. */
int cuda_backend_footprint(const model *m, const cuda_config *cfg, size_t *fixed,
                           size_t *per_block, inf_err *err);

/* How the backend placed itself, for the log line at start-up. */
typedef struct cuda_info {
    char device[256];     /* device name of rank 0                            */
    int tp;
    size_t total;         /* device memory per GPU                            */
    size_t weights;       /* weight arena per rank                            */
    size_t acts;          /* activation arena per rank                        */
    size_t kv;            /* KV cache per rank                                */
    int num_blocks;       /* including the null block                         */
    int n_buckets;        /* decode batch sizes with a CUDA graph             */
    int q4_requant;       /* pieces of layer matrices bound as 4-bit codes that
                             int4 requantized (zero points, desc_act's sorted
                             inputs: not held as stored), rank 0's            */
} cuda_info;

void cuda_backend_info(const be_backend *be, cuda_info *out);

/* Sampling on the device and host-device overlap are part of the seam
 * (engine/be.h): be_submit queues a step and returns without waiting for it,
 * be_wait delivers the oldest one's results. smp (be_smp_row, one per logit
 * row; NULL: the step returns logits) samples on the device; at most two
 * steps may be in flight (max_inflight), and only one of them returning
 * logits. Penalties and the other logits processors are not applied on the
 * device: rows that need them take the logits and sample on the host.
 *
 * Tokens of a batch may be placeholders: token -1 - i stands for the id
 * sampled for logit row i of the previously submitted step (which must have
 * sampled), resolved on the device, so a decode step can be queued before
 * the previous one's tokens are known on the host.
 *
 * want_hidden: the final norm's rows (the LM head's input) come back as
 * well, computed in bf16 as the LM head reads them and widened to f32. */
typedef be_smp_row cuda_smp_row;

#endif
