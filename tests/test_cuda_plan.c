/* The CUDA backend's host-side arithmetic (cuda/plan.c), which needs no GPU:
 * tensor-parallel shards and weight slices, arena layouts, the KV pool from
 * gpu_memory_utilization, CUDA-graph buckets, decode split-K, packing a batch
 * into kernel metadata, and bf16 conversion on upload. Built and run in every
 * build (no CUDA needed). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cuda/backend.h"
#include "cuda/plan.h"

/* A model of this shape (everything else zero). */
static model_config shape(int D, int F, int L, int H, int KV, int hd, int V)
{
    model_config c;
    memset(&c, 0, sizeof c);
    c.hidden_size = D;
    c.intermediate_size = F;
    c.n_layers = L;
    c.n_heads = H;
    c.n_kv_heads = KV;
    c.head_dim = hd;
    c.vocab_size = V;
    return c;
}

/* Mistral-7B's shape. */
static model_config mistral(void)
{
    model_config c = shape(4096, 14336, 32, 32, 8, 128, 32000);
    c.max_position_embeddings = 32768;
    return c;
}

/* cuda_plan_dims with these limits (max_logits: max_tokens). */
static int dims(const model_config *c, const cuda_shard *s, int T, int S, int ctx, int bs,
                cuda_dims *d, inf_err *err)
{
    cuda_limits lim = {.max_tokens = T, .max_seqs = S, .max_ctx = ctx, .block_size = bs};
    return cuda_plan_dims(c, s, &lim, d, err);
}

/* ---- shards ------------------------------------------------------------- */

/* tp=1 owns every head and unit. */
static void test_cuda_plan_shard_tp1_owns_everything(void **state)
{
    (void)state;
    model_config c = mistral();
    cuda_shard s;
    assert_int_equal(cuda_plan_shard(&c, 1, 0, &s, NULL), INF_OK);
    assert_int_equal(s.q_head0, 0);
    assert_int_equal(s.n_q_heads, 32);
    assert_int_equal(s.kv_head0, 0);
    assert_int_equal(s.n_kv_heads, 8);
    assert_int_equal(s.ff0, 0);
    assert_int_equal(s.n_ff, 14336);
}

/* Ranks own disjoint contiguous ranges that cover everything, and every
 * query head a rank owns reads a KV head the same rank owns. */
static void test_cuda_plan_shard_ranges_partition_and_keep_groups(void **state)
{
    (void)state;
    model_config c = mistral();
    int G = c.n_heads / c.n_kv_heads;
    for (int tp = 1; tp <= 8; tp *= 2) {
        int q = 0, kv = 0, ff = 0;
        for (int r = 0; r < tp; r++) {
            cuda_shard s;
            assert_int_equal(cuda_plan_shard(&c, tp, r, &s, NULL), INF_OK);
            assert_int_equal(s.q_head0, q);
            assert_int_equal(s.kv_head0, kv);
            assert_int_equal(s.ff0, ff);
            for (int h = s.q_head0; h < s.q_head0 + s.n_q_heads; h++) {
                assert_true(h / G >= s.kv_head0);
                assert_true(h / G < s.kv_head0 + s.n_kv_heads);
            }
            q += s.n_q_heads;
            kv += s.n_kv_heads;
            ff += s.n_ff;
        }
        assert_int_equal(q, c.n_heads);
        assert_int_equal(kv, c.n_kv_heads);
        assert_int_equal(ff, c.intermediate_size);
    }
}

/* Biases under tensor parallelism: each rank's vector [qkv + D] holds the
 * q, k and v bias elements of its own heads (the rows of its QKV slice, in
 * the same order), so over the ranks every q/k/v bias element lands exactly
 * once; the o bias is whole on rank 0 and zero elsewhere, so the sum over
 * ranks adds it once. An absent bias leaves zeros. */
static void test_cuda_plan_bias_pieces_shard(void **state)
{
    (void)state;
    enum { D = 64, H = 8, KV = 4, HD = 16 };
    model_config c = shape(D, 96, 1, H, KV, HD, 100);
    static float bq[H * HD], bk[KV * HD], bv[KV * HD], bo[D];
    for (int i = 0; i < H * HD; i++)
        bq[i] = 1000.0f + (float)i;
    for (int i = 0; i < KV * HD; i++) {
        bk[i] = 2000.0f + (float)i;
        bv[i] = 3000.0f + (float)i;
    }
    for (int i = 0; i < D; i++)
        bo[i] = 4000.0f + (float)i;
    model_layer ly;
    memset(&ly, 0, sizeof ly);
    ly.bq = (model_tensor){.dtype = INF_F32, .data = bq, .rows = H * HD, .cols = 1};
    ly.bk = (model_tensor){.dtype = INF_F32, .data = bk, .rows = KV * HD, .cols = 1};
    ly.bv = (model_tensor){.dtype = INF_F32, .data = bv, .rows = KV * HD, .cols = 1};
    ly.bo = (model_tensor){.dtype = INF_F32, .data = bo, .rows = D, .cols = 1};
    const int tps[] = {1, 2, 4};
    for (int ti = 0; ti < 3; ti++) {
        int tp = tps[ti];
        int seen_q[H * HD] = {0}, seen_k[KV * HD] = {0}, seen_v[KV * HD] = {0};
        double o_sum[D] = {0};
        for (int r = 0; r < tp; r++) {
            cuda_shard sh;
            assert_int_equal(cuda_plan_shard(&c, tp, r, &sh, NULL), INF_OK);
            int nq = sh.n_q_heads * HD, nkv = sh.n_kv_heads * HD, n = nq + 2 * nkv + D;
            float vec[H * HD + 2 * KV * HD + D];
            memset(vec, 0, sizeof vec);
            cuda_bias_piece p[4];
            cuda_plan_bias_pieces(&ly, &c, &sh, p);
            for (int i = 0; i < 4; i++) { /* inside the vector, no overlap */
                if (!p[i].t)
                    continue;
                assert_true(p[i].dst0 >= 0 && p[i].dst0 + p[i].n <= n);
                assert_true(p[i].src0 >= 0 && p[i].src0 + p[i].n <= p[i].t->rows);
                for (int64_t j = 0; j < p[i].n; j++)
                    vec[p[i].dst0 + j] = ((const float *)p[i].t->data)[p[i].src0 + j];
            }
            /* q rows of this rank's heads, then k, then v: as the QKV slice */
            for (int j = 0; j < nq; j++) {
                int g = sh.q_head0 * HD + j;
                assert_true(vec[j] == bq[g]);
                seen_q[g]++;
            }
            for (int j = 0; j < nkv; j++) {
                int g = sh.kv_head0 * HD + j;
                assert_true(vec[nq + j] == bk[g]);
                assert_true(vec[nq + nkv + j] == bv[g]);
                seen_k[g]++;
                seen_v[g]++;
            }
            for (int j = 0; j < D; j++) {
                assert_true(vec[nq + 2 * nkv + j] == (r == 0 ? bo[j] : 0.0f));
                o_sum[j] += vec[nq + 2 * nkv + j];
            }
        }
        for (int i = 0; i < H * HD; i++)
            assert_int_equal(seen_q[i], 1);
        for (int i = 0; i < KV * HD; i++) {
            assert_int_equal(seen_k[i], 1);
            assert_int_equal(seen_v[i], 1);
        }
        for (int j = 0; j < D; j++)
            assert_true(o_sum[j] == bo[j]);
    }
    /* absent biases: no piece, zeros stay */
    ly.bk.data = NULL;
    ly.bo.data = NULL;
    cuda_shard sh;
    assert_int_equal(cuda_plan_shard(&c, 2, 0, &sh, NULL), INF_OK);
    cuda_bias_piece p[4];
    cuda_plan_bias_pieces(&ly, &c, &sh, p);
    assert_non_null(p[0].t);
    assert_null(p[1].t);
    assert_non_null(p[2].t);
    assert_null(p[3].t);
}

/* A tp that does not divide the heads is refused with the sizes named; a
 * rank outside [0, tp) is a caller error. */
static void test_cuda_plan_shard_refuses_indivisible(void **state)
{
    (void)state;
    model_config c = mistral();
    cuda_shard s;
    inf_err err = {0};
    assert_int_equal(cuda_plan_shard(&c, 3, 0, &s, &err), INF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "tensor_parallel_size 3"));
    assert_non_null(strstr(err.msg, "(8)"));
    c.n_kv_heads = 4;
    assert_int_equal(cuda_plan_shard(&c, 8, 0, &s, &err), INF_ERR_UNSUPPORTED);
    assert_int_equal(cuda_plan_shard(&c, 2, 2, &s, &err), INF_ERR_INVALID);
    assert_int_equal(cuda_plan_shard(&c, 0, 0, &s, &err), INF_ERR_INVALID);
}

static model_tensor tensor(int64_t rows, int64_t cols)
{
    model_tensor t = {.dtype = INF_F32, .data = NULL, .rows = rows, .cols = cols, .name = ""};
    return t;
}

/* Over all ranks, the slices of the four fused matrices cover every element
 * of wq, wk, wv, wo, w_gate, w_up and w_down exactly once, and each fused
 * matrix has the rows and width the weight layout gives it. */
static void test_cuda_plan_pieces_cover_every_weight_once(void **state)
{
    (void)state;
    int D = 24, H = 8, KV = 4, hd = 6, F = 40;
    model_config c = shape(D, F, 1, H, KV, hd, 10);
    model_layer w = {
        .wq = tensor(H * hd, D), .wk = tensor(KV * hd, D), .wv = tensor(KV * hd, D),
        .wo = tensor(D, H * hd), .w_gate = tensor(F, D), .w_up = tensor(F, D),
        .w_down = tensor(D, F),
    };
    const model_tensor *all[7] = {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down};
    for (int tp = 1; tp <= 4; tp *= 2) {
        int *count[7];
        for (int i = 0; i < 7; i++)
            count[i] = calloc((size_t)(all[i]->rows * all[i]->cols), sizeof(int));
        for (int r = 0; r < tp; r++) {
            cuda_shard s;
            cuda_dims d;
            cuda_wlayout wl;
            assert_int_equal(cuda_plan_shard(&c, tp, r, &s, NULL), INF_OK);
            assert_int_equal(dims(&c, &s, 64, 8, 128, 16, &d, NULL), INF_OK);
            cuda_plan_weights(&d, 0, &wl);
            for (int which = 0; which < CUDA_W_COUNT; which++) {
                cuda_piece p[3];
                int n = cuda_plan_pieces(&w, &c, &s, which, p);
                int64_t rows = 0;
                for (int i = 0; i < n; i++) {
                    assert_int_equal(p[i].nc, (int64_t)wl.w_cols[which]);
                    rows += p[i].nr;
                    int ti = 0;
                    while (all[ti] != p[i].w)
                        ti++;
                    for (int64_t y = p[i].r0; y < p[i].r0 + p[i].nr; y++)
                        for (int64_t x = p[i].c0; x < p[i].c0 + p[i].nc; x++)
                            count[ti][y * all[ti]->cols + x]++;
                }
                assert_int_equal(rows, (int64_t)wl.w_rows[which]);
            }
        }
        for (int i = 0; i < 7; i++) {
            for (int64_t e = 0; e < all[i]->rows * all[i]->cols; e++)
                assert_int_equal(count[i][e], 1);
            free(count[i]);
        }
    }
}

/* ---- dims and layouts ----------------------------------------------------- */

/* Shapes the kernels cannot run are refused up front; limits derive as
 * documented (S <= R <= T, MB = ceil(ctx / bs), tiles of 32 / G tokens). */
static void test_cuda_plan_dims_limits(void **state)
{
    (void)state;
    model_config c = mistral();
    cuda_shard s;
    cuda_dims d;
    inf_err err = {0};
    cuda_plan_shard(&c, 1, 0, &s, NULL);
    assert_int_equal(dims(&c, &s, 100, 256, 1000, 16, &d, NULL), INF_OK);
    assert_int_equal(d.S, 100);
    assert_int_equal(d.MB, 63);
    assert_int_equal(d.G, 4);
    assert_int_equal(d.tile_tokens, 8);
    assert_int_equal(d.qkv, (32 + 16) * 128);
    assert_int_equal(d.lm_head, 1);
    assert_int_equal(d.R, 100); /* logit rows: max_tokens by default */
    cuda_limits lim = {.max_tokens = 100, .max_seqs = 40, .max_ctx = 1000, .block_size = 16,
                       .max_logits = 10};
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, NULL), INF_OK);
    assert_int_equal(d.R, 40); /* never fewer than a full decode step's rows */
    lim.max_logits = 64;
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, NULL), INF_OK);
    assert_int_equal(d.R, 64);
    lim.max_logits = 5000;
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, NULL), INF_OK);
    assert_int_equal(d.R, 100);
    /* batch-invariant: every token on the decode list; the tensor-core
     * attention's tiles of 16 / G tokens where head_dim is a multiple of 8 */
    lim.invariant = 1;
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, NULL), INF_OK);
    assert_true(d.invariant && d.attn_mma);
    assert_int_equal(d.n_dec_max, 100);
    assert_int_equal(d.tile_tokens, 4);
    c.head_dim = 12;
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, NULL), INF_OK);
    assert_false(d.attn_mma); /* the split-K kernel for every token instead */
    assert_int_equal(d.n_dec_max, 100);
    c.head_dim = 7;
    assert_int_equal(dims(&c, &s, 100, 256, 1000, 16, &d, &err), INF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "head_dim 7"));
    c.head_dim = 258;
    assert_int_equal(dims(&c, &s, 100, 256, 1000, 16, &d, &err), INF_ERR_UNSUPPORTED);
    c.head_dim = 128;
    c.n_heads = 64;
    c.n_kv_heads = 1;
    s.n_q_heads = 64;
    s.n_kv_heads = 1;
    assert_int_equal(dims(&c, &s, 100, 256, 1000, 16, &d, &err), INF_ERR_UNSUPPORTED);
    c = mistral();
    assert_int_equal(dims(&c, &s, 0, 256, 1000, 16, &d, &err), INF_ERR_INVALID);
}

/* What cuda_backend_create would otherwise find only later is refused here,
 * each with the value named: heads that do not group over the KV heads,
 * more tokens than a grid's y extent, a negative num_blocks. */
static void test_cuda_plan_dims_refusals_say_why(void **state)
{
    (void)state;
    model_config c = mistral();
    cuda_shard s;
    cuda_dims d;
    inf_err err = {0};
    cuda_plan_shard(&c, 1, 0, &s, NULL);
    cuda_limits lim = {.max_tokens = 100, .max_seqs = 8, .max_ctx = 1000, .block_size = 16};
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, &err), INF_OK);
    c.n_heads = 12; /* 12 query heads over 8 KV heads */
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, &err), INF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "12 heads do not group over 8 KV heads"));
    c = mistral();
    lim.max_tokens = CUDA_MAX_TOKENS;
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, &err), INF_OK);
    lim.max_tokens = CUDA_MAX_TOKENS + 1;
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, &err), INF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_tokens 65536 (1..65535)"));
    lim.max_tokens = 100;
    lim.num_blocks = -1;
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, &err), INF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "num_blocks -1"));
}

/* Every context n <= max_ctx is cut into splits that tile [0, n) exactly,
 * at most max_splits of them (<= CUDA_SPLIT_MAX), each chunk a multiple of
 * 64 and at least CUDA_SPLIT_MIN. */
static void test_cuda_plan_splitk_partitions_every_context(void **state)
{
    (void)state;
    const int ctxs[] = {1, 17, 256, 257, 2048, 4096, 8191, 32768, 131072};
    for (size_t i = 0; i < sizeof ctxs / sizeof ctxs[0]; i++) {
        int chunk, ms, max_ctx = ctxs[i];
        cuda_plan_splitk(max_ctx, &chunk, &ms);
        assert_true(chunk >= CUDA_SPLIT_MIN);
        assert_int_equal(chunk % 64, 0);
        assert_true(ms >= 1 && ms <= CUDA_SPLIT_MAX);
        for (int n = 1; n <= max_ctx; n += 1 + n / 7) {
            int ns = cuda_plan_n_splits(chunk, n), covered = 0;
            assert_true(ns >= 1 && ns <= ms);
            for (int s = 0; s < ns; s++) {
                int p0 = s * chunk, p1 = p0 + chunk < n ? p0 + chunk : n;
                assert_int_equal(p0, covered);
                assert_true(p1 > p0);
                covered = p1;
            }
            assert_int_equal(covered, n);
        }
    }
}

typedef struct span {
    size_t at, len;
} span;

/* Spans are CUDA_ALIGN-aligned, pairwise disjoint and inside total. */
static void assert_layout(const span *s, int n, size_t total)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(s[i].at % CUDA_ALIGN, 0);
        assert_true(s[i].at + s[i].len <= total);
        for (int j = 0; j < i; j++)
            assert_true(s[i].len == 0 || s[j].len == 0 || s[i].at >= s[j].at + s[j].len ||
                        s[j].at >= s[i].at + s[i].len);
    }
}

/* Weight arena: aligned, disjoint, tied LM head shares the embedding, a
 * rank without the LM head holds none, and stream_bytes is what a decode
 * step reads (the 7B figure: 14.5 GB with the LM head). */
static void test_cuda_plan_weights_layout(void **state)
{
    (void)state;
    model_config c = mistral();
    cuda_shard s;
    cuda_dims d;
    cuda_wlayout w;
    cuda_plan_shard(&c, 1, 0, &s, NULL);
    dims(&c, &s, 512, 64, 4096, 16, &d, NULL);
    cuda_plan_weights(&d, 0, &w);
    size_t V = 32000, D = 4096, F = 14336;
    span sp[4 + 2 * 32 + 4 * 32];
    int n = 0;
    sp[n++] = (span){w.embed, V * D * 2};
    sp[n++] = (span){w.lm_head, V * D * 2};
    sp[n++] = (span){w.norm, D * 4};
    sp[n++] = (span){w.rope, 4 * 64 * 8};
    for (int l = 0; l < 32; l++) {
        size_t base = w.layer0 + (size_t)l * w.layer_stride;
        sp[n++] = (span){base + w.attn_norm, D * 4};
        sp[n++] = (span){base + w.ffn_norm, D * 4};
        for (int m = 0; m < CUDA_W_COUNT; m++)
            sp[n++] = (span){base + w.w[m], w.w_rows[m] * w.w_cols[m] * 2};
    }
    assert_layout(sp, n, w.total);
    size_t per_layer = (D * 6144 + D * D + 2 * F * D + D * F) * 2;
    assert_int_equal(w.stream_bytes, 32 * per_layer + V * D * 2);
    assert_int_equal(w.w_rows[CUDA_W_QKV], 6144);
    assert_int_equal(w.w_rows[CUDA_W_GU], 2 * F);

    cuda_wlayout tied;
    cuda_plan_weights(&d, 1, &tied);
    assert_int_equal(tied.lm_head, tied.embed);
    assert_true(tied.total < w.total);

    cuda_shard s1;
    cuda_dims d1;
    cuda_wlayout w1;
    cuda_plan_shard(&c, 2, 1, &s1, NULL);
    dims(&c, &s1, 512, 64, 4096, 16, &d1, NULL);
    cuda_plan_weights(&d1, 0, &w1);
    assert_int_equal(d1.lm_head, 0);
    assert_int_equal(w1.stream_bytes, 32 * per_layer / 2);
}

/* Quantized layer matrices (cuda/kern.h): int8 rows of K rounded up to 32
 * bytes with an f32 scale each, int4 groups of 16 bytes with an f16 scale
 * each; disjoint and aligned, a quarter and an eighth (plus scales) of the
 * bf16 stream; the activation arena gains the quantized input rows. Refused
 * over several ranks, and for K of 65,536 or more (int32 sums). */
static void test_cuda_plan_quantized_layout(void **state)
{
    (void)state;
    model_config c = shape(4096, 14336, 2, 32, 8, 128, 32000);
    c.max_position_embeddings = 4096;
    c.intermediate_size = 14330; /* K not a multiple of 32 for down */
    cuda_shard s;
    cuda_plan_shard(&c, 1, 0, &s, NULL);
    size_t D = 4096, F = 14330, Fp = 14336, V = 32000;
    for (int quant = CUDA_QUANT_INT8; quant <= CUDA_QUANT_INT4; quant++) {
        cuda_limits lim = {.max_tokens = 300, .max_seqs = 8, .max_ctx = 1000, .block_size = 16,
                           .quant = quant};
        cuda_dims d;
        assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, NULL), INF_OK);
        assert_int_equal(d.ldq, (int)Fp);
        cuda_wlayout w;
        cuda_plan_weights(&d, 0, &w);
        size_t K[4] = {D, D, D, F}, N[4] = {6144, D, 2 * F, D}, mats = 0;
        span sp[4 + 2 * 4 * 2];
        int n = 0;
        sp[n++] = (span){w.embed, V * D * 2};
        sp[n++] = (span){w.lm_head, V * D * 2};
        sp[n++] = (span){w.norm, D * 4};
        sp[n++] = (span){w.rope, 4 * 64 * 8};
        for (int l = 0; l < 2; l++)
            for (int m = 0; m < CUDA_W_COUNT; m++) {
                size_t base = w.layer0 + (size_t)l * w.layer_stride, b, sb;
                assert_int_equal(w.w_rows[m], N[m]);
                if (quant == CUDA_QUANT_INT8) {
                    assert_int_equal(w.w_ld[m], (K[m] + 31) / 32 * 32);
                    b = N[m] * w.w_ld[m];
                    sb = N[m] * 4;
                } else {
                    assert_int_equal(w.w_ld[m], (K[m] + 31) / 32);
                    b = N[m] * w.w_ld[m] * 16;
                    sb = N[m] * w.w_ld[m] * 2;
                }
                sp[n++] = (span){base + w.w[m], b};
                sp[n++] = (span){base + w.w_scale[m], sb};
                mats += l == 0 ? b + sb : 0;
            }
        assert_layout(sp, n, w.total);
        assert_int_equal(w.stream_bytes, 2 * mats + V * D * 2);
        cuda_mlayout ml;
        cuda_alayout a;
        cuda_plan_meta(&d, &ml);
        cuda_plan_acts(&d, &ml, &a);
        span as[] = {{a.xq, 300 * Fp}, {a.sx, 300 * 4}, {a.fin, 300 * D * 2}, {a.ids, 300 * 4}};
        assert_layout(as, 4, a.total);
    }
    inf_err err = {0};
    cuda_dims d;
    cuda_limits lim = {.max_tokens = 300, .max_seqs = 8, .max_ctx = 1000, .block_size = 16,
                       .quant = CUDA_QUANT_INT4};
    cuda_plan_shard(&c, 2, 0, &s, NULL);
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, &err), INF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "--quantization int4 runs on one GPU"));
    c.intermediate_size = 65536;
    cuda_plan_shard(&c, 1, 0, &s, NULL);
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, &err), INF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "K below 65536, and this model has 65536"));
}

/* Activation and metadata arenas: aligned, disjoint, sized from T, S, MB;
 * block tables last in the metadata. */
static void test_cuda_plan_acts_and_meta_layout(void **state)
{
    (void)state;
    model_config c = mistral();
    cuda_shard s;
    cuda_dims d;
    cuda_mlayout m;
    cuda_alayout a;
    cuda_plan_shard(&c, 1, 0, &s, NULL);
    dims(&c, &s, 300, 40, 1000, 16, &d, NULL);
    cuda_plan_meta(&d, &m);
    size_t T = 300, S = 40;
    span ms[] = {{m.tokens, T * 4}, {m.positions, T * 4}, {m.slots, T * 4}, {m.tok_seq, T * 4},
                 {m.table, S * 63 * 4}, {m.rows, T * 4}, {m.dec, S * 4},
                 {m.tiles, 3 * T * 4}, {m.smp, T * sizeof(cuda_smp_row)},
                 {m.masks, T * 1000 * 4}};
    assert_int_equal(m.mask_words, 1000); /* 32000 tokens */
    assert_layout(ms, (int)(sizeof ms / sizeof ms[0]), m.total);
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) /* then the tables, then masks */
        assert_true(ms[i].at >= m.table || ms[i].at + ms[i].len <= m.table);
    assert_true(m.table + S * 63 * 4 <= m.masks);
    cuda_plan_acts(&d, &m, &a);
    size_t D = 4096;
    span as[] = {{a.meta, m.total}, {a.x, T * D * 4}, {a.xn, T * D * 2},
                 {a.qkv, T * 6144 * 4}, {a.att, T * D * 2}, {a.delta, T * D * 4},
                 {a.gu, T * 2 * 14336 * 4}, {a.act, T * 14336 * 2}, {a.fin, T * D * 2},
                 {a.logits, T * 32000 * 4},
                 {a.part, S * 8 * (size_t)d.max_splits * 4 * 130 * 4},
                 {a.ids, T * 4}, {a.ws, CUDA_BLAS_WORKSPACE}};
    assert_layout(as, (int)(sizeof as / sizeof as[0]), a.total);
    assert_int_equal(a.total, a.gws); /* cuBLAS mode: no K-range workspace */
    assert_int_equal(cuda_plan_kv_block_bytes(&d), (size_t)32 * 2 * 8 * 16 * 128 * 2);

    /* batch-invariant, 2048 tokens: the K-range workspace (last) holds the
     * widest split GEMM, down (N 4096, K 14336: 4 ranges); qkv and o take 2
     * ranges, gate/up and the LM head (N >= 16384) one: 134 MB */
    cuda_limits lim = {.max_tokens = 2048, .max_seqs = 40, .max_ctx = 1000, .block_size = 16,
                       .invariant = 1};
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, NULL), INF_OK);
    cuda_plan_meta(&d, &m);
    cuda_plan_acts(&d, &m, &a);
    assert_int_equal(a.total - a.gws, (size_t)4 * 2048 * 4096 * 4);
}

/* ---- KV pool ----------------------------------------------------------------- */

#define GIB ((size_t)1 << 30)
#define MIB_ ((size_t)1 << 20)

/* Worked example: an 80 GiB device with 20 GiB in use after weights and
 * activations, utilization 0.9 and 256 MiB kept free leaves 51.75 GiB: 26496
 * blocks of 2 MiB (Mistral-7B, 16 tokens a block). */
static void test_cuda_plan_kv_worked_example(void **state)
{
    (void)state;
    cuda_kv_in in = {.total = 80 * GIB, .free = 60 * GIB, .util = 0.9,
                     .block_bytes = 2 * MIB_, .reserve = 256 * MIB_, .weights = 14 * GIB,
                     .acts = 2 * GIB, .block_size = 16, .max_ctx = 32768};
    int n = 0;
    assert_int_equal(cuda_plan_kv(&in, &n, NULL), INF_OK);
    assert_int_equal(n, (int)((0.9 * 80 * 1024 - 20 * 1024 - 256) / 2));
    /* utilization 1 never takes more than is free minus the reserve */
    in.util = 1.0;
    assert_int_equal(cuda_plan_kv(&in, &n, NULL), INF_OK);
    assert_int_equal(n, (int)((60 * 1024 - 256) / 2));
    /* slot numbers stay int32 however large the device */
    in.block_bytes = 1;
    in.total = in.free = (size_t)1 << 40;
    assert_int_equal(cuda_plan_kv(&in, &n, NULL), INF_OK);
    assert_int_equal(n, 0x7fffffff / 16);
}

/* Too little room for one sequence: INF_ERR_NOMEM naming the utilization
 * and every size; a bad utilization is a caller error. */
static void test_cuda_plan_kv_too_small_says_why(void **state)
{
    (void)state;
    cuda_kv_in in = {.total = 80 * GIB, .free = 10 * GIB, .util = 0.9,
                     .block_bytes = 2 * MIB_, .reserve = 256 * MIB_, .weights = 60 * GIB,
                     .acts = 8 * GIB, .block_size = 16, .max_ctx = 32768};
    int n = 0;
    inf_err err = {0};
    assert_int_equal(cuda_plan_kv(&in, &n, &err), INF_ERR_NOMEM);
    assert_int_equal(n, 0);
    assert_non_null(strstr(err.msg, "gpu_memory_utilization 0.9 "));
    assert_non_null(strstr(err.msg, "81920.0 MiB"));
    assert_non_null(strstr(err.msg, "weights 61440.0 MiB"));
    assert_non_null(strstr(err.msg, "32768 tokens"));
    in.util = 0.0;
    assert_int_equal(cuda_plan_kv(&in, &n, &err), INF_ERR_INVALID);
    in.util = 1.5;
    assert_int_equal(cuda_plan_kv(&in, &n, &err), INF_ERR_INVALID);
}

/* A fixed num_blocks is taken as is when it fits, refused when it does not. */
static void test_cuda_plan_kv_fixed_blocks(void **state)
{
    (void)state;
    cuda_kv_in in = {.total = 16 * GIB, .free = 4 * GIB, .util = 0.5, .block_bytes = MIB_,
                     .reserve = 256 * MIB_, .block_size = 16, .max_ctx = 512,
                     .num_blocks = 100};
    int n = 0;
    inf_err err = {0};
    assert_int_equal(cuda_plan_kv(&in, &n, &err), INF_OK);
    assert_int_equal(n, 100);
    in.num_blocks = 4000;
    assert_int_equal(cuda_plan_kv(&in, &n, &err), INF_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "4000 KV blocks"));
    in.num_blocks = 1;
    assert_int_equal(cuda_plan_kv(&in, &n, &err), INF_ERR_INVALID);
}

/* ---- graph buckets ------------------------------------------------------------ */

/* 1, 2, 4, then multiples of 8, ending exactly at max_seqs (capped at
 * CUDA_BUCKET_CAP); the lookup takes the smallest bucket that fits. */
static void test_cuda_plan_buckets(void **state)
{
    (void)state;
    int b[CUDA_MAX_BUCKETS];
    int n = cuda_plan_buckets(256, b, CUDA_MAX_BUCKETS);
    assert_int_equal(n, 3 + 32);
    assert_int_equal(b[0], 1);
    assert_int_equal(b[1], 2);
    assert_int_equal(b[2], 4);
    assert_int_equal(b[3], 8);
    assert_int_equal(b[4], 16);
    assert_int_equal(b[n - 1], 256);
    assert_int_equal(b[cuda_plan_bucket(b, n, 3)], 4);
    assert_int_equal(b[cuda_plan_bucket(b, n, 9)], 16);
    assert_int_equal(b[cuda_plan_bucket(b, n, 64)], 64);
    assert_int_equal(cuda_plan_bucket(b, n, 257), -1);

    n = cuda_plan_buckets(5, b, CUDA_MAX_BUCKETS);
    assert_int_equal(n, 4);
    assert_int_equal(b[3], 5);
    n = cuda_plan_buckets(1, b, CUDA_MAX_BUCKETS);
    assert_int_equal(n, 1);
    assert_int_equal(b[0], 1);
    n = cuda_plan_buckets(20, b, CUDA_MAX_BUCKETS);
    assert_int_equal(b[n - 1], 20);
    assert_int_equal(b[n - 2], 16);
    n = cuda_plan_buckets(100000, b, CUDA_MAX_BUCKETS);
    assert_true(n <= CUDA_MAX_BUCKETS);
    assert_int_equal(b[n - 1], CUDA_BUCKET_CAP);
    for (int i = 1; i < n; i++)
        assert_true(b[i] > b[i - 1]);
    n = cuda_plan_buckets(64, b, 3); /* a short array still ends at the top */
    assert_int_equal(n, 3);
    assert_int_equal(b[2], 64);
}

/* ---- batch packing ------------------------------------------------------------- */

static cuda_dims small_dims(int T, int S, int ctx, int bs, int G)
{
    model_config c = shape(64, 96, 2, 4 * G, 4, 16, 100);
    cuda_shard s;
    cuda_dims d;
    assert_int_equal(cuda_plan_shard(&c, 1, 0, &s, NULL), INF_OK);
    assert_int_equal(dims(&c, &s, T, S, ctx, bs, &d, NULL), INF_OK);
    return d;
}

/* small_dims's model and step (T 64, S 8, context 128, G 2), batch-invariant,
 * with head_dim hd: cuda_plan_dims derives the rest. */
static cuda_dims inv_dims(int hd)
{
    model_config c = shape(64, 96, 2, 8, 4, hd, 100);
    cuda_shard s;
    cuda_dims d;
    cuda_limits lim = {.max_tokens = 64, .max_seqs = 8, .max_ctx = 128, .block_size = 16,
                       .invariant = 1};
    assert_int_equal(cuda_plan_shard(&c, 1, 0, &s, NULL), INF_OK);
    assert_int_equal(cuda_plan_dims(&c, &s, &lim, &d, NULL), INF_OK);
    return d;
}

#define I32(stage, off) ((int32_t *)((char *)(stage) + (off)))

/* cuda_plan_batch into a fresh stage of m->total bytes, filled with 0x55 so
 * that what the plan leaves unwritten shows; the caller frees it. */
static void *plan_staged(const cuda_dims *d, const cuda_mlayout *m, const be_batch *b,
                         int bucket, const cuda_smp_row *smp, cuda_step *st)
{
    void *stage = malloc(m->total);
    assert_non_null(stage);
    memset(stage, 0x55, m->total);
    cuda_plan_batch(d, m, b, bucket, smp, NULL, stage, st);
    return stage;
}

/* The mixed step of the batch tests: a 40-token prompt (sequence 0), one
 * decode token at position 17 (sequence 1), a 5-token chunk after 10 tokens
 * of context (sequence 2). */
typedef struct mixed {
    int32_t tokens[46], pos[46], slots[46], start[4], len[3], table[9], rows[3];
    be_batch b;
} mixed;

static void mixed_init(mixed *x)
{
    for (int t = 0; t < 46; t++) {
        x->tokens[t] = t + 3;
        x->slots[t] = 16 + t;
        x->pos[t] = t < 40 ? t : t == 40 ? 17 : 10 + (t - 41);
    }
    const int32_t start[4] = {0, 40, 41, 46}, len[3] = {40, 18, 15};
    const int32_t table[9] = {1, 2, 3, 4, 5, 0, 6, 7, 0}, rows[3] = {39, 40, 45};
    memcpy(x->start, start, sizeof start);
    memcpy(x->len, len, sizeof len);
    memcpy(x->table, table, sizeof table);
    memcpy(x->rows, rows, sizeof rows);
    be_batch b = {.n_tokens = 46, .tokens = x->tokens, .positions = x->pos,
                  .slots = x->slots, .n_seqs = 3, .seq_start = x->start, .seq_len = x->len,
                  .block_table = x->table, .max_blocks = 3, .logit_rows = x->rows,
                  .n_logits = 3};
    x->b = b;
}

/* A mixed step: a 40-token prompt, one decode token and a 5-token chunk.
 * The decode token goes to the decode list; the others are cut into tiles
 * of 32 / G tokens in order; tables are re-strided to MB with zeros past
 * the batch's width; the token -> sequence map and logit rows are copied. */
static void test_cuda_plan_batch_mixed_step(void **state)
{
    (void)state;
    cuda_dims d = small_dims(64, 8, 128, 16, 2); /* tiles of 16 tokens, MB 8 */
    cuda_mlayout m;
    cuda_plan_meta(&d, &m);
    mixed x;
    mixed_init(&x);
    be_batch b = x.b;
    int32_t *tokens = x.tokens, *pos = x.pos, *slots = x.slots, *rows = x.rows;
    assert_false(cuda_plan_is_decode(&b));
    cuda_step st;
    void *stage = plan_staged(&d, &m, &b, 0, NULL, &st);
    assert_int_equal(st.T, 46);
    assert_int_equal(st.n_dec, 1);
    assert_int_equal(st.n_tiles, 4);
    assert_int_equal(st.n_rows, 3);
    assert_int_equal(st.n_out, 3);
    assert_int_equal(st.bucket, 0);
    assert_int_equal(st.sample, 0);
    assert_int_equal(st.meta_bytes, m.table + 3 * 8 * sizeof(int32_t)); /* table rows last */
    assert_true(st.meta_bytes <= m.total);
    assert_memory_equal(I32(stage, m.tokens), tokens, sizeof x.tokens);
    assert_memory_equal(I32(stage, m.positions), pos, sizeof x.pos);
    assert_memory_equal(I32(stage, m.slots), slots, sizeof x.slots);
    assert_memory_equal(I32(stage, m.rows), rows, sizeof x.rows);
    int32_t *seq = I32(stage, m.tok_seq);
    assert_int_equal(seq[0], 0);
    assert_int_equal(seq[39], 0);
    assert_int_equal(seq[40], 1);
    assert_int_equal(seq[45], 2);
    assert_int_equal(I32(stage, m.dec)[0], 40);
    int32_t want_tiles[4][3] = {{0, 0, 16}, {0, 16, 16}, {0, 32, 8}, {2, 41, 5}};
    assert_memory_equal(I32(stage, m.tiles), want_tiles, sizeof want_tiles);
    int32_t *tb = I32(stage, m.table);
    int32_t want_row1[8] = {4, 5, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(tb + 8, want_row1, sizeof want_row1);
    assert_int_equal(tb[0], 1);
    assert_int_equal(tb[2], 3);
    assert_int_equal(tb[3], 0);
    free(stage);
}

/* Batch-invariant: the same mixed step puts every token on the split-K list
 * (prompt chunks, the decode token and the second prompt alike), in order,
 * and makes no tiles; the list and the partials are sized for T tokens. */
static void test_cuda_plan_batch_invariant_all_split_k(void **state)
{
    (void)state;
    cuda_dims d = inv_dims(12); /* head_dim 12: the split-K fallback */
    assert_false(d.attn_mma);
    assert_int_equal(d.n_dec_max, d.T);
    cuda_mlayout m;
    cuda_plan_meta(&d, &m);
    cuda_alayout a;
    cuda_plan_acts(&d, &m, &a);
    assert_true(a.ids - a.part >= (size_t)d.T * d.KVl * d.max_splits * d.G * (d.hd + 2) * 4);
    mixed x;
    mixed_init(&x);
    be_batch b = x.b;
    const int32_t *start = x.start;
    cuda_step st;
    void *stage = plan_staged(&d, &m, &b, 0, NULL, &st);
    assert_int_equal(st.n_dec, 46);
    assert_int_equal(st.n_tiles, 0);
    for (int t = 0; t < 46; t++)
        assert_int_equal(I32(stage, m.dec)[t], t);
    /* head_dim 16, the tensor-core kernel: also tiles of 16 / G tokens of
     * each sequence (the metadata layout does not depend on head_dim) */
    d = inv_dims(16);
    assert_true(d.attn_mma);
    assert_int_equal(d.tile_tokens, 8);
    cuda_mlayout m16;
    cuda_plan_meta(&d, &m16);
    assert_memory_equal(&m16, &m, sizeof m);
    cuda_plan_batch(&d, &m, &b, 0, NULL, NULL, stage, &st);
    assert_int_equal(st.n_dec, 46);
    int32_t *tl = I32(stage, m.tiles), next = 0;
    for (int i = 0; i < st.n_tiles; i++) {
        int s_ = tl[3 * i], t0 = tl[3 * i + 1], nt = tl[3 * i + 2];
        assert_int_equal(t0, next); /* in order, every token once */
        assert_true(nt >= 1 && nt <= d.tile_tokens);
        assert_true(t0 >= start[s_] && t0 + nt <= start[s_ + 1]); /* one sequence */
        next = t0 + nt;
    }
    assert_int_equal(next, 46);
    free(stage);
}

/* K ranges of the batch-invariant GEMM: by the weight's shape alone. */
static void test_cuda_plan_gemm_splits(void **state)
{
    (void)state;
    assert_int_equal(cuda_plan_gemm_splits(28672, 4096), 1); /* wide: enough blocks */
    assert_int_equal(cuda_plan_gemm_splits(32000, 4096), 1);
    assert_int_equal(cuda_plan_gemm_splits(6144, 4096), 2);
    assert_int_equal(cuda_plan_gemm_splits(4096, 4096), 2);
    assert_int_equal(cuda_plan_gemm_splits(4096, 14336), 4); /* at most 4 */
    assert_int_equal(cuda_plan_gemm_splits(4096, 2047), 1);
    assert_int_equal(cuda_plan_gemm_splits(64, 172), 1);
}

/* A decode step padded to its bucket: padding rows are token 0 at position
 * 0 of their own one-token sequence on the null block (slot 0, table of
 * zeros), in the decode list; only the real rows are returned. */
static void test_cuda_plan_batch_decode_padding(void **state)
{
    (void)state;
    cuda_dims d = small_dims(64, 8, 128, 16, 1);
    cuda_mlayout m;
    cuda_plan_meta(&d, &m);
    int32_t tokens[3] = {7, -1, 9}, pos[3] = {5, 20, 0}, slots[3] = {21, 52, 64};
    int32_t start[4] = {0, 1, 2, 3}, len[3] = {6, 21, 1}, table[3 * 2] = {1, 0, 2, 3, 4, 0};
    int32_t rows[3] = {0, 1, 2};
    be_batch b = {.n_tokens = 3, .tokens = tokens, .positions = pos, .slots = slots,
                  .n_seqs = 3, .seq_start = start, .seq_len = len, .block_table = table,
                  .max_blocks = 2, .logit_rows = rows, .n_logits = 3};
    assert_true(cuda_plan_is_decode(&b));
    cuda_smp_row smp[3] = {{.temperature = 0.7f, .top_k = 5, .top_p = 0.9f, .u = 0.25},
                           {.temperature = 1.0f, .top_p = 1.0f, .u = 0.5},
                           {.temperature = 0.0f, .top_p = 1.0f}};
    cuda_step st;
    void *stage = plan_staged(&d, &m, &b, 4, smp, &st);
    assert_int_equal(st.T, 4);
    assert_int_equal(st.n_dec, 4);
    assert_int_equal(st.n_tiles, 0);
    assert_int_equal(st.n_rows, 4);
    assert_int_equal(st.n_out, 3);
    assert_int_equal(st.bucket, 4);
    assert_int_equal(st.sample, 1);
    assert_int_equal(st.n_masks, 0);
    assert_int_equal(st.mask_bytes, 0);
    assert_int_equal(st.meta_bytes, m.table + 4 * (size_t)d.MB * sizeof(int32_t));
    assert_int_equal(I32(stage, m.tokens)[1], -1); /* placeholders pass through */
    assert_int_equal(I32(stage, m.tokens)[3], 0);
    assert_int_equal(I32(stage, m.positions)[3], 0);
    assert_int_equal(I32(stage, m.slots)[3], 0);
    assert_int_equal(I32(stage, m.tok_seq)[3], 3);
    for (int i = 0; i < d.MB; i++)
        assert_int_equal(I32(stage, m.table)[3 * d.MB + i], 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(I32(stage, m.dec)[i], i);
    for (int i = 0; i < 3; i++)
        assert_int_equal(I32(stage, m.rows)[i], i);
    const cuda_smp_row *sr = (const cuda_smp_row *)((char *)stage + m.smp);
    assert_memory_equal(sr, smp, sizeof smp);
    free(stage);
}

/* Token masks: the masked rows' masks are packed from the start of the
 * masks region in row order, each staged row's pointer is rewritten to its
 * copy's device address (dev_meta + offset), unmasked rows keep NULL, and
 * the step says how many bytes of masks to copy. */
static void test_cuda_plan_batch_token_masks(void **state)
{
    (void)state;
    cuda_dims d = small_dims(64, 8, 128, 16, 1);
    d.V = 70; /* three words, the last partly used */
    cuda_mlayout m;
    cuda_plan_meta(&d, &m);
    assert_int_equal(m.mask_words, 3);
    assert_true(m.masks >= m.table + (size_t)d.S * d.MB * sizeof(int32_t));
    assert_true(m.masks + (size_t)d.R * 3 * 4 <= m.total);
    int32_t tokens[3] = {7, 8, 9}, pos[3] = {5, 20, 0}, slots[3] = {21, 52, 64};
    int32_t start[4] = {0, 1, 2, 3}, len[3] = {6, 21, 1}, table[3 * 2] = {1, 0, 2, 3, 4, 0};
    int32_t rows[3] = {0, 1, 2};
    be_batch b = {.n_tokens = 3, .tokens = tokens, .positions = pos, .slots = slots,
                  .n_seqs = 3, .seq_start = start, .seq_len = len, .block_table = table,
                  .max_blocks = 2, .logit_rows = rows, .n_logits = 3};
    uint32_t m0[3] = {0x1u, 0x80000000u, 0x20u}, m2[3] = {0xdeadbeefu, 0, 0x3fu};
    cuda_smp_row smp[3] = {{.temperature = 0.0f, .top_p = 1.0f, .mask = m0},
                           {.temperature = 1.0f, .top_p = 1.0f, .u = 0.5},
                           {.temperature = 0.5f, .top_k = 3, .top_p = 0.8f, .mask = m2}};
    char *dev = (char *)(uintptr_t)0x100000; /* a made-up device address */
    void *stage = malloc(m.total);
    assert_non_null(stage);
    memset(stage, 0x55, m.total);
    cuda_step st;
    cuda_plan_batch(&d, &m, &b, 0, smp, dev, stage, &st);
    assert_int_equal(st.n_masks, 2);
    assert_int_equal(st.mask_bytes, 2 * 3 * 4);
    const uint32_t *mk = (const uint32_t *)((char *)stage + m.masks);
    assert_memory_equal(mk, m0, sizeof m0);
    assert_memory_equal(mk + 3, m2, sizeof m2);
    const cuda_smp_row *sr = (const cuda_smp_row *)((char *)stage + m.smp);
    assert_ptr_equal(sr[0].mask, dev + m.masks);
    assert_null(sr[1].mask);
    assert_ptr_equal(sr[2].mask, dev + m.masks + 12);
    for (int r = 0; r < 3; r++) { /* everything else as given */
        assert_true(sr[r].temperature == smp[r].temperature);
        assert_int_equal(sr[r].top_k, smp[r].top_k);
        assert_true(sr[r].top_p == smp[r].top_p && sr[r].u == smp[r].u);
    }
    free(stage);
}

/* A decode step is exactly: one token per sequence, logits for all, in order. */
static void test_cuda_plan_is_decode_requires_identity_rows(void **state)
{
    (void)state;
    int32_t start[3] = {0, 1, 2}, rows[2] = {0, 1}, swapped[2] = {1, 0}, start2[3] = {0, 2, 2};
    be_batch b = {.n_tokens = 2, .n_seqs = 2, .seq_start = start, .logit_rows = rows,
                  .n_logits = 2};
    assert_true(cuda_plan_is_decode(&b));
    b.logit_rows = swapped;
    assert_false(cuda_plan_is_decode(&b));
    b.logit_rows = rows;
    b.n_logits = 1;
    assert_false(cuda_plan_is_decode(&b));
    b.n_logits = 2;
    b.seq_start = start2;
    assert_false(cuda_plan_is_decode(&b));
}

/* ---- conversion ---------------------------------------------------------------- */

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One f32 through the upload conversion. */
static uint16_t cuda_plan_bf16(float f)
{
    uint16_t out;
    cuda_plan_to_bf16(&f, INF_F32, 1, &out);
    return out;
}

/* f32 -> bf16 on upload rounds to nearest even exactly as engine/common's
 * reference, across random bit patterns and the special values; NaN stays
 * NaN. */
static void test_cuda_plan_bf16_rounding(void **state)
{
    (void)state;
    const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, 1e-45f, -1e-45f,
                             1e-40f, 3.4028235e38f, -3.4028235e38f, u2f(0x3f808000u),
                             u2f(0x3f818000u), u2f(0x3f807fffu), u2f(0x7f7fffffu)};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        assert_int_equal(cuda_plan_bf16(special[i]), inf_f32_to_bf16(special[i]));
    assert_int_equal(cuda_plan_bf16(u2f(0x3f808000u)), 0x3f80); /* tie to even: down */
    assert_int_equal(cuda_plan_bf16(u2f(0x3f818000u)), 0x3f82); /* tie to even: up   */
    uint16_t nan = cuda_plan_bf16(NAN);
    assert_true(isnan(inf_bf16_to_f32(nan)));
    assert_true(isnan(inf_bf16_to_f32(cuda_plan_bf16(u2f(0x7f800001u))))); /* low-bit NaN */
    uint64_t x = 12345;
    for (int i = 0; i < 1000000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        float f = u2f((uint32_t)(x >> 32));
        if (isnan(f))
            continue;
        assert_int_equal(cuda_plan_bf16(f), inf_f32_to_bf16(f));
    }
}

/* Every f16 value converts with a single rounding (f16 -> f32 is exact);
 * bf16 passes through untouched; f32 round-trips through to_f32. */
static void test_cuda_plan_convert_all_dtypes(void **state)
{
    (void)state;
    uint16_t *h = malloc(65536 * sizeof *h), *out = malloc(65536 * sizeof *out);
    float *f = malloc(65536 * sizeof *f);
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    cuda_plan_to_bf16(h, INF_F16, 65536, out);
    for (int i = 0; i < 65536; i++) {
        float v = inf_f16_to_f32(h[i]);
        if (isnan(v))
            assert_true(isnan(inf_bf16_to_f32(out[i])));
        else
            assert_int_equal(out[i], inf_f32_to_bf16(v));
    }
    cuda_plan_to_bf16(h, INF_BF16, 65536, out);
    assert_memory_equal(out, h, 65536 * sizeof *h);
    cuda_plan_to_f32(h, INF_BF16, 65536, f);
    for (int i = 0; i < 65536; i++)
        assert_int_equal(f2u(f[i]), (uint32_t)h[i] << 16);
    cuda_plan_to_f32(h, INF_F16, 65536, f);
    for (int i = 0; i < 65536; i += 97)
        assert_memory_equal(&f[i], &(float){inf_f16_to_f32(h[i])}, sizeof(float));
    free(h);
    free(out);
    free(f);
}

/* pack takes a piece's columns of the requested rows, as bf16, row-major. */
static void test_cuda_plan_pack_slices(void **state)
{
    (void)state;
    float w[5][7];
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 7; c++)
            w[r][c] = (float)(r * 10 + c);
    model_tensor t = {.dtype = INF_F32, .data = w, .rows = 5, .cols = 7, .name = "w"};
    cuda_piece p = {.w = &t, .r0 = 1, .nr = 4, .c0 = 2, .nc = 3};
    uint16_t out[2][3];
    cuda_plan_pack(&p, 1, 2, &out[0][0]); /* piece rows 1, 2 = tensor rows 2, 3 */
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++)
            assert_true(inf_bf16_to_f32(out[r][c]) == (float)((r + 2) * 10 + c + 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_plan_shard_tp1_owns_everything),
        cmocka_unit_test(test_cuda_plan_shard_ranges_partition_and_keep_groups),
        cmocka_unit_test(test_cuda_plan_shard_refuses_indivisible),
        cmocka_unit_test(test_cuda_plan_bias_pieces_shard),
        cmocka_unit_test(test_cuda_plan_pieces_cover_every_weight_once),
        cmocka_unit_test(test_cuda_plan_dims_limits),
        cmocka_unit_test(test_cuda_plan_dims_refusals_say_why),
        cmocka_unit_test(test_cuda_plan_splitk_partitions_every_context),
        cmocka_unit_test(test_cuda_plan_weights_layout),
        cmocka_unit_test(test_cuda_plan_quantized_layout),
        cmocka_unit_test(test_cuda_plan_acts_and_meta_layout),
        cmocka_unit_test(test_cuda_plan_kv_worked_example),
        cmocka_unit_test(test_cuda_plan_kv_too_small_says_why),
        cmocka_unit_test(test_cuda_plan_kv_fixed_blocks),
        cmocka_unit_test(test_cuda_plan_buckets),
        cmocka_unit_test(test_cuda_plan_batch_mixed_step),
        cmocka_unit_test(test_cuda_plan_batch_invariant_all_split_k),
        cmocka_unit_test(test_cuda_plan_gemm_splits),
        cmocka_unit_test(test_cuda_plan_batch_decode_padding),
        cmocka_unit_test(test_cuda_plan_batch_token_masks),
        cmocka_unit_test(test_cuda_plan_is_decode_requires_identity_rows),
        cmocka_unit_test(test_cuda_plan_bf16_rounding),
        cmocka_unit_test(test_cuda_plan_convert_all_dtypes),
        cmocka_unit_test(test_cuda_plan_pack_slices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
