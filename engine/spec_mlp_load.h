/* spec_mlp_load: an MLP speculator checkpoint read from its directory (the
 * format vLLM loads: config.json with model_type "mlp_speculator",
 * safetensors with speculator.{emb,proj,head,ln}.{i}.*), every shape
 * checked against the config before anything of the config's size is
 * allocated, the weights widened to f32. Used by spec_mlp.c; tied
 * checkpoints get every stage pointing at set 0 (proj: 1 from stage 1). */
#ifndef INFERD_SPEC_MLP_LOAD_H
#define INFERD_SPEC_MLP_LOAD_H

#include "spec_mlp.h"

typedef struct spec_mlp_ckpt {
    int vocab, emb_dim, inner, n_predict, tie, scale_input;
    float *arena;             /* every weight, as f32                */
    spec_mlp_stage_w *stage;  /* [n_predict], pointing into arena     */
} spec_mlp_ckpt;

/* Reads dir's config and weights into *out (zeroed first). On failure
 * *out holds nothing to free and the message names the file or tensor. */
int spec_mlp_ckpt_load(const char *dir, spec_mlp_ckpt *out, inf_err *err);
void spec_mlp_ckpt_free(spec_mlp_ckpt *c); /* NULL-safe, idempotent */

#endif
