/* cpu_be: the CPU backend's state, shared by its two halves: backend.c
 * (the forward pass: per-token ops, attention, the layers) and backend_mm.c
 * (the matmuls: parallel jobs over columns and tokens, and the int8 / int4
 * inputs). Private to cpu/; the public API is cpu/backend.h. */
#ifndef INFERD_CPU_BACKEND_INT_H
#define INFERD_CPU_BACKEND_INT_H

#include "cpu/backend.h"
#include "cpu/kern.h"
#include "cpu/pool.h"
#include "cpu/q4.h"
#include "cpu/qw.h"

/* A layer's norms, in this order in cpu_be.norms. */
enum { NORM_ATTN, NORM_FFN, NORM_POST_ATTN, NORM_POST_FFN, NORM_N };

/* A layer's seven matrices, in this order wherever they are listed. */
enum { QW_Q, QW_K, QW_V, QW_O, QW_GATE, QW_UP, QW_DOWN, QW_N };

static inline const model_tensor *layer_matrix(const model_layer *w, int i)
{
    const model_tensor *ts[QW_N] = {&w->wq, &w->wk, &w->wv, &w->wo,
                                    &w->w_gate, &w->w_up, &w->w_down};
    return ts[i];
}

typedef struct cpu_be {
    be_backend base;
    const model *m;
    const cpu_kern *k;
    cpu_pool *pool;
    int nt;                   /* threads                                    */
    int max_tokens, max_ctx;
    int D, H, KV, hd, F, V, L, qdim, kvdim, group;
    const mdesc *md;          /* the recipe (m->cfg.desc)                   */
    unsigned feat;            /* its mdesc_features                         */
    int rot, n_rope;          /* rotated dims per head; RoPE tables (1, 2)  */
    float eps;
    float *norms;             /* [L][NORM_N][D] gains (1 + w folded in where
                                 the family says); then [D] final           */
    float *qkn;               /* [L][2][hd] q_norm, k_norm gains, or NULL   */
    float *bias;              /* [L][qdim + 2 kvdim + D] q|k|v|o biases, or
                                 NULL                                       */
    float *kc, *vc;           /* [L][num_blocks*block_size][kvdim]          */
    size_t layer_kv;          /* floats per layer in kc / vc                */
    float *x;                 /* [T][D] residual stream                     */
    float *h;                 /* [T][max(D, qdim)] normed input / outputs   */
    float *q;                 /* [T][qdim]                                  */
    float *kb, *vb;           /* [T][kvdim] this step's keys and values     */
    float *att;               /* [T][qdim] attention output                 */
    float *gate, *up;         /* [T][F]                                     */
    float *cosv, *sinv;       /* [n_rope][T][rot/2] RoPE rotation per token */
    int32_t *tok_seq;         /* [T] sequence index of each token           */
    const be_batch *pending;  /* submitted, run by the next wait            */
    float *pack;              /* [nt][CPU_PACK_FLOATS]                      */
    float *scores;            /* [nt][group][max_ctx]                       */
    cpu_qw **qw;              /* [L][QW_N] with --quantization int8, or NULL */
    uint8_t *xq;              /* [T][ldq] quantized matmul input (+128)     */
    size_t ldq;
    float *xs;                /* [T] its scales                             */
    cpu_q4w **q4;             /* [L][QW_N] with --quantization int4, or NULL */
    const cpu_q4k *k4;        /* the int4 kernels that go with k            */
    int32_t *xs8;             /* [T][ldxs] int4: 8 * group sums of xq        */
    size_t ldxs;
    int8_t *xqp;              /* [3][T][ldq] int4: xq in up to three matrices'
                                 orders of inputs (cpu_q4w.perm), or NULL   */
    int32_t *xs8p;            /* [3][T][ldxs] their group sums              */
} cpu_be;
/* The MLP's activation over columns [lo, hi) of gate and up, rows t < T:
 * gate = act(gate) * up. */
typedef void (*glu_fn)(const cpu_be *be, int T, int lo, int hi);

typedef void (*row_fn)(cpu_be *be, int t, const void *arg);

/* fn(be, t, arg) for every token t < T, on the pool's threads when it pays. */
void cpu__per_token(cpu_be *be, int T, row_fn fn, const void *arg);

/* y_i = x . w_i^T for the n matrices of layer l from index first on (QW_*),
 * which share the input x [T][K]: as stored, or int8 / int4 (the input
 * quantized once for all n). glu: the MLP's activation fused into gate and
 * up (first is QW_GATE), or NULL. */
void cpu__linears(cpu_be *be, int l, int T, const float *x, size_t ldx, int first, int n,
                  float *const *y, const size_t *ldy, glu_fn glu);

/* y [M][ldy] = x [M][ldx] . w^T with w as stored (the LM head), its
 * columns across the pool's threads. */
void cpu__matmul(cpu_be *be, const float *x, size_t ldx, const model_tensor *w, float *y,
                 size_t ldy, int M);

/* Quantizes every layer's seven matrices (quant: CPU_QUANT_INT8 or _INT4)
 * and allocates the quantized inputs' buffers; cfg->layer_need is asked for
 * each layer before it is read and cfg->layer_packed hears of it after. */
int cpu__quantize_layers(cpu_be *be, int quant, const cpu_config *cfg, inf_err *err);

#endif
