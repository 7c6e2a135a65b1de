/* model_ internals shared by model.c (config sizes, weights), mdesc.c (the
 * forward recipe of each family) and gguf_model.c. */
#ifndef INFERD_MODEL_INT_H
#define INFERD_MODEL_INT_H

#include <cJSON.h>

#include "cfgjson.h"

#include "model.h"

/* model_config_load's work on a parsed config.json (or one a GGUF file's
 * metadata was mapped onto: gguf_model.c); path labels messages. */
int model__config_parse(const cJSON *root, const char *path, model_config *cfg, inf_err *err);

/* The family of root (architectures[0], else model_type) into c->arch and
 * c->desc.family, with its default head_dim (0: hidden / heads). */
int mdesc__family(const cJSON *root, model_config *c, int *default_head_dim, const char *path,
                  inf_err *err);

/* RoPE r (r->theta set) for rot rotated dimensions under rope_scaling rs
 * (NULL: none): kind, factor, attention factor, inverse frequencies (and
 * LongRoPE's long ones, from original_max_position_embeddings on). */
int mdesc__rope(const cJSON *root, const cJSON *rs, md_rope *r, int rot, const model_config *c,
                const char *path, inf_err *err);

/* Rows r0.. r0+n of a bound [rows, cols] tensor (data, int8 rows or 4-bit
 * codes), as a tensor of its own: the parts of a fused linear. */
model_tensor model__rows(const model_tensor *t, int64_t r0, int64_t n);

/* Frees the conversions of layer `layer` that model_layer_need made
 * (model_layer_packed); model__lazy_free the list and all of them
 * (model_destroy). engine/model_lazy.c. */
void model__lazy_release(model *m, int layer);
void model__lazy_free(model *m);

/* The rest of c->desc from root, after the sizes are known; refuses (by
 * key) what no backend computes. */
int mdesc__parse(const cJSON *root, model_config *c, const char *path, inf_err *err);

#endif
