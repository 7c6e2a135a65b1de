/* gguf_: GGUF files (llama.cpp's single-file models), version 2 and 3,
 * little-endian, mmapped.
 *
 * Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count; the
 * metadata as (string key, u32 type, value); the tensor infos as (string
 * name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset); then, at the
 * next multiple of general.alignment (default 32), the data, each tensor at
 * its offset from there. A string is a u64 length and that many bytes (not
 * NUL-terminated); ne[0] is the innermost (fastest-varying) dimension.
 *
 * The file is untrusted: every length, count, offset and size is checked
 * against the file before use, and a failure names the file and what is
 * wrong. Tensors of a type we cannot read are listed with their type (the
 * model loader names them if it needs one). */
#ifndef INFERD_GGUF_H
#define INFERD_GGUF_H

#include "common.h"

#define GGUF_MAX_DIMS 4

/* ggml tensor types by their numbers in the file. */
typedef enum gguf_type {
    GGUF_F32 = 0,
    GGUF_F16 = 1,
    GGUF_Q4_0 = 2,
    GGUF_Q4_1 = 3,
    GGUF_Q5_0 = 6,
    GGUF_Q5_1 = 7,
    GGUF_Q8_0 = 8,
    GGUF_Q2_K = 10,
    GGUF_Q3_K = 11,
    GGUF_Q4_K = 12,
    GGUF_Q5_K = 13,
    GGUF_Q6_K = 14,
    GGUF_IQ4_NL = 20,
    GGUF_IQ4_XS = 23,
    GGUF_BF16 = 30,
} gguf_type;

/* Metadata value types. */
typedef enum gguf_vtype {
    GGUF_V_U8 = 0, GGUF_V_I8 = 1, GGUF_V_U16 = 2, GGUF_V_I16 = 3, GGUF_V_U32 = 4,
    GGUF_V_I32 = 5, GGUF_V_F32 = 6, GGUF_V_BOOL = 7, GGUF_V_STRING = 8, GGUF_V_ARRAY = 9,
    GGUF_V_U64 = 10, GGUF_V_I64 = 11, GGUF_V_F64 = 12,
} gguf_vtype;

typedef struct gguf_kv {
    const char *key;          /* NUL-terminated copy                          */
    gguf_vtype type;
    gguf_vtype elem;          /* arrays: the elements' type                   */
    uint64_t n;               /* arrays: element count                         */
    const void *data;         /* scalars and array elements, in the mapping    */
    /* scalars as numbers (integers, floats and bools): */
    double num;
    int64_t inum;
    const char *str;          /* strings: the bytes (not NUL-terminated)       */
    uint64_t str_len;
} gguf_kv;

typedef struct gguf_tensor {
    const char *name;         /* NUL-terminated copy                          */
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];/* ne[0] innermost; unused dims are 1           */
    uint32_t type;            /* ggml type number                             */
    const char *type_name;    /* "Q4_K", ..., or "type 99" for unknown ones   */
    char type_buf[16];
    int known;                /* a type gguf_type lists                       */
    const void *data;         /* in the mapping (NULL when !known)            */
    size_t nbytes;            /* (0 when !known)                              */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* 1 when path is a regular file that begins with GGUF's magic ("GGUF"):
 * what the tokenizer and template loaders read as a GGUF file. */
int gguf_sniff(const char *path);

/* Opens and maps path and checks everything above. */
int gguf_open(const char *path, gguf_file **out, inf_err *err);

/* The same over a buffer the caller keeps alive (the fuzz harness). */
int gguf_open_mem(const void *buf, size_t len, const char *label, gguf_file **out,
                  inf_err *err);

void gguf_close(gguf_file *g); /* NULL-safe */

/* A split model (llama.cpp's gguf-split: NAME-00001-of-0000N.gguf, ...): the
 * first file opened with gguf_open, then the others by gguf_open_model.
 * gguf_adopt moves shard's tensors into g's list (their data stays in the
 * shard's mapping, which g now owns and closes); a tensor name in both is an
 * error, and then shard stays the caller's. */
int gguf_adopt(gguf_file *g, gguf_file *shard, inf_err *err);

/* A model's GGUF: path, and when its metadata says it is split
 * (split.count > 1), the other files beside it, named as llama.cpp names
 * them, their tensors adopted: one gguf_file with every tensor. Refused:
 * loading a split by another than its first file, a name not ending in
 * -00001-of-NNNNN.gguf, a missing file, a file whose split.no or
 * split.count is not its place, a tensor in two files, and a total other
 * than split.tensors.count (engine/gguf_split.c). */
int gguf_open_model(const char *path, gguf_file **out, inf_err *err);

/* A split file's place by llama.cpp's naming, "P-IIIII-of-NNNNN.gguf":
 * *no = IIIII (from 1), *count = NNNNN and *prefix = the length of P; 0
 * when path is not so named (or IIIII is 0 or past NNNNN). */
int gguf_split_name(const char *path, int *no, int *count, size_t *prefix);

const char *gguf_path(const gguf_file *g);
uint32_t gguf_version(const gguf_file *g);

int gguf_kv_count(const gguf_file *g);
const gguf_kv *gguf_kv_at(const gguf_file *g, int i);
const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key); /* or NULL */

int gguf_tensor_count(const gguf_file *g);
const gguf_tensor *gguf_tensor_at(const gguf_file *g, int i);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name); /* or NULL */

/* Bytes of tensor data in the file (what reading every tensor touches). */
size_t gguf_data_bytes(const gguf_file *g);

/* A type's block: elements per block and bytes per block; 0 for types we
 * do not read. */
int gguf_type_block(uint32_t type, size_t *block_bytes);
const char *gguf_type_name(uint32_t type); /* ggml's name, or NULL if unknown */

/* Dequantizes n elements (a whole number of blocks) of a tensor of the given
 * type at src into dst, exactly as the type's block format defines (f32
 * arithmetic in the order ggml's reference dequantizers use). */
void gguf_dequant(uint32_t type, const void *src, float *dst, int64_t n);

/* n elements (a whole number of blocks) of a Q4_0 tensor at src as the
 * int4 kernels' codes (model_tensor.q4): u [n / 2], byte j holding value
 * 2j's code in its low nibble and 2j + 1's in its high one, and the f16
 * scale of each 32, d [n / 32]; value i = f16(d) * (code - 8), the block's
 * own numbers (no rounding). */
void gguf_q4_0_codes(const void *src, int64_t n, uint8_t *u, uint16_t *d);

#endif
