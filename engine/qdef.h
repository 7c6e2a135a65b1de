/* qdef_: the quantization rules every backend shares, as plain scalar code.
 *
 * The CPU's SIMD tables and the CUDA kernels compute the same values; these
 * are the definitions they are tested against, and what the backends use to
 * quantize weights at load, so a matrix quantized for the CPU and for a GPU
 * holds the same integers and scales. */
#ifndef INFERD_QDEF_H
#define INFERD_QDEF_H

#include <stdint.h>

/* Symmetric int8 of n values (cpu/kern.h): amax = max |v| (NaNs skipped),
 * inv = 127 / amax, q = round-to-nearest-even(min(max(v * inv, -127), 127))
 * with NaN -> -127; returns the scale amax / 127 (0 when amax is 0, and then
 * every q is 0). */
float qdef_i8(const float *v, int n, int8_t *q);

/* v [n] with a static scale s > 0 (compressed-tensors' per-tensor input
 * scale): q = rint(min(max(v / s, -127), 127)), NaN to -127, as qdef_i8
 * clamps (vLLM clamps at -128; the vpmaddubsw kernels need |q| <= 127);
 * stored as q + 128 in bytes when offset is set (kern.h's quant form). */
void qdef_i8_static(const float *v, int n, float s, int8_t *q, int offset);

#define QDEF_Q4_GROUP 32

/* One group of len <= 32 weights as 4-bit (cpu/q4.h): a = the value with
 * the largest |a| (the first such), d = f16(a / -8) (capped at the largest
 * finite f16), u[i] = q + 8 with q = round(v * (1 / D)) clamped to [-8, 7]
 * (NaN -> -8) for i < len and q = 0 past it. */
void qdef_q4_group(const float *v, int len, uint8_t u[QDEF_Q4_GROUP], uint16_t *d16);

/* qdef_q4_group's scale of a group whose value of largest |a| is a (0 when
 * there is none): d = f16(a / -8) capped at the largest finite f16, and
 * *inv = 1 / D (0 when D is 0), for SIMD versions of the rule. */
uint16_t qdef_q4_scale(float a, float *inv);

/* The 32 codes u (0..15) of group g of a row of 4-bit codes as a checkpoint
 * stores them (model_tensor.q4: two a byte, the lower index in the low
 * nibble; codes [cols / 2] bytes); past cols: fill. */
void qdef_q4_codes(const uint8_t *codes, int64_t cols, int64_t g, uint8_t fill,
                   uint8_t u[QDEF_Q4_GROUP]);

#endif
