/* cpu_q4: 4-bit weights, 8-bit activations (W4A8, `--quantization int4`).
 *
 * Weights: groups of CPU_Q4_GROUP consecutive k of one output row share a
 * scale d (stored as f16) and hold q in [-8, 7] (w ~ d * q), the format of
 * GGUF's Q4_0, so a Q4_0 file converts without loss:
 *
 *   a = the value of the group with the largest |a| (the first such);
 *   d = f16(a / -8);  D = f32(d);  inv = D != 0 ? 1 / D : 0   (f32)
 *   q = min(max(round-to-nearest-even(w * inv), -8), 7)
 *
 * No minimum or zero point: on the tiny models' layer matrices one (GGUF's
 * Q4_1) lowers the squared weight error from 0.74% to 0.61% of the weights'
 * energy for 11% more bytes per weight (docs/engine.md).
 *
 * Activations: per token, kern.h's symmetric int8 (cpu_kern.quant, scale sx).
 * The product is
 *
 *   s_g = sum_{k in group g} qx[k] * q[k]                 (exact, int32)
 *   acc = +0; acc = fma((float)s_g, D_g, acc) for g = 0, 1, ... in order
 *   y = acc * sx
 *
 * s_g is at most 32 * 127 * 8 in size, so (float)s_g is exact and every
 * table (and any split of rows or columns) gives the same bits: the float
 * operations are one fixed chain per output.
 *
 * Packed layout: rows padded with zeros to a multiple of CPU_Q4_ROWS (64),
 * K to a multiple of 32 (padding weights are 0 and padding activations 0).
 * Tile t (rows 64t..64t+63) and group g form one record of CPU_Q4_REC bytes
 * at (t * G + g) * CPU_Q4_REC: four blocks of 16 rows (256 bytes each), then
 * the 64 scales as f16 (128 bytes). In block j, byte p * 64 + r * 4 + i holds
 * q + 8 for row 16j + r at k = 32g + 4p + i in its low nibble and at
 * k = 32g + 4(p + 4) + i in its high nibble (p < 4, i < 4): what one 512-bit
 * register of 16 rows x 4 k wants after a shift and a mask. One tile reads
 * one contiguous stream.
 *
 * Zero points (a GPTQ / AWQ checkpoint's own codes, packed as stored): the
 * same record with 64 more bytes, each row's zero z in [0, 16] for the group
 * (CPU_Q4_RECZ), and w = d * (u - z) for the stored code u in [0, 15];
 * s_g = sum u * qx - z * sum qx, at most 32 * 128 * 16 in size, so the same
 * exact sums and chain. The symmetric layout is the case z = 8, without the
 * bytes. */
#ifndef INFERD_CPU_Q4_H
#define INFERD_CPU_Q4_H

#include "cpu/kern.h"
#include "cpu/pool.h"
#include "engine/model.h"

#define CPU_Q4_GROUP 32
#define CPU_Q4_ROWS 64
#define CPU_Q4_REC (4 * 256 + 64 * 2)
#define CPU_Q4_RECZ (CPU_Q4_REC + 64)

/* y[m][n] = sx[m] * sum_g D[n][g] * s_g for m < M and the caller's columns. */
typedef struct cpu_mm4 {
    const int8_t *x;     /* [M][ldx] qx (signed), G * 32 bytes used per row   */
    size_t ldx;
    const int32_t *xs8;  /* [M][ldxs] 8 * sum of qx over each group          */
    size_t ldxs;
    const float *sx;     /* [M] activation scales                           */
    const uint8_t *w;    /* packed as above                                 */
    float *y;            /* [M][ldy]                                        */
    size_t ldy;
    int M, N, G;         /* G = K / 32 rounded up                           */
    int zp;              /* records with zero points (CPU_Q4_RECZ)           */
} cpu_mm4;

typedef struct cpu_q4k {
    const char *name; /* "avx512-vnni", "avx512", "avx2", "generic" */
    /* Columns [n0, n1) of a->y (n0 a multiple of CPU_Q4_ROWS) for all rows. */
    void (*mm4)(const cpu_mm4 *a, int n0, int n1);
    /* A weight row v [K] as its G = ceil(K / 32) groups: u [G * 32] = q + 8
     * and d [G], each group as engine/qdef.h's qdef_q4_group says (every
     * table gives the same bytes). */
    void (*quant)(const float *v, int K, uint8_t *u, uint16_t *d);
} cpu_q4k;

/* The portable quant (qdef_q4_group group by group), for tables without
 * their own. */
void cpu_q4_quant_rule(const float *v, int K, uint8_t *u, uint16_t *d);

/* The int4 kernels that go with the cpu_kern table called kern_name
 * ("avx512" picks VNNI when the CPU has it), or NULL if not supported. */
const cpu_q4k *cpu_q4k_select(const char *kern_name);

extern const cpu_q4k cpu_q4k_generic;
extern const cpu_q4k cpu_q4k_avx2;
extern const cpu_q4k cpu_q4k_avx512;
extern const cpu_q4k cpu_q4k_avx512_vnni;

/* A weight matrix in the packed layout. */
typedef struct cpu_q4w {
    int N, K;        /* N output rows of K inputs                   */
    int G;           /* groups per row: K / 32 rounded up            */
    int tiles;       /* N / 64 rounded up                            */
    int zp;          /* a zero point per group (records CPU_Q4_RECZ) */
    uint8_t *w;      /* tiles * G * record bytes, on 2 MiB pages     */
    const int32_t *perm; /* [K] or NULL: input j of the packed rows is
                            the activation's perm[j] (the model's
                            model_tensor.q4_perm: desc_act codes) */
} cpu_q4w;

/* Quantizes t (f32, f16 or bf16) as above, converting rows with k->to_f32
 * and quantizing them with k4->quant (the int4 table that goes with k), on
 * pool's threads when pool is not NULL; a GPTQ / AWQ linear bound as its
 * codes (t->q4, model.h) is packed as stored, with its zero points unless
 * every one is 8 (a symmetric checkpoint: the symmetric layout). */
int cpu_q4w_create(const model_tensor *t, const cpu_kern *k, const cpu_q4k *k4, cpu_pool *pool,
                   cpu_q4w **out,
                   inf_err *err);

/* An empty matrix (all q = 0, scales 0; with zp, zeros 8) to fill with
 * cpu_q4w_set_group (and cpu_q4w_set_zero). */
int cpu_q4w_alloc(int N, int K, int zp, const char *name, cpu_q4w **out, inf_err *err);

/* Stores group g of row n: 32 values q + 8 in [0, 15] (one per byte) and
 * the f16 scale d. */
void cpu_q4w_set_group(cpu_q4w *q, int n, int g, const uint8_t u[CPU_Q4_GROUP], uint16_t d);

/* Reads it back (for tests). */
void cpu_q4w_get_group(const cpu_q4w *q, int n, int g, uint8_t u[CPU_Q4_GROUP], uint16_t *d);

/* Group g of row n's zero point z in [0, 16] (a zp matrix's only; GPTQ's
 * v1 format stores z - 1 in 4 bits), and
 * reading it back: 8 in a symmetric matrix. */
void cpu_q4w_set_zero(cpu_q4w *q, int n, int g, uint8_t z);
int cpu_q4w_zero(const cpu_q4w *q, int n, int g);

void cpu_q4w_destroy(cpu_q4w *q); /* NULL-safe */

/* Bytes the packed matrix takes. */
size_t cpu_q4w_bytes(const cpu_q4w *q);

/* Quantizes one activation row x [K] with k->quant into qx [G * 32] (zeros
 * past K) and its group sums xs8 [G] (8 * sum); returns the scale. */
float cpu_q4_quant_act(const cpu_kern *k, const float *x, int K, int8_t *qx, int32_t *xs8);

/* A row qx quantized as above, gathered into the order perm [K] of a
 * matrix's inputs (cpu_q4w.perm): out[j] = qx[perm[j]], zeros past K, and
 * its group sums xs8 [G]. Per-token quantization does not depend on the
 * order, so this is the row quantized in that order. */
void cpu_q4_gather_act(const int8_t *qx, const int32_t *perm, int K, int8_t *out, int32_t *xs8);

/* The arguments of y = x . q^T for M rows quantized by cpu_q4_quant_act. */
cpu_mm4 cpu_q4w_args(const cpu_q4w *q, const int8_t *x, size_t ldx, const int32_t *xs8,
                     size_t ldxs, const float *sx, float *y, size_t ldy, int M);

#endif
