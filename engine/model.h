/* model_: a decoder's configuration and weights bound to a checkpoint.
 *
 * The families and their settings are engine/mdesc.h's (docs/architectures.md);
 * the sizes are here. Weights are used in place from the mapped safetensors
 * (f32, f16, bf16); fused tensors (Phi-3's qkv_proj, gate_up_proj) become
 * views of their rows. */
#ifndef INFERD_MODEL_H
#define INFERD_MODEL_H

#include "common.h"
#include "mdesc.h"
#include "st.h"

#define MODEL_MAX_EOS 8

typedef struct model_config {
    char arch[64];             /* architectures[0]                        */
    int hidden_size;           /* D                                       */
    int intermediate_size;     /* F                                       */
    int n_layers;
    int n_heads;               /* H query heads                           */
    int n_kv_heads;            /* KV heads (GQA); defaults to n_heads     */
    int head_dim;              /* defaults to hidden_size / n_heads       */
    int vocab_size;
    int max_position_embeddings;
    double rope_theta;         /* default 10000                           */
    double rms_norm_eps;       /* default 1e-6                            */
    int tie_word_embeddings;   /* the family's HF default when absent     */
    int sliding_window;        /* the config's window; 0 when none (which
                                  layers use it: desc.window / desc.local) */
    int bos_token_id;          /* -1 when absent                          */
    int n_eos;                 /* eos_token_id may be one id or a list     */
    int eos_token_ids[MODEL_MAX_EOS];
    mdesc desc;                /* the forward recipe                       */
} model_config;

/* Parses config.json at path into cfg, cfg->desc included. Refuses
 * (INF_ERR_UNSUPPORTED, message naming the file and key) what we would
 * otherwise compute wrongly: another architecture, an unknown rope_scaling
 * type, another activation, mlp_bias. */
int model_config_load(const char *path, model_config *cfg, inf_err *err);

/* The longest context the engine computes for this model: its positions
 * (a sliding window is attended as a window: it caps nothing; a backend
 * without windowed attention refuses a context longer than the window). */
int model_context(const model_config *cfg);

/* A 1-D or 2-D row-major weight in place: rows x cols (1-D: rows = 1). */
typedef struct model_tensor {
    inf_dtype dtype;
    const void *data;
    int64_t rows, cols;
    const char *name;          /* checkpoint name, for messages           */
    /* A compressed-tensors W8A8 linear (hfq.h): dtype INF_DTYPE_NONE, data
     * NULL, and W[n][k] = q8[n * cols + k] * q8_scale[n]; only the int8
     * path (--quantization int8) reads it. q8_scale set says the linear
     * is int8; q8 is NULL while its layer waits for model_layer_need (a
     * W8A16 checkpoint's rows, unpacked one layer at a time). */
    const int8_t *q8;          /* [rows, cols] in [-128, 127]             */
    const float *q8_scale;     /* [rows]                                  */
    float q8_in_scale;         /* > 0: a static input scale (the linears
                                  sharing an input use their largest);
                                  0: activations quantized per token      */
    /* A GPTQ / AWQ 4-bit linear bound as its codes (model_load_opts
     * .packed_q4): dtype INF_DTYPE_NONE, data NULL, and W[n][i] =
     * f16(q4_scale[n][b]) * (u - q4_zero[n][b]) for b = j / 32 and the code
     * u of byte q4[n * cols / 2 + j / 2] (j even: low nibble), where input
     * i = q4_perm[j] (j when q4_perm is NULL: a desc_act checkpoint's
     * inputs run sorted by group); only the int4 path reads it. */
    const uint8_t *q4;         /* [rows, cols / 2]                        */
    const uint16_t *q4_scale;  /* [rows, ceil(cols / 32)] f16 bits         */
    const uint8_t *q4_zero;    /* [rows, ceil(cols / 32)] in [0, 16]       */
    const int32_t *q4_perm;    /* [cols] or NULL; shared by the linears of
                                  one input when equal                    */
    int q4_lazy;               /* codes deferred to model_layer_need (a
                                  GGUF Q4_0 matrix): q4, q4_scale and
                                  q4_zero NULL until then, one buffer of
                                  model_convert_bytes after              */
} model_tensor;

typedef struct model_layer {
    model_tensor attn_norm;    /* [D]                                     */
    model_tensor wq;           /* [H*hd, D]                               */
    model_tensor wk;           /* [KV*hd, D]                              */
    model_tensor wv;           /* [KV*hd, D]                              */
    model_tensor wo;           /* [D, H*hd]                               */
    model_tensor ffn_norm;     /* [D]                                     */
    model_tensor w_gate;       /* [F, D]                                  */
    model_tensor w_up;         /* [F, D]                                  */
    model_tensor w_down;       /* [D, F]                                  */
    /* What some families add; data NULL when the family has none. */
    model_tensor bq, bk, bv;   /* [H*hd], [KV*hd], [KV*hd] biases          */
    model_tensor bo;           /* [D]                                     */
    model_tensor q_norm, k_norm;       /* [hd] QK-norm gains              */
    model_tensor post_attn_norm;       /* [D] on the attention output     */
    model_tensor post_ffn_norm;        /* [D] on the MLP output           */
} model_layer;

/* Who owns a model's tensors when they are not safetensors mappings (a
 * GGUF file's mapping and the tensors converted at load): model_destroy and
 * model_prefetch call through it, so model.c knows no file format but its
 * own. */
typedef struct model_source {
    void *self;
    void (*free)(void *self);
    void (*prefetch)(const void *self, void (*progress)(void *user, size_t done, size_t total),
                     void *user);
    /* Frees the 4-bit codes buffers at[0..n) point into (or NULL: it
     * binds none); model_drop_layer_codes. */
    void (*drop_codes)(void *self, const void *const *at, int n);
    /* What its quantized tensors became, for model_quant_desc, or NULL. */
    const char *(*describe)(const void *self);
} model_source;

typedef struct model {
    model_config cfg;
    model_tensor embed;        /* [V, D]                                  */
    model_tensor norm;         /* [D]                                     */
    model_tensor lm_head;      /* [V, D]; the embedding when tied         */
    float embed_scale;         /* desc.embed_scale in the embedding's dtype,
                                  as HF multiplies (1: none)             */
    model_layer *layers;       /* [n_layers]                              */
    st_set *st;                /* owns the mappings                       */
    model_source src;          /* or another owner of the tensors (a GGUF
                                  file: gguf_model.h)                     */
    struct hfq *hfq;           /* GPTQ / AWQ / compressed-tensors FP8
                                  linears dequantized at load,
                                  compressed-tensors int8 ones (hfq.h), or
                                  NULL                                    */
    struct model_copy *copies; /* tensors whose data in the file is not
                                  aligned to their element size, copied
                                  once to aligned memory (safetensors
                                  does not align data; typed loads need
                                  it)                                     */
    char *dir;
    int codes_dropped;         /* model_drop_codes (or _layer_codes) ran:
                                  the layers' 4-bit codes are (partly)
                                  gone                                    */
    struct model_lazy *lazy;   /* [n_lazy] layer matrices converted only on
                                  model_layer_need, data NULL until then
                                  (model_defer; engine/model_lazy.c)     */
    int n_lazy, cap_lazy;
} model;

/* Loads DIR/config.json and binds every tensor from DIR's safetensors; or,
 * when DIR is a file, loads it as GGUF (gguf_model_load; model_open.c
 * chooses). model_load_dir is the safetensors half alone.
 * Errors (one line naming the file and tensor): missing file, corrupt header,
 * missing tensor, shape not matching the config, unsupported dtype or
 * architecture. */
int model_load(const char *dir, model **out, inf_err *err);
int model_load_dir(const char *dir, model **out, inf_err *err);

/* How a checkpoint is bound, for the backend that will run it. */
typedef struct model_load_opts {
    int packed_q4; /* GPTQ / AWQ 4-bit linears whose groups are whole 32s
                      of inputs once sorted by group (desc_act too) as
                      their codes (model_tensor.q4) for the CPU's int4
                      kernels, instead of dequantized to f32 */
    int packed_q8; /* compressed-tensors W8A16 linears per channel and
                      symmetric as their int8 rows and scales
                      (model_tensor.q8) for the int8 kernels */
    int lazy_layers; /* layer matrices that loading would convert (a GGUF
                        file's quantized blocks to f32) are converted one
                        layer at a time when a backend asks
                        (model_layer_need) and freed once it has packed its
                        own copy (model_layer_packed): for a backend that
                        packs every layer matrix (the CPU's int8 / int4),
                        so a 4-bit file never becomes f32 all at once */
    int threads;     /* threads a loader may convert a tensor's rows on (a
                        GGUF file's blocks); <= 0: one per online CPU */
} model_load_opts;

/* model_load / model_load_dir with o (NULL: all 0). */
int model_load_with(const char *dir, const model_load_opts *o, model **out, inf_err *err);
int model_load_dir_with(const char *dir, const model_load_opts *o, model **out, inf_err *err);

/* Unmaps and frees; NULL-safe. */
void model_destroy(model *m);

/* Reads every page of the weights once, so the first request does not pay
 * for disk reads; progress(user, done, total) is called about every 1% of
 * the bytes and at the end. */
void model_prefetch(const model *m, void (*progress)(void *user, size_t done, size_t total),
                    void *user);

/* Bytes of weights the forward pass reads per token (all matrices once),
 * and one tensor's share. */
size_t model_weight_bytes(const model *m);
size_t model_tensor_bytes(const model_tensor *t);

/* 1 when a layer matrix is bound as 4-bit codes (model_tensor.q4): the
 * int4 paths run them (the CPU's; CUDA's upload). */
int model_has_q4(const model *m);

/* Frees layer `layer`'s 4-bit codes (model_tensor.q4, q4_scale, q4_zero:
 * NULL after; the shapes and q4_perm stay) once the one backend that runs
 * them has packed its own copy, so the process does not hold both (about
 * 0.6 byte per weight), and the load's peak holds one layer's twice at
 * most. From the first call on, model_has_q4 stays 1 and a backend created
 * after refuses the model. NULL-safe; a no-op without codes or out of
 * range. model_drop_codes does every layer. */
void model_drop_layer_codes(model *m, int layer);
void model_drop_codes(model *m);

/* Converts src (and aux, arg: the loader's) into dst, t's rows x cols in
 * t->dtype. */
typedef void (*model_convert_fn)(const void *src, const void *aux, int arg,
                                 const model_tensor *t, void *dst);

/* Where a conversion of t goes (a model_convert_fn's dst), one rule for
 * every loader and the lazy list: its bytes, and t pointed at it: int8 rows
 * (q8) when t's q8_scale is bound, else data in t->dtype. */
size_t model_convert_bytes(const model_tensor *t);
void model_convert_into(model_tensor *t, void *dst);

/* One buffer of t's 4-bit codes (a loader's, deferred or not): its bytes,
 * and where the parts go in it: codes [rows, cols / 2], then the f16
 * scales [rows, ceil(cols / 32)], then the zeros (the same). */
size_t model_q4_bytes(const model_tensor *t);
void model_q4_parts(const model_tensor *t, void *dst, uint8_t **u, uint16_t **d, uint8_t **z);

/* Lazy layers: a loader asked for them (model_load_opts.lazy_layers) binds
 * a layer matrix it would convert with out's shape and dtype set and defers
 * the conversion (m a model; out->data NULL until model_layer_need).
 * model_has_lazy: some matrix was deferred (a backend without the hooks
 * below refuses such a model). */
int model_defer(void *m, model_tensor *out, int layer, model_convert_fn fn, const void *src,
                const void *aux, int arg, inf_err *err);
int model_has_lazy(const model *m);

/* The hooks of a backend that packs its own copy of every layer matrix
 * (cpu_config.layer_need / layer_packed, m a model: serve and generate pass
 * them). model_layer_need converts layer `layer`'s deferred matrices (again
 * after a release: a later backend may pack them too) and is a no-op
 * without them; model_layer_packed frees what the loader holds of that
 * layer and the backend no longer reads: its deferred matrices' conversion
 * and its 4-bit codes (model_drop_layer_codes). */
int model_layer_need(void *m, int layer, inf_err *err);
void model_layer_packed(void *m, int layer);

/* Bytes the lazy list holds now: conversions a backend needs, and the
 * buffers of released layers kept as spares for the next layers' matrices
 * (0 once the last layer is packed). */
size_t model_lazy_held(const model *m);

/* 1 when the layers' matrices are a pre-quantized W8A8 int8 checkpoint's
 * (model_tensor.q8): they run on the CPU's int8 path only. */
int model_is_w8a8(const model *m);

/* The pre-quantized checkpoint's scheme as inferd runs it, for start-up
 * messages (hfq_describe: "compressed-tensors FP8 (dequantized to f32 at
 * load; activations not quantized)", ...; a GGUF file's: "GGUF Q4_K, Q6_K
 * (dequantized to f32 at load)", or its Q4_0 codes run by the int4
 * kernels), or NULL for a plain checkpoint or a GGUF file of F32 / F16 /
 * BF16 layer matrices. */
const char *model_quant_desc(const model *m);

#endif
