/* cuda_upload: a rank's weights from the checkpoint into its device arena
 * (cuda_wlayout), converted or quantized on the host on the way. */
#ifndef INFERD_CUDA_UPLOAD_H
#define INFERD_CUDA_UPLOAD_H

#include <cuda_runtime_api.h>

#include "cuda/backend.h"
#include "cuda/plan.h"
#include "engine/model.h"

/* Everything of m that shard sh holds, to the arena w laid out as wl, on
 * stream st; returns once it is all on the device. The layer matrices go
 * as bf16, or quantized by engine/qdef's rules when d->quant says so
 * (docs/cuda.md, "Quantized layer matrices"); cfg's layer_need and
 * layer_packed hear of each layer before and after its matrices are read
 * (cuda_config). Matrices bound as 4-bit codes go as stored where int4
 * holds them; *q4_requant counts those requantized (zero points, sorted
 * inputs). */
int cuda_upload(const model *m, const cuda_config *cfg, const cuda_shard *sh,
                const cuda_dims *d, const cuda_wlayout *wl, unsigned char *w, cudaStream_t st,
                int *q4_requant, inf_err *err);

#endif
