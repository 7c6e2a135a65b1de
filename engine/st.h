/* st_: safetensors checkpoints, mmapped, single file or sharded.
 *
 * A checkpoint directory holds either model.safetensors or several shards
 * listed in model.safetensors.index.json ("weight_map": tensor -> file).
 * Tensor data stays in the mapped files; nothing is copied. */
#ifndef INFERD_ST_H
#define INFERD_ST_H

#include "common.h"

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    const char *name;
    inf_dtype dtype;          /* INF_DTYPE_NONE for types we do not compute in */
    const char *dtype_name;   /* as written in the header, e.g. "BF16", "I64" */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;         /* points into the mapped file                  */
    size_t nbytes;
    const char *file;         /* path of the file that holds it               */
} st_tensor;

typedef struct st_set st_set;

/* Opens and maps one .safetensors file and validates its header (JSON shape,
 * dtypes' sizes against offsets, offsets inside the file, no overlaps).
 * On failure returns an INF_ERR_* code with a message naming the file. */
int st_open_file(const char *path, st_set **out, inf_err *err);

/* Opens a checkpoint directory: model.safetensors.index.json when present
 * (every shard it names is opened and every mapped tensor must be in the shard
 * the index says), else model.safetensors. */
int st_open_dir(const char *dir, st_set **out, inf_err *err);

/* The tensor called name, or NULL. */
const st_tensor *st_find(const st_set *s, const char *name);

int st_count(const st_set *s);
const st_tensor *st_get(const st_set *s, int i);

/* Total bytes of tensor data across all files. */
size_t st_data_bytes(const st_set *s);

/* Unmaps every file; NULL-safe. Tensor pointers die with the set. */
void st_destroy(st_set *s);

#endif
