/* cuda_k_: the CUDA backend's kernels, one per op, each behind a host
 * launcher that takes a stream and returns the launch's error (never
 * synchronizes). Kernels are CUDA C++ (the .cu files); this header is C.
 *
 * Storage: activations f32 or bf16 (uint16_t here, __nv_bfloat16 on the
 * device), row-major with the row strides given. The paged KV cache of one
 * layer is K and V, each [num_blocks][KVl][block_size][hd] bf16: the
 * block_size x hd tile of one (block, KV head) is contiguous, so attention
 * reads a block's keys for one head as one 16-byte-aligned run, and slot
 * s = block * block_size + offset lands at [block][head][offset]. */
#ifndef INFERD_CUDA_KERN_H
#define INFERD_CUDA_KERN_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "cuda/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x[t][:] = table[tok][:] widened to f32, times scale (1: exactly the
 * row; Gemma's sqrt(hidden)), for t < T, where tok = tokens[t], or, for a
 * placeholder tokens[t] = -1 - i, prev_ids[i]. */
cudaError_t cuda_k_embed(const uint16_t *table, int D, const int32_t *tokens,
                         const int32_t *prev_ids, int T, float scale, float *x, cudaStream_t st);

/* x[i] = x[i] * (1 / sqrt(mean(x[i]^2) + eps)) * gain for rows i < n of
 * [n][D] f32, in place: Gemma's norm of a sublayer's output before the
 * residual add. */
cudaError_t cuda_k_rmsnorm_f32(float *x, const float *gain, int D, float eps, int n,
                               cudaStream_t st);

/* Before RoPE, per token t < T of qkv [T][(Hl + 2 KVl) hd]: adds bias
 * [(Hl + 2 KVl) hd] (NULL: none), then (qk_gain [2][hd], NULL: none)
 * RMSNorm over each q head with gain qk_gain[0] and each k head with
 * qk_gain[1]. */
cudaError_t cuda_k_qkv_prep(float *qkv, int T, const float *bias, const float *qk_gain, int Hl,
                            int KVl, int hd, float eps, cudaStream_t st);

/* x[i] = cap * tanh(x[i] / cap) for i < n (the final logits' soft-cap). */
cudaError_t cuda_k_softcap(float *x, size_t n, float cap, cudaStream_t st);

/* For i < n and r = rows ? rows[i] : i: x[r] += delta[r] (skipped when delta
 * is NULL), then out[i] = bf16(x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * gain):
 * the residual add fused with the RMSNorm that follows it. With rows (the
 * final norm) x is left as it is, so a row listed twice is still right. */
cudaError_t cuda_k_add_rmsnorm(float *x, const float *delta, const float *gain, int D,
                               float eps, const int32_t *rows, int n, uint16_t *out,
                               cudaStream_t st);

/* One layer's RoPE (engine/mdesc.h's md_rope), its tables on the device. */
typedef struct cuda_rope {
    const double *inv_freq; /* [rot / 2]                                     */
    const double *inv_long; /* [rot / 2] for positions >= long_from; NULL none */
    int long_from;
    int rot;                /* dimensions rotated per head (even, <= hd)     */
    double attn_factor;     /* cos and sin times it (1: none)                 */
} cuda_rope;

/* qkv [T][(Hl + 2 KVl) hd] holds q | k | v of each token. Rotates q in place
 * and k (HF rotate-half: pairs (i, i + rot/2) of the first rot dims, angle
 * position * inv_freq[i] in double, cos and sin times attn_factor), then
 * writes k and v as bf16 to the layer's cache at slots[t]. */
cudaError_t cuda_k_rope_kv(float *qkv, int T, const int32_t *positions,
                           const int32_t *slots, const cuda_rope *rope, int Hl, int KVl,
                           int hd, uint16_t *kc, uint16_t *vc, int block_size,
                           cudaStream_t st);

/* out[t][i] = bf16(g / (1 + exp(-g)) * u) with g = gu[t][i], u = gu[t][F + i]. */
cudaError_t cuda_k_swiglu(const float *gu, int F, int T, uint16_t *out, cudaStream_t st);

/* The same with GELU's tanh form: out = bf16(0.5 g (1 + tanh(sqrt(2/pi)
 * (g + 0.044715 g^3))) * u) (Gemma's GeGLU). */
cudaError_t cuda_k_geglu(const float *gu, int F, int T, uint16_t *out, cudaStream_t st);

/* One MLP speculator stage's state (engine/spec_mlp.h), per row r < n:
 * v = t[r] * sw + emb[tok[r]] * ew (t [n][I] f32, the projected state; emb
 * [vocab][I] bf16), then s[r] = bf16(gelu(v / sqrt(mean(v^2) + eps) *
 * ln_w + ln_b)) with the exact-erf GELU, into s [n][lds]: the head GEMM's
 * and the next stage's input. */
cudaError_t cuda_k_mlp_mix(const float *t, const int32_t *tok, const uint16_t *emb,
                           const float *ln_w, const float *ln_b, float sw, float ew, int I,
                           float eps, int n, uint16_t *s, int lds, cudaStream_t st);

/* Paged attention over one layer. Token t (of sequence tok_seq[t]) attends
 * to positions 0..positions[t] of its sequence (the last `window` of them
 * when window > 0), read through
 * table[seq][p / block_size]; q comes from the rotated qkv rows, the result
 * goes to out [T][ldo] bf16 at head h's columns h*hd. */
typedef struct cuda_attn_args {
    const float *q;          /* [T][ldq], head h at h*hd                      */
    int ldq;
    const uint16_t *kc, *vc; /* this layer's cache                            */
    uint16_t *out;           /* [T][ldo]                                      */
    int ldo;
    const int32_t *positions, *tok_seq;
    const int32_t *table;    /* [S][MB]                                       */
    int MB;
    int KVl, G, hd, block_size;
    float scale;             /* multiplies q.k (mdesc attn_scale)             */
    float softcap;           /* scores -> softcap * tanh(s / softcap); 0 none */
    int window;              /* token at p attends p-window+1..p; 0: all      */
    const int32_t *dec;      /* decode: token indices                         */
    int chunk, max_splits;   /* decode split-K (cuda_plan_splitk)             */
    float *part;             /* [n_dec][KVl][max_splits][G][hd + 2]          */
    const int32_t *tiles;    /* prefill: [n_tiles][3] seq, first token, count */
} cuda_attn_args;

/* Decode: one query token per entry of dec (their sequences have one token
 * in this step; batch-invariant without the tensor-core kernel, every
 * token). Each (token, KV head, split of chunk positions) block writes a partial softmax to part; a second kernel merges the splits in
 * split order. Empty splits exit at once, so the grid can stay fixed (CUDA
 * graphs) while contexts grow. */
cudaError_t cuda_k_attn_decode(const cuda_attn_args *a, int n_dec, cudaStream_t st);

/* Prefill and verification rows: one block per (tile, KV head) takes up to
 * CUDA_ATTN_ROWS query rows (tile tokens x the KV head's G query heads),
 * walks the KV positions 0..max position in the tile 32 at a time through
 * shared memory with the causal mask per row, online softmax. */
cudaError_t cuda_k_attn_prefill(const cuda_attn_args *a, int n_tiles, cudaStream_t st);

/* Batch-invariant attention for every token: tiles (a.tiles, up to 16 query
 * rows: 16 / G consecutive tokens of one sequence x the G query heads of a KV
 * head) on the tensor cores, over the decode kernel's splits, then the same
 * merge; partials at part[t] for token t (so the decode list must be every
 * token in order, n_tokens of them). A token's result does not depend on its
 * tile. Needs hd a multiple of 8, at most 256, and G <= 16. */
cudaError_t cuda_k_attn_tiles(const cuda_attn_args *a, int n_tiles, int n_tokens,
                              cudaStream_t st);

/* Raises the prefill kernel's shared-memory limit for head_dim hd on the
 * current device (once per device, before any launch or capture). */
cudaError_t cuda_k_attn_setup(int hd);

/* y[M][ldy] = x[M][ldx] . w[N][K]^T, bf16 in (x and w), f32 accumulate and
 * out, on the tensor cores. Batch-invariant: row i of y is the same bits
 * whatever M is and whatever the other rows hold (each element is one
 * accumulator per K range, in increasing K order, the ranges summed in
 * order; cuda/k_gemm.cu says why). splits: the K ranges,
 * cuda_plan_gemm_splits(N, K), never chosen by M; with more than one, ws
 * holds splits * M * N floats. */
cudaError_t cuda_k_gemm(const uint16_t *x, int ldx, const uint16_t *w, int N, int K, float *y,
                        int ldy, int M, int splits, float *ws, cudaStream_t st);

/* Candidate tile shapes of cuda_k_gemm, for bench_cuda to time (each one
 * computes the same bits; K and ldx multiples of 8): how many, a name, and a
 * launch of candidate v (cuda_k_gemm_variants_setup raises every
 * candidate's shared-memory limit first, so the launch alone is what
 * bench_cuda times). */
int cuda_k_gemm_variants(void);
const char *cuda_k_gemm_variant_name(int v);
cudaError_t cuda_k_gemm_variant(int v, const uint16_t *x, int ldx, const uint16_t *w, int N,
                                int K, float *y, int ldy, int M, int splits, float *ws,
                                cudaStream_t st);

/* cuda_k_gemm's contract on Hopper's warpgroup MMA (cuda/k_gemm_wg.cu:
 * wgmma m64n128k16, 64 x 128 tiles, rows padded to 64, the same K ranges):
 * for the tests and bench_cuda, chosen by nothing until a GPU has run it.
 * variant 0 reads the PTX ISA's descriptor offsets one way, 1 the other
 * (the first GPU run says which the hardware means). x and w 16-byte
 * aligned, K and ldx multiples of 8. _setup first (shared memory): it
 * returns cudaErrorNotSupported on a device other than compute capability
 * 9.0, where a launch fails (the kernel is built for sm_90a alone). */
cudaError_t cuda_k_gemm_wg_setup(void);
cudaError_t cuda_k_gemm_wg(int variant, const uint16_t *x, int ldx, const uint16_t *w, int N,
                           int K, float *y, int ldy, int M, int splits, float *ws,
                           cudaStream_t st);

/* Raises the shared-memory limits of cuda_k_gemm's shapes on the current
 * device (once per device, before any launch or capture); the device must
 * allow cuda_k_gemm_smem() bytes per block. The candidates' limits: the
 * second call, for bench_cuda only. */
size_t cuda_k_gemm_smem(void);
cudaError_t cuda_k_gemm_setup(void);
cudaError_t cuda_k_gemm_variants_setup(void);

/* ---- quantized layer matrices (`--quantization int8` / `int4`) ----------
 * The CPU backend's arithmetic (cpu/kern.h, cpu/q4.h), so the two backends
 * differ only in their inputs (here the bf16 rows the other GEMMs read):
 * every sum is exact in int32, so any order, tile or split gives the same
 * bits and batch invariance costs nothing; the few float steps after it are
 * one fixed chain per output, written with explicit rounding intrinsics.
 * q, w and w4 are 16-byte aligned, ldq a multiple of 32 (16 is refused);
 * K below 65,536 keeps every sum exact (cuda_plan_dims refuses more). A row
 * holding inf makes a scale inf and its y NaN, whose payload may differ from
 * the CPU's; every finite result is the same bits. */

/* Per row t < T of x [T][ldx] bf16 (K columns), the CPU's symmetric int8:
 *   amax = max |v| (NaNs skipped); inv = amax > 0 ? 127 / amax : 0 (f32)
 *   q = (int)rint(min(max(v * inv, -127), 127)) (NaN -> -127)
 *   sx[t] = amax / 127
 * into q [T][ldq] int8, columns K..ldq-1 set to 0 (ldq a multiple of 32,
 * >= K). */
cudaError_t cuda_k_quant_rows(const uint16_t *x, int ldx, int K, int T, int8_t *q, int ldq,
                              float *sx, cudaStream_t st);
/* The same with a static scale s > 0 (a compressed-tensors checkpoint's
 * input_scale), as the CPU's qdef_i8_static:
 *   q = (int)rint(min(max(v / s, -127), 127)) (NaN -> -127), sx[t] = s. */
cudaError_t cuda_k_quant_rows_static(const uint16_t *x, int ldx, int K, int T, float s,
                                     int8_t *q, int ldq, float *sx, cudaStream_t st);

/* cuda_k_add_rmsnorm (rows NULL) over n rows of width D, then
 * cuda_k_quant_rows of the out it wrote (K = ldx = D) into q and sx, in one
 * launch: the same bits as the two (a quantized layer GEMM's input, one
 * launch and one pass over the row fewer). ldq >= D, a multiple of 32. */
cudaError_t cuda_k_add_rmsnorm_q(float *x, const float *delta, const float *gain, int D,
                                 float eps, int n, uint16_t *out, int8_t *q, int ldq, float *sx,
                                 cudaStream_t st);

/* cuda_k_geglu (gelu) or cuda_k_swiglu over T rows, then cuda_k_quant_rows
 * of the out it wrote (K = ldx = F), in one launch: the same bits as the
 * two (the down projection's quantized input). ldq >= F, a multiple of 32. */
cudaError_t cuda_k_glu_q(const float *gu, int F, int T, int gelu, uint16_t *out, int8_t *q,
                         int ldq, float *sx, cudaStream_t st);
/* Its kernels (cuda/k_quant_rows.cu), the same bits: CUDA_QR_BLOCK and
 * CUDA_QR_VEC (16-byte loads held between the passes: the one
 * cuda_k_quant_rows runs, 1.3-3.2x faster on an H200; it falls back to the
 * block kernel on rows not aligned for it). For bench_cuda's sweep and the
 * tests. */
enum { CUDA_QR_BLOCK, CUDA_QR_VEC, CUDA_QR_KERNELS };
const char *cuda_k_quant_rows_kernel_name(int kernel);
cudaError_t cuda_k_quant_rows_with(int kernel, const uint16_t *x, int ldx, int K, int T,
                                   int8_t *q, int ldq, float *sx, cudaStream_t st);

/* W8A8: y[m][n] = ((float)S * sx[m]) * sw[n], S = sum_k q[m][k] * w[n][k]
 * (int32, exact), for m < M, n < N. w [N][ldw] int8 with ldw a multiple of
 * 32 and >= K, columns K..ldw-1 zero; q [M][ldq] from cuda_k_quant_rows
 * (ldq >= ldw, zero past K). */
cudaError_t cuda_k_gemm_i8(const int8_t *q, int ldq, const float *sx, const int8_t *w, int ldw,
                           const float *sw, int N, int K, float *y, int ldy, int M,
                           cudaStream_t st);

/* W4A8, the CPU's int4 (cpu/q4.h: groups of 32 along K, q in [-8, 7], an
 * f16 scale per group). w4 [N][G][16] bytes: byte i of group g of row n
 * holds q + 8 of k = 32g + i in its low nibble and of k = 32g + 16 + i in
 * its high nibble (GGUF Q4_0's order); d [N][G] f16 scales. For m < M, n < N:
 *   s_g = sum_{k in group g} q[m][k] * wq[n][k]   (int32, exact)
 *   acc = +0; acc = fmaf((float)s_g, float(d[n][g]), acc) for g = 0..G-1
 *   y[m][n] = acc * sx[m]
 * q [M][ldq] from cuda_k_quant_rows, ldq >= 32 G, zero past K. */
cudaError_t cuda_k_gemm_i4(const int8_t *q, int ldq, const float *sx, const uint8_t *w4,
                           const uint16_t *d, int N, int G, float *y, int ldy, int M,
                           cudaStream_t st);

/* The kernels cuda_k_gemm_i8 and _i4 choose among by M (as measured on an
 * H200, cuda/k_quant.cu), each giving the same bits at every M:
 * CUDA_QK_ROWS (a warp per weight row, activations in passes of up to 8
 * rows: decode), CUDA_QK_TILED (64 x 64 tiles through shared memory, no
 * longer chosen), CUDA_QK_WARP (8 rows a pass at every M: int8's row kernel
 * so, int4's first decode kernel, its chains advancing every 32 groups) and
 * CUDA_QK_MMA (64 x 64 tiles on the int8 tensor cores, sm_80 and later,
 * cuda/k_quant_mma.cu: chosen above 16 rows, where the H200 ran it 1.4-2.8x
 * faster than the tiles). The _with launches run the one named, for
 * bench_cuda's sweep and the exact tests. */
enum { CUDA_QK_ROWS, CUDA_QK_TILED, CUDA_QK_WARP, CUDA_QK_MMA, CUDA_QK_KERNELS };
const char *cuda_k_qgemm_kernel_name(int kernel);
/* The one cuda_k_gemm_i8 (bits 8) or _i4 (bits 4) runs for M rows. */
int cuda_k_qgemm_kernel(int bits, int M);
cudaError_t cuda_k_gemm_i8_with(int kernel, const int8_t *q, int ldq, const float *sx,
                                const int8_t *w, int ldw, const float *sw, int N, int K,
                                float *y, int ldy, int M, cudaStream_t st);
cudaError_t cuda_k_gemm_i4_with(int kernel, const int8_t *q, int ldq, const float *sx,
                                const uint8_t *w4, const uint16_t *d, int N, int G, float *y,
                                int ldy, int M, cudaStream_t st);

/* ids[r] for r < n: the token drawn from logits row r ([n][V] f32) with
 * rows[r]'s parameters, as smp_ draws (cuda/backend.h). One block per row.
 * rows[r].mask, when not NULL, is a device pointer to (V + 31) / 32 words:
 * the row's logits of tokens whose bit is clear are set to -inf in place
 * first (the host chain's grammar mask), then the row is sampled. */
cudaError_t cuda_k_sample(float *logits, int V, int n, const cuda_smp_row *rows,
                          int32_t *ids, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
