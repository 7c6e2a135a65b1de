/* The CUDA backend's host-side arithmetic (contract in cuda/plan.h). Pure C:
 * no CUDA header, no allocation, so every rule here is tested on any machine. */
#include "cuda/plan.h"

#include <limits.h>
#include <string.h>

#include "cuda/backend.h"

#define MIB(x) ((double)(x) / 1048576.0)

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }
static int cdiv(int a, int b) { return (a + b - 1) / b; }

/* Takes `bytes` at *off and moves *off past them to the next CUDA_ALIGN
 * boundary, so every buffer starts aligned for 16-byte vector loads and
 * cuBLAS's preferred alignment. */
static size_t bump(size_t *off, size_t bytes)
{
    size_t at = *off;
    *off = (at + bytes + CUDA_ALIGN - 1) / CUDA_ALIGN * CUDA_ALIGN;
    return at;
}

/* ---- tensor parallelism -------------------------------------------------- */

int cuda_plan_shard(const model_config *c, int tp, int rank, cuda_shard *o, inf_err *err)
{
    if (tp < 1 || rank < 0 || rank >= tp)
        return inf_fail(err, INF_ERR_INVALID, "cuda: rank %d of tensor_parallel_size %d",
                        rank, tp);
    if (c->n_heads % tp || c->n_kv_heads % tp || c->intermediate_size % tp)
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "cuda: tensor_parallel_size %d must divide the attention heads (%d), "
                        "the KV heads (%d) and the intermediate size (%d)",
                        tp, c->n_heads, c->n_kv_heads, c->intermediate_size);
    o->rank = rank;
    o->tp = tp;
    o->n_q_heads = c->n_heads / tp;
    o->q_head0 = rank * o->n_q_heads;
    o->n_kv_heads = c->n_kv_heads / tp;
    o->kv_head0 = rank * o->n_kv_heads;
    o->n_ff = c->intermediate_size / tp;
    o->ff0 = rank * o->n_ff;
    return INF_OK;
}

static cuda_piece piece(const model_tensor *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc)
{
    cuda_piece p = {.w = w, .r0 = r0, .nr = nr, .c0 = c0, .nc = nc};
    return p;
}

int cuda_plan_pieces(const model_layer *w, const model_config *c, const cuda_shard *sh,
                     int which, cuda_piece *out)
{
    int64_t hd = c->head_dim, D = c->hidden_size;
    switch (which) {
    case CUDA_W_QKV:
        out[0] = piece(&w->wq, sh->q_head0 * hd, sh->n_q_heads * hd, 0, D);
        out[1] = piece(&w->wk, sh->kv_head0 * hd, sh->n_kv_heads * hd, 0, D);
        out[2] = piece(&w->wv, sh->kv_head0 * hd, sh->n_kv_heads * hd, 0, D);
        return 3;
    case CUDA_W_O: /* row-parallel: this rank's heads are columns of wo */
        out[0] = piece(&w->wo, 0, D, sh->q_head0 * hd, sh->n_q_heads * hd);
        return 1;
    case CUDA_W_GU:
        out[0] = piece(&w->w_gate, sh->ff0, sh->n_ff, 0, D);
        out[1] = piece(&w->w_up, sh->ff0, sh->n_ff, 0, D);
        return 2;
    case CUDA_W_DOWN:
        out[0] = piece(&w->w_down, 0, D, sh->ff0, sh->n_ff);
        return 1;
    default:
        return 0;
    }
}

static cuda_bias_piece bias_piece(const model_tensor *t, int64_t src0, int64_t n, int64_t dst0)
{
    return (cuda_bias_piece){.t = t && t->data ? t : NULL, .src0 = src0, .n = n, .dst0 = dst0};
}

void cuda_plan_bias_pieces(const model_layer *w, const model_config *c, const cuda_shard *sh,
                           cuda_bias_piece out[4])
{
    int64_t hd = c->head_dim, nq = sh->n_q_heads * hd, nkv = sh->n_kv_heads * hd;
    out[0] = bias_piece(&w->bq, sh->q_head0 * hd, nq, 0);
    out[1] = bias_piece(&w->bk, sh->kv_head0 * hd, nkv, nq);
    out[2] = bias_piece(&w->bv, sh->kv_head0 * hd, nkv, nq + nkv);
    /* row-parallel: added once, on rank 0, before the sum over ranks */
    out[3] = bias_piece(sh->rank == 0 ? &w->bo : NULL, 0, c->hidden_size, nq + 2 * nkv);
}

/* ---- sizes --------------------------------------------------------------- */

void cuda_plan_splitk(int max_ctx, int *chunk, int *max_splits)
{
    int c = cdiv(max_ctx > 0 ? max_ctx : 1, CUDA_SPLIT_MAX);
    c = cdiv(c, 64) * 64;
    if (c < CUDA_SPLIT_MIN)
        c = CUDA_SPLIT_MIN;
    *chunk = c;
    *max_splits = cdiv(max_ctx > 0 ? max_ctx : 1, c);
}

int cuda_plan_n_splits(int chunk, int n_ctx)
{
    return cdiv(n_ctx, chunk);
}

int cuda_plan_dims(const model_config *c, const cuda_shard *sh, const cuda_limits *lim,
                   cuda_dims *d, inf_err *err)
{
    int max_tokens = lim->max_tokens, max_seqs = lim->max_seqs, max_ctx = lim->max_ctx;
    int block_size = lim->block_size;
    memset(d, 0, sizeof *d);
    if (max_tokens < 1 || max_tokens > CUDA_MAX_TOKENS || max_seqs < 1 || max_ctx < 1 ||
        block_size < 1 || lim->num_blocks < 0)
        return inf_fail(err, INF_ERR_INVALID,
                        "cuda: bad limits (max_tokens %d (1..%d), max_seqs %d, max_context "
                        "%d, block_size %d, num_blocks %d)", max_tokens, CUDA_MAX_TOKENS,
                        max_seqs, max_ctx, block_size, lim->num_blocks);
    if (c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads)
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "cuda: %d heads do not group over %d KV heads", c->n_heads,
                        c->n_kv_heads);
    if (c->head_dim < 2 || c->head_dim % 2 || c->head_dim > CUDA_MAX_HEAD_DIM)
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "cuda: head_dim %d is not supported (even, at most %d)", c->head_dim,
                        CUDA_MAX_HEAD_DIM);
    int G = c->n_heads / c->n_kv_heads;
    if (G > CUDA_ATTN_ROWS)
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "cuda: %d query heads per KV head is not supported (at most %d)", G,
                        CUDA_ATTN_ROWS);
    d->D = c->hidden_size;
    d->hd = c->head_dim;
    d->Hl = sh->n_q_heads;
    d->KVl = sh->n_kv_heads;
    d->G = G;
    d->Fl = sh->n_ff;
    d->V = c->vocab_size;
    d->L = c->n_layers;
    d->qkv = (d->Hl + 2 * d->KVl) * d->hd;
    d->T = max_tokens;
    d->S = imin(max_seqs, max_tokens);
    d->R = lim->max_logits > 0 ? imin(lim->max_logits, max_tokens) : max_tokens;
    if (d->R < d->S)
        d->R = d->S;
    d->max_ctx = max_ctx;
    d->block_size = block_size;
    d->MB = cdiv(max_ctx, block_size);
    cuda_plan_splitk(max_ctx, &d->chunk, &d->max_splits);
    d->invariant = lim->invariant != 0;
    d->n_dec_max = d->invariant ? d->T : d->S;
    d->attn_mma = d->invariant && cuda_attn_mma_fits(d->hd, G);
    d->tile_tokens = (d->attn_mma ? CUDA_MMA_ROWS : CUDA_ATTN_ROWS) / G;
    d->lm_head = sh->rank == 0;
    d->bias = c->desc.bias_qkv || c->desc.bias_o;
    d->qk_norm = c->desc.qk_norm;
    d->sandwich = c->desc.sandwich;
    d->quant = lim->quant;
    if (d->quant) {
        /* a rank's slice of O and down would be quantized over its own K
         * columns, not the row the CPU quantizes */
        if (sh->tp > 1)
            return inf_fail(err, INF_ERR_UNSUPPORTED, "cuda: --quantization %s runs on one GPU "
                            "(tensor_parallel_size 1), not %d", d->quant == 1 ? "int8" : "int4",
                            sh->tp);
        int k = imax(imax(d->D, d->Hl * d->hd), d->Fl);
        if (k >= 65536) /* int32 sums stay exact below this (cpu/qw.h's CPU_QK_MAX) */
            return inf_fail(err, INF_ERR_UNSUPPORTED, "cuda: quantized GEMMs need K below "
                            "65536, and this model has %d", k);
        d->ldq = cdiv(k, 32) * 32;
    }
    return INF_OK;
}

void cuda_plan_weights(const cuda_dims *d, int tied, cuda_wlayout *w)
{
    memset(w, 0, sizeof *w);
    size_t D = (size_t)d->D, V = (size_t)d->V, off = 0;
    w->embed = bump(&off, V * D * 2);
    if (d->lm_head)
        w->lm_head = tied ? w->embed : bump(&off, V * D * 2);
    w->norm = bump(&off, D * sizeof(float));
    w->rope = bump(&off, 4 * (size_t)(d->hd / 2) * sizeof(double));

    w->w_rows[CUDA_W_QKV] = (size_t)d->qkv;
    w->w_cols[CUDA_W_QKV] = D;
    w->w_rows[CUDA_W_O] = D;
    w->w_cols[CUDA_W_O] = (size_t)d->Hl * d->hd;
    w->w_rows[CUDA_W_GU] = 2 * (size_t)d->Fl;
    w->w_cols[CUDA_W_GU] = D;
    w->w_rows[CUDA_W_DOWN] = D;
    w->w_cols[CUDA_W_DOWN] = (size_t)d->Fl;

    size_t lo = 0, mats = 0;
    w->attn_norm = bump(&lo, D * sizeof(float));
    w->ffn_norm = bump(&lo, D * sizeof(float));
    if (d->sandwich)
        w->post_norm = bump(&lo, 2 * D * sizeof(float));
    if (d->qk_norm)
        w->qk_gain = bump(&lo, 2 * (size_t)d->hd * sizeof(float));
    if (d->bias)
        w->bias = bump(&lo, ((size_t)d->qkv + D) * sizeof(float));
    for (int i = 0; i < CUDA_W_COUNT; i++) {
        size_t N = w->w_rows[i], K = w->w_cols[i], b, sb = 0;
        if (d->quant == CUDA_QUANT_INT8) {
            w->w_ld[i] = (K + 31) / 32 * 32;
            b = N * w->w_ld[i];
            sb = N * sizeof(float);
        } else if (d->quant == CUDA_QUANT_INT4) {
            w->w_ld[i] = (K + 31) / 32;
            b = N * w->w_ld[i] * 16;
            sb = N * w->w_ld[i] * 2;
        } else {
            b = N * K * 2;
        }
        w->w[i] = bump(&lo, b);
        if (sb)
            w->w_scale[i] = bump(&lo, sb);
        mats += b + sb;
    }
    w->layer_stride = lo;
    w->layer0 = bump(&off, lo * (size_t)d->L);
    w->total = off;
    w->stream_bytes = mats * (size_t)d->L + (d->lm_head ? V * D * 2 : 0);
}

void cuda_plan_meta(const cuda_dims *d, cuda_mlayout *m)
{
    size_t T = (size_t)d->T, S = (size_t)d->S, R = (size_t)d->R, I = sizeof(int32_t), off = 0;
    m->tokens = bump(&off, T * I);
    m->positions = bump(&off, T * I);
    m->slots = bump(&off, T * I);
    m->tok_seq = bump(&off, T * I);
    m->rows = bump(&off, R * I);
    m->dec = bump(&off, (size_t)d->n_dec_max * I);
    m->tiles = bump(&off, 3 * T * I);
    m->smp = bump(&off, R * sizeof(cuda_smp_row));
    m->table = bump(&off, S * (size_t)d->MB * I); /* a step copies only its rows */
    m->mask_words = ((size_t)d->V + 31) / 32;
    m->masks = bump(&off, R * m->mask_words * sizeof(uint32_t)); /* copied apart */
    m->total = off;
}

int cuda_plan_gemm_splits(int N, int K)
{
    if (N >= CUDA_GEMM_WIDE_N)
        return 1;
    int s = K / 2048;
    return s < 1 ? 1 : s > CUDA_GEMM_MAX_SPLITS ? CUDA_GEMM_MAX_SPLITS : s;
}

void cuda_plan_acts(const cuda_dims *d, const cuda_mlayout *m, cuda_alayout *a)
{
    size_t T = (size_t)d->T, D = (size_t)d->D, off = 0;
    a->meta = bump(&off, m->total);
    a->x = bump(&off, T * D * sizeof(float));
    a->xn = bump(&off, T * D * 2);
    a->qkv = bump(&off, T * (size_t)d->qkv * sizeof(float));
    a->att = bump(&off, T * (size_t)d->Hl * d->hd * 2);
    a->delta = bump(&off, T * D * sizeof(float));
    a->gu = bump(&off, T * 2 * (size_t)d->Fl * sizeof(float));
    a->act = bump(&off, T * (size_t)d->Fl * 2);
    size_t R = (size_t)d->R;
    a->fin = bump(&off, R * D * 2);
    if (d->quant) {
        a->xq = bump(&off, T * (size_t)d->ldq);
        a->sx = bump(&off, T * sizeof(float));
    }
    a->logits = bump(&off, d->lm_head ? R * (size_t)d->V * sizeof(float) : 0);
    a->part = bump(&off, (size_t)d->n_dec_max * d->KVl * d->max_splits * d->G * (d->hd + 2) *
                             sizeof(float));
    a->ids = bump(&off, R * sizeof(int32_t));
    a->ws = bump(&off, CUDA_BLAS_WORKSPACE);
    size_t g = 0; /* the layer GEMMs' N x K, and the LM head's */
    const int nk[5][2] = {{d->qkv, d->D}, {d->D, d->Hl * d->hd}, {2 * d->Fl, d->D},
                          {d->D, d->Fl}, {d->V, d->D}};
    for (int i = 0; d->invariant && i < 5; i++) {
        int sp = cuda_plan_gemm_splits(nk[i][0], nk[i][1]);
        size_t rows = i == 4 ? (size_t)d->R : T, need = sp > 1 ? sp * rows * nk[i][0] : 0;
        g = need > g ? need : g;
    }
    a->gws = bump(&off, g * sizeof(float));
    a->total = off;
}

size_t cuda_plan_kv_block_bytes(const cuda_dims *d)
{
    return (size_t)d->L * 2 * d->KVl * d->block_size * d->hd * 2;
}

/* ---- KV pool -------------------------------------------------------------- */

int cuda_plan_kv(const cuda_kv_in *in, int *num_blocks, inf_err *err)
{
    *num_blocks = 0;
    if (in->block_bytes == 0 || in->block_size < 1 || in->max_ctx < 1)
        return inf_fail(err, INF_ERR_INVALID, "cuda: bad KV block size");
    int need = cdiv(in->max_ctx, in->block_size) + 1; /* one sequence + null block */
    size_t free_kv = in->free > in->reserve ? in->free - in->reserve : 0;
    if (in->num_blocks > 0) {
        if (in->num_blocks < 2)
            return inf_fail(err, INF_ERR_INVALID, "cuda: num_blocks %d (need >= 2)",
                            in->num_blocks);
        double want = (double)in->num_blocks * (double)in->block_bytes;
        if (want > (double)free_kv)
            return inf_fail(err, INF_ERR_NOMEM,
                            "cuda: %d KV blocks need %.1f MiB, but only %.1f MiB are free "
                            "(device %.1f MiB; weights %.1f MiB, activations %.1f MiB, "
                            "%.1f MiB kept free)",
                            in->num_blocks, MIB(want), MIB(free_kv), MIB(in->total),
                            MIB(in->weights), MIB(in->acts), MIB(in->reserve));
        *num_blocks = in->num_blocks;
        return INF_OK;
    }
    if (!(in->util > 0.0 && in->util <= 1.0))
        return inf_fail(err, INF_ERR_INVALID,
                        "cuda: gpu_memory_utilization must be in (0, 1], got %g", in->util);
    size_t used = in->total > in->free ? in->total - in->free : 0;
    double budget = in->util * (double)in->total - (double)used - (double)in->reserve;
    if (budget > (double)free_kv) /* util 1 with rounding: never more than is free */
        budget = (double)free_kv;
    double one = (double)need * (double)in->block_bytes;
    if (budget < one)
        return inf_fail(err, INF_ERR_NOMEM,
                        "cuda: gpu_memory_utilization %g allows %.1f MiB of the %.1f MiB "
                        "device; %.1f MiB are in use (weights %.1f MiB, activations %.1f MiB, "
                        "the CUDA context and anything else on the device) and %.1f MiB "
                        "are kept free, which leaves %.1f MiB for the KV cache, but one "
                        "sequence of %d tokens needs %.1f MiB (%d blocks of %.3f MiB); "
                        "raise gpu_memory_utilization, shorten max_model_len or add GPUs",
                        in->util, MIB(in->util * (double)in->total), MIB(in->total),
                        MIB(used), MIB(in->weights), MIB(in->acts), MIB(in->reserve),
                        budget > 0 ? MIB(budget) : 0.0, in->max_ctx, MIB(one), need,
                        MIB(in->block_bytes));
    double n = budget / (double)in->block_bytes;
    int cap = INT_MAX / in->block_size; /* slot numbers are int32 */
    *num_blocks = n >= (double)cap ? cap : (int)n;
    return INF_OK;
}

/* ---- CUDA-graph buckets ------------------------------------------------- */

int cuda_plan_buckets(int max_seqs, int *out, int cap)
{
    int top = imin(max_seqs, CUDA_BUCKET_CAP), n = 0;
    if (top < 1 || cap < 1)
        return 0;
    for (int b = 1; b <= top && n < cap; b = b < 8 ? 2 * b : b + 8)
        out[n++] = b;
    if (out[n - 1] != top) {
        if (n == cap)
            n--;
        out[n++] = top;
    }
    return n;
}

int cuda_plan_bucket(const int *buckets, int nb, int n)
{
    for (int i = 0; i < nb; i++)
        if (buckets[i] >= n)
            return i;
    return -1;
}

/* ---- one step's metadata ------------------------------------------------ */

int cuda_plan_is_decode(const be_batch *b)
{
    if (b->n_seqs != b->n_tokens || b->n_logits != b->n_tokens)
        return 0;
    for (int s = 0; s <= b->n_seqs; s++)
        if (b->seq_start[s] != s)
            return 0;
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] != i)
            return 0;
    return 1;
}

/* Tiles of sequence s's tokens [t0, t1), tile_tokens at a time, from entry n
 * of tiles ([seq, first token, count] each); returns the new count. */
static int add_tiles(const cuda_dims *d, int32_t *tiles, int n, int s, int t0, int t1)
{
    for (int t = t0; t < t1; t += d->tile_tokens, n++) {
        tiles[3 * n] = s;
        tiles[3 * n + 1] = t;
        tiles[3 * n + 2] = imin(d->tile_tokens, t1 - t);
    }
    return n;
}

void cuda_plan_batch(const cuda_dims *d, const cuda_mlayout *m, const be_batch *b, int bucket,
                     const cuda_smp_row *smp, const void *dev_meta, void *stage, cuda_step *st)
{
    char *base = stage;
    int32_t *tok = (int32_t *)(base + m->tokens), *pos = (int32_t *)(base + m->positions);
    int32_t *slot = (int32_t *)(base + m->slots), *seq = (int32_t *)(base + m->tok_seq);
    int32_t *table = (int32_t *)(base + m->table);
    int32_t *rows = (int32_t *)(base + m->rows), *dec = (int32_t *)(base + m->dec);
    int32_t *tiles = (int32_t *)(base + m->tiles);
    cuda_smp_row *srow = (cuda_smp_row *)(base + m->smp);
    int n = b->n_tokens, T = bucket > 0 ? bucket : n;
    size_t I = sizeof(int32_t);

    memcpy(tok, b->tokens, (size_t)n * I);
    memcpy(pos, b->positions, (size_t)n * I);
    memcpy(slot, b->slots, (size_t)n * I);
    memcpy(rows, b->logit_rows, (size_t)b->n_logits * I);
    int cols = imin(b->max_blocks, d->MB), n_dec = 0, n_tiles = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int t0 = b->seq_start[s], t1 = b->seq_start[s + 1];
        for (int t = t0; t < t1; t++)
            seq[t] = s;
        int32_t *row = table + (size_t)s * d->MB;
        memcpy(row, b->block_table + (size_t)s * b->max_blocks, (size_t)cols * I);
        memset(row + cols, 0, (size_t)(d->MB - cols) * I);
        if (t1 - t0 == 1 || d->invariant) {
            for (int t = t0; t < t1; t++)
                dec[n_dec++] = t;
            if (!d->attn_mma)
                continue;
        }
        n_tiles = add_tiles(d, tiles, n_tiles, s, t0, t1);
    }
    /* padding rows: their own one-token sequences on the null block */
    for (int t = n, s = b->n_seqs; t < T; t++, s++) {
        tok[t] = 0;
        pos[t] = 0;
        slot[t] = 0;
        seq[t] = s;
        memset(table + (size_t)s * d->MB, 0, (size_t)d->MB * I);
        dec[n_dec++] = t;
        if (d->attn_mma)
            n_tiles = add_tiles(d, tiles, n_tiles, s, t, t + 1);
    }
    int n_rows = bucket > 0 ? T : b->n_logits;
    int n_masks = 0;
    size_t mw = m->mask_words, mb = mw * sizeof(uint32_t);
    for (int r = 0; smp && r < b->n_logits; r++) {
        srow[r] = smp[r];
        if (!smp[r].mask)
            continue;
        /* the device reads the copy; the kernel's pointer is its address */
        memcpy(base + m->masks + (size_t)n_masks * mb, smp[r].mask, mb);
        srow[r].mask = (const uint32_t *)((uintptr_t)dev_meta + m->masks +
                                          (size_t)n_masks * mb);
        n_masks++;
    }
    st->T = T;
    st->n_dec = n_dec;
    st->n_tiles = n_tiles;
    st->n_rows = n_rows;
    st->n_out = b->n_logits;
    int n_seqs = b->n_seqs + (T - n); /* padding rows are sequences too */
    st->meta_bytes = m->table + (size_t)n_seqs * (size_t)d->MB * sizeof(int32_t);
    st->bucket = bucket;
    st->sample = smp != NULL;
    st->n_masks = n_masks;
    st->mask_bytes = (size_t)n_masks * mb;
}

/* ---- weight conversion ---------------------------------------------------- */

void cuda_plan_to_bf16(const void *src, inf_dtype t, size_t n, uint16_t *dst)
{
    if (t == INF_BF16) {
        memcpy(dst, src, n * sizeof *dst);
    } else if (t == INF_F32) {
        const float *s = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = inf_f32_to_bf16(s[i]);
    } else { /* f16 -> f32 is exact, so one rounding */
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = inf_f32_to_bf16(inf_f16_to_f32(s[i]));
    }
}

void cuda_plan_to_f32(const void *src, inf_dtype t, size_t n, float *dst)
{
    if (t == INF_F32) {
        memcpy(dst, src, n * sizeof *dst);
    } else {
        const uint16_t *s = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = t == INF_BF16 ? inf_bf16_to_f32(s[i]) : inf_f16_to_f32(s[i]);
    }
}

void cuda_plan_pack(const cuda_piece *p, int64_t r0, int64_t nr, uint16_t *dst)
{
    const model_tensor *w = p->w;
    size_t es = inf_dtype_size(w->dtype);
    for (int64_t i = 0; i < nr; i++) {
        const char *src = (const char *)w->data +
                          ((size_t)(p->r0 + r0 + i) * (size_t)w->cols + (size_t)p->c0) * es;
        cuda_plan_to_bf16(src, w->dtype, (size_t)p->nc, dst + (size_t)i * (size_t)p->nc);
    }
}
