/* cuda_plan: the CUDA backend's host-side arithmetic, in pure C.
 *
 * Everything here is decided on the host and needs no GPU: how a model is
 * sharded across tensor-parallel ranks, where each weight, activation and
 * per-step metadata array lives inside its device arena, how many KV blocks
 * gpu_memory_utilization leaves room for, which batch sizes get a CUDA graph,
 * how long contexts are split for decode attention, how a be_batch is packed
 * into the metadata the kernels read, and the f32/f16 -> bf16 conversion of
 * weights on upload. It is unit-tested without a GPU (tests/test_cuda_plan.c)
 * and linked only with engine/common.o. */
#ifndef INFERD_CUDA_PLAN_H
#define INFERD_CUDA_PLAN_H

#include "engine/be.h"
#include "engine/model.h"

#define CUDA_ALIGN 256          /* bytes: every sub-buffer of an arena        */
#define CUDA_MAX_TOKENS 65535   /* a grid's y extent (k_swiglu: one per token) */
#define CUDA_MAX_HEAD_DIM 256   /* the attention kernels' register tiles      */
#define CUDA_ATTN_ROWS 32       /* query rows (token x head) per prefill tile */
#define CUDA_MMA_ROWS 16        /* query rows per tensor-core attention tile  */
#define CUDA_GEMM_WIDE_N 16384  /* a GEMM this wide has blocks enough: 1 range */
#define CUDA_GEMM_MAX_SPLITS 4  /* most K ranges of the batch-invariant GEMM  */

/* Whether the tensor-core attention (cuda_k_attn_tiles) takes head_dim hd
 * with G query heads per KV head: whole 8-wide mma steps, at most 256 wide,
 * and a KV head's queries within one tile. */
static inline int cuda_attn_mma_fits(int hd, int G)
{
    return hd % 8 == 0 && hd <= CUDA_MAX_HEAD_DIM && G <= CUDA_MMA_ROWS;
}
#define CUDA_DEC_HEADS 8        /* query heads one decode block handles       */
#define CUDA_SPLIT_MIN 256      /* fewest positions in one decode split       */
#define CUDA_SPLIT_MAX 32       /* most splits of one decode token's context  */
#define CUDA_MAX_BUCKETS 72     /* CUDA-graph batch sizes                     */
#define CUDA_BUCKET_CAP 512     /* no graph above this many sequences         */
#define CUDA_BLAS_WORKSPACE ((size_t)32 << 20) /* cuBLAS workspace per rank   */
#define CUDA_RESERVE ((size_t)256 << 20) /* left free: graphs, library state  */

/* ---- tensor parallelism ------------------------------------------------ */

/* What one rank of tp owns: contiguous ranges of query heads, KV heads and
 * FFN units. Query head h reads KV head h / (H / KV), so equal contiguous
 * cuts of both keep every group on one rank. */
typedef struct cuda_shard {
    int rank, tp;
    int q_head0, n_q_heads;   /* query heads [q_head0, +n_q_heads)          */
    int kv_head0, n_kv_heads; /* KV heads                                   */
    int ff0, n_ff;            /* gate/up rows and down columns              */
} cuda_shard;

/* INF_ERR_UNSUPPORTED unless heads, KV heads and the FFN width all divide
 * by tp; INF_ERR_INVALID for a rank outside [0, tp). */
int cuda_plan_shard(const model_config *c, int tp, int rank, cuda_shard *out,
                    inf_err *err);

/* One slice of a checkpoint tensor: rows [r0, r0+nr), columns [c0, c0+nc). */
typedef struct cuda_piece {
    const model_tensor *w;
    int64_t r0, nr, c0, nc;
} cuda_piece;

/* The fused device matrices of a layer, each built from checkpoint slices
 * stacked by rows (all slices of one matrix have the same width). */
enum {
    CUDA_W_QKV = 0,  /* [(Hl + 2 KVl) hd][D]: q rows, then k, then v      */
    CUDA_W_O = 1,    /* [D][Hl hd]: wo's columns for this rank's heads      */
    CUDA_W_GU = 2,   /* [2 Fl][D]: gate rows, then up rows                  */
    CUDA_W_DOWN = 3, /* [D][Fl]: w_down's columns for this rank's units     */
    CUDA_W_COUNT = 4
};

/* Writes the slices of matrix `which` of layer l for shard sh into out
 * (room for 3); returns how many. */
int cuda_plan_pieces(const model_layer *w, const model_config *c, const cuda_shard *sh,
                     int which, cuda_piece *out);

/* One slice of a 1-D bias: elements [src0, src0+n) of t go to elements
 * [dst0, dst0+n) of the rank's bias vector. */
typedef struct cuda_bias_piece {
    const model_tensor *t; /* NULL: nothing (the vector keeps zeros there)  */
    int64_t src0, n, dst0;
} cuda_bias_piece;

/* Layer l's biases for shard sh, in the rank's f32 vector [qkv + D] (q | k
 * | v, then o). Column-parallel q, k and v biases are cut like their rows:
 * this rank's query heads and KV heads. The row-parallel o bias goes whole
 * to rank 0 and to no other (the all-reduce that sums the ranks' partial
 * O products then adds it exactly once). Writes 4 pieces (q, k, v, o);
 * a piece with t NULL (absent from the checkpoint, or o off rank 0) is
 * left as zeros. */
void cuda_plan_bias_pieces(const model_layer *w, const model_config *c, const cuda_shard *sh,
                           cuda_bias_piece out[4]);

/* ---- sizes --------------------------------------------------------------- */

/* Everything the arenas are sized from, for one rank. */
typedef struct cuda_dims {
    int D, hd, Hl, KVl, G, Fl, V, L;
    int qkv;        /* (Hl + 2 KVl) * hd: width of the fused QKV output      */
    int T;          /* most tokens in one forward                            */
    int S;          /* most sequences in one forward (<= T)                  */
    int R;          /* most logit rows in one forward (S <= R <= T)          */
    int MB;         /* block-table entries per sequence: ceil(max_ctx / bs)  */
    int max_ctx, block_size;
    int chunk;      /* positions per decode split                           */
    int max_splits; /* splits of the longest context                         */
    int tile_tokens;/* tokens per tile: CUDA_ATTN_ROWS / G (prefill tiles),
                       CUDA_MMA_ROWS / G (attn_mma)                         */
    int invariant;  /* 1: batch-invariant kernels; every token is on the
                       decode list and has split partials (T of them, not S) */
    int n_dec_max;  /* entries of the decode list: T when invariant, else S */
    int attn_mma;   /* invariant, head_dim a multiple of 8 and G <= 16: the
                       tensor-core kernel (cuda_k_attn_tiles) over tiles of
                       tile_tokens = 16 / G tokens; else the split-K kernel */
    int lm_head;    /* 1 on the rank that computes logits (rank 0)           */
    int bias;       /* per-layer q|k|v and o biases (mdesc bias_qkv/bias_o)  */
    int qk_norm;    /* per-layer q_norm, k_norm gains                        */
    int sandwich;   /* per-layer post-attention / post-MLP norms (Gemma)     */
    int quant;      /* the layer matrices: CUDA_QUANT_NONE (bf16), _INT8
                       (W8A8) or _INT4 (W4A8), cuda/backend.h              */
    int ldq;        /* bytes per quantized activation row: the widest K of
                       a layer GEMM, rounded up to 32 (0 unquantized)      */
} cuda_dims;

/* What one forward may carry. */
typedef struct cuda_limits {
    int max_tokens; /* 1..CUDA_MAX_TOKENS                                    */
    int max_seqs, max_ctx, block_size;
    int max_logits; /* logit rows; <= 0: max_tokens. Raised to max_seqs, the
                       rows a full decode step (and its graph) computes     */
    int num_blocks; /* KV blocks asked for: 0 from the budget, > 0 fixed;
                       checked here so a bad value fails before the upload  */
    int invariant;  /* batch-invariant kernels (cuda_config.batch_invariant) */
    int quant;      /* cuda_config.quant                                     */
} cuda_limits;

/* Fills d for shard sh. INF_ERR_UNSUPPORTED for shapes the kernels do not
 * handle (query heads that do not group over the KV heads, odd or
 * > CUDA_MAX_HEAD_DIM head_dim, more than CUDA_ATTN_ROWS query heads per KV
 * head, quantized matrices over several ranks or with K of 65,536 or more);
 * INF_ERR_INVALID for bad limits. */
int cuda_plan_dims(const model_config *c, const cuda_shard *sh, const cuda_limits *lim,
                   cuda_dims *d, inf_err *err);

/* Split-K of decode attention: a context of n positions is cut into
 * ceil(n / chunk) splits [s*chunk, min(n, (s+1)*chunk)); chunk is fixed by
 * max_ctx alone (so a token's result never depends on the batch), a multiple
 * of 64 and >= CUDA_SPLIT_MIN, with at most CUDA_SPLIT_MAX splits. */
void cuda_plan_splitk(int max_ctx, int *chunk, int *max_splits);
int cuda_plan_n_splits(int chunk, int n_ctx);

/* K ranges of the batch-invariant GEMM for an N x K weight: a function of
 * the shape alone, never of the rows, so results stay batch-invariant. More
 * than one when N is narrow enough that a decode step would leave the GPU
 * short of blocks: one per 2048 columns of K, at most 4. */
int cuda_plan_gemm_splits(int N, int K);

/* Offsets (bytes) inside one rank's weight arena. */
typedef struct cuda_wlayout {
    size_t embed;        /* [V][D] bf16                                      */
    size_t lm_head;      /* [V][D] bf16; == embed when tied; 0 unused         */
    size_t norm;         /* [D] f32 final RMSNorm gain                        */
    size_t rope;         /* [4][hd/2] f64 inverse frequencies: global layers'
                            short and long, local layers' short and long     */
    size_t layer0;       /* first layer; layer l at layer0 + l * layer_stride */
    size_t layer_stride;
    size_t attn_norm, ffn_norm;          /* [D] f32, inside a layer           */
    size_t post_norm;    /* [2][D] f32 post-attention, post-MLP (sandwich)    */
    size_t qk_gain;      /* [2][hd] f32 (qk_norm)                              */
    size_t bias;         /* [qkv + D] f32 q|k|v then o (bias)                  */
    size_t w[CUDA_W_COUNT];              /* the matrices, inside a layer: bf16
                                            [N][K]; int8 [N][w_ld]; int4 [N][G][16]
                                            nibbles (cuda/kern.h)              */
    size_t w_scale[CUDA_W_COUNT];        /* quantized: int8 [N] f32 scales;
                                            int4 [N][G] f16 (inside a layer)   */
    size_t w_rows[CUDA_W_COUNT], w_cols[CUDA_W_COUNT];
    size_t w_ld[CUDA_W_COUNT];           /* int8: bytes per row (K rounded up
                                            to 32); int4: groups per row       */
    size_t total;
    size_t stream_bytes; /* what one decode step reads: the layers' matrices
                            and the LM head (the roofline's numerator)        */
} cuda_wlayout;

void cuda_plan_weights(const cuda_dims *d, int tied, cuda_wlayout *w);

/* Offsets (bytes) of the per-step metadata; the host's pinned staging and
 * the device copy share this layout, so one copy moves it all. The block
 * tables come last but for the token masks, so a step copies only the rows
 * it uses; the masks of its masked sampling rows, packed from the start of
 * their region, go in a second copy (rank 0 only) when there are any. */
typedef struct cuda_mlayout {
    size_t tokens, positions, slots, tok_seq; /* [T] int32                   */
    size_t rows;                              /* [R] int32 logit rows        */
    size_t dec;                               /* [n_dec_max] int32 tokens of
                                                 split-K attention           */
    size_t tiles;                             /* [T][3] int32 seq, t0, nq    */
    size_t smp;                               /* [R] cuda_smp_row            */
    size_t table;                             /* [S][MB] int32               */
    size_t masks;                             /* [R][mask_words] uint32 token
                                                 masks of sampling rows      */
    size_t mask_words;                        /* (V + 31) / 32               */
    size_t total;
} cuda_mlayout;

void cuda_plan_meta(const cuda_dims *d, cuda_mlayout *m);

/* Offsets (bytes) inside one rank's activation arena. */
typedef struct cuda_alayout {
    size_t meta;    /* cuda_mlayout.total bytes                              */
    size_t x;       /* [T][D] f32 residual stream                            */
    size_t xn;      /* [T][D] bf16 normed input of a GEMM                    */
    size_t qkv;     /* [T][qkv] f32; q rotated in place                      */
    size_t att;     /* [T][Hl hd] bf16 attention output                      */
    size_t delta;   /* [T][D] f32 O / down projection (summed across ranks)  */
    size_t gu;      /* [T][2 Fl] f32 gate | up                               */
    size_t act;     /* [T][Fl] bf16 SwiGLU output                            */
    size_t fin;     /* [R][D] bf16 final-normed logit rows                   */
    size_t xq;      /* [T][ldq] int8 quantized GEMM input (quant only)       */
    size_t sx;      /* [T] f32 its scales (quant only)                       */
    size_t logits;  /* [R][V] f32 (lm_head rank; 0 bytes elsewhere)          */
    size_t part;    /* [n_dec_max][KVl][max_splits][G][hd + 2] f32 partials  */
    size_t ids;     /* [R] int32 sampled ids                                 */
    size_t ws;      /* cuBLAS workspace                                       */
    size_t gws;     /* [splits][T][N] f32: the batch-invariant GEMM's K-range
                       sums, for the layer GEMM that needs the most          */
    size_t total;
} cuda_alayout;

void cuda_plan_acts(const cuda_dims *d, const cuda_mlayout *m, cuda_alayout *a);

/* KV storage of one block on one rank: all layers, K and V, bf16. */
size_t cuda_plan_kv_block_bytes(const cuda_dims *d);

/* ---- KV pool from gpu_memory_utilization -------------------------------- */

typedef struct cuda_kv_in {
    size_t total;       /* device memory                                     */
    size_t free;        /* free now, after weights and activations           */
    double util;        /* (0, 1]                                            */
    size_t block_bytes; /* cuda_plan_kv_block_bytes                          */
    size_t reserve;     /* kept free (graphs, library state)                 */
    size_t weights, acts; /* for the message only                            */
    int block_size, max_ctx;
    int num_blocks;     /* > 0: exactly this many (checked against free)     */
} cuda_kv_in;

/* vLLM's meaning: this backend may hold util * total bytes. Everything
 * already held on the device (our context, weights and activations, other
 * processes) counts against that, the reserve stays free, and the rest is
 * KV blocks. num_blocks includes the null block 0. INF_ERR_NOMEM, with every
 * size in MiB, when not even one sequence of max_ctx tokens fits. */
int cuda_plan_kv(const cuda_kv_in *in, int *num_blocks, inf_err *err);

/* ---- CUDA-graph buckets ------------------------------------------------- */

/* vLLM's capture sizes: 1, 2, 4, then every multiple of 8, up to
 * min(max_seqs, CUDA_BUCKET_CAP), which is always the last. Returns the
 * count (<= cap). */
int cuda_plan_buckets(int max_seqs, int *out, int cap);

/* Index of the smallest bucket >= n, or -1. */
int cuda_plan_bucket(const int *buckets, int nb, int n);

/* ---- one step's metadata ------------------------------------------------ */

/* Device-side sampling parameters of one logit row (engine/be.h). */
typedef be_smp_row cuda_smp_row;

typedef struct cuda_step {
    int T;       /* token rows the kernels run over (n_tokens, or the bucket) */
    int n_dec;   /* tokens on the decode list (of one-token sequences, or
                    every token when batch-invariant)                        */
    int n_tiles; /* tiles: prefill tiles of the other sequences, or with
                    attn_mma every sequence's                                */
    int n_rows;  /* logit rows computed (the bucket's, when padded)            */
    int n_out;   /* logit rows returned: the batch's n_logits                 */
    int bucket;  /* > 0: a pure decode step padded to this many rows          */
    int sample;  /* 1: sampled on the device, ids come back                   */
    size_t meta_bytes; /* leading bytes of the metadata this step uses        */
    int n_masks; /* sampling rows with a token mask: the first n_masks rows of
                    the masks region hold them, in row order                  */
    size_t mask_bytes; /* n_masks * mask_words * 4, copied from m->masks      */
} cuda_step;

/* 1 when b is a pure decode step: every sequence one token, logits for every
 * token in order (what a CUDA graph replays). */
int cuda_plan_is_decode(const be_batch *b);

/* Packs b into stage (layout m): tokens, positions, slots, the token ->
 * sequence map, block tables re-strided to MB, logit rows, the decode list,
 * prefill tiles and, if smp, sampling rows. With d->invariant every token is
 * on the decode list, in order (split-K attention computes a token the same
 * way whether it decodes, prefills or verifies), and with d->attn_mma every
 * sequence, padding too, is cut into tiles of tile_tokens for the
 * tensor-core kernel. bucket > 0 pads a decode step to
 * bucket rows: padding tokens are token 0 at position 0 of a one-token
 * sequence on the null block (slot 0), so they read and write nothing real.
 * Padding gets no logit rows or sampling rows: a padded step's final norm
 * takes its rows in order, and only the batch's n_logits rows are sampled.
 * A sampling row's host mask is copied into the masks region and its staged
 * mask pointer rewritten to where that copy will be on the device: dev_meta
 * is the device address of the metadata of the rank that samples (rank 0).
 * The batch must already have passed be_batch_check and the limits of d
 * (context, sequences, logit rows). */
void cuda_plan_batch(const cuda_dims *d, const cuda_mlayout *m, const be_batch *b,
                     int bucket, const cuda_smp_row *smp, const void *dev_meta, void *stage,
                     cuda_step *st);

/* ---- weight conversion on upload --------------------------------------- */

/* n elements of dtype t to bf16 / f32. */
void cuda_plan_to_bf16(const void *src, inf_dtype t, size_t n, uint16_t *dst);
void cuda_plan_to_f32(const void *src, inf_dtype t, size_t n, float *dst);

/* Rows [r0, r0+nr) of a piece (its columns c0..c0+nc) as bf16 into dst
 * [nr][nc]: the unit the uploader converts at a time. */
void cuda_plan_pack(const cuda_piece *p, int64_t r0, int64_t nr, uint16_t *dst);

#endif
