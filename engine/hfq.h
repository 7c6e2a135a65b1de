/* hfq_: Hugging Face pre-quantized checkpoints, by config.json's
 * quantization_config: GPTQ (4- and 8-bit) and AWQ 4-bit linear layers,
 * compressed-tensors' int8, FP8 and pack-quantized (W4A16 / W8A16)
 * schemes, quant_method fp8 and bitsandbytes 4- and 8-bit.
 *
 * A quantized linear `P.weight` [N out, K in] is stored as
 *
 *   GPTQ  P.qweight I32 [K/8, N]: input k of output n in bits 4(k%8) of
 *         qweight[k/8][n]; P.qzeros I32 [G, N/8]: output n's zero in bits
 *         4(n%8) of qzeros[g][n/8], stored minus one unless
 *         checkpoint_format is "gptq_v2"; P.scales F16 [G, N]; P.g_idx I32
 *         [K] (optional): the group of input k (any order with desc_act;
 *         k / group_size without it)
 *   AWQ   (version "gemm") P.qweight I32 [K, N/8] and P.qzeros I32 [G, N/8]:
 *         nibble i of packed column j holds output 8j + {0,2,4,6,1,3,5,7}[i];
 *         P.scales F16 [G, N]; the group of input k is k / group_size
 *
 * and means W[n][k] = scale[g][n] * (q - zero[g][n]), g the group of k.
 * inferd dequantizes it once at load to f32 (the product of an f16 scale and
 * a small integer is exact in f32), so the checkpoint's function is computed
 * as written; `--quantization int8|int4` then requantizes it like any
 * checkpoint.
 *
 *   compressed-tensors W8A8 int8 (llm-compressor; format int-quantized or
 *   naive-quantized, weights symmetric int8 per channel or per tensor,
 *   input_activations symmetric int8 dynamic per token, or static per
 *   tensor with P.input_scale: model_tensor.q8_in_scale):
 *         P.weight I8 [N, K]; P.weight_scale F32/BF16/F16 [N, 1] (channel)
 *         or one value (tensor); W[n][k] = weight[n][k] * scale[n]
 *
 * is bound as it is (model_tensor.q8, scales widened to f32) for the CPU's
 * int8 kernels, which quantize activations as the scheme says (per token,
 * or with the static scale).
 *
 *   compressed-tensors FP8 (llm-compressor's FP8 / FP8-dynamic; format
 *   float-quantized, weights symmetric float 8-bit per channel or per
 *   tensor, input_activations float per token dynamic, per tensor static,
 *   or null):
 *         P.weight F8_E4M3 [N, K]; P.weight_scale as int8's;
 *         W[n][k] = e4m3(weight[n][k]) * scale[n]
 *
 * is dequantized at load to f32 like GPTQ (one f32 multiply of two exact
 * values), and its activations are not quantized: vLLM's weight-only FP8
 * fallback on GPUs without FP8 arithmetic. A static P.input_scale is not
 * read.
 *
 *   compressed-tensors W4A16 / W8A16 (llm-compressor's W4A16, W4A16_ASYM,
 *   W8A16; format pack-quantized, weights int of 4 or 8 bits per channel or
 *   per group of group_size inputs, symmetric or with zero points,
 *   input_activations null):
 *         P.weight_packed I32 [N, ceil(K/(32/b))]: input k's q + 2^(b-1) in bits
 *         b(k % (32/b)) of word k/(32/b); P.weight_shape I64/I32 [2];
 *         P.weight_scale F32/BF16/F16 [N, G]; P.weight_zero_point (not
 *         symmetric) I32 [ceil(N/(32/b)), G], zero + 2^(b-1) packed the same way
 *         down the rows, or I8 [N, G] (older files); P.weight_g_idx I32 [K]
 *         (actorder group): the group of input k, else k / group_size;
 *         W[n][k] = scale[n][g] * (q - zero[n][g])
 *
 * is dequantized at load to f32 like GPTQ: the integer difference, then one
 * f32 multiply (exact for bf16 and f16 scales).
 *
 *   quant_method fp8 (vLLM's Fp8Config; fmt e4m3, activation_scheme
 *   dynamic or static, weight_block_size [bn, bk] or none):
 *         P.weight F8_E4M3 [N, K]; with blocks P.weight_scale_inv F32/BF16/
 *         F16 [ceil(N/bn), ceil(K/bk)], else P.weight_scale, one value;
 *         W[n][k] = e4m3(weight[n][k]) * scale[n / bn][k / bk]
 *
 * is dequantized like compressed-tensors FP8 (P.input_scale is not read).
 *
 *   bitsandbytes 4-bit (load_in_4bit; NF4 or FP4, double quantization or
 *   not; engine/hfq_bnb.c has the layout): dequantized as bitsandbytes
 *   does, each weight rounded to the quant_state's dtype, into f32.
 *
 *   bitsandbytes 8-bit (load_in_8bit, LLM.int8; row layout):
 *         P.weight I8 [N, K]; P.SCB F32 [N]; P.weight_format U8 0;
 *         W[n][k] = f32(weight[n][k] * SCB[n]) * f32(1/127)
 *
 * is dequantized to f32 as bitsandbytes does; activations are not
 * quantized (LLM.int8's outlier threshold is a way of running it, not part
 * of the weights).
 *
 * Other methods (HQQ, ...), other bit widths, AWQ's gemv layouts and other
 * compressed-tensors schemes (F8_E5M2, FP8 blocks, zero points or groups
 * outside pack-quantized, W4A8) are refused by
 * name. */
#ifndef INFERD_HFQ_H
#define INFERD_HFQ_H

#include "model.h"
#include "st.h"

typedef struct hfq hfq;

/* Reads config_path's quantization_config: *out NULL when there is none,
 * else what the tensors are bound with. */
int hfq_open(const char *config_path, hfq **out, inf_err *err);

void hfq_free(hfq *q); /* NULL-safe; frees the dequantized tensors */

/* Frees those of the 4-bit codes, scales and zeros bound as model_tensor.q4
 * (their orders, q4_perm, stay) whose buffers hold one of the n pointers (a
 * tensor's codes, or a view into a fused linear's): model_drop_layer_codes,
 * one layer at a time as a backend packs it. NULL entries are skipped;
 * NULL-safe. */
void hfq_drop_codes_at(hfq *q, const void *const *at, int n);

/* The method's name ("gptq", "awq", "compressed-tensors"). */
const char *hfq_method(const hfq *q);

/* What the checkpoint's linears become, for start-up messages:
 * "compressed-tensors FP8 (dequantized to f32 at load; activations not
 * quantized)", ... (a static string). */
const char *hfq_describe(const hfq *q);

/* on: GPTQ / AWQ and compressed-tensors W4A16 linears whose groups are
 * whole 32s of inputs in order (group_size a multiple of 32 or a row, no
 * desc_act / actorder permutation; W4A16: scales exact in f16) are bound as
 * their codes, scales and zeros (model_tensor.q4) instead of f32, for the
 * CPU's int4 kernels (model_load_opts.packed_q4). NULL-safe. */
void hfq_set_packed_q4(hfq *q, int on);

/* on: compressed-tensors W8A16 linears per channel and symmetric are bound
 * as their int8 rows and f32 scales (model_tensor.q8: the stored value
 * minus 128, exactly) instead of f32, for the int8 kernels
 * (model_load_opts.packed_q8). NULL-safe. */
void hfq_set_packed_q8(hfq *q, int on);

/* A compressed-tensors FP8 checkpoint's layer matrices (names
 * "model.layers.N.") are checked at bind, and their conversion to f32 is
 * handed to defer (model_defer, ctx the model: model_load_opts.lazy_layers)
 * instead of done at once. NULL-safe. */
void hfq_set_defer(hfq *q,
                   int (*defer)(void *ctx, model_tensor *out, int layer, model_convert_fn fn,
                                const void *src, const void *aux, int arg, inf_err *err),
                   void *ctx);

/* 1 for a compressed-tensors int8 checkpoint (NULL-safe). */
int hfq_is_int8(const hfq *q);

/* Binds name (a linear's "P.weight", absent from st or of a dtype inferd
 * does not compute in) as [rows, cols]: from P.qweight / qzeros / scales
 * (/ g_idx), dequantized to f32 owned by q; compressed-tensors' I8
 * P.weight in place with P.weight_scale as f32 owned by q; or its F8_E4M3
 * P.weight dequantized to f32 owned by q; or its pack-quantized
 * P.weight_packed parts dequantized to f32 owned by q. Errors name the
 * tensor and what is wrong with it. */
int hfq_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
             model_tensor *out, inf_err *err);

#endif
