/* AVX2+FMA kernels: the canonical reduction of kern.h with each 16-lane
 * accumulator held as two ymm halves (lanes 0-7, 8-15). One path for every M:
 * 2x2 tiles widen weights in registers (16 ymm registers leave no room for a
 * packed 6x4 tile); this table is the fallback for CPUs without AVX-512. */
#include "cpu/kern.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define ALWAYS static inline __attribute__((always_inline))

typedef struct v16 {
    __m256 lo, hi;
} v16;

ALWAYS __m256 widen8(const uint16_t *p, int wt)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (wt == INF_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

ALWAYS v16 load_w(const void *w, int wt, size_t off)
{
    v16 r;
    if (wt == INF_F32) {
        r.lo = _mm256_loadu_ps((const float *)w + off);
        r.hi = _mm256_loadu_ps((const float *)w + off + 8);
    } else {
        r.lo = widen8((const uint16_t *)w + off, wt);
        r.hi = widen8((const uint16_t *)w + off + 8, wt);
    }
    return r;
}

ALWAYS v16 load_x(const float *p)
{
    v16 r = {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
    return r;
}

ALWAYS v16 fma16(v16 a, v16 b, v16 c)
{
    v16 r = {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
    return r;
}

/* kern.h's tree on one accumulator. */
ALWAYS float tree(v16 v)
{
    __m256 s8 = _mm256_add_ps(v.lo, v.hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

static float w_at(const void *w, int wt, size_t i)
{
    if (wt == INF_F32)
        return ((const float *)w)[i];
    uint16_t h = ((const uint16_t *)w)[i];
    return wt == INF_F16 ? inf_f16_to_f32(h) : inf_bf16_to_f32(h);
}

/* One K block for an MR x NR tile (see kern_avx512.c's tile()). The last
 * partial 16-chunk goes through zero-padded copies. */
ALWAYS void tile(const int MR, const int NR, const int WT, const float *x,
                 size_t ldx, const void *w, size_t ldw, int klen, float *y,
                 size_t ldy, int first)
{
    v16 acc[4];
    const v16 zero = {_mm256_setzero_ps(), _mm256_setzero_ps()};
#pragma GCC unroll 4
    for (int a = 0; a < MR * NR; a++)
        acc[a] = zero;
    int k = 0;
    for (; k + 16 <= klen; k += 16) {
        v16 wv[2];
#pragma GCC unroll 2
        for (int j = 0; j < NR; j++)
            wv[j] = load_w(w, WT, (size_t)j * ldw + (size_t)k);
#pragma GCC unroll 2
        for (int i = 0; i < MR; i++) {
            v16 xv = load_x(x + (size_t)i * ldx + k);
#pragma GCC unroll 2
            for (int j = 0; j < NR; j++)
                acc[i * NR + j] = fma16(xv, wv[j], acc[i * NR + j]);
        }
    }
    if (k < klen) {
        float wt_[2][16], xt[2][16];
        memset(wt_, 0, sizeof wt_);
        memset(xt, 0, sizeof xt);
        for (int j = 0; j < NR; j++)
            for (int l = 0; k + l < klen; l++)
                wt_[j][l] = w_at(w, WT, (size_t)j * ldw + (size_t)(k + l));
        for (int i = 0; i < MR; i++)
            memcpy(xt[i], x + (size_t)i * ldx + k, (size_t)(klen - k) * sizeof(float));
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++)
                acc[i * NR + j] = fma16(load_x(xt[i]), load_x(wt_[j]), acc[i * NR + j]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int j = 0; j < NR; j++) {
            float s = tree(acc[i * NR + j]);
            float *p = y + (size_t)i * ldy + j;
            *p = first ? s : *p + s;
        }
}

typedef void (*tile_fn)(const float *x, size_t ldx, const void *w, size_t ldw,
                        int klen, float *y, size_t ldy, int first);

#define TILE(MR, NR, WT, NAME)                                              \
    static void NAME(const float *x, size_t ldx, const void *w, size_t ldw, \
                     int klen, float *y, size_t ldy, int first)             \
    {                                                                       \
        tile(MR, NR, WT, x, ldx, w, ldw, klen, y, ldy, first);              \
    }
#define TILE_SET(WT, T)                                                     \
    TILE(1, 1, WT, t_##T##_1x1) TILE(1, 2, WT, t_##T##_1x2)                 \
    TILE(2, 1, WT, t_##T##_2x1) TILE(2, 2, WT, t_##T##_2x2)
TILE_SET(INF_F32, f32)
TILE_SET(INF_F16, f16)
TILE_SET(INF_BF16, bf16)

/* [dtype][MR-1][NR-1] */
#define TILE_ROW(T) {{t_##T##_1x1, t_##T##_1x2}, {t_##T##_2x1, t_##T##_2x2}}
static const tile_fn tiles[3][2][2] = {
    [INF_F32] = TILE_ROW(f32),
    [INF_F16] = TILE_ROW(f16),
    [INF_BF16] = TILE_ROW(bf16),
};

static void mm(const cpu_mm *a, int n0, int n1, float *pack)
{
    (void)pack;
    size_t es = inf_dtype_size(a->wt);
    for (int j = n0; j < n1;) {
        int nr = n1 - j >= 2 ? 2 : 1;
        for (int i = 0; i < a->M;) {
            int mr = a->M - i >= 2 ? 2 : 1;
            tile_fn f = tiles[a->wt][mr - 1][nr - 1];
            for (int kb = 0; kb < a->K; kb += CPU_KB) {
                int klen = a->K - kb < CPU_KB ? a->K - kb : CPU_KB;
                f(a->x + (size_t)i * a->ldx + kb, a->ldx,
                  (const char *)a->w + ((size_t)j * a->ldw + kb) * es, a->ldw,
                  klen, a->y + (size_t)i * a->ldy + j, a->ldy, kb == 0);
            }
            i += mr;
        }
        j += nr;
    }
}

static float dot(const float *a, const float *b, int n)
{
    float y = 0.0f;
    for (int kb = 0; kb < n; kb += CPU_KB) {
        int klen = n - kb < CPU_KB ? n - kb : CPU_KB;
        t_f32_1x1(a + kb, 0, b + kb, 0, klen, &y, 0, kb == 0);
    }
    return y;
}

static void to_f32(const void *w, inf_dtype wt, float *out, int n)
{
    int i = 0;
    if (wt != INF_F32)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(out + i, widen8((const uint16_t *)w + i, wt));
    for (; i < n; i++)
        out[i] = w_at(w, wt, (size_t)i);
}

/* Up to 2 rows x 32 columns of wsum with the outputs in registers. */
ALWAYS void wsum_tile(const int RR, const float *w, size_t ldw, const float *v, size_t ldv,
                      int n, float *o, size_t ldo)
{
    __m256 acc[8];
#pragma GCC unroll 2
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            acc[r * 4 + c] = _mm256_loadu_ps(o + (size_t)r * ldo + 8 * c);
    for (int p = 0; p < n; p++) {
        __m256 vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            vv[c] = _mm256_loadu_ps(v + (size_t)p * ldv + 8 * c);
#pragma GCC unroll 2
        for (int r = 0; r < RR; r++) {
            __m256 b = _mm256_set1_ps(w[(size_t)r * ldw + p]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                acc[r * 4 + c] = _mm256_fmadd_ps(b, vv[c], acc[r * 4 + c]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            _mm256_storeu_ps(o + (size_t)r * ldo + 8 * c, acc[r * 4 + c]);
}

static void wsum(const float *w, size_t ldw, int R, const float *v, size_t ldv, int n,
                 float *o, size_t ldo, int D)
{
    int d0 = 0;
    for (; d0 + 32 <= D; d0 += 32) {
        int r = 0;
        for (; r + 2 <= R; r += 2)
            wsum_tile(2, w + (size_t)r * ldw, ldw, v + d0, ldv, n, o + (size_t)r * ldo + d0, ldo);
        if (r < R)
            wsum_tile(1, w + (size_t)r * ldw, ldw, v + d0, ldv, n, o + (size_t)r * ldo + d0, ldo);
    }
    /* columns past the last 32: the same fma per element */
    for (int r = 0; r < R; r++)
        for (int p = 0; p < n; p++)
            for (int d = d0; d < D; d++) {
                float *y = o + (size_t)r * ldo + d;
                *y = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(w[(size_t)r * ldw + p]),
                                                _mm_set_ss(v[(size_t)p * ldv + d]),
                                                _mm_set_ss(*y)));
            }
}

/* kern.h's exp on 8 lanes, operation for operation. */
ALWAYS __m256 exp8(__m256 x)
{
    __m256 xc = _mm256_max_ps(_mm256_set1_ps(CPU_EXP_LO), x); /* NaN stays */
    xc = _mm256_min_ps(_mm256_set1_ps(CPU_EXP_HI), xc);
    __m256 t = _mm256_mul_ps(xc, _mm256_set1_ps(CPU_EXP_LOG2E));
    t = _mm256_add_ps(t, _mm256_set1_ps(CPU_EXP_MAGIC));
    __m256 n = _mm256_sub_ps(t, _mm256_set1_ps(CPU_EXP_MAGIC));
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-CPU_EXP_C1), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-CPU_EXP_C2), r);
    __m256 p = _mm256_set1_ps(CPU_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CPU_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CPU_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CPU_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CPU_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CPU_EXP_P5));
    __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    __m256i sb = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(127 - 0x4b400000)), 23);
    __m256 e = _mm256_mul_ps(y, _mm256_castsi256_ps(sb));
    __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(CPU_EXP_LO), _CMP_LT_OQ);
    return _mm256_andnot_ps(under, e);
}

static float softmax_exp(float *x, int n, float scale)
{
    __m256 sv = _mm256_set1_ps(scale), mv = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sv);
        _mm256_storeu_ps(x + i, v);
        mv = _mm256_max_ps(v, mv); /* a NaN in v keeps mv */
    }
    /* the tail through a padded copy: -inf never wins the max */
    float tail[8];
    int nt = n - i;
    for (int j = 0; j < 8; j++)
        tail[j] = j < nt ? x[i + j] * scale : -INFINITY;
    mv = _mm256_max_ps(_mm256_loadu_ps(tail), mv);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    float m = _mm_cvtss_f32(m4);
    __m256 mb = _mm256_set1_ps(m);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mb)));
    _mm256_storeu_ps(tail, exp8(_mm256_sub_ps(_mm256_loadu_ps(tail), mb)));
    for (int j = 0; j < nt; j++)
        x[i + j] = tail[j];
    return m;
}

ALWAYS __m256 swiglu8(__m256 g, __m256 u)
{
    __m256 e = exp8(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
    __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), e);
    return _mm256_mul_ps(_mm256_div_ps(g, d), u);
}

/* g[i] = f(g[i], u[i]) over n elements, 8 at a time, the tail through a
 * zero-padded copy (the GLUs). */
ALWAYS void glu_loop(float *g, const float *u, int n, __m256 (*f)(__m256, __m256))
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, f(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        float gt[8] = {0}, ut[8] = {0};
        memcpy(gt, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(ut, u + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(gt, f(_mm256_loadu_ps(gt), _mm256_loadu_ps(ut)));
        memcpy(g + i, gt, (size_t)(n - i) * sizeof(float));
    }
}

static void swiglu(float *g, const float *u, int n) { glu_loop(g, u, n, swiglu8); }

ALWAYS __m256 geglu8(__m256 x, __m256 u)
{
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 a = _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(0.044715f), x3));
    __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(CPU_GELU_M2C), a));
    __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), e);
    return _mm256_mul_ps(_mm256_div_ps(x, d), u);
}

static void geglu(float *g, const float *u, int n) { glu_loop(g, u, n, geglu8); }

/* kern.h's int8 quantization, 8 lanes at a time (tail scalar, same ops). */
static float quant(const float *v, int n, int8_t *q, int offset)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mv = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) /* max_ps returns its second operand for NaN */
        mv = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i), absmask), mv);
    float lanes[8], amax = 0.0f;
    _mm256_storeu_ps(lanes, mv);
    for (int l = 0; l < 8; l++)
        amax = lanes[l] > amax ? lanes[l] : amax;
    for (int j = i; j < n; j++)
        amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    __m256 iv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    int add = offset ? 128 : 0;
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 t = _mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), iv), lo);
        int32_t r[8];
        _mm256_storeu_si256((__m256i *)r, _mm256_cvtps_epi32(_mm256_min_ps(t, hi)));
        for (int l = 0; l < 8; l++)
            q[i + l] = (int8_t)(uint8_t)(r[l] + add);
    }
    for (; i < n; i++) {
        float t = fminf(fmaxf(v[i] * inv, -127.0f), 127.0f);
        q[i] = (int8_t)(uint8_t)((int)rintf(t) + add);
    }
    return amax / 127.0f;
}

/* MR rows x one group of 16 weight rows over all of K. AVX2 has no VNNI:
 * vpmaddubsw multiplies |w| by x carrying w's sign (no pair can saturate:
 * 2 * 127 * 127 < 2^15), vpmaddwd adds the pairs into int32. */
ALWAYS void qtile2(const int MR, const cpu_mmq *a, int m0, int n0)
{
    __m256i acc[8];
    for (int t = 0; t < 2 * MR; t++)
        acc[t] = _mm256_setzero_si256();
    const int8_t *w = a->w + (size_t)(n0 / CPU_QG) * a->K4 * 64;
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    for (int k = 0; k < a->K4; k++) {
        __m256i wv[2], wa[2];
        for (int h = 0; h < 2; h++) {
            wv[h] = _mm256_loadu_si256((const __m256i *)(w + (size_t)k * 64 + 32 * h));
            wa[h] = _mm256_abs_epi8(wv[h]);
        }
        for (int i = 0; i < MR; i++) {
            int32_t x4;
            memcpy(&x4, a->x + (size_t)(m0 + i) * a->ldx + (size_t)k * 4, 4);
            __m256i xs = _mm256_xor_si256(_mm256_set1_epi32(x4), flip); /* qx, signed */
            for (int h = 0; h < 2; h++) {
                __m256i p = _mm256_maddubs_epi16(wa[h], _mm256_sign_epi8(xs, wv[h]));
                acc[2 * i + h] = _mm256_add_epi32(acc[2 * i + h], _mm256_madd_epi16(p, ones));
            }
        }
    }
    int cols = a->N - n0 < CPU_QG ? a->N - n0 : CPU_QG;
    for (int i = 0; i < MR; i++) {
        __m256 sx = _mm256_set1_ps(a->sx[m0 + i]);
        float out[16];
        for (int h = 0; h < 2; h++)
            _mm256_storeu_ps(out + 8 * h,
                             _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[2 * i + h]), sx),
                                           _mm256_loadu_ps(a->sw + n0 + 8 * h)));
        memcpy(a->y + (size_t)(m0 + i) * a->ldy + n0, out, (size_t)cols * sizeof(float));
    }
}

static void qtile2_1(const cpu_mmq *a, int m0, int n0) { qtile2(1, a, m0, n0); }
static void qtile2_2(const cpu_mmq *a, int m0, int n0) { qtile2(2, a, m0, n0); }
static void qtile2_3(const cpu_mmq *a, int m0, int n0) { qtile2(3, a, m0, n0); }
static void qtile2_4(const cpu_mmq *a, int m0, int n0) { qtile2(4, a, m0, n0); }

static void mmq(const cpu_mmq *a, int n0, int n1, int32_t *scratch)
{
    static void (*const tiles_q[4])(const cpu_mmq *, int, int) = {qtile2_1, qtile2_2,
                                                                  qtile2_3, qtile2_4};
    (void)scratch;
    for (int n = n0; n < n1; n += CPU_QG)
        for (int m = 0; m < a->M; m += 4)
            tiles_q[(a->M - m < 4 ? a->M - m : 4) - 1](a, m, n);
}

const cpu_kern cpu_kern_avx2 = {
    .name = "avx2", .mm = mm, .dot = dot, .to_f32 = to_f32,
    .wsum = wsum, .softmax_exp = softmax_exp, .swiglu = swiglu, .geglu = geglu,
    .quant = quant, .mmq = mmq,
};
