/* bufs_: buffers a loader converts tensors into, owned until the model goes,
 * some of them (4-bit codes, scales, zeros) freed earlier by address once a
 * backend has packed its own copy (model_drop_layer_codes). Shared by the
 * Hugging Face quantized loaders (hfq) and the GGUF one. */
#ifndef INFERD_BUFS_H
#define INFERD_BUFS_H

#include <stddef.h>

typedef struct bufs {
    void **p;               /* [cap] the buffers (NULL once dropped)   */
    size_t *sizes;          /* [cap] their bytes                       */
    unsigned char *is_code; /* [cap] 1: bufs_drop_at may free it       */
    int n, cap;
} bufs;

/* n bytes (inf_alloc_big) owned by b, or NULL; is_code: a 4-bit codes part
 * bufs_drop_at frees. A zero-initialized bufs is empty. */
void *bufs_keep(bufs *b, size_t n, int is_code);

/* Frees every is_code buffer that one of at[0..n) points into (NULL
 * entries skipped). */
void bufs_drop_at(bufs *b, const void *const *at, int n);

/* Frees every buffer and the lists; b is empty after. NULL-safe. */
void bufs_free(bufs *b);

#endif
