/* CPU kernels: every SIMD table equals the portable oracle bit for bit, for
 * all dtypes and shapes with tails; results never depend on how rows are
 * grouped or columns split; and all are close to a float64 reference. */
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
#include "cpu/qw.h"

static uint64_t rng_state = 42;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* Random weights of dtype wt; also their exact f32 values in wf. */
static void *rand_weights(inf_dtype wt, size_t n, float *wf)
{
    void *w = malloc(n * inf_dtype_size(wt));
    for (size_t i = 0; i < n; i++) {
        float v = frand();
        if (wt == INF_F32) {
            ((float *)w)[i] = v;
        } else if (wt == INF_F16) {
            uint16_t h = inf_f32_to_f16(v);
            ((uint16_t *)w)[i] = h;
            v = inf_f16_to_f32(h);
        } else {
            uint16_t h = inf_f32_to_bf16(v);
            ((uint16_t *)w)[i] = h;
            v = inf_bf16_to_f32(h);
        }
        wf[i] = v;
    }
    return w;
}

static const cpu_kern *tables[3];
static int n_tables;

static int setup(void **state)
{
    (void)state;
    const char *names[] = {"generic", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        const cpu_kern *k = cpu_kern_select(names[i]);
        if (k)
            tables[n_tables++] = k;
        else
            printf("note: %s kernels not supported on this CPU; not tested here\n",
                   names[i]);
    }
    return 0;
}

static void run_mm(const cpu_kern *k, const float *x, int M, int K, const void *w,
                   inf_dtype wt, int N, float *y, int n0, int n1)
{
    float *pack = malloc(CPU_PACK_FLOATS * sizeof(float));
    cpu_mm a = {.x = x, .ldx = (size_t)K, .w = w, .ldw = (size_t)K, .wt = wt,
                .y = y, .ldy = (size_t)N, .M = M, .N = N, .K = K};
    k->mm(&a, n0, n1, pack);
    free(pack);
}

/* mm of every table equals the generic table bit for bit and is within
 * float rounding of a float64 dot product, over shapes with K, M and N tails
 * and every weight dtype. */
static void test_kernels_mm_matches_oracle_all_shapes(void **state)
{
    (void)state;
    const int Ms[] = {1, 2, 3, 4, 5, 7, 9, 13, 16, 17, 37};
    const int Ns[] = {1, 7, 8, 9, 33};
    const int Ks[] = {1, 5, 16, 17, 64, 100, 512, 513, 1100};
    for (int dt = 0; dt < 3; dt++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
            for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
                for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++) {
                    int M = Ms[mi], N = Ns[ni], K = Ks[ki];
                    float *x = malloc(sizeof(float) * (size_t)M * K);
                    float *wf = malloc(sizeof(float) * (size_t)N * K);
                    for (int i = 0; i < M * K; i++)
                        x[i] = frand();
                    void *w = rand_weights((inf_dtype)dt, (size_t)N * K, wf);
                    float *ref = malloc(sizeof(float) * (size_t)M * N);
                    float *y = malloc(sizeof(float) * (size_t)M * N);
                    run_mm(tables[0], x, M, K, w, (inf_dtype)dt, N, ref, 0, N);
                    for (int m = 0; m < M; m++)
                        for (int n = 0; n < N; n++) {
                            double d = 0, mag = 0;
                            for (int k = 0; k < K; k++) {
                                d += (double)x[m * K + k] * wf[n * K + k];
                                mag += fabs((double)x[m * K + k] * wf[n * K + k]);
                            }
                            double got = ref[m * N + n];
                            assert_true(fabs(got - d) <= 1e-6 * mag + 1e-30);
                        }
                    for (int t = 1; t < n_tables; t++) {
                        run_mm(tables[t], x, M, K, w, (inf_dtype)dt, N, y, 0, N);
                        if (memcmp(y, ref, sizeof(float) * (size_t)M * N)) {
                            fail_msg("%s mm differs from generic: dtype %s M=%d N=%d K=%d",
                                     tables[t]->name, inf_dtype_name((inf_dtype)dt), M, N, K);
                        }
                    }
                    free(x), free(wf), free(w), free(ref), free(y);
                }
}

/* A row's result is the same whether it is computed alone or among 64 rows,
 * and whatever column range a thread is given. */
static void test_kernels_mm_row_and_split_invariant(void **state)
{
    (void)state;
    enum { M = 64, N = 77, K = 1100 };
    for (int t = 0; t < n_tables; t++)
        for (int dt = 0; dt < 3; dt++) {
            float *x = malloc(sizeof(float) * M * K);
            float *wf = malloc(sizeof(float) * N * K);
            for (int i = 0; i < M * K; i++)
                x[i] = frand();
            void *w = rand_weights((inf_dtype)dt, (size_t)N * K, wf);
            float *all = malloc(sizeof(float) * M * N);
            float *part = malloc(sizeof(float) * M * N);
            float one[N];
            run_mm(tables[t], x, M, K, w, (inf_dtype)dt, N, all, 0, N);
            /* split columns at odd places, as threads might */
            run_mm(tables[t], x, M, K, w, (inf_dtype)dt, N, part, 0, 13);
            run_mm(tables[t], x, M, K, w, (inf_dtype)dt, N, part, 13, 50);
            run_mm(tables[t], x, M, K, w, (inf_dtype)dt, N, part, 50, N);
            assert_memory_equal(all, part, sizeof(float) * M * N);
            for (int m = 0; m < M; m += 5) {
                run_mm(tables[t], x + (size_t)m * K, 1, K, w, (inf_dtype)dt, N, one, 0, N);
                assert_memory_equal(one, all + (size_t)m * N, sizeof one);
            }
            /* rows 3..9 as a batch of 7 */
            run_mm(tables[t], x + 3 * K, 7, K, w, (inf_dtype)dt, N, part, 0, N);
            assert_memory_equal(part, all + 3 * N, sizeof(float) * 7 * N);
            free(x), free(wf), free(w), free(all), free(part);
        }
}

/* Several column blocks in one call (N > CPU_NC and over 128, with a column
 * tail) and K blocks with a tail, at row counts that take the AVX-512
 * kernel's blocked path (9-16) and its packed path (21): every table equals
 * the generic one. */
static void test_kernels_mm_many_blocks_match_oracle(void **state)
{
    (void)state;
    enum { N = 2 * CPU_NC + 37, K = 2 * CPU_KB + 52 };
    static const int Ms[] = {9, 12, 16, 21};
    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (int dt = 0; dt < 3; dt++) {
            int M = Ms[mi];
            float *x = malloc(sizeof(float) * M * K), *wf = malloc(sizeof(float) * N * K);
            for (int i = 0; i < M * K; i++)
                x[i] = frand();
            void *w = rand_weights((inf_dtype)dt, (size_t)N * K, wf);
            float *ref = malloc(sizeof(float) * M * N), *y = malloc(sizeof(float) * M * N);
            run_mm(tables[0], x, M, K, w, (inf_dtype)dt, N, ref, 0, N);
            for (int t = 1; t < n_tables; t++) {
                run_mm(tables[t], x, M, K, w, (inf_dtype)dt, N, y, 0, N);
                if (memcmp(y, ref, sizeof(float) * M * N))
                    fail_msg("%s mm differs from generic: dtype %s M=%d N=%d K=%d", tables[t]->name,
                             inf_dtype_name((inf_dtype)dt), M, N, K);
            }
            free(x), free(wf), free(w), free(ref), free(y);
        }
}

/* dot and to_f32 of every table equal the generic table's exactly. */
static void test_kernels_dot_convert_match_oracle(void **state)
{
    (void)state;
    const int ns[] = {1, 3, 8, 15, 16, 17, 64, 511, 512, 513, 2048, 3000};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        int n = ns[i];
        float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
        for (int j = 0; j < n; j++)
            a[j] = frand(), b[j] = frand();
        float d0 = tables[0]->dot(a, b, n);
        for (int t = 1; t < n_tables; t++) {
            float d = tables[t]->dot(a, b, n);
            assert_memory_equal(&d, &d0, sizeof d);
            for (int dt = 0; dt < 3; dt++) {
                float *wf = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
                void *w = rand_weights((inf_dtype)dt, (size_t)n, wf);
                tables[t]->to_f32(w, (inf_dtype)dt, out, n);
                assert_memory_equal(out, wf, sizeof(float) * n);
                free(wf), free(out), free(w);
            }
        }
        free(a), free(b);
    }
}

/* wsum (attention's weighted sum of value rows) of every table equals the
 * generic table's exactly, over row counts, widths and key counts with tails,
 * and equals kern.h's contract: one fmaf per key, in key order. */
static void test_kernels_wsum_matches_oracle(void **state)
{
    (void)state;
    const int Rs[] = {1, 2, 3, 4, 5, 8, 9};
    const int Ds[] = {1, 7, 16, 31, 64, 80, 128};
    const int ns[] = {0, 1, 5, 16};
    enum { LDW = 20, LDV = 136, LDO = 132 };
    float w[9 * LDW], v[16 * LDV], o0[9 * LDO], ref[9 * LDO], got[9 * LDO];
    for (int i = 0; i < 9 * LDW; i++)
        w[i] = frand();
    for (int i = 0; i < 16 * LDV; i++)
        v[i] = frand();
    for (int i = 0; i < 9 * LDO; i++)
        o0[i] = frand();
    for (size_t ri = 0; ri < sizeof Rs / sizeof *Rs; ri++)
        for (size_t di = 0; di < sizeof Ds / sizeof *Ds; di++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                int R = Rs[ri], D = Ds[di], n = ns[ni];
                memcpy(ref, o0, sizeof ref);
                tables[0]->wsum(w, LDW, R, v, LDV, n, ref, LDO, D);
                memcpy(got, o0, sizeof got);
                for (int r = 0; r < R; r++)
                    for (int p = 0; p < n; p++)
                        for (int d = 0; d < D; d++)
                            got[r * LDO + d] = fmaf(w[r * LDW + p], v[p * LDV + d], got[r * LDO + d]);
                assert_memory_equal(got, ref, sizeof got);
                for (int t = 1; t < n_tables; t++) {
                    memcpy(got, o0, sizeof got);
                    tables[t]->wsum(w, LDW, R, v, LDV, n, got, LDO, D);
                    if (memcmp(got, ref, sizeof got))
                        fail_msg("%s wsum differs from generic: R=%d D=%d n=%d",
                                 tables[t]->name, R, D, n);
                }
            }
}

/* softmax_exp, swiglu and geglu of every table equal the generic table's exactly,
 * over lengths with tails and inputs across exp's whole range (including
 * both clamps, infinities and NaN); and the shared exp is within a few ulp
 * of libm's. */
static void test_kernels_exp_ops_match_oracle(void **state)
{
    (void)state;
    const int ns[] = {1, 3, 8, 15, 16, 17, 33, 100, 257};
    enum { N = 257 };
    float x[N], u[N], ref[N], got[N];
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
        for (int range = 0; range < 3; range++) {
            int n = ns[ni];
            float span = range == 0 ? 4.0f : range == 1 ? 40.0f : 200.0f;
            for (int i = 0; i < n; i++)
                x[i] = span * frand(), u[i] = frand();
            if (range == 2 && n > 5) {
                x[1] = INFINITY, x[2] = -INFINITY, x[3] = NAN;
                x[4] = CPU_EXP_LO, x[5] = CPU_EXP_HI;
            }
            static const char *const names[] = {"softmax_exp", "swiglu", "geglu"};
            for (int op = 0; op < 3; op++) {
                float m0 = 0;
                memcpy(ref, x, sizeof ref);
                if (op == 0)
                    m0 = tables[0]->softmax_exp(ref, n, 0.125f);
                else if (op == 1)
                    tables[0]->swiglu(ref, u, n);
                else
                    tables[0]->geglu(ref, u, n);
                for (int t = 1; t < n_tables; t++) {
                    memcpy(got, x, sizeof got);
                    if (op == 0) {
                        float m = tables[t]->softmax_exp(got, n, 0.125f);
                        assert_memory_equal(&m, &m0, sizeof m);
                    } else if (op == 1) {
                        tables[t]->swiglu(got, u, n);
                    } else {
                        tables[t]->geglu(got, u, n);
                    }
                    if (memcmp(got, ref, sizeof(float) * (size_t)n))
                        fail_msg("%s %s differs from generic: n=%d span %g", tables[t]->name,
                                 names[op], n, span);
                }
            }
        }
    /* exp itself, through softmax_exp with scale 1 and max 0 */
    for (int i = 0; i < 200000; i++) {
        float in = -100.0f * (float)i / 200000.0f, a[2] = {0.0f, in}, e = expf(in);
        tables[0]->softmax_exp(a, 2, 1.0f);
        assert_true(a[0] == 1.0f);
        if (in < CPU_EXP_LO)
            assert_true(a[1] == 0.0f);
        else
            assert_true(fabsf(a[1] - e) <= 2.5e-7f * e); /* 2 ulp */
    }
}

/* geglu's sigmoid form is PyTorch's tanh GELU times u: against the tanh
 * formula in double, within a few float ulp of the larger of the result and
 * the cancellation-prone terms, from deep negative (GELU -> 0) to large. */
static void test_kernels_geglu_is_tanh_gelu(void **state)
{
    (void)state;
    enum { N = 4001 };
    static float g[N], u[N];
    for (int i = 0; i < N; i++)
        g[i] = -20.0f + 40.0f * (float)i / (N - 1), u[i] = 0.5f + 0.25f * frand();
    float x0[N];
    memcpy(x0, g, sizeof x0);
    tables[0]->geglu(g, u, N);
    for (int i = 0; i < N; i++) {
        double x = x0[i], z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        double want = 0.5 * x * (1.0 + tanh(z)) * u[i];
        double tol = 4e-7 * (fabs(x * u[i]) + 1e-30);
        if (fabs(g[i] - want) > tol)
            fail_msg("geglu(%g) = %.9g, tanh form %.9g", x, g[i], want);
    }
}

/* Every table's int8 quantization equals the generic one bit for bit and
 * follows kern.h's rule: |q| <= 127, the largest |v| maps to 127, and
 * q * scale is within half a step of v. */
static void test_kernels_quant_matches_oracle(void **state)
{
    (void)state;
    const int ns[] = {1, 3, 15, 16, 17, 64, 100, 1030};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
        for (int kind = 0; kind < 3; kind++) {
            int n = ns[ni];
            float *v = malloc(sizeof(float) * (size_t)n);
            for (int i = 0; i < n; i++) /* kind 1: all zero; 2: one NaN, exact halves */
                v[i] = kind == 1 ? 0.0f : kind == 2 && i % 5 == 1 ? (float)(i % 7) - 3.5f
                                                                  : 3.0f * frand();
            if (kind == 2)
                v[n / 2] = NAN;
            int8_t *ref = malloc((size_t)n), *q = malloc((size_t)n);
            for (int offset = 0; offset < 2; offset++) {
                float sref = tables[0]->quant(v, n, ref, offset);
                float amax = 0;
                for (int i = 0; i < n; i++)
                    if (fabsf(v[i]) > amax)
                        amax = fabsf(v[i]);
                assert_true(sref == amax / 127.0f);
                for (int i = 0; i < n; i++) {
                    int qi = offset ? (int)(uint8_t)ref[i] - 128 : ref[i];
                    assert_true(qi >= -127 && qi <= 127);
                    if (isnan(v[i]))
                        continue;
                    if (amax > 0 && fabsf(v[i]) == amax)
                        assert_int_equal(abs(qi), 127);
                    assert_true(fabsf(qi * sref - v[i]) <= 0.5001f * sref);
                }
                for (int t = 1; t < n_tables; t++) {
                    float s = tables[t]->quant(v, n, q, offset);
                    if (s != sref || memcmp(q, ref, (size_t)n))
                        fail_msg("%s quant differs from generic: n=%d kind %d offset %d",
                                 tables[t]->name, n, kind, offset);
                }
            }
            free(v), free(ref), free(q);
        }
}

/* int8 matmul: every table (and AVX-512 without VNNI where AVX-512 runs)
 * gives exactly (float)(integer dot) * sx * sw, for shapes with M, N and K
 * tails, more rows than one scratch pass, and any split of the columns. */
static void test_kernels_mmq_matches_oracle(void **state)
{
    (void)state;
    const int Ms[] = {1, 2, 5, 6, 7, 16, 17, 250};
    const int Ns[] = {1, 16, 17, 64, 65, 130};
    const int Ks[] = {1, 3, 4, 5, 64, 257, 1030};
    const cpu_kern *all[5];
    int n_all = 0;
    for (int t = 0; t < n_tables; t++) {
        all[n_all++] = tables[t];
        if (!strcmp(tables[t]->name, "avx512") && tables[t] != &cpu_kern_avx512_novnni)
            all[n_all++] = &cpu_kern_avx512_novnni;
    }
    int32_t *scratch = aligned_alloc(64, CPU_MMQ_INTS * sizeof(int32_t));
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++) {
                int M = Ms[mi], N = Ns[ni], K = Ks[ki], K4 = (K + 3) / 4;
                if (M == 250 && (K > 300 || N > 70))
                    continue; /* the oracle is slow; one big-M shape per K is enough */
                float *wf = malloc(sizeof(float) * (size_t)N * K);
                uint16_t *wb = (uint16_t *)rand_weights(INF_BF16, (size_t)N * K, wf);
                model_tensor t = {.dtype = INF_BF16, .data = wb, .rows = N, .cols = K,
                                  .name = "w"};
                cpu_qw *qw = NULL;
                inf_err err = {0};
                assert_int_equal(cpu_qw_create(&t, tables[0], NULL, &qw, &err), INF_OK);
                /* activations, quantized by the rule, and the weights' q */
                size_t ldx = (size_t)K4 * 4 + 8;
                uint8_t *xq = malloc(ldx * (size_t)M);
                float *sx = malloc(sizeof(float) * (size_t)M), *row = malloc(sizeof(float) * (size_t)K);
                memset(xq, 128, ldx * (size_t)M);
                for (int m = 0; m < M; m++) {
                    for (int k = 0; k < K; k++)
                        row[k] = 2.0f * frand();
                    sx[m] = tables[0]->quant(row, K, (int8_t *)xq + (size_t)m * ldx, 1);
                }
                int8_t *wq = malloc((size_t)K);
                float *ref = malloc(sizeof(float) * (size_t)M * N);
                float *y = malloc(sizeof(float) * (size_t)M * N);
                for (int n = 0; n < N; n++) {
                    for (int k = 0; k < K; k++)
                        row[k] = wf[(size_t)n * K + k];
                    float sw = tables[0]->quant(row, K, wq, 0);
                    assert_true(sw == qw->scale[n]);
                    for (int m = 0; m < M; m++) {
                        int64_t d = 0;
                        for (int k = 0; k < K; k++)
                            d += (int64_t)((int)xq[(size_t)m * ldx + k] - 128) * wq[k];
                        ref[(size_t)m * N + n] = (float)d * sx[m] * sw;
                    }
                }
                for (int a = 0; a < n_all; a++) {
                    memset(y, 0xff, sizeof(float) * (size_t)M * N);
                    cpu_mmq q = cpu_qw_args(qw, xq, ldx, sx, y, (size_t)N, M);
                    /* two column ranges split on a CPU_QN boundary */
                    int mid = N > CPU_QN ? CPU_QN : N;
                    all[a]->mmq(&q, 0, mid, scratch);
                    if (mid < N)
                        all[a]->mmq(&q, mid, N, scratch);
                    if (memcmp(y, ref, sizeof(float) * (size_t)M * N))
                        fail_msg("%s%s mmq differs from the oracle: M=%d N=%d K=%d",
                                 all[a]->name, all[a] == &cpu_kern_avx512_novnni ? " (no VNNI)" : "",
                                 M, N, K);
                }
                cpu_qw_destroy(qw);
                free(wf), free(wb), free(xq), free(sx), free(row), free(wq), free(ref), free(y);
            }
    free(scratch);
}

/* Pre-quantized int8 weights (a compressed-tensors W8A8 checkpoint's, bound
 * as model_tensor.q8) are packed as stored with their own scales, and every
 * table computes exactly (float)(integer dot) * sx * sw with weights at -128
 * and 127 against activations at -127 and 127, the largest products, up to
 * the longest K the int32 sums allow. */
static void test_kernels_mmq_prequant_extremes(void **state)
{
    (void)state;
    const int Ks[] = {5, 257, 1030, CPU_QK_MAX - 4};
    const int M = 3, N = 17;
    const cpu_kern *all[5];
    int n_all = 0;
    for (int t = 0; t < n_tables; t++) {
        all[n_all++] = tables[t];
        if (!strcmp(tables[t]->name, "avx512") && tables[t] != &cpu_kern_avx512_novnni)
            all[n_all++] = &cpu_kern_avx512_novnni;
    }
    int32_t *scratch = aligned_alloc(64, CPU_MMQ_INTS * sizeof(int32_t));
    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
        int K = Ks[ki], K4 = (K + 3) / 4;
        int8_t *wq = malloc((size_t)N * K);
        float sw[17];
        for (int n = 0; n < N; n++) {
            sw[n] = 0.001f * (float)(n + 1) + frand() * 1e-4f;
            for (int k = 0; k < K; k++) /* row 0 all -128, row 1 all 127, the rest mixed */
                wq[(size_t)n * K + k] = n == 0 ? -128 : n == 1 ? 127
                                      : rand() % 4 == 0 ? -128 : (int8_t)(rand() % 256 - 128);
        }
        model_tensor t = {.dtype = INF_DTYPE_NONE, .q8 = wq, .q8_scale = sw, .rows = N, .cols = K,
                          .name = "w"};
        cpu_qw *qw = NULL;
        inf_err err = {0};
        assert_int_equal(cpu_qw_create(&t, tables[0], NULL, &qw, &err), INF_OK);
        size_t ldx = (size_t)K4 * 4;
        uint8_t *xq = malloc(ldx * M);
        float sx[3] = {0.01f, 0.02f, 0.003f};
        memset(xq, 128, ldx * M);
        for (int k = 0; k < K; k++) { /* row 0 all -127, row 1 all 127, row 2 mixed */
            xq[k] = 1;
            xq[ldx + k] = 255;
            xq[2 * ldx + k] = (uint8_t)(128 + (rand() % 255 - 127));
        }
        float ref[3 * 17], y[3 * 17];
        for (int n = 0; n < N; n++) {
            assert_true(qw->scale[n] == sw[n]);
            for (int m = 0; m < M; m++) {
                int64_t d = 0;
                for (int k = 0; k < K; k++)
                    d += (int64_t)((int)xq[(size_t)m * ldx + k] - 128) * wq[(size_t)n * K + k];
                assert_true(d > INT32_MIN && d < INT32_MAX);
                ref[m * N + n] = (float)d * sx[m] * sw[n];
            }
        }
        for (int a = 0; a < n_all; a++) {
            memset(y, 0xff, sizeof y);
            cpu_mmq q = cpu_qw_args(qw, xq, ldx, sx, y, (size_t)N, M);
            all[a]->mmq(&q, 0, N, scratch);
            if (memcmp(y, ref, sizeof y))
                fail_msg("%s%s mmq differs from the oracle with -128 weights: K=%d", all[a]->name,
                         all[a] == &cpu_kern_avx512_novnni ? " (no VNNI)" : "", K);
        }
        cpu_qw_destroy(qw);
        free(wq), free(xq);
    }
    free(scratch);
}

/* "auto" picks a table; unknown names are refused. */
static void test_kernels_select_names(void **state)
{
    (void)state;
    assert_non_null(cpu_kern_select("auto"));
    assert_non_null(cpu_kern_select("generic"));
    assert_null(cpu_kern_select("sse9"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_mm_matches_oracle_all_shapes),
        cmocka_unit_test(test_kernels_mm_row_and_split_invariant),
        cmocka_unit_test(test_kernels_mm_many_blocks_match_oracle),
        cmocka_unit_test(test_kernels_dot_convert_match_oracle),
        cmocka_unit_test(test_kernels_wsum_matches_oracle),
        cmocka_unit_test(test_kernels_exp_ops_match_oracle),
        cmocka_unit_test(test_kernels_geglu_is_tanh_gelu),
        cmocka_unit_test(test_kernels_quant_matches_oracle),
        cmocka_unit_test(test_kernels_mmq_matches_oracle),
        cmocka_unit_test(test_kernels_mmq_prequant_extremes),
        cmocka_unit_test(test_kernels_select_names),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
