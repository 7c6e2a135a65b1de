/* kern.h's vdpbf16ps order for bf16 weights: the portable emulation
 * (generic-bf16) follows the instruction's definition (checked on values
 * whose rounding is known), the AVX512_BF16 table equals it bit for bit for
 * many shapes, row groupings and column splits, and both stay within the
 * hi + lo split's error of a float64 dot product. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpu/kern.h"

static uint64_t rng_state = 7;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void run_mm(const cpu_kern *k, const float *x, int M, int K, const uint16_t *w, int N,
                   float *y, int n0, int n1)
{
    float *pack = aligned_alloc(64, CPU_PACK_FLOATS * sizeof(float));
    cpu_mm a = {.x = x, .ldx = (size_t)K, .w = w, .ldw = (size_t)K, .wt = INF_BF16,
                .y = y, .ldy = (size_t)N, .M = M, .N = N, .K = K};
    k->mm(&a, n0, n1, pack);
    free(pack);
}

/* bf16(): round to nearest even, denormals to 0, NaN stays NaN. */
static void test_kern_bf16_rounding(void **state)
{
    (void)state;
    assert_int_equal(cpu_bf16_rne(1.0f), 0x3f80);
    assert_int_equal(cpu_bf16_rne(from_bits(0x3f808000u)), 0x3f80); /* tie to even */
    assert_int_equal(cpu_bf16_rne(from_bits(0x3f818000u)), 0x3f82); /* tie to even (up) */
    assert_int_equal(cpu_bf16_rne(from_bits(0x3f808001u)), 0x3f81);
    assert_int_equal(cpu_bf16_rne(-2.0f), 0xc000);
    assert_int_equal(cpu_bf16_rne(from_bits(0x00400000u)), 0x0000); /* denormal */
    assert_int_equal(cpu_bf16_rne(from_bits(0x80400000u)), 0x8000);
    assert_int_equal(cpu_bf16_rne(INFINITY), 0x7f80);
    uint16_t n = cpu_bf16_rne(NAN);
    assert_true((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0);
}

/* One pair, values picked so that each rounding step of the definition
 * shows: the odd product first, then the even one, each rounded. */
static void test_kern_bf16_step_order(void **state)
{
    (void)state;
    const cpu_kern *g = cpu_kern_select("generic-bf16");
    /* K = 34: lane 0 sees k = 1, 0 (chunk 0) then 33, 32 (chunk 1). With
     * x = 1 and w[1] = 1, w[33] = 2^-24, w[32] = -1: odd first, each step
     * rounded, gives (1 + 2^-24) - 1 = 1 - 1 = 0; even first would give
     * 2^-24, and one rounding of the whole sum 2^-24 too. */
    float x[34];
    uint16_t w[34] = {0};
    for (int k = 0; k < 34; k++)
        x[k] = 1.0f;
    w[1] = 0x3f80, w[33] = 0x3380, w[32] = 0xbf80;
    float y = -1;
    run_mm(g, x, 1, 34, w, 1, &y, 0, 1);
    assert_true(y == 0.0f);
    const cpu_kern *s = cpu_kern_select("avx512bf16");
    if (s) { /* the hardware's own answer */
        y = -1;
        run_mm(s, x, 1, 34, w, 1, &y, 0, 1);
        assert_true(y == 0.0f);
    }
    /* hi/lo split: x = 1 + 2^-10 is not a bf16; hi = 1, lo = 2^-10, so the
     * product with w = 1 is exact (plain bf16 activations would give 1). */
    float x1 = 1.0f + 0x1p-10f;
    uint16_t w1 = 0x3f80;
    run_mm(g, &x1, 1, 1, &w1, 1, &y, 0, 1);
    assert_true(y == x1);
    /* a denormal accumulator or product is flushed */
    float x2[2] = {0x1p-70f, 0x1p-70f};
    uint16_t w2[2] = {0x1c80, 0x1c80}; /* 2^-70 each: products 2^-140, denormal */
    run_mm(g, x2, 1, 2, w2, 1, &y, 0, 1);
    assert_true(y == 0.0f);
}

static const cpu_kern *simd(void)
{
    const cpu_kern *k = cpu_kern_select("avx512bf16");
    if (!k)
        printf("note: this CPU has no AVX512_BF16: avx512bf16 kernels not tested here\n");
    return k;
}

/* Fills x (with some specials) and bf16 weights w (their values in wf). */
static void fill(float *x, size_t nx, uint16_t *w, float *wf, size_t nw, int specials)
{
    for (size_t i = 0; i < nx; i++) {
        x[i] = frand() * (i % 7 == 0 ? 64.0f : 1.0f);
        if (specials && i % 97 == 3)
            x[i] = from_bits(0x00012345u); /* denormal activation */
        if (specials && i % 89 == 5)
            x[i] = 1.0f + 0x1p-9f + 0x1p-17f; /* hi / lo rounding ties */
    }
    for (size_t i = 0; i < nw; i++) {
        w[i] = cpu_bf16_rne(frand());
        if (specials && i % 101 == 7)
            w[i] = 0x0001; /* denormal weight */
        uint32_t u = (uint32_t)w[i] << 16;
        memcpy(&wf[i], &u, 4);
    }
}

/* avx512bf16 == generic-bf16 bit for bit, and both within the split's error
 * of float64: |err| <= 2^-16 * sum |x w| plus f32 accumulation. */
static void test_kern_bf16_simd_matches_oracle(void **state)
{
    (void)state;
    const cpu_kern *g = cpu_kern_select("generic-bf16"), *s = simd();
    const int Ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 37, 70};
    const int Ns[] = {1, 7, 8, 9, 33};
    const int Ks[] = {1, 2, 5, 16, 31, 32, 33, 64, 100, 513, 1024, 1100, 2080, 9000};
    double worst = 0;
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++) {
                int M = Ms[mi], N = Ns[ni], K = Ks[ki];
                if (K == 9000 && M > 9)
                    continue; /* the oracle is slow; 9000 checks the K-block path */
                float *x = malloc(sizeof(float) * (size_t)M * K);
                float *wf = malloc(sizeof(float) * (size_t)N * K);
                uint16_t *w = malloc(2 * (size_t)N * K);
                fill(x, (size_t)M * K, w, wf, (size_t)N * K, (int)(ki % 2));
                float *ref = malloc(sizeof(float) * (size_t)M * N);
                float *y = malloc(sizeof(float) * (size_t)M * N);
                run_mm(g, x, M, K, w, N, ref, 0, N);
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        double d = 0, mag = 0;
                        for (int k = 0; k < K; k++) {
                            float xk = x[(size_t)m * K + k];
                            if (fabsf(xk) < 0x1p-126f)
                                xk = 0; /* DAZ */
                            d += (double)xk * wf[(size_t)n * K + k];
                            mag += fabs((double)xk * wf[(size_t)n * K + k]);
                        }
                        double e = fabs(ref[(size_t)m * N + n] - d) / (mag + 1e-30);
                        if (e > worst)
                            worst = e;
                        if (e > 0x1p-15)
                            fail_msg("generic-bf16 M=%d N=%d K=%d: error %.3g of sum|xw|", M,
                                     N, K, e);
                    }
                if (s) {
                    run_mm(s, x, M, K, w, N, y, 0, N);
                    if (memcmp(y, ref, sizeof(float) * (size_t)M * N))
                        fail_msg("avx512bf16 mm differs from generic-bf16: M=%d N=%d K=%d", M, N,
                                 K);
                }
                free(x), free(wf), free(w), free(ref), free(y);
            }
    printf("note: worst error of the hi+lo split: %.3g of sum|x*w|\n", worst);
}

/* A row gives the same bits alone or among 100 rows, and for any column
 * split, on both tables. */
static void test_kern_bf16_row_and_split_invariant(void **state)
{
    (void)state;
    enum { M = 100, N = 77, K = 2100 };
    const cpu_kern *ks[2] = {cpu_kern_select("generic-bf16"), simd()};
    float *x = malloc(sizeof(float) * M * K), *wf = malloc(sizeof(float) * N * K);
    uint16_t *w = malloc(2 * (size_t)N * K);
    fill(x, (size_t)M * K, w, wf, (size_t)N * K, 1);
    float *all = malloc(sizeof(float) * M * N), *part = malloc(sizeof(float) * M * N);
    for (int t = 0; t < 2; t++) {
        if (!ks[t])
            continue;
        run_mm(ks[t], x, M, K, w, N, all, 0, N);
        run_mm(ks[t], x, M, K, w, N, part, 0, 13);
        run_mm(ks[t], x, M, K, w, N, part, 13, 50);
        run_mm(ks[t], x, M, K, w, N, part, 50, N);
        assert_memory_equal(all, part, sizeof(float) * M * N);
        for (int m = 0; m < M; m += 9) {
            float one[N];
            run_mm(ks[t], x + (size_t)m * K, 1, K, w, N, one, 0, N);
            if (memcmp(one, all + (size_t)m * N, sizeof one))
                fail_msg("%s: row %d alone differs from among %d", ks[t]->name, m, M);
            run_mm(ks[t], x + (size_t)m * K, M - m < 5 ? M - m : 5, K, w, N, part, 0, N);
            assert_memory_equal(part, all + (size_t)m * N, sizeof one);
        }
    }
    free(x), free(wf), free(w), free(all), free(part);
}

/* f32 and f16 weights are untouched by the bf16 tables. */
static void test_kern_bf16_other_dtypes_unchanged(void **state)
{
    (void)state;
    enum { M = 3, N = 9, K = 100 };
    float x[M * K], w[N * K], a[M * N], b[M * N];
    for (int i = 0; i < M * K; i++)
        x[i] = frand();
    for (int i = 0; i < N * K; i++)
        w[i] = frand();
    const cpu_kern *g = cpu_kern_select("generic"), *gb = cpu_kern_select("generic-bf16");
    float *pack = aligned_alloc(64, CPU_PACK_FLOATS * sizeof(float));
    cpu_mm m = {.x = x, .ldx = K, .w = w, .ldw = K, .wt = INF_F32, .y = a, .ldy = N,
                .M = M, .N = N, .K = K};
    g->mm(&m, 0, N, pack);
    m.y = b;
    gb->mm(&m, 0, N, pack);
    assert_memory_equal(a, b, sizeof a);
    if (simd()) {
        simd()->mm(&m, 0, N, pack);
        assert_memory_equal(a, b, sizeof a);
    }
    assert_true(gb->bf16dp && !g->bf16dp);
    free(pack);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kern_bf16_rounding),
        cmocka_unit_test(test_kern_bf16_step_order),
        cmocka_unit_test(test_kern_bf16_simd_matches_oracle),
        cmocka_unit_test(test_kern_bf16_row_and_split_invariant),
        cmocka_unit_test(test_kern_bf16_other_dtypes_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
