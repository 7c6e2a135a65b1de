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
 * portable path is an exact oracle for the SIMD ones in tests.
 *
 * bf16 weights on a CPU with AVX512_BF16 (table "avx512bf16", picked by
 * "auto" there; its portable twin "generic-bf16" is the oracle) use another
 * order, built on vdpbf16ps, for EVERY matmul with bf16 weights (any M), so
 * batch invariance holds on that machine; its sums differ from the f32-FMA
 * order's in the last bits. The activations are split per element into two
 * bf16 halves, hi = bf16(x) and lo = bf16(x - hi) (x - hi exact in f32),
 * where bf16() is vcvtneps2bf16: round to nearest even, a denormal input
 * taken as 0 of its sign, a NaN kept quiet. Then:
 *
 *   K is cut into blocks of CPU_KB as above. A block is cut into chunks of
 *   32 elements (past the end: x = w = 0). In chunk c (starting at k0),
 *   lane l (of 16) owns the pair e = k0+2l, o = k0+2l+1 and does, in order,
 *     acc = dp(acc, hi[o]*w[o]);  acc = dp(acc, hi[e]*w[e]);
 *     acc = dp(acc, lo[o]*w[o]);  acc = dp(acc, lo[e]*w[e]);
 *   starting from +0, where dp(a, p) is vdpbf16ps's step: the product of
 *   two bf16 is exact in f32; a (and each bf16 input) denormal counts as 0
 *   of its sign; a + p rounded to nearest even; a denormal result becomes
 *   0 of its sign. The 16 lanes then go through the tree above, and the
 *   block sums are added left to right.
 *
 * (One vdpbf16ps with hi and one with lo per 32 weights; hi + lo carries 16
 * bits of the activation's 24, see docs/engine.md for the precision.)
 *
 * exp (softmax, SiLU) is not libm's expf, whose result may differ between
 * libm builds and code paths, but one fixed sequence of IEEE float
 * operations, the same in every table (all elementwise, so vectorizing it
 * changes nothing):
 *
 *   xc = x clamped to [CPU_EXP_LO, CPU_EXP_HI] (NaN stays NaN)
 *   t = xc * log2(e) + 1.5*2^23    (two roundings: t holds round(xc*log2 e))
 *   n = t - 1.5*2^23;  r = fma(n, -C1, xc);  r = fma(n, -C2, r)
 *   p = P0; p = fma(p, r, Pi) for P1..P5;  y = fma(p, r*r, r) + 1
 *   exp = y * 2^n (2^n built from t's bits), or +0 where x < CPU_EXP_LO
 *
 * (Cephes' expf constants; within 2 ulp of the true exp.) */
#ifndef INFERD_CPU_KERN_H
#define INFERD_CPU_KERN_H

#include "engine/common.h"

#define CPU_KB 1024  /* K block of the canonical reduction                  */
#define CPU_LANES 16 /* lanes of the canonical reduction                     */
#define CPU_NC 64    /* weight rows packed per block (packed matmul path): 64
                        * (266 KB of f32) beat 128 at 32 and 64 rows on Ice Lake */
#define CPU_EXP_LO (-87.0f) /* exp below this is +0 (2^n stays normal)      */
#define CPU_EXP_HI 88.0f    /* exp above this is exp(88)                      */
#define CPU_GELU_M2C (-1.5957691216057308f) /* -2 sqrt(2 / pi): GeGLU's exp  */
#define CPU_EXP_LOG2E 1.44269504088896341f
#define CPU_EXP_MAGIC 12582912.0f /* 1.5 * 2^23: adding it rounds to integer */
#define CPU_EXP_C1 0.693359375f   /* ln 2 = C1 + C2, C1 with 9 bits          */
#define CPU_EXP_C2 (-2.12194440e-4f)
#define CPU_EXP_P0 1.9875691500e-4f
#define CPU_EXP_P1 1.3981999507e-3f
#define CPU_EXP_P2 8.3334519073e-3f
#define CPU_EXP_P3 4.1665795894e-2f
#define CPU_EXP_P4 1.6666665459e-1f
#define CPU_EXP_P5 5.0000001201e-1f

/* Row stride of a packed block: one cache line more than CPU_KB, so the rows
 * a register tile reads together do not all fall in the same L1 set. */
#define CPU_PACK_LD (CPU_KB + 16)

/* Scratch floats one thread needs for cpu_kern.mm's packing. */
#define CPU_PACK_FLOATS ((size_t)CPU_NC * CPU_PACK_LD)

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

/* int8 matmul (W8A8, `--quantization int8`): weights quantized per output
 * row, activations per token, both symmetric to [-127, 127]:
 *
 *   amax = max |v[i]| (NaNs skipped); inv = 127 / amax (f32)
 *   q[i] = round-to-nearest-even(min(max(v[i] * inv, -127), 127))
 *   scale = amax / 127 (f32); amax = 0 gives q = 0 and scale 0
 *
 *   y[m][n] = ((float)sum_k qx[m][k] * qw[n][k] * sx[m]) * sw[n]
 *
 * Weights may also come pre-quantized (compressed-tensors W8A8) with their
 * own scales and hold -128: every table is exact for qw in [-128, 127] as
 * long as qx stays in [-127, 127] (VNNI multiplies u8 by s8; vpmaddubsw's
 * |qw| of -128 is 0x80 = 128 as its unsigned operand, and a pair of
 * products, 2 * 128 * 127, is below 2^15 so never saturates).
 * The sum is exact in int32 (K * 128 * 255 < 2^31 for K below 65,700, the
 * offset form's worst case), so every table and every split of the work
 * gives the same bits with no reduction order to keep.
 *
 * Packed weights: rows padded with zeros to a multiple of CPU_QN and put in
 * groups of CPU_QG, K padded to a multiple of 4 with zeros; group g holds,
 * for each k4, 16 rows x 4 consecutive k (64 bytes):
 * byte (g * K4 + k4) * 64 + r * 4 + j is qw[16g + r][4 k4 + j]. Activations
 * are stored as qx + 128 (unsigned, what VNNI multiplies), K padded with 128
 * (zero). wsum[n] = 128 * sum_k qw[n][k] undoes the offset. */
#define CPU_QG 16
#define CPU_QN 64
typedef struct cpu_mmq {
    const uint8_t *x;      /* [M][ldx] qx + 128, K4 * 4 bytes used per row     */
    size_t ldx;
    const float *sx;       /* [M] activation scales                           */
    const int8_t *w;       /* packed as above                                 */
    const float *sw;       /* [N rounded up to CPU_QN] weight scales          */
    const int32_t *wsum;   /* [same] 128 * row sums of qw                     */
    float *y;              /* [M][ldy]                                        */
    size_t ldy;
    int M, N, K4;
} cpu_mmq;

/* int32 scratch one thread needs for cpu_kern.mmq (fits in the pack). */
#define CPU_MMQ_ROWS 240
#define CPU_MMQ_INTS ((size_t)CPU_MMQ_ROWS * 64)

typedef struct cpu_kern {
    const char *name; /* "avx512bf16", "avx512", "avx2", "generic", "generic-bf16" */
    int bf16dp;       /* bf16 weights use the vdpbf16ps order above          */
    /* Computes columns [n0, n1) of a->y for all M rows. pack: at least
     * CPU_PACK_FLOATS floats of per-thread scratch. */
    void (*mm)(const cpu_mm *a, int n0, int n1, float *pack);
    /* Canonical dot product of two f32 vectors. */
    float (*dot)(const float *a, const float *b, int n);
    /* Converts n weights of dtype wt to f32. */
    void (*to_f32)(const void *w, inf_dtype wt, float *out, int n);
    /* Attention's weighted sum of value rows: for r < R and d < D,
     * o[r*ldo + d] = fma(w[r*ldw + p], v[p*ldv + d], o[r*ldo + d]) for
     * p = 0..n-1 in order (rows kept in registers). */
    void (*wsum)(const float *w, size_t ldw, int R, const float *v, size_t ldv, int n,
                 float *o, size_t ldo, int D);
    /* Softmax numerators: x[i] = exp(x[i]*scale - m) with m the largest
     * x[i]*scale (NaNs skipped; -inf if none), exp as above. Returns m. */
    float (*softmax_exp)(float *x, int n, float scale);
    /* SwiGLU: g[i] = g[i] / (1 + exp(-g[i])) * u[i], exp as above. */
    void (*swiglu)(float *g, const float *u, int n);
    /* GeGLU with PyTorch's tanh GELU, 0.5 x (1 + tanh(z)) = x / (1 + exp(-2z)),
     * z = sqrt(2/pi) (x + 0.044715 x^3): per element, each step rounded,
     *   a = x + 0.044715f * ((x * x) * x);  e = exp(CPU_GELU_M2C * a)
     *   g[i] = x / (1 + e) * u[i]
     * with exp as above (CPU_GELU_M2C * a is -2 (sqrt(2/pi) a), as the
     * factor 2 is exact). */
    void (*geglu)(float *g, const float *u, int n);
    /* Quantizes n values as above into q (q + 128 as bytes when offset is
     * set); returns the scale. */
    float (*quant)(const float *v, int n, int8_t *q, int offset);
    /* Columns [n0, n1) of a->y (n0 a multiple of CPU_QN) for all M rows.
     * scratch: CPU_MMQ_INTS int32, 64-byte aligned. */
    void (*mmq)(const cpu_mmq *a, int n0, int n1, int32_t *scratch);
} cpu_kern;

/* Kernels by name ("auto" = the best this CPU supports, "avx512bf16",
 * "avx512", "avx2", "generic", "generic-bf16"); NULL if unknown or
 * unsupported here. "avx512" on a CPU with AVX512_BF16 is the f32-FMA path
 * (the same sums as avx2 and generic). */
const cpu_kern *cpu_kern_select(const char *name);

/* Each table; a SIMD table must only be used when the CPU supports it. */
extern const cpu_kern cpu_kern_generic;
extern const cpu_kern cpu_kern_avx2;
extern const cpu_kern cpu_kern_avx512;
/* AVX-512 without VNNI (Skylake-X): the same table with int8 products
 * formed by vpmaddubsw. */
extern const cpu_kern cpu_kern_avx512_novnni;
/* AVX-512 with AVX512_BF16 (Zen 4, Sapphire Rapids, Cooper Lake): bf16
 * weights by vdpbf16ps in the order above, all else as cpu_kern_avx512. */
extern const cpu_kern cpu_kern_avx512_bf16;
/* The portable oracle of that order: cpu_kern_generic with bf16 weights by
 * an emulation of vdpbf16ps. */
extern const cpu_kern cpu_kern_generic_bf16;
/* The vdpbf16ps matmul (built apart with -mavx512bf16); a->wt is bf16. */
void cpu_avx512_mm_bf16dp(const cpu_mm *a, int n0, int n1, float *pack);
/* The portable vdpbf16ps matmul: columns [n0, n1), a->wt is bf16. */
void cpu_generic_mm_bf16dp(const cpu_mm *a, int n0, int n1);

/* The canonical 16-lane tree sum above, in portable C (the oracles'). */
float cpu_tree16(const float v[CPU_LANES]);
/* vcvtneps2bf16 of one float (the split's bf16() above). */
uint16_t cpu_bf16_rne(float x);
/* cpu_kern_avx512's mmq, built apart with VNNI enabled. */
void cpu_avx512_mmq_vnni(const cpu_mmq *a, int n0, int n1, int32_t *scratch);

#endif
