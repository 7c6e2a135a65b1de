/* cpu_kern: the CPU backend's numeric kernels, one table per instruction set
 * (AVX-512, AVX2+FMA, portable C), picked at run time.
 *
 * Batch invariance rests on one rule: every reduction a kernel does has a
 * fixed order that depends only on the reduction length, never on how many
 * rows are computed together, how work is split across threads, or which
 * instruction set runs. For a dot product of length K (matmul outputs, q.k
 * scores, RMSNorm's sum of squares) that order is:
 *
 *   K is cut into blocks of CPU_KB elements. In a block, lane l (of 16)
 *   accumulates x[k]*w[k] for k = l, l+16, l+32, ... with a fused
 *   multiply-add starting from +0 (elements past the end count as 0*0).
 *   The 16 lanes are summed as a tree: s8[l] = v[l] + v[l+8],
 *   s4[l] = s8[l] + s8[l+4], s2[l] = s4[l] + s4[l+2], s = s2[0] + s2[1].
 *   The result is s_0 + s_1 + ... over blocks, left to right.
 *
 * AVX-512 holds the 16 lanes in one register, AVX2 in two, the portable path
 * in an array with fmaf(); all three give bit-identical results, so the
 * portable path is an exact oracle for the SIMD ones in tests. */
#ifndef INFERD_CPU_KERN_H
#define INFERD_CPU_KERN_H

#include "engine/common.h"

#define CPU_KB 1024  /* K block of the canonical reduction                  */
#define CPU_LANES 16 /* lanes of the canonical reduction                     */
#define CPU_NC 64    /* weight rows packed per block (packed matmul path)    */

/* Scratch floats one thread needs for cpu_kern.mm's packing. */
#define CPU_PACK_FLOATS ((size_t)CPU_NC * CPU_KB)

/* y[m][n] = sum_k x[m][k] * w[n][k] for m < M, n in the caller's range. */
typedef struct cpu_mm {
    const float *x;  /* [M][ldx] activations, f32                          */
    size_t ldx;
    const void *w;   /* [N][ldw] weights, row-major, dtype wt               */
    size_t ldw;
    inf_dtype wt;
    float *y;        /* [M][ldy]                                           */
    size_t ldy;
    int M, N, K;
} cpu_mm;

typedef struct cpu_kern {
    const char *name; /* "avx512", "avx2", "generic" */
    /* Computes columns [n0, n1) of a->y for all M rows. pack: at least
     * CPU_PACK_FLOATS floats of per-thread scratch. */
    void (*mm)(const cpu_mm *a, int n0, int n1, float *pack);
    /* Canonical dot product of two f32 vectors. */
    float (*dot)(const float *a, const float *b, int n);
    /* y[i] = fma(a, x[i], y[i]) for i < n. */
    void (*axpy)(float a, const float *x, float *y, int n);
    /* Converts n weights of dtype wt to f32. */
    void (*to_f32)(const void *w, inf_dtype wt, float *out, int n);
} cpu_kern;

/* Kernels by name ("auto" = the best this CPU supports, "avx512", "avx2",
 * "generic"); NULL if unknown or unsupported here. */
const cpu_kern *cpu_kern_select(const char *name);

/* Each table; a SIMD table must only be used when the CPU supports it. */
extern const cpu_kern cpu_kern_generic;
extern const cpu_kern cpu_kern_avx2;
extern const cpu_kern cpu_kern_avx512;

#endif
