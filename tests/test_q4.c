/* int4 kernels (cpu/q4.h): every table equals the portable one bit for bit
 * over shapes with row, column and group tails; a row's result does not
 * depend on the rows computed with it or on how columns are split; packing
 * round-trips; and the result is the float64 value of the same integers;
 * the same for matrices with zero points (a GPTQ / AWQ tensor's codes);
 * and a quantized row gathered into an order of its inputs (desc_act) is the
 * row quantized in that order.
 * qdef_q4_group follows its rule (engine/qdef.h) on ties, zeros, NaN,
 * infinities, subnormals and scales past f16. (The quantization of whole
 * models is checked against numpy by tests/ref/check_engine.py's int4.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpu/q4.h"
#include "engine/common.h"
#include "engine/gguf.h"
#include "engine/qdef.h"

static uint64_t rng_state = 7;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static const cpu_q4k *tables[4];
static int n_tables;

static int setup(void **state)
{
    (void)state;
    tables[n_tables++] = &cpu_q4k_generic;
    const char *names[] = {"avx2", "avx512"};
    for (int i = 0; i < 2; i++) {
        const cpu_q4k *k = cpu_q4k_select(names[i]);
        if (k)
            tables[n_tables++] = k;
        else
            printf("note: %s int4 kernels not supported on this CPU; not tested here\n", names[i]);
    }
    /* AVX-512 without VNNI too, where the CPU has VNNI (same instructions
     * otherwise) */
    if (cpu_q4k_select("avx512") == &cpu_q4k_avx512_vnni)
        tables[n_tables++] = &cpu_q4k_avx512;
    return 0;
}

typedef struct fix {
    int M, N, K;
    float *w, *x;        /* [N][K], [M][K] */
    uint8_t *codes, *zero; /* zp: a GPTQ-style tensor's codes and zeros */
    uint16_t *scale;
    cpu_q4w *q;
    int8_t *qx;          /* [M][G*32] */
    int32_t *xs8;        /* [M][G] */
    float *sx;
} fix;

/* zp: the weights are codes with a zero point per 32 (model_tensor.q4),
 * zeros over all of [0, 16]; K is then made even. */
static void fix_make_zp(fix *f, int M, int N, int K, int zp)
{
    K += zp && K % 2;
    f->M = M, f->N = N, f->K = K;
    f->w = malloc(sizeof(float) * (size_t)N * K);
    f->x = malloc(sizeof(float) * (size_t)M * K);
    for (int i = 0; i < N * K; i++)
        f->w[i] = frand() * (1 + i % 7); /* groups of different sizes */
    for (int i = 0; i < M * K; i++)
        f->x[i] = frand();
    model_tensor t = {.dtype = INF_F32, .data = f->w, .rows = N, .cols = K, .name = "w"};
    int B = (K + 31) / 32;
    f->codes = f->zero = NULL;
    f->scale = NULL;
    if (zp) {
        f->codes = malloc((size_t)N * K / 2);
        f->zero = malloc((size_t)N * B);
        f->scale = malloc(sizeof(uint16_t) * (size_t)N * B);
        for (int i = 0; i < N * K / 2; i++) {
            frand();
            f->codes[i] = (uint8_t)(rng_state >> 40);
        }
        for (int i = 0; i < N * B; i++) {
            f->zero[i] = (uint8_t)(i % 17);
            f->scale[i] = inf_f32_to_f16(frand() * 0.05f);
        }
        f->codes[0] = 0xf0; /* codes 0 and 15 against zero 0 */
        t = (model_tensor){.dtype = INF_DTYPE_NONE, .rows = N, .cols = K, .name = "w",
                           .q4 = f->codes, .q4_scale = f->scale, .q4_zero = f->zero};
    }
    inf_err err;
    assert_int_equal(cpu_q4w_create(&t, cpu_kern_select("generic"), &cpu_q4k_generic, NULL, &f->q, &err), 0);
    int G = f->q->G;
    f->qx = malloc((size_t)M * G * 32);
    f->xs8 = malloc(sizeof(int32_t) * (size_t)M * G);
    f->sx = malloc(sizeof(float) * (size_t)M);
    for (int m = 0; m < M; m++)
        f->sx[m] = cpu_q4_quant_act(cpu_kern_select("generic"), f->x + (size_t)m * K, K,
                                    f->qx + (size_t)m * G * 32, f->xs8 + (size_t)m * G);
}

static void fix_make(fix *f, int M, int N, int K)
{
    fix_make_zp(f, M, N, K, 0);
}

static void fix_free(fix *f)
{
    free(f->w), free(f->x), free(f->qx), free(f->xs8), free(f->sx);
    free(f->codes), free(f->zero), free(f->scale);
    cpu_q4w_destroy(f->q);
}

/* Rows [m0, m0 + M) into y [M][N], columns [n0, n1). */
static void run(const cpu_q4k *k, const fix *f, int m0, int M, float *y, int n0, int n1)
{
    int G = f->q->G;
    cpu_mm4 a = cpu_q4w_args(f->q, f->qx + (size_t)m0 * G * 32, (size_t)G * 32,
                             f->xs8 + (size_t)m0 * G, (size_t)G, f->sx + m0, y, (size_t)f->N, M);
    k->mm4(&a, n0, n1);
}

/* Every table equals generic bit for bit, and generic equals the float64
 * sum of the same quantized integers within the chain's rounding. */
static void test_q4_tables_match_oracle_all_shapes(void **state)
{
    (void)state;
    const int Ms[] = {1, 2, 3, 4, 5, 9};
    const int Ns[] = {1, 15, 64, 65, 130};
    const int Ks[] = {1, 31, 32, 33, 100, 600};
    for (int zp = 0; zp < 2; zp++)
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++) {
                fix f;
                fix_make_zp(&f, Ms[mi], Ns[ni], Ks[ki], zp);
                int M = f.M, N = f.N, G = f.q->G;
                float *ref = calloc((size_t)M * N, sizeof(float));
                float *y = calloc((size_t)M * N, sizeof(float));
                run(tables[0], &f, 0, M, ref, 0, N);
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        double want = 0, mag = 0;
                        for (int g = 0; g < G; g++) {
                            uint8_t u[32];
                            uint16_t d;
                            cpu_q4w_get_group(f.q, n, g, u, &d);
                            int z = cpu_q4w_zero(f.q, n, g);
                            if (zp) { /* the tensor's own code, scale and zero */
                                size_t b = (size_t)n * G + g;
                                assert_int_equal(z, f.zero[b]);
                                assert_int_equal(d, f.scale[b]);
                                for (int i = 0; i < 32 && g * 32 + i < f.K; i++) {
                                    int k = g * 32 + i;
                                    assert_int_equal(u[i], f.codes[((size_t)n * f.K + k) / 2] >> (4 * (k % 2)) & 15);
                                }
                            }
                            long s = 0;
                            for (int i = 0; i < 32; i++)
                                s += (long)(u[i] - z) * f.qx[(size_t)m * G * 32 + g * 32 + i];
                            want += (double)s * inf_f16_to_f32(d);
                            mag += fabs((double)s * inf_f16_to_f32(d));
                        }
                        want *= f.sx[m];
                        mag *= f.sx[m];
                        assert_true(fabs(ref[(size_t)m * N + n] - want) <= 1e-6 * mag + 1e-30);
                    }
                for (int t = 1; t < n_tables; t++) {
                    memset(y, 0, sizeof(float) * (size_t)M * N);
                    run(tables[t], &f, 0, M, y, 0, N);
                    if (memcmp(y, ref, sizeof(float) * (size_t)M * N))
                        fail_msg("%s int4 differs from generic: M=%d N=%d K=%d zp=%d",
                                 tables[t]->name, M, N, f.K, zp);
                }
                free(ref), free(y);
                fix_free(&f);
            }
}

/* A row's result is the same alone, among 37 rows or 5, and whatever
 * column tiles a thread is given. */
static void test_q4_row_and_split_invariant(void **state)
{
    (void)state;
    enum { M = 37, N = 200, K = 300 };
    for (int zp = 0; zp < 2; zp++) {
    fix f;
    fix_make_zp(&f, M, N, K, zp);
    float *all = malloc(sizeof(float) * M * N), *part = malloc(sizeof(float) * M * N);
    for (int t = 0; t < n_tables; t++) {
        run(tables[t], &f, 0, M, all, 0, N);
        run(tables[t], &f, 0, M, part, 0, 64);
        run(tables[t], &f, 0, M, part, 64, 192);
        run(tables[t], &f, 0, M, part, 192, N);
        assert_memory_equal(all, part, sizeof(float) * M * N);
        for (int m = 0; m < M; m += 4) {
            float one[N];
            run(tables[t], &f, m, 1, one, 0, N);
            assert_memory_equal(one, all + (size_t)m * N, sizeof one);
        }
        run(tables[t], &f, 3, 5, part, 0, N);
        assert_memory_equal(part, all + 3 * N, sizeof(float) * 5 * N);
    }
    free(all), free(part);
    fix_free(&f);
    }
}

/* qdef.h's rule for one group (and every table's quant), spelled out as it reads: a the first value
 * of largest |v| (NaNs never larger), d = f16(a / -8) capped at the
 * largest finite f16, q = nearbyint(v / D) clamped to [-8, 7], NaN -8. */
static void q4_rule(const float *v, int len, uint8_t u[32], uint16_t *d)
{
    float a = 0.0f;
    for (int i = 0; i < len; i++)
        if (fabsf(v[i]) > fabsf(a))
            a = v[i];
    uint16_t h = inf_f32_to_f16(a / -8.0f);
    if ((h & 0x7c00u) == 0x7c00u)
        h = (uint16_t)((h & 0x8000u) | 0x7bffu);
    float D = inf_f16_to_f32(h), inv = D != 0.0f ? 1.0f / D : 0.0f;
    for (int i = 0; i < 32; i++) {
        float t = i < len ? nearbyintf(v[i] * inv) : 0.0f;
        t = isnan(t) || t < -8.0f ? -8.0f : t > 7.0f ? 7.0f : t;
        u[i] = (uint8_t)((int)t + 8);
    }
    *d = h;
}

static void test_q4_group_rule(void **state)
{
    (void)state;
    float v[32];
    for (int c = 0; c < 4000; c++) {
        int len = 1 + c % 32;
        float mag = c % 7 == 0 ? 1e-6f : c % 7 == 1 ? 1e30f : c % 7 == 2 ? 3e-41f : 1.0f;
        for (int i = 0; i < 32; i++)
            v[i] = frand() * mag;
        switch (c % 11) { /* the cases the rule names */
        case 0: v[c % len] = -v[(c + 1) % len]; break;     /* a tie of +m and -m */
        case 1: memset(v, 0, sizeof v); v[0] = -0.0f; break; /* zeros: d is +0 */
        case 2: v[c % len] = NAN; break;
        case 3: v[c % len] = INFINITY; break;
        case 4: v[c % len] = 1e6f; break;                  /* a scale past f16 */
        case 5: for (int i = 0; i < len; i++) v[i] = (float)(i % 17) - 8.0f; break;
        case 6: for (int i = 0; i < len; i++) v[i] = ((float)(i % 9) - 4.0f) * 0.5f; break; /* halves */
        default: break;
        }
        uint8_t u[32], want[32];
        uint16_t d, wd;
        qdef_q4_group(v, len, u, &d);
        q4_rule(v, len, want, &wd);
        if (d != wd || memcmp(u, want, sizeof u))
            fail_msg("case %d (len %d): scale %04x codes differ from the rule's (%04x)", c, len,
                     d, wd);
        for (int t = 0; t < n_tables; t++) { /* each table's quant: the same bytes */
            uint8_t tu[32];
            uint16_t td;
            tables[t]->quant(v, len, tu, &td);
            if (td != wd || memcmp(tu, want, sizeof tu))
                fail_msg("%s quant, case %d (len %d): scale %04x codes differ from the rule's "
                         "(%04x)", tables[t]->name, c, len, td, wd);
        }
    }
    /* whole rows: groups and the tail group in place */
    const int Ks[] = {1, 31, 32, 33, 100, 600};
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
        int K = Ks[ki], G = (K + 31) / 32;
        float *row = malloc(sizeof(float) * (size_t)K);
        uint8_t *want = malloc((size_t)G * 32), *got = malloc((size_t)G * 32);
        uint16_t *wd = malloc(sizeof(uint16_t) * (size_t)G), *gd = malloc(sizeof(uint16_t) * (size_t)G);
        for (int k = 0; k < K; k++)
            row[k] = k % 13 == 5 ? NAN : frand() * (k % 64 < 32 ? 1.0f : 1e-3f);
        for (int g = 0; g < G; g++)
            q4_rule(row + 32 * g, K - 32 * g < 32 ? K - 32 * g : 32, want + 32 * g, wd + g);
        for (int t = 0; t < n_tables; t++) {
            memset(got, 0xee, (size_t)G * 32);
            tables[t]->quant(row, K, got, gd);
            if (memcmp(got, want, (size_t)G * 32) || memcmp(gd, wd, sizeof(uint16_t) * (size_t)G))
                fail_msg("%s quant of a row of %d differs from the rule's", tables[t]->name, K);
        }
        free(row), free(want), free(got), free(wd), free(gd);
    }
}

/* set_group / get_group round-trip at every position of a record, and the
 * padding of a fresh matrix is q = 0 with scale 0. */
static void test_q4_pack_roundtrip(void **state)
{
    (void)state;
    cpu_q4w *q;
    inf_err err;
    assert_int_equal(cpu_q4w_alloc(70, 70, 0, "t", &q, &err), 0);
    uint8_t u[32], v[32];
    uint16_t d;
    cpu_q4w_get_group(q, 69, 2, v, &d);
    for (int i = 0; i < 32; i++)
        assert_int_equal(v[i], 8);
    assert_int_equal(d, 0);
    for (int n = 0; n < 70; n++)
        for (int g = 0; g < 3; g++) {
            for (int i = 0; i < 32; i++)
                u[i] = (uint8_t)((n * 7 + g * 3 + i) & 15);
            cpu_q4w_set_group(q, n, g, u, (uint16_t)(n * 3 + g));
        }
    for (int n = 0; n < 70; n++)
        for (int g = 0; g < 3; g++) {
            cpu_q4w_get_group(q, n, g, v, &d);
            for (int i = 0; i < 32; i++)
                assert_int_equal(v[i], (n * 7 + g * 3 + i) & 15);
            assert_int_equal(d, n * 3 + g);
        }
    cpu_q4w_destroy(q);
}

/* Zeros round-trip in a zp matrix (fresh: 8), a symmetric one reads 8, a
 * zp matrix whose zeros are all 8 computes the symmetric one's bits with
 * the same codes and scales on every table, and a codes tensor whose zeros
 * are all 8 is packed without them. */
static void test_q4_zero_points(void **state)
{
    (void)state;
    enum { M = 5, N = 70, K = 96, G = K / 32 };
    fix f;
    fix_make(&f, M, N, K);
    cpu_q4w *z;
    inf_err err;
    assert_int_equal(cpu_q4w_alloc(N, K, 1, "z", &z, &err), 0);
    assert_int_equal(cpu_q4w_zero(z, 69, 2), 8);
    assert_int_equal(cpu_q4w_zero(f.q, 3, 1), 8);
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            uint8_t u[32];
            uint16_t d;
            cpu_q4w_get_group(f.q, n, g, u, &d);
            cpu_q4w_set_group(z, n, g, u, d);
            cpu_q4w_set_zero(z, n, g, (uint8_t)(n % 17));
            assert_int_equal(cpu_q4w_zero(z, n, g), n % 17);
            cpu_q4w_set_zero(z, n, g, 8);
        }
    float want[M * N], got[M * N];
    for (int t = 0; t < n_tables; t++) {
        run(tables[t], &f, 0, M, want, 0, N);
        cpu_mm4 a = cpu_q4w_args(z, f.qx, (size_t)G * 32, f.xs8, (size_t)G, f.sx, got, N, M);
        assert_int_equal(a.zp, 1);
        tables[t]->mm4(&a, 0, N);
        assert_memory_equal(got, want, sizeof got);
    }
    cpu_q4w_destroy(z);
    fix_free(&f);
    /* a codes tensor whose zeros are all 8 packs as the symmetric layout */
    fix_make_zp(&f, 1, N, K, 1);
    memset(f.zero, 8, (size_t)N * G);
    cpu_q4w_destroy(f.q);
    model_tensor t = {.dtype = INF_DTYPE_NONE, .rows = N, .cols = K, .name = "w",
                      .q4 = f.codes, .q4_scale = f.scale, .q4_zero = f.zero};
    assert_int_equal(cpu_q4w_create(&t, cpu_kern_select("generic"), &cpu_q4k_generic, NULL, &f.q, &err), 0);
    assert_int_equal(f.q->zp, 0);
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            uint8_t u[32];
            uint16_t d;
            cpu_q4w_get_group(f.q, n, g, u, &d);
            assert_int_equal(d, f.scale[n * G + g]);
            for (int i = 0; i < 32; i++)
                assert_int_equal(u[i], f.codes[(n * K + g * 32 + i) / 2] >> (4 * (i % 2)) & 15);
        }
    fix_free(&f);
}

/* A GGUF Q4_0 matrix as ggml writes it (each group's largest |value| at
 * q = -8: d is that value / -8), dequantized and quantized again, gives the
 * file's own nibbles and scales: Q4_0 files lose nothing more in int4. */
static void test_q4_from_q4_0_is_lossless(void **state)
{
    (void)state;
    enum { N = 70, K = 96, G = K / 32 };
    uint8_t blocks[N * G * 18];
    for (int b = 0; b < N * G; b++) {
        uint16_t d = inf_f32_to_f16(frand() * 0.1f + (frand() > 0 ? 1e-3f : -1e-3f));
        blocks[18 * b] = (uint8_t)d, blocks[18 * b + 1] = (uint8_t)(d >> 8);
        for (int i = 0; i < 16; i++) {
            frand();
            blocks[18 * b + 2 + i] = (uint8_t)(rng_state >> 40);
        }
        blocks[18 * b + 2 + b % 16] &= (uint8_t)(b % 3 ? 0xf0 : 0x0f); /* one q = -8 */
    }
    float *w = malloc(sizeof(float) * N * K);
    gguf_dequant(GGUF_Q4_0, blocks, w, (int64_t)N * K);
    model_tensor t = {.dtype = INF_F32, .data = w, .rows = N, .cols = K, .name = "q4_0"};
    cpu_q4w *q;
    inf_err err;
    assert_int_equal(cpu_q4w_create(&t, cpu_kern_select("generic"), &cpu_q4k_generic, NULL, &q, &err), 0);
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            const uint8_t *blk = blocks + 18 * (n * G + g);
            uint8_t u[32];
            uint16_t d;
            cpu_q4w_get_group(q, n, g, u, &d);
            assert_int_equal(d, blk[0] | blk[1] << 8);
            for (int i = 0; i < 16; i++) {
                assert_int_equal(u[i], blk[2 + i] & 15);
                assert_int_equal(u[i + 16], blk[2 + i] >> 4);
            }
        }
    cpu_q4w_destroy(q);
    free(w);
}

/* Every SIMD kernel table a CPU can run has SIMD int4 kernels beside it:
 * `--kernels avx512bf16` (what auto picks on Zen 4) once fell back to the
 * portable ones, and int4 decode ran 60 times slower. */
static void test_q4_select_follows_kernel_table(void **state)
{
    (void)state;
    const char *names[] = {"avx512bf16", "avx512", "avx2", "auto"};
    int checked = 0;
    for (int i = 0; i < 4; i++) {
        const cpu_kern *k = cpu_kern_select(names[i]);
        if (!k || !strcmp(k->name, "generic") || !strcmp(k->name, "generic-bf16"))
            continue;
        const cpu_q4k *q = cpu_q4k_select(names[i]);
        if (q == NULL || q == &cpu_q4k_generic)
            fail_msg("--kernels %s (%s) gets the portable int4 kernels", names[i], k->name);
        checked++;
    }
    printf("%d SIMD kernel tables checked\n", checked);
}

/* A row quantized and gathered into an order of its inputs is the row
 * gathered first and quantized (what a desc_act checkpoint's codes take),
 * with the same group sums, for every kernel table's quant and K with a
 * group tail. */
static void test_q4_gather_is_quantizing_in_that_order(void **state)
{
    (void)state;
    const char *names[] = {"generic", "avx2", "avx512", "avx512bf16"};
    for (int t = 0; t < 4; t++) {
        const cpu_kern *k = cpu_kern_select(names[t]);
        if (!k)
            continue;
        for (int K = 8; K <= 200; K += 48) {
            int G = (K + 31) / 32;
            float x[200], xp[200];
            int32_t perm[200], s1[8], s2[8];
            int8_t q[224], g1[224], g2[224];
            for (int i = 0; i < K; i++) {
                x[i] = 3.0f * frand();
                perm[i] = i;
            }
            for (int i = K - 1; i > 0; i--) { /* a shuffle */
                int j = (int)((frand() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
                int32_t v = perm[i];
                perm[i] = perm[j];
                perm[j] = v;
            }
            for (int i = 0; i < K; i++)
                xp[i] = x[perm[i]];
            float sa = cpu_q4_quant_act(k, x, K, q, s1);
            memset(g1, 0x55, sizeof g1);
            cpu_q4_gather_act(q, perm, K, g1, s1);
            float sb = cpu_q4_quant_act(k, xp, K, g2, s2);
            assert_true(sa == sb);
            assert_memory_equal(g1, g2, (size_t)G * 32);
            assert_memory_equal(s1, s2, sizeof s1[0] * (size_t)G);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_tables_match_oracle_all_shapes),
        cmocka_unit_test(test_q4_row_and_split_invariant),
        cmocka_unit_test(test_q4_pack_roundtrip),
        cmocka_unit_test(test_q4_group_rule),
        cmocka_unit_test(test_q4_zero_points),
        cmocka_unit_test(test_q4_from_q4_0_is_lossless),
        cmocka_unit_test(test_q4_select_follows_kernel_table),
        cmocka_unit_test(test_q4_gather_is_quantizing_in_that_order),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
