/* hfq's internals, shared by hfq.c (GPTQ, AWQ), hfq_ct.c
 * (compressed-tensors), hfq_fp8.c (its FP8 scheme) and hfq_pack.c (its
 * pack-quantized W4A16 / W8A16). */
#ifndef INFERD_HFQ_INT_H
#define INFERD_HFQ_INT_H

#include "hfq.h"

#include <cJSON.h>

#include "bufs.h"

/* HFQ_CT_INT8S: W8A8 int8 with a static input_scale per linear. HFQ_FP8M:
 * quant_method fp8 (vLLM's own FP8 format); HFQ_BNB: bitsandbytes 4-bit.
 * HFQ_CT_PACK stays last (hfq.c's as_run table has a row past it for 8 bits). */
typedef enum { HFQ_GPTQ, HFQ_AWQ, HFQ_CT_INT8, HFQ_CT_INT8S, HFQ_CT_FP8, HFQ_FP8M, HFQ_BNB,
               HFQ_CT_PACK } hfq_kind;

/* A compressed-tensors pack-quantized scheme: the same for every linear. */
typedef struct hfq_pack {
    int bits;     /* 4 or 8                                              */
    int group;    /* inputs per scale; 0: one scale per row (channel)    */
    int sym;      /* 1: no zero points (stored value = q + 2^(bits-1))   */
    int actorder; /* 1: P.weight_g_idx must be present (actorder group)  */
} hfq_pack;

struct hfq {
    hfq_kind kind;
    int group;       /* group_size; <= 0: one group per row */
    int bits;        /* GPTQ / AWQ: 4, or 8 (GPTQ only)        */
    int zero_plus1;  /* GPTQ v1 stores zero - 1                */
    int packed_q4;   /* bind 4-bit codes where they fit (hfq.h) */
    int packed_q8;   /* bind W8A16 int8 rows where they fit     */
    int n_requant;   /* linears that did not, bound as f32      */
    int n_perm;      /* linears bound as codes in g_idx order   */
    const int32_t *last_perm; /* the last order kept (hfq__bind_codes) */
    int64_t last_perm_k;
    char path[512];  /* config.json, for messages              */
    bufs bufs;       /* what bound tensors point into; 4-bit codes,
                        scales and zeros (hfq__bind_codes) marked for
                        hfq_drop_codes_at */
    hfq_pack pack;   /* kind HFQ_CT_PACK                       */
    int fp8_block[2]; /* kind HFQ_FP8M: weight_block_size [rows,
                         inputs], or 0s: a scale per tensor      */
    char desc[3][200]; /* hfq_describe's lines for linears through f32: as
                          f32, requantized to int8, to int4 (hfq.c) */
    /* hfq_set_defer: FP8 layer matrices' conversion handed to it */
    int (*defer)(void *ctx, model_tensor *out, int layer, model_convert_fn fn,
                 const void *src, const void *aux, int arg, inf_err *err);
    void *defer_ctx;
};

/* A string key, or NULL. */
const char *hfq__jstr(const cJSON *o, const char *k);
/* An integer key, or def when absent; -1000 when not an integer. */
int hfq__jint(const cJSON *o, const char *k, int def);
/* n floats (n bytes) owned by q (freed by hfq_free), or NULL. */
float *hfq__keep(hfq *q, size_t n);
void *hfq__keep_bytes(hfq *q, size_t n);

/* Element i of a tensor, little-endian: a 32- or 16-bit word, or an F32,
 * BF16 or F16 value as f32 (exactly). */
static inline uint32_t hfq__u32(const st_tensor *t, size_t i) /* inline: the converters' */
{                                                              /* inner loops read these  */
    const uint8_t *p = (const uint8_t *)t->data + 4 * i;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint16_t hfq__u16(const st_tensor *t, size_t i)
{
    const uint8_t *p = (const uint8_t *)t->data + 2 * i;
    return (uint16_t)(p[0] | p[1] << 8);
}

float hfq__float_at(const st_tensor *t, size_t i);

/* *out emptied to a [rows, cols] linear called name, of no dtype yet. */
void hfq__out(model_tensor *out, int64_t rows, int64_t cols, const char *name);

/* *out (hfq__out: shape and name set) converted by fn(src, aux, arg): as
 * int8 rows or f32, as model_convert_into says (q8_scale bound or not)
 * (out->dtype INF_F32); now, into memory owned by q, or, for a layer
 * matrix ("model.layers.N.*") of a q that defers (hfq_set_defer), when a
 * backend needs its layer. src and aux must then live as long as q (or the
 * file's mapping). */
int hfq__convert(hfq *q, model_tensor *out, model_convert_fn fn, const void *src,
                 const void *aux, int arg, inf_err *err);

/* Where a 4-bit linear's stored numbers are, whatever the format: rows
 * writes the codes (0..15) of outputs n0 .. n0 + m - 1 (m <= HFQ_CODE_ROWS;
 * rows at a time, so a packed word is read once, beside its neighbours)
 * two a byte, input k of output n0 + i in u[i * K/2 + k/2] at bit 4 (k %
 * 2); scale and zero: group g's f16 scale (bits) and zero in 0..16 for
 * output n, so W[n][k] = scale * (u - zero) of group grp[k]. K is even. */
#define HFQ_CODE_ROWS 64
typedef struct hfq_codes_src {
    const void *ctx;
    void (*rows)(const void *ctx, int64_t n0, int m, int64_t K, uint8_t *u);
    uint16_t (*scale)(const void *ctx, int64_t n, int64_t g);
    int (*zero)(const void *ctx, int64_t n, int64_t g);
} hfq_codes_src;

/* Binds an N x K linear whose input k is in group grp[k] < G as its codes
 * (model_tensor.q4) into *out, named name, when the int4 kernels can take
 * them: with the inputs stably sorted by group (a desc_act / actorder
 * g_idx: model_tensor.q4_perm, shared with the previous linear's when
 * equal, as linears on one input have it), every 32 consecutive ones in
 * one group. *bound 0 (and *out untouched) when they cannot. */
int hfq__bind_codes(hfq *q, int64_t N, int64_t K, int64_t G, const int32_t *grp,
                    const hfq_codes_src *s, const char *name, model_tensor *out, int *bound,
                    inf_err *err);

/* hfq_bind for GPTQ and AWQ (hfq_gptq.c). */
int hfq__gptq_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                   model_tensor *out, inf_err *err);

/* Checks a compressed-tensors quantization_config qc: INF_OK with *kind
 * HFQ_CT_INT8 (W8A8 int8; HFQ_CT_INT8S with static input scales),
 * HFQ_CT_FP8 (FP8 weights) or HFQ_CT_PACK (*pack filled) when it is a
 * scheme inferd runs, else an error naming the field and value. */
int hfq__ct_open(const cJSON *qc, const char *path, hfq_kind *kind, hfq_pack *pack,
                 inf_err *err);

/* A boolean key: 1 true, 0 false, def when absent or null, -1 otherwise. */
int hfq__jbool(const cJSON *o, const char *k, int def);
/* A key's value as text for messages ("<absent or not a string>"). */
const char *hfq__shown(const cJSON *o, const char *k);

/* One 8-bit symmetric args object (weights or input_activations of group
 * g) of type int (fp8 0) or float (fp8 1): INF_OK or the first field out of
 * line. */
int hfq__ct_args(const cJSON *a, const char *path, const char *g, const char *what, int fp8,
                 inf_err *err);

/* A group's weights strategy (channel or tensor) and dynamic (false), the
 * same in every scheme; scheme ("" or " in an FP8 scheme") goes in the
 * message. */
int hfq__ct_wscope(const cJSON *w, const char *path, const char *g, const char *scheme,
                   inf_err *err);

/* Linear name of a compressed-tensors scheme (messages: "int8", "FP8"):
 * *w the tensor, which must be dtype [rows, cols], and *sc its
 * hfq__ct_scales. */
int hfq__ct_linear(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                   const char *dtype, const char *scheme, const st_tensor **w, float **sc,
                   inf_err *err);

/* hfq_bind for compressed-tensors int8: name is I8 [rows, cols] beside its
 * name-minus-"weight" + "weight_scale". */
int hfq__ct_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                 model_tensor *out, inf_err *err);

/* The rows per-row f32 scales (owned by q) of compressed-tensors linear name
 * ("P.weight"): P.weight_scale, F32 / BF16 / F16 [rows, 1], [rows] or one
 * value, every one finite; P.weight_zero_point, if present, all zero. */
int hfq__ct_scales(hfq *q, const st_set *st, const char *name, int64_t rows, float **out,
                   inf_err *err);


/* Checks compressed-tensors group g's FP8 scheme (weights and
 * input_activations of type float): INF_OK or the field out of line. */
int hfq__fp8_group(const cJSON *grp, const char *path, const char *g, inf_err *err);

/* hfq_bind for compressed-tensors FP8: name is F8_E4M3 [rows, cols],
 * dequantized with hfq__ct_scales into f32 owned by q. */
int hfq__fp8_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                  model_tensor *out, inf_err *err);

/* Checks a quant_method fp8 quantization_config (fmt e4m3,
 * activation_scheme dynamic or static, weight_block_size absent or two
 * integers, into block; 0s when absent): INF_OK or the field out of line. */
int hfq__fp8_open(const cJSON *qc, const char *path, int block[2], inf_err *err);

/* hfq_bind for quant_method fp8: name is F8_E4M3 [rows, cols] beside
 * P.weight_scale_inv [ceil(rows/bn), ceil(cols/bk)] (q->fp8_block) or, per
 * tensor, P.weight_scale (one value), dequantized into f32. */
int hfq__fp8m_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                   model_tensor *out, inf_err *err);

/* Checks a quant_method bitsandbytes quantization_config (load_in_4bit
 * with uint8 storage, or load_in_8bit): INF_OK with *bits 4 or 8, or what
 * is not supported. */
int hfq__bnb_open(const cJSON *qc, const char *path, int *bits, inf_err *err);

/* hfq_bind for bitsandbytes 4-bit and 8-bit (q->bits; engine/hfq_bnb.c
 * says the layouts): dequantized into f32. */
int hfq__bnb_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                  model_tensor *out, inf_err *err);

/* Checks compressed-tensors group g's pack-quantized scheme (weight-only
 * int, 4 or 8 bits, channel or group): INF_OK with *out, or the field out
 * of line. */
int hfq__pack_group(const cJSON *grp, const char *path, const char *g, hfq_pack *out,
                    inf_err *err);

/* hfq_bind for compressed-tensors pack-quantized: name's P.weight_packed,
 * P.weight_shape, P.weight_scale (and P.weight_zero_point, P.weight_g_idx)
 * dequantized into f32 owned by q. */
int hfq__pack_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                   model_tensor *out, inf_err *err);

#endif
