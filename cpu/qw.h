/* cpu_qw: a weight matrix quantized to int8 for cpu_kern.mmq (W8A8,
 * `--quantization int8`): one scale per output row, packed as kern.h lays
 * out. Made once when the backend is created, from the checkpoint's f32,
 * f16 or bf16 weights, or packed as stored from a pre-quantized int8
 * checkpoint's (model_tensor.q8, its scales kept as they are). */
#ifndef INFERD_CPU_QW_H
#define INFERD_CPU_QW_H

#include "cpu/kern.h"
#include "cpu/pool.h"
#include "engine/model.h"

typedef struct cpu_qw {
    int N, K;        /* the matrix: N output rows of K inputs            */
    int N64, K4;     /* N rounded up to CPU_QN, K to a multiple of 4 / 4 */
    int8_t *w;       /* packed, N64 * K4 * 4 bytes (mapped)             */
    float *scale;    /* [N64] (0 for padding rows)                       */
    int32_t *wsum;   /* [N64] 128 * sum_k w[n][k]                        */
} cpu_qw;

/* K must be below CPU_QK_MAX so that int32 sums cannot overflow. */
#define CPU_QK_MAX 65536

/* Quantizes t with k's quant (on pool's threads when pool is not NULL). */
int cpu_qw_create(const model_tensor *t, const cpu_kern *k, cpu_pool *pool, cpu_qw **out,
                  inf_err *err);
void cpu_qw_destroy(cpu_qw *q); /* NULL-safe */

/* Bytes the quantized matrix takes. */
size_t cpu_qw_bytes(const cpu_qw *q);

/* The arguments of a->y = x . q^T for M rows of x quantized by quant (with
 * the offset) at ldx bytes, scales sx. */
cpu_mmq cpu_qw_args(const cpu_qw *q, const uint8_t *x, size_t ldx, const float *sx, float *y,
                    size_t ldy, int M);

#endif
