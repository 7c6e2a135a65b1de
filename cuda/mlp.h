/* cuda_mlp: an MLP speculator's stages (engine/spec_mlp.h) on a GPU, the
 * target's, so a speculator with a real vocabulary (its head is vocab x
 * inner per stage) does not run its GEMMs on the host. Weights go up once as
 * bf16 (the layer norms' weight and bias as f32); per stage, for the rows of
 * one propose call: the projection GEMM (cuBLAS, bf16 in, f32 out), the
 * state update (cuda_k_mlp_mix), the head GEMM, and the logits back to the
 * host, where the proposer picks each row's token as on the host. Its own
 * stream and cuBLAS handle; its memory comes out of what the target's
 * gpu_memory_utilization leaves free (docs/cuda.md). */
#ifndef INFERD_CUDA_MLP_H
#define INFERD_CUDA_MLP_H

#include "engine/spec_mlp.h"

/* Uploads w to GPU `device` for up to max_rows rows a call and fills *out
 * (the proposer takes it with spec_mlp_set_device). Errors: INF_ERR_NOMEM
 * naming the bytes, INF_ERR_IO for another CUDA or cuBLAS failure. */
int cuda_mlp_create(int device, const spec_mlp_weights *w, int max_rows, spec_mlp_device *out,
                    inf_err *err);

#endif
