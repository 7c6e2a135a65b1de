/* CUDA backend parity: every kernel against a CPU reference on random
 * inputs, whole-model logits against the CPU backend, greedy tokens against
 * the CPU backend for 64 tokens, paged attention over many sequences with
 * chunked prefill, CUDA graphs against eager steps, queued steps with
 * placeholder tokens, errors, and tensor parallelism where two GPUs exist.
 *
 * Built only with `make CUDA=1`. Without a usable GPU every test that needs
 * one is skipped with the reason printed; test_cuda_available_never_crashes
 * runs everywhere. Tolerances (first estimates, stated per test; see
 * docs/cuda.md: not yet calibrated on a GPU):
 *   - exact:   embedding gather, residual add, V written to the cache,
 *              sampled ids (u kept away from CDF boundaries);
 *   - 1 bf16 ulp (|d| <= 2^-8 |ref| + 1e-6): bf16 outputs of RMSNorm,
 *              K after RoPE, SwiGLU;
 *   - 1e-6 relative: q after RoPE (f32);
 *   - 5e-3 absolute: attention outputs (values in [-1, 1], bf16 out);
 *   - 3% of the row's logit range + 1e-3: model logits against the CPU
 *              backend on the same bf16-rounded weights (the GPU rounds
 *              activations and KV to bf16 as well). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cpu/backend.h"
#include "cpu/kern.h"
#include "cuda/backend.h"
#include "cuda/kern.h"
#include "cuda/mlp.h"
#include "cuda/plan.h"
#include "engine/eng_internal.h"
#include "engine/model.h"
#include "engine/gram.h"
#include "engine/qdef.h"
#include "engine/smp.h"
#include "engine/spec_mlp.h"
#include "engine/tok.h"
#include "tests/mlp_fix.h"
#include "tests/tdir.h"

static int have_gpu;
static char gpu_why[256];

#define NEED_GPU()                                                                     \
    do {                                                                               \
        if (!have_gpu) {                                                               \
            print_message("skipped: needs a GPU (%s)\n", gpu_why);                     \
            skip();                                                                    \
        }                                                                              \
    } while (0)
#define CK(call) assert_int_equal((int)(call), (int)cudaSuccess)

static uint64_t rng_state = 7;

static uint32_t urand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}

static float frand(void) /* uniform in [-1, 1) */
{
    return (float)(urand() >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

static void *dmalloc(size_t n)
{
    void *p = NULL;
    CK(cudaMalloc(&p, n ? n : 1));
    return p;
}

static void *to_dev(const void *h, size_t n)
{
    void *d = dmalloc(n);
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

static void to_host(void *h, const void *d, size_t n)
{
    CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

static float bf(uint16_t h) { return inf_bf16_to_f32(h); }

/* |got - want| within one bf16 ulp of want. */
static int bf16_close(float got, double want)
{
    return fabs((double)got - want) <= fabs(want) / 256.0 + 1e-6;
}

static int group_setup(void **state)
{
    (void)state;
    have_gpu = cuda_available(gpu_why, sizeof gpu_why);
    print_message("%s: %s\n", have_gpu ? "GPU" : "no GPU, GPU tests are skipped", gpu_why);
    return 0;
}

static const char *fixtures(void)
{
    const char *f = getenv("INFERD_TEST_FIXTURES");
    return f ? f : "build/fixtures";
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The fixture tiny, or stories260K when `real` and ../shared has it; dir
 * gets the path. A model that does not load fails the test. */
static model *load_test_model(int real, char dir[600])
{
    if (real && is_dir("../shared/models/stories260K"))
        snprintf(dir, 600, "../shared/models/stories260K");
    else
        snprintf(dir, 600, "%s/tiny", fixtures());
    model *m = NULL;
    inf_err err = {0};
    if (model_load(dir, &m, &err))
        fail_msg("%s", err.msg);
    return m;
}

/* Blocks 1..nb-1 in random order ([nb - 1], malloc'd): a cache handed out
 * scattered, as a long-running pool would. */
static int32_t *shuffled_blocks(int nb)
{
    int32_t *perm = malloc((size_t)nb * sizeof *perm);
    for (int i = 0; i < nb - 1; i++)
        perm[i] = i + 1;
    for (int i = nb - 2; i > 0; i--) {
        int j = (int)(urand() % (unsigned)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    return perm;
}

/* ---- no GPU needed ------------------------------------------------------------ */

/* cuda_available answers with a reason on any machine, GPU or not, and
 * without a GPU cuda_backend_create fails cleanly with that reason. */
static void test_cuda_available_never_crashes(void **state)
{
    (void)state;
    char why[256] = "";
    int ok = cuda_available(why, sizeof why);
    assert_true(strlen(why) > 0);
    print_message("cuda_available: %d (%s)\n", ok, why);
    if (ok)
        return;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tiny", fixtures());
    model *m = NULL;
    inf_err err = {0};
    if (model_load(dir, &m, &err)) {
        print_message("note: %s: %s; creation not tried\n", dir, err.msg);
        return;
    }
    cuda_config cfg = cuda_config_default();
    be_backend *be = (be_backend *)1;
    assert_int_equal(cuda_backend_create(m, &cfg, &be, &err), INF_ERR_UNSUPPORTED);
    assert_null(be);
    assert_memory_equal(err.msg, "cuda: ", 6);
    model_destroy(m);
}

/* ---- kernels ---------------------------------------------------------------------- */

/* The gather widens bf16 exactly and resolves placeholders from prev_ids. */
static void test_cuda_kern_embed_exact(void **state)
{
    (void)state;
    NEED_GPU();
    int V = 1000, D = 200, T = 37;
    uint16_t *table = malloc((size_t)V * D * 2);
    for (int i = 0; i < V * D; i++)
        table[i] = inf_f32_to_bf16(frand());
    int32_t tok[37], prev[3] = {5, 6, 999};
    for (int t = 0; t < T; t++)
        tok[t] = (int32_t)(urand() % (unsigned)V);
    tok[3] = -1;
    tok[20] = -3;
    uint16_t *dt = to_dev(table, (size_t)V * D * 2);
    int32_t *dtok = to_dev(tok, sizeof tok), *dprev = to_dev(prev, sizeof prev);
    float *dx = dmalloc((size_t)T * D * 4), *x = malloc((size_t)T * D * 4);
    CK(cuda_k_embed(dt, D, dtok, dprev, T, 1.0f, dx, 0));
    to_host(x, dx, (size_t)T * D * 4);
    for (int t = 0; t < T; t++) {
        int id = tok[t] >= 0 ? tok[t] : prev[-1 - tok[t]];
        for (int i = 0; i < D; i++)
            assert_true(x[t * D + i] == bf(table[(size_t)id * D + i]));
    }
    cudaFree(dt);
    cudaFree(dtok);
    cudaFree(dprev);
    cudaFree(dx);
    free(table);
    free(x);
}

/* Residual add (exact f32 adds) then RMSNorm to bf16 (1 ulp), with and
 * without the add: over all rows, x is updated in place; over listed rows
 * (the final norm; a row may be listed twice) x is left as it was. */
static void test_cuda_kern_add_rmsnorm(void **state)
{
    (void)state;
    NEED_GPU();
    const int Ds[] = {64, 80, 4096, 5003};
    for (size_t k = 0; k < sizeof Ds / sizeof Ds[0]; k++) {
        int D = Ds[k], R = 10;
        int32_t listed_rows[4] = {3, 0, 9, 3};
        float *x = malloc((size_t)R * D * 4), *delta = malloc((size_t)R * D * 4);
        float *g = malloc((size_t)D * 4), *xo = malloc((size_t)R * D * 4);
        float *want_x = malloc((size_t)D * 4);
        uint16_t *out = malloc((size_t)R * D * 2);
        for (int i = 0; i < R * D; i++) {
            x[i] = 3.0f * frand();
            delta[i] = frand();
        }
        for (int i = 0; i < D; i++)
            g[i] = 1.0f + 0.5f * frand();
        for (int mode = 0; mode < 4; mode++) {
            int with = mode & 1, listed = mode >> 1, n = listed ? 4 : R;
            float *dx = to_dev(x, (size_t)R * D * 4), *dd = to_dev(delta, (size_t)R * D * 4);
            float *dg = to_dev(g, (size_t)D * 4);
            int32_t *dr = to_dev(listed_rows, sizeof listed_rows);
            uint16_t *dout = dmalloc((size_t)n * D * 2);
            CK(cuda_k_add_rmsnorm(dx, with ? dd : NULL, dg, D, 1e-5f, listed ? dr : NULL, n,
                                  dout, 0));
            to_host(xo, dx, (size_t)R * D * 4);
            to_host(out, dout, (size_t)n * D * 2);
            for (int i = 0; i < R * D; i++)
                assert_true(xo[i] == (with && !listed ? x[i] + delta[i] : x[i]));
            for (int i = 0; i < n; i++) {
                int r = listed ? listed_rows[i] : i;
                double ss = 0;
                for (int j = 0; j < D; j++) {
                    want_x[j] = with ? x[r * D + j] + delta[r * D + j] : x[r * D + j];
                    ss += (double)want_x[j] * want_x[j];
                }
                double inv = 1.0 / sqrt(ss / D + 1e-5);
                for (int j = 0; j < D; j++)
                    assert_true(bf16_close(bf(out[i * D + j]), want_x[j] * inv * g[j]));
            }
            cudaFree(dx);
            cudaFree(dd);
            cudaFree(dg);
            cudaFree(dr);
            cudaFree(dout);
        }
        free(x);
        free(delta);
        free(g);
        free(xo);
        free(want_x);
        free(out);
    }
}

/* Fails unless device buffers a and b hold the same n bytes. */
static void same_dev_bytes(const void *a, const void *b, size_t n, const char *what)
{
    void *ha = malloc(n), *hb = malloc(n);
    to_host(ha, a, n);
    to_host(hb, b, n);
    if (memcmp(ha, hb, n))
        fail_msg("%s differ", what);
    free(ha);
    free(hb);
}

/* What a kernel that quantizes its own output writes: bf16 rows [n][w], q
 * [n][ldq] (poisoned first: its padding must be written) and sx [n]. */
typedef struct qrows {
    int n, w, ldq;
    uint16_t *out;
    int8_t *q;
    float *sx;
} qrows;

static qrows qrows_make(int n, int w, int ldq)
{
    qrows r = {.n = n, .w = w, .ldq = ldq, .out = dmalloc((size_t)n * w * 2),
               .q = dmalloc((size_t)n * ldq), .sx = dmalloc((size_t)n * 4)};
    CK(cudaMemset(r.q, 0x55, (size_t)n * ldq));
    return r;
}

/* The two launches' a and the fused kernel's b hold the same bits. */
static void qrows_same(const qrows *a, const qrows *b, const char *what)
{
    char m[120];
    snprintf(m, sizeof m, "%s: the rows", what);
    same_dev_bytes(a->out, b->out, (size_t)a->n * a->w * 2, m);
    snprintf(m, sizeof m, "%s: q", what);
    same_dev_bytes(a->q, b->q, (size_t)a->n * a->ldq, m);
    snprintf(m, sizeof m, "%s: sx", what);
    same_dev_bytes(a->sx, b->sx, (size_t)a->n * 4, m);
}

static void qrows_free(qrows *r)
{
    cudaFree(r->out);
    cudaFree(r->q);
    cudaFree(r->sx);
}

/* cuda_k_add_rmsnorm_q against cuda_k_add_rmsnorm then cuda_k_quant_rows on
 * the same inputs: x, the bf16 rows, q (padding zeros included) and sx the
 * same bits, with and without delta, at widths a block covers in one pass,
 * in several, and not a multiple of 8. */
static void test_cuda_kern_add_rmsnorm_q_exact(void **state)
{
    (void)state;
    NEED_GPU();
    uint64_t saved = rng_state; /* draws of its own: later tests' inputs stay as they were */
    rng_state = 99;
    const int Ds[] = {64, 80, 4096, 5003};
    for (size_t k = 0; k < sizeof Ds / sizeof Ds[0]; k++) {
        int D = Ds[k], R = 9, ldq = (D + 31) / 32 * 32 + 32;
        float *x = malloc((size_t)R * D * 4), *delta = malloc((size_t)R * D * 4);
        float *g = malloc((size_t)D * 4);
        for (int i = 0; i < R * D; i++) {
            x[i] = 3.0f * frand();
            delta[i] = frand();
        }
        x[D + 5] = 0.0f; /* a row whose largest value is at the start of a chunk */
        for (int i = 0; i < D; i++)
            g[i] = 1.0f + 0.5f * frand();
        for (int with = 0; with < 2; with++) {
            float *xs[2], *dd = to_dev(delta, (size_t)R * D * 4), *dg = to_dev(g, (size_t)D * 4);
            qrows o[2];
            for (int v = 0; v < 2; v++) {
                xs[v] = to_dev(x, (size_t)R * D * 4);
                o[v] = qrows_make(R, D, ldq);
            }
            CK(cuda_k_add_rmsnorm(xs[0], with ? dd : NULL, dg, D, 1e-5f, NULL, R, o[0].out, 0));
            CK(cuda_k_quant_rows(o[0].out, D, D, R, o[0].q, ldq, o[0].sx, 0));
            CK(cuda_k_add_rmsnorm_q(xs[1], with ? dd : NULL, dg, D, 1e-5f, R, o[1].out, o[1].q,
                                    ldq, o[1].sx, 0));
            CK(cudaDeviceSynchronize());
            char what[80];
            snprintf(what, sizeof what, "add_rmsnorm_q D %d delta %d: x", D, with);
            same_dev_bytes(xs[0], xs[1], (size_t)R * D * 4, what);
            snprintf(what, sizeof what, "add_rmsnorm_q D %d delta %d", D, with);
            qrows_same(&o[0], &o[1], what);
            for (int v = 0; v < 2; v++) {
                cudaFree(xs[v]);
                qrows_free(&o[v]);
            }
            cudaFree(dd);
            cudaFree(dg);
        }
        print_message("add_rmsnorm_q D %d: x, rows, q and sx the same bits as the two "
                      "launches, with and without delta\n", D);
        free(x);
        free(delta);
        free(g);
    }
    rng_state = saved;
}

/* cuda_k_glu_q against cuda_k_swiglu / cuda_k_geglu then cuda_k_quant_rows:
 * the bf16 rows, q (padding included) and sx the same bits, both
 * activations, widths of one block pass, several, and odd. */
static void test_cuda_kern_glu_q_exact(void **state)
{
    (void)state;
    NEED_GPU();
    uint64_t saved = rng_state; /* draws of its own, as above */
    rng_state = 101;
    const int Fs[] = {64, 80, 5003, 14336};
    for (size_t k = 0; k < sizeof Fs / sizeof Fs[0]; k++) {
        int F = Fs[k], T = 5, ldq = (F + 31) / 32 * 32 + 32;
        float *gu = malloc((size_t)T * 2 * F * 4);
        for (int i = 0; i < T * 2 * F; i++)
            gu[i] = 4.0f * frand();
        float *dgu = to_dev(gu, (size_t)T * 2 * F * 4);
        for (int gelu = 0; gelu < 2; gelu++) {
            qrows o[2] = {qrows_make(T, F, ldq), qrows_make(T, F, ldq)};
            CK(gelu ? cuda_k_geglu(dgu, F, T, o[0].out, 0) : cuda_k_swiglu(dgu, F, T, o[0].out, 0));
            CK(cuda_k_quant_rows(o[0].out, F, F, T, o[0].q, ldq, o[0].sx, 0));
            CK(cuda_k_glu_q(dgu, F, T, gelu, o[1].out, o[1].q, ldq, o[1].sx, 0));
            CK(cudaDeviceSynchronize());
            char what[80];
            snprintf(what, sizeof what, "glu_q F %d gelu %d", F, gelu);
            qrows_same(&o[0], &o[1], what);
            qrows_free(&o[0]);
            qrows_free(&o[1]);
        }
        print_message("glu_q F %d: rows, q and sx the same bits as the two launches, SwiGLU "
                      "and GeGLU\n", F);
        cudaFree(dgu);
        free(gu);
    }
    rng_state = saved;
}

/* RoPE as the CPU computes it (double angles, float rotation): q in place
 * within 1e-6 relative, K in the cache within 1 bf16 ulp, V exact, at the
 * slot's [block][head][offset] and nowhere else. */
static void test_cuda_kern_rope_kv(void **state)
{
    (void)state;
    NEED_GPU();
    const int hds[] = {8, 64, 128};
    const double thetas[] = {10000.0, 500000.0};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 2; b++) {
            int hd = hds[a], H = 4, KV = 2, T = 20, bs = 16, nb = 40, ld = (H + 2 * KV) * hd;
            size_t cache = (size_t)nb * KV * bs * hd;
            float *qkv = malloc((size_t)T * ld * 4), *qo = malloc((size_t)T * ld * 4);
            int32_t pos[20], slots[20];
            double *inv = malloc((size_t)(hd / 2) * sizeof *inv);
            for (int i = 0; i < hd / 2; i++)
                inv[i] = pow(thetas[b], -2.0 * i / hd);
            for (int i = 0; i < T * ld; i++)
                qkv[i] = frand();
            for (int t = 0; t < T; t++) {
                pos[t] = t < 10 ? t : (int32_t)(urand() % 30000);
                slots[t] = bs + t * 37 % (bs * (nb - 1)); /* distinct, never block 0 */
            }
            uint16_t *kc = malloc(cache * 2), *vc = malloc(cache * 2);
            for (size_t i = 0; i < cache; i++)
                kc[i] = vc[i] = 0x7fc1; /* sentinel NaN: must stay where not written */
            float *dq = to_dev(qkv, (size_t)T * ld * 4);
            int32_t *dp = to_dev(pos, sizeof pos), *ds = to_dev(slots, sizeof slots);
            double *di = to_dev(inv, (size_t)(hd / 2) * sizeof *inv);
            uint16_t *dk = to_dev(kc, cache * 2), *dv = to_dev(vc, cache * 2);
            cuda_rope rp = {.inv_freq = di, .rot = hd, .attn_factor = 1.0};
            CK(cuda_k_rope_kv(dq, T, dp, ds, &rp, H, KV, hd, dk, dv, bs, 0));
            to_host(qo, dq, (size_t)T * ld * 4);
            to_host(kc, dk, cache * 2);
            to_host(vc, dv, cache * 2);
            char *hit = calloc(cache, 1);
            int half = hd / 2;
            for (int t = 0; t < T; t++) {
                for (int h = 0; h < H + KV; h++)
                    for (int i = 0; i < half; i++) {
                        double ang = (double)pos[t] * inv[i];
                        float c = (float)cos(ang), s = (float)sin(ang);
                        float x0 = qkv[t * ld + h * hd + i], x1 = qkv[t * ld + h * hd + i + half];
                        float r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s;
                        double tol = 1e-6 * (fabs(x0) + fabs(x1)) + 1e-7;
                        if (h < H) {
                            assert_true(fabs(qo[t * ld + h * hd + i] - r0) <= tol);
                            assert_true(fabs(qo[t * ld + h * hd + i + half] - r1) <= tol);
                        } else {
                            int blk = slots[t] / bs, off = slots[t] % bs;
                            size_t at = (((size_t)blk * KV + (h - H)) * bs + off) * hd;
                            assert_true(bf16_close(bf(kc[at + i]), r0) || fabs(r0) < 1e-6);
                            assert_true(bf16_close(bf(kc[at + i + half]), r1) || fabs(r1) < 1e-6);
                            hit[at + i] = hit[at + i + half] = 1;
                        }
                    }
                for (int h = 0; h < KV; h++) {
                    int blk = slots[t] / bs, off = slots[t] % bs;
                    size_t at = (((size_t)blk * KV + h) * bs + off) * hd;
                    for (int d = 0; d < hd; d++)
                        assert_int_equal(vc[at + d],
                                         inf_f32_to_bf16(qkv[t * ld + (H + KV + h) * hd + d]));
                }
            }
            for (size_t i = 0; i < cache; i++)
                if (!hit[i])
                    assert_int_equal(kc[i], 0x7fc1);
            free(hit);
            cudaFree(dq);
            cudaFree(dp);
            cudaFree(ds);
            cudaFree(di);
            cudaFree(dk);
            cudaFree(dv);
            free(qkv);
            free(qo);
            free(kc);
            free(vc);
            free(inv);
        }
}

/* SwiGLU to bf16 within 1 ulp. */
static void test_cuda_kern_swiglu(void **state)
{
    (void)state;
    NEED_GPU();
    int F = 600, T = 5;
    float *gu = malloc((size_t)T * 2 * F * 4);
    for (int i = 0; i < T * 2 * F; i++)
        gu[i] = 6.0f * frand();
    uint16_t *out = malloc((size_t)T * F * 2);
    float *dg = to_dev(gu, (size_t)T * 2 * F * 4);
    uint16_t *dout = dmalloc((size_t)T * F * 2);
    CK(cuda_k_swiglu(dg, F, T, dout, 0));
    to_host(out, dout, (size_t)T * F * 2);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < F; i++) {
            double g = gu[t * 2 * F + i], u = gu[t * 2 * F + F + i];
            assert_true(bf16_close(bf(out[t * F + i]), g / (1.0 + exp(-g)) * u));
        }
    cudaFree(dg);
    cudaFree(dout);
    free(gu);
    free(out);
}

/* ---- attention ---------------------------------------------------------------------- */

/* Host reference of y = x . w^T (double): the worst |y - ref| over sum |x w|
 * of M rows, or a failure naming the first element past 1e-4 (or not
 * finite) when must; returns the worst (infinity when one is not finite). */
static double gemm_ref_err(const uint16_t *x, int ldx, const uint16_t *w, int N, int K,
                           const float *y, int M, int must, const char *what)
{
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)bf(x[(size_t)i * ldx + k]) * bf(w[(size_t)j * K + k]);
                ref += p;
                mag += fabs(p);
            }
            double got = y[(size_t)i * N + j], e = fabs(got - ref) / (mag + 1e-30);
            if (!isfinite(got))
                e = INFINITY;
            if (must && e > 1e-4)
                fail_msg("%s N %d K %d: y[%d][%d] = %g, reference %g", what, N, K, i, j, got,
                         ref);
            worst = fmax(worst, e);
        }
    return worst;
}

/* A GEMM launcher with cuda_k_gemm's contract; v: a variant (cuda_k_gemm_wg's). */
typedef cudaError_t (*gemm_fn)(int v, const uint16_t *x, int ldx, const uint16_t *w, int N,
                               int K, float *y, int ldy, int M, int splits, float *ws,
                               cudaStream_t st);

static cudaError_t gemm_mma(int v, const uint16_t *x, int ldx, const uint16_t *w, int N, int K,
                            float *y, int ldy, int M, int splits, float *ws, cudaStream_t st)
{
    (void)v;
    return cuda_k_gemm(x, ldx, w, N, K, y, ldy, M, splits, ws, st);
}

enum { GEMM_M = 300 };

/* One case of the GEMM tests: GEMM_M x K random x (row stride ldx) and N x K
 * random w, on the host and the device, with outputs and the K ranges'
 * workspace. */
typedef struct gcase {
    int N, K, ldx, splits;
    size_t ybytes;
    uint16_t *x, *w, *dx, *dw;
    float *y, *y2, *dy, *dy2, *ws;
} gcase;

static void gcase_make(gcase *g, int N, int K, int ldx)
{
    *g = (gcase){.N = N, .K = K, .ldx = ldx, .splits = cuda_plan_gemm_splits(N, K),
                 .ybytes = (size_t)GEMM_M * N * 4};
    g->x = malloc((size_t)GEMM_M * ldx * 2);
    g->w = malloc((size_t)N * K * 2);
    for (size_t i = 0; i < (size_t)GEMM_M * ldx; i++)
        g->x[i] = inf_f32_to_bf16(frand());
    for (size_t i = 0; i < (size_t)N * K; i++)
        g->w[i] = inf_f32_to_bf16(frand());
    g->dx = to_dev(g->x, (size_t)GEMM_M * ldx * 2);
    g->dw = to_dev(g->w, (size_t)N * K * 2);
    g->dy = dmalloc(g->ybytes);
    g->dy2 = dmalloc(g->ybytes);
    g->y = malloc(g->ybytes);
    g->y2 = malloc(g->ybytes);
    g->ws = dmalloc((size_t)g->splits * g->ybytes);
}

static void gcase_free(gcase *g)
{
    free(g->x);
    free(g->w);
    free(g->y);
    free(g->y2);
    cudaFree(g->dx);
    cudaFree(g->dw);
    cudaFree(g->dy);
    cudaFree(g->dy2);
    cudaFree(g->ws);
}

/* fn's variant v on all GEMM_M rows into out (the device output poisoned
 * first: NaN shows an unwritten element). */
static void gcase_run(gcase *g, gemm_fn fn, int v, float *out)
{
    CK(cudaMemset(g->dy, 0xff, g->ybytes));
    CK(fn(v, g->dx, g->ldx, g->dw, g->N, g->K, g->dy, g->N, GEMM_M, g->splits, g->ws, 0));
    CK(cudaDeviceSynchronize());
    to_host(out, g->dy, g->ybytes);
}

/* Batch invariance: the rows of subsets of the product (1 to 200 rows, from
 * other offsets, alone) are the same bits as g->y's. */
static void gcase_subsets(gcase *g, gemm_fn fn, int v, const char *what)
{
    static const int subs[][2] = {{0, 1},    {7, 1},   {3, 5},   {100, 16}, {31, 17},
                                  {200, 64}, {17, 65}, {50, 200}, {299, 1}};
    for (size_t k = 0; k < sizeof subs / sizeof *subs; k++) {
        int m0 = subs[k][0], cnt = subs[k][1];
        CK(cudaMemset(g->dy2, 0xff, g->ybytes));
        CK(fn(v, g->dx + (size_t)m0 * g->ldx, g->ldx, g->dw, g->N, g->K, g->dy2, g->N, cnt,
              g->splits, g->ws, 0));
        CK(cudaDeviceSynchronize());
        to_host(g->y2, g->dy2, (size_t)cnt * g->N * 4);
        if (memcmp(g->y2, g->y + (size_t)m0 * g->N, (size_t)cnt * g->N * 4))
            fail_msg("%s N %d K %d: rows %d..%d computed as %d rows differ from the %d-row "
                     "product", what, g->N, g->K, m0, m0 + cnt - 1, cnt, GEMM_M);
    }
}

/* cuda_k_gemm against a double-precision reference on random bf16 inputs,
 * every output written; and batch invariance (gcase_subsets) across all
 * four tile shapes. Widths cover the 16-byte path, a padded row stride, K
 * not a multiple of 8 (element loads) and K tails. */
static void test_cuda_kern_gemm_invariant(void **state)
{
    (void)state;
    NEED_GPU();
    CK(cuda_k_gemm_setup());
    const int shapes[][3] = {/* N, K, ldx */
                             {200, 64, 72}, {344, 64, 64},    {64, 172, 172}, {1000, 1024, 1024},
                             {96, 4104, 4104}, {8, 8, 8},     {130, 200, 200},
                             {200, 8200, 8200}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        gcase g;
        gcase_make(&g, shapes[c][0], shapes[c][1], shapes[c][2]);
        gcase_run(&g, gemm_mma, 0, g.y);
        double worst = gemm_ref_err(g.x, g.ldx, g.w, g.N, g.K, g.y, GEMM_M, 1, "gemm");
        gcase_subsets(&g, gemm_mma, 0, "gemm");
        print_message("gemm N %d K %d ldx %d, %d K range%s: worst error %.2e of sum |x w|; "
                      "every row subset the same bits\n", g.N, g.K, g.ldx, g.splits,
                      g.splits > 1 ? "s" : "", worst);
        gcase_free(&g);
    }
}

/* cuda_k_gemm_wg (Hopper's wgmma, written without a GPU): variant 0 within
 * 1e-4 of sum |x w| of a double reference on every element of 300 rows,
 * every row subset the same bits (batch-invariant), and whether its bits
 * equal cuda_k_gemm's (mma.sync) said, not asserted; variant 1 (the
 * descriptor's offsets read the other way) reported only. Skips where the
 * device is not compute capability 9.0. K a multiple of 8 (its contract). */
static void test_cuda_kern_gemm_wgmma(void **state)
{
    (void)state;
    NEED_GPU();
    if (cuda_k_gemm_wg_setup() == cudaErrorNotSupported) {
        cudaGetLastError();
        print_message("skipped: no wgmma here (the device is not compute capability 9.0, or is "
                      "the fake one)\n");
        skip();
    }
    CK(cuda_k_gemm_setup());
    const int shapes[][3] = {/* N, K, ldx */
                             {200, 64, 72},   {344, 64, 64},     {1000, 1024, 1024},
                             {96, 4104, 4104}, {8, 8, 8},        {130, 200, 200},
                             {200, 8200, 8200}};
    int same_as_mma = 1, v1_ok = 1;
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        gcase g;
        gcase_make(&g, shapes[c][0], shapes[c][1], shapes[c][2]);
        gcase_run(&g, cuda_k_gemm_wg, 0, g.y);
        double worst = gemm_ref_err(g.x, g.ldx, g.w, g.N, g.K, g.y, GEMM_M, 1, "wgmma gemm");
        gcase_subsets(&g, cuda_k_gemm_wg, 0, "wgmma gemm");
        gcase_run(&g, gemm_mma, 0, g.y2);
        int same = !memcmp(g.y, g.y2, g.ybytes);
        same_as_mma &= same;
        gcase_run(&g, cuda_k_gemm_wg, 1, g.y2);
        double w1 = gemm_ref_err(g.x, g.ldx, g.w, g.N, g.K, g.y2, GEMM_M, 0, "");
        v1_ok &= w1 <= 1e-4;
        print_message("wgmma gemm N %d K %d ldx %d, %d K range%s: worst error %.2e of sum |x w|; "
                      "every row subset the same bits; %s mma.sync's; variant 1: %.2e\n", g.N,
                      g.K, g.ldx, g.splits, g.splits > 1 ? "s" : "", worst,
                      same ? "the same bits as" : "other bits than", w1);
        gcase_free(&g);
    }
    print_message("wgmma: %s mma.sync's bits on every shape; variant 1 %s\n",
                  same_as_mma ? "the same as" : "NOT", v1_ok ? "also right" : "wrong, as expected");
}

/* ---- quantized layer matrices: bit for bit against cuda/kern.h's contract ---- */

/* The contract's int8 row quantization on the host, one rounding per step;
 * returns sx. */
static float quant_host(const uint16_t *x, int K, int8_t *q, int ldq)
{
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
        float a = fabsf(bf(x[k]));
        if (a > amax) /* false for NaN */
            amax = a;
    }
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int k = 0; k < ldq; k++) /* fmaxf: NaN -> -127 */
        q[k] = k < K ? (int8_t)(int)rintf(fminf(fmaxf(bf(x[k]) * inv, -127.0f), 127.0f)) : 0;
    return amax / 127.0f;
}

/* cuda_k_quant_rows gives the contract's q (zero padding included) and sx
 * bits: random rows of several magnitudes, a row of zeros, NaNs (skipped by
 * amax, -127 in q), an infinity (inv 0: finite values 0, the infinity -127),
 * and a row scaled by exactly 1 whose halves round to even; each of its
 * kernels too, and on rows longer than the vec kernel holds and of a K
 * that is not a multiple of 8. The host computation is checked against the
 * CPU backend's quantizer too. */
static void test_cuda_kern_quant_rows_exact(void **state)
{
    (void)state;
    NEED_GPU();
    enum { T = 8, K = 600, LDX = 608, LDQ = 640 };
    uint16_t *x = malloc((size_t)T * LDX * 2);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < LDX; k++)
            x[t * LDX + k] = inf_f32_to_bf16(frand() * (float)(1 << t));
    for (int k = 0; k < K; k++)
        x[1 * LDX + k] = k % 2 ? 0x8000 : 0; /* +0 and -0 */
    x[2 * LDX + 5] = 0x7fc0;
    x[2 * LDX + 50] = 0xffc0;
    x[3 * LDX + 7] = 0x7f80;
    const float halves[] = {-127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 126.5f, -126.5f};
    const int8_t rounded[] = {-127, 2, -4, 0, 0, 2, 126, -126};
    for (int k = 0; k < 8; k++)
        x[4 * LDX + k] = inf_f32_to_bf16(halves[k]); /* amax 127: inv exactly 1 */
    int8_t *want = malloc((size_t)T * LDQ), *got = malloc((size_t)T * LDQ), cq[K];
    float want_sx[T], got_sx[T], v[K];
    for (int t = 0; t < T; t++) {
        want_sx[t] = quant_host(x + t * LDX, K, want + t * LDQ, LDQ);
        for (int k = 0; k < K; k++)
            v[k] = bf(x[t * LDX + k]);
        float s = cpu_kern_generic.quant(v, K, cq, 0);
        assert_memory_equal(&s, &want_sx[t], 4);
        assert_memory_equal(cq, want + t * LDQ, K);
    }
    assert_memory_equal(want + 4 * LDQ, rounded, 8);
    assert_int_equal(want[2 * LDQ + 5], -127);
    assert_int_equal(want[2 * LDQ + 50], -127);
    assert_int_equal(want[3 * LDQ + 7], -127);
    assert_true(isinf(want_sx[3]) && want_sx[1] == 0.0f);

    uint16_t *dx = to_dev(x, (size_t)T * LDX * 2);
    int8_t *dq = dmalloc((size_t)T * LDQ);
    float *dsx = dmalloc(sizeof got_sx);
    for (int kern = -1; kern < CUDA_QR_KERNELS; kern++) { /* -1: cuda_k_quant_rows */
        CK(cudaMemset(dq, 0x55, (size_t)T * LDQ)); /* the padding must be written */
        CK(kern < 0 ? cuda_k_quant_rows(dx, LDX, K, T, dq, LDQ, dsx, 0)
                    : cuda_k_quant_rows_with(kern, dx, LDX, K, T, dq, LDQ, dsx, 0));
        CK(cudaDeviceSynchronize());
        to_host(got, dq, (size_t)T * LDQ);
        to_host(got_sx, dsx, sizeof got_sx);
        assert_memory_equal(got, want, (size_t)T * LDQ);
        assert_memory_equal(got_sx, want_sx, sizeof got_sx);
    }
    /* a static scale (a W8A8 checkpoint's input_scale): the CPU's
     * qdef_i8_static of the same values, NaN to -127, the rows' large
     * values clamped (x's rows grow by 2^t) */
    const float s = 0.37f;
    memset(want, 0, (size_t)T * LDQ);
    for (int t = 0; t < T; t++) {
        for (int k = 0; k < K; k++)
            v[k] = bf(x[t * LDX + k]);
        qdef_i8_static(v, K, s, want + t * LDQ, 0);
        want_sx[t] = s;
    }
    assert_int_equal(want[2 * LDQ + 5], -127);
    assert_int_equal(want[7 * LDQ + 0] == 127 || want[7 * LDQ + 0] == -127, 1);
    CK(cudaMemset(dq, 0x55, (size_t)T * LDQ));
    CK(cuda_k_quant_rows_static(dx, LDX, K, T, s, dq, LDQ, dsx, 0));
    CK(cudaDeviceSynchronize());
    to_host(got, dq, (size_t)T * LDQ);
    to_host(got_sx, dsx, sizeof got_sx);
    assert_memory_equal(got, want, (size_t)T * LDQ);
    assert_memory_equal(got_sx, want_sx, sizeof got_sx);
    assert_int_equal(cuda_k_quant_rows_static(dx, LDX, K, T, 0.0f, dq, LDQ, dsx, 0),
                     cudaErrorInvalidValue);
    cudaGetLastError();
    cudaFree(dx);
    cudaFree(dq);
    cudaFree(dsx);
    free(x);
    free(want);
    free(got);

    /* rows longer than the vec kernel holds (16,384 values), and K not a
     * multiple of 8 (the block kernel runs), each kernel */
    const int longs[][2] = {{20000, 20032}, {4100, 4128}}; /* K, ldq (= ldx) */
    for (size_t c = 0; c < sizeof longs / sizeof longs[0]; c++) {
        int LK = longs[c][0], LQ = longs[c][1];
        uint16_t *lx = malloc((size_t)2 * LQ * 2);
        int8_t *lwant = malloc((size_t)2 * LQ), *lgot = malloc((size_t)2 * LQ);
        float lsx[2], lgsx[2];
        for (int i = 0; i < 2 * LQ; i++)
            lx[i] = inf_f32_to_bf16(frand());
        lx[LQ + LK - 1] = inf_f32_to_bf16(9.0f); /* row 1's amax in its last value */
        for (int t = 0; t < 2; t++)
            lsx[t] = quant_host(lx + (size_t)t * LQ, LK, lwant + (size_t)t * LQ, LQ);
        uint16_t *ldx_ = to_dev(lx, (size_t)2 * LQ * 2);
        int8_t *ldq_ = dmalloc((size_t)2 * LQ);
        float *lds = dmalloc(sizeof lsx);
        for (int kern = 0; kern < CUDA_QR_KERNELS; kern++) {
            CK(cudaMemset(ldq_, 0x55, (size_t)2 * LQ));
            CK(cuda_k_quant_rows_with(kern, ldx_, LQ, LK, 2, ldq_, LQ, lds, 0));
            CK(cudaDeviceSynchronize());
            to_host(lgot, ldq_, (size_t)2 * LQ);
            to_host(lgsx, lds, sizeof lgsx);
            assert_memory_equal(lgot, lwant, (size_t)2 * LQ);
            assert_memory_equal(lgsx, lsx, sizeof lsx);
        }
        cudaFree(ldx_);
        cudaFree(ldq_);
        cudaFree(lds);
        free(lx);
        free(lwant);
        free(lgot);
    }
}

/* The row counts of the GEMM tests: each pass size of the row kernels, one
 * and two passes of 8, then the tiles with a partial and several row
 * tiles. INFERD_CUDA_TEST_SHORT (gpu-check's racecheck, which runs kernels
 * far slower) keeps one of each kind: 1, a short pass of 8, five passes,
 * and tiles with a partial one. */
static const int q_ms[] = {1, 2, 3, 5, 8, 9, 40, 64, 65, 130};
static const int q_ms_short[] = {1, 5, 40, 130};
enum { Q_MMAX = 130 };

/* Activations as cuda_k_quant_rows leaves them ([-127, 127], zero past K)
 * and their scales (row 2's 0). */
static void rand_q(int8_t *q, int ldq, int K, float *sx)
{
    for (int m = 0; m < Q_MMAX; m++) {
        for (int k = 0; k < ldq; k++)
            q[(size_t)m * ldq + k] = k < K ? (int8_t)((int)(urand() % 255) - 127) : 0;
        sx[m] = m == 2 ? 0.0f : fabsf(frand()) * 0.01f;
    }
}

/* Runs one quantized GEMM for every M of q_ms and compares rows 0..M-1 of
 * y with want [Q_MMAX][N] bit for bit; row 0 of the largest M is also
 * compared with the M = 1 run's (batch invariance, said outright). */
typedef cudaError_t (*q_gemm_fn)(const void *ctx, int M, float *dy, int ldy);

static void q_gemm_check(q_gemm_fn run, const void *ctx, int N, const float *want,
                         const char *what)
{
    int ldy = N + 3;
    size_t ybytes = (size_t)Q_MMAX * ldy * 4;
    float *dy = dmalloc(ybytes), *y = malloc(ybytes), *row0 = malloc((size_t)N * 4);
    const char *sh = getenv("INFERD_CUDA_TEST_SHORT");
    int shrt = sh && *sh && strcmp(sh, "0");
    const int *ms = shrt ? q_ms_short : q_ms;
    size_t nms = shrt ? sizeof q_ms_short / sizeof *q_ms_short : sizeof q_ms / sizeof *q_ms;
    for (size_t i = 0; i < nms; i++) {
        int M = ms[i];
        CK(cudaMemset(dy, 0xff, ybytes)); /* NaN: an unwritten output shows */
        CK(run(ctx, M, dy, ldy));
        CK(cudaDeviceSynchronize());
        to_host(y, dy, (size_t)M * ldy * 4);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++)
                if (memcmp(&y[(size_t)m * ldy + n], &want[(size_t)m * N + n], 4))
                    fail_msg("%s, M %d: y[%d][%d] = %a, the contract's %a", what, M, m, n,
                             y[(size_t)m * ldy + n], want[(size_t)m * N + n]);
        if (M == 1)
            memcpy(row0, y, (size_t)N * 4);
        if (M == Q_MMAX)
            assert_memory_equal(row0, y, (size_t)N * 4);
    }
    print_message("%s: the contract's bits at each of %zu M\n", what, nms);
    cudaFree(dy);
    free(y);
    free(row0);
}

typedef struct i8_case {
    const int8_t *q, *w;
    const float *sx, *sw;
    int ldq, ldw, N, K;
    int kernel; /* CUDA_QK_*, or -1: the launcher's choice by M */
} i8_case;

static cudaError_t run_i8(const void *ctx, int M, float *dy, int ldy)
{
    const i8_case *c = ctx;
    if (c->kernel < 0)
        return cuda_k_gemm_i8(c->q, c->ldq, c->sx, c->w, c->ldw, c->sw, c->N, c->K, dy, ldy, M,
                              0);
    return cuda_k_gemm_i8_with(c->kernel, c->q, c->ldq, c->sx, c->w, c->ldw, c->sw, c->N, c->K,
                               dy, ldy, M, 0);
}

/* cuda_k_gemm_i8 gives the contract's bits, y = ((float)S * sx) * sw, for
 * N not a multiple of any tile, K a multiple of 32 and not (with ldw and
 * ldq padded), weights holding -128, and one output whose sum is past 2^24
 * (so (float)S rounds); so does each of its kernels at every M. */
static void test_cuda_kern_gemm_i8_exact(void **state)
{
    (void)state;
    NEED_GPU();
    const int shapes[][4] = {/* N, K, ldw, ldq */
                             {1, 32, 32, 32}, {37, 96, 96, 96}, {300, 2080, 2080, 2080},
                             {37, 100, 128, 160}, {9, 9600, 9600, 9600}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int N = shapes[c][0], K = shapes[c][1], ldw = shapes[c][2], ldq = shapes[c][3];
        int8_t *q = malloc((size_t)Q_MMAX * ldq), *w = malloc((size_t)N * ldw);
        float sx[Q_MMAX], *sw = malloc((size_t)N * 4), *want = malloc((size_t)Q_MMAX * N * 4);
        rand_q(q, ldq, K, sx);
        for (int n = 0; n < N; n++) {
            for (int k = 0; k < ldw; k++)
                w[(size_t)n * ldw + k] = k < K ? (int8_t)((int)(urand() % 256) - 128) : 0;
            sw[n] = fabsf(frand()) * 0.01f;
        }
        for (int k = 0; k < K; k++) { /* y[0][0]: S near -2^25 for K = 2080 */
            q[k] = (int8_t)(100 + urand() % 28);
            w[k] = (int8_t)(-128 + (int)(urand() % 28));
        }
        for (int m = 0; m < Q_MMAX; m++)
            for (int n = 0; n < N; n++) {
                int32_t S = 0;
                for (int k = 0; k < K; k++)
                    S += (int32_t)q[(size_t)m * ldq + k] * w[(size_t)n * ldw + k];
                want[(size_t)m * N + n] = ((float)S * sx[m]) * sw[n];
            }
        i8_case ic = {.q = to_dev(q, (size_t)Q_MMAX * ldq), .w = to_dev(w, (size_t)N * ldw),
                      .sx = to_dev(sx, sizeof sx), .sw = to_dev(sw, (size_t)N * 4),
                      .ldq = ldq, .ldw = ldw, .N = N, .K = K};
        for (ic.kernel = -1; ic.kernel < CUDA_QK_KERNELS; ic.kernel++) {
            char what[96];
            snprintf(what, sizeof what, "gemm_i8 N %d K %d ldw %d ldq %d (%s)", N, K, ldw, ldq,
                     ic.kernel < 0 ? "by M" : cuda_k_qgemm_kernel_name(ic.kernel));
            q_gemm_check(run_i8, &ic, N, want, what);
        }
        cudaFree((void *)ic.q);
        cudaFree((void *)ic.w);
        cudaFree((void *)ic.sx);
        cudaFree((void *)ic.sw);
        free(q);
        free(w);
        free(sw);
        free(want);
    }
}

typedef struct i4_case {
    const int8_t *q;
    const uint8_t *w4;
    const uint16_t *d;
    const float *sx;
    int ldq, N, G;
    int kernel; /* CUDA_QK_*, or -1: the launcher's choice by M */
} i4_case;

static cudaError_t run_i4(const void *ctx, int M, float *dy, int ldy)
{
    const i4_case *c = ctx;
    if (c->kernel < 0)
        return cuda_k_gemm_i4(c->q, c->ldq, c->sx, c->w4, c->d, c->N, c->G, dy, ldy, M, 0);
    return cuda_k_gemm_i4_with(c->kernel, c->q, c->ldq, c->sx, c->w4, c->d, c->N, c->G, dy, ldy,
                               M, 0);
}

/* cuda_k_gemm_i4 gives the contract's bits: s_g exact from the nibbles
 * (low k = 32g + i, high 32g + 16 + i, minus 8), the fmaf chain over g in
 * order, then times sx; random nibbles and f16 scales of both signs (and
 * some 0), N not a multiple of any tile, G odd and even, over several of
 * the row kernel's 128-group chunks (300), ldq padded; each kernel at
 * every M. */
static void test_cuda_kern_gemm_i4_exact(void **state)
{
    (void)state;
    NEED_GPU();
    const int shapes[][3] = {/* N, G, ldq */ {1, 1, 32},      {37, 3, 128},
                             {300, 65, 2080}, {9, 300, 9632}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int N = shapes[c][0], G = shapes[c][1], ldq = shapes[c][2], K = 32 * G;
        size_t nd = (size_t)N * G;
        int8_t *q = malloc((size_t)Q_MMAX * ldq);
        uint8_t *w4 = malloc(nd * 16);
        uint16_t *d = malloc(nd * 2);
        float sx[Q_MMAX], *want = malloc((size_t)Q_MMAX * N * 4);
        rand_q(q, ldq, K, sx);
        for (size_t i = 0; i < nd * 16; i++)
            w4[i] = (uint8_t)urand();
        for (size_t i = 0; i < nd; i++)
            d[i] = i % 11 == 5 ? 0 : inf_f32_to_f16(frand() * 0.01f);
        for (int m = 0; m < Q_MMAX; m++)
            for (int n = 0; n < N; n++) {
                const int8_t *qm = q + (size_t)m * ldq;
                float acc = 0.0f;
                for (int g = 0; g < G; g++) {
                    const uint8_t *b = w4 + ((size_t)n * G + g) * 16;
                    int32_t s = 0;
                    for (int i = 0; i < 16; i++)
                        s += qm[32 * g + i] * ((b[i] & 15) - 8) +
                             qm[32 * g + 16 + i] * ((b[i] >> 4) - 8);
                    acc = fmaf((float)s, inf_f16_to_f32(d[(size_t)n * G + g]), acc);
                }
                want[(size_t)m * N + n] = acc * sx[m];
            }
        i4_case ic = {.q = to_dev(q, (size_t)Q_MMAX * ldq), .w4 = to_dev(w4, nd * 16),
                      .d = to_dev(d, nd * 2), .sx = to_dev(sx, sizeof sx), .ldq = ldq, .N = N,
                      .G = G};
        for (ic.kernel = -1; ic.kernel < CUDA_QK_KERNELS; ic.kernel++) {
            char what[96];
            snprintf(what, sizeof what, "gemm_i4 N %d G %d ldq %d (%s)", N, G, ldq,
                     ic.kernel < 0 ? "by M" : cuda_k_qgemm_kernel_name(ic.kernel));
            q_gemm_check(run_i4, &ic, N, want, what);
        }
        cudaFree((void *)ic.q);
        cudaFree((void *)ic.w4);
        cudaFree((void *)ic.d);
        cudaFree((void *)ic.sx);
        free(q);
        free(w4);
        free(d);
        free(want);
    }
}

typedef struct attn_case {
    int hd, G, KV, bs, max_ctx;
    int n_seqs;
    int first[8], count[8]; /* sequence s: tokens at positions first..first+count-1 */
} attn_case;

/* Causal attention in double: token t (sequence seq[t]) over positions
 * 0..pos[t] read through the table, from the same bf16 cache. */
static void attn_ref(const attn_case *c, const float *q, int ldq, const uint16_t *kc,
                     const uint16_t *vc, const int32_t *table, int MB, const int32_t *seq,
                     const int32_t *pos, int t, double *out)
{
    int hd = c->hd, H = c->KV * c->G;
    double *sc = malloc((size_t)(pos[t] + 1) * sizeof *sc);
    for (int h = 0; h < H; h++) {
        int g = h / c->G;
        double mx = -INFINITY, sum = 0;
        for (int p = 0; p <= pos[t]; p++) {
            size_t at = (((size_t)table[seq[t] * MB + p / c->bs] * c->KV + g) * c->bs +
                         p % c->bs) * hd;
            double s = 0;
            for (int d = 0; d < hd; d++)
                s += (double)q[(size_t)t * ldq + h * hd + d] * bf(kc[at + d]);
            sc[p] = s / sqrt((double)hd);
            if (sc[p] > mx)
                mx = sc[p];
        }
        for (int p = 0; p <= pos[t]; p++)
            sum += (sc[p] = exp(sc[p] - mx));
        for (int d = 0; d < hd; d++) {
            double o = 0;
            for (int p = 0; p <= pos[t]; p++) {
                size_t at = (((size_t)table[seq[t] * MB + p / c->bs] * c->KV + g) * c->bs +
                             p % c->bs) * hd;
                o += sc[p] * bf(vc[at + d]);
            }
            out[h * hd + d] = o / sum;
        }
    }
    free(sc);
}

/* Runs one mixed batch (one-token sequences through the decode kernel, the
 * others through prefill tiles, metadata packed by cuda_plan_batch) over a
 * random cache with blocks handed out in shuffled order, and compares every
 * output with attn_ref within 5e-3. */
static void run_attn_case(const attn_case *c)
{
    model_config mc;
    memset(&mc, 0, sizeof mc);
    mc.hidden_size = c->KV * c->G * c->hd;
    mc.intermediate_size = 8;
    mc.n_layers = 1;
    mc.n_heads = c->KV * c->G;
    mc.n_kv_heads = c->KV;
    mc.head_dim = c->hd;
    mc.vocab_size = 8;
    int T = 0;
    for (int s = 0; s < c->n_seqs; s++)
        T += c->count[s];
    cuda_shard sh;
    cuda_dims d;
    assert_int_equal(cuda_plan_shard(&mc, 1, 0, &sh, NULL), INF_OK);
    cuda_limits lim = {.max_tokens = T, .max_seqs = c->n_seqs, .max_ctx = c->max_ctx,
                       .block_size = c->bs};
    assert_int_equal(cuda_plan_dims(&mc, &sh, &lim, &d, NULL), INF_OK);
    int MB = d.MB, nb = c->n_seqs * MB + 1, H = c->KV * c->G, hd = c->hd;
    int32_t *perm = shuffled_blocks(nb);
    int32_t *table = calloc((size_t)c->n_seqs * MB, sizeof *table);
    for (int s = 0, k = 0; s < c->n_seqs; s++)
        for (int i = 0; i < MB; i++)
            table[s * MB + i] = perm[k++];
    int32_t *tok = calloc((size_t)T, 4), *pos = malloc((size_t)T * 4), *slot = malloc((size_t)T * 4);
    int32_t *seq = malloc((size_t)T * 4), start[9], len[8];
    int32_t *rows = malloc((size_t)T * 4);
    for (int s = 0, t = 0; s < c->n_seqs; s++) {
        start[s] = t;
        len[s] = c->first[s] + c->count[s];
        for (int i = 0; i < c->count[s]; i++, t++) {
            pos[t] = c->first[s] + i;
            slot[t] = table[s * MB + pos[t] / c->bs] * c->bs + pos[t] % c->bs;
            seq[t] = s;
            rows[t] = t;
        }
    }
    start[c->n_seqs] = T;
    be_batch b = {.n_tokens = T, .tokens = tok, .positions = pos, .slots = slot,
                  .n_seqs = c->n_seqs, .seq_start = start, .seq_len = len,
                  .block_table = table, .max_blocks = MB, .logit_rows = rows, .n_logits = T};
    cuda_mlayout ml;
    cuda_plan_meta(&d, &ml);
    void *stage = calloc(1, ml.total);
    cuda_step st;
    cuda_plan_batch(&d, &ml, &b, 0, NULL, NULL, stage, &st);

    size_t cache = (size_t)nb * c->KV * c->bs * hd;
    uint16_t *kc = malloc(cache * 2), *vc = malloc(cache * 2);
    for (size_t i = 0; i < cache; i++) {
        kc[i] = inf_f32_to_bf16(frand());
        vc[i] = inf_f32_to_bf16(frand());
    }
    int ldq = H * hd;
    float *q = malloc((size_t)T * ldq * 4);
    for (int i = 0; i < T * ldq; i++)
        q[i] = 2.0f * frand();
    unsigned char *dmeta = to_dev(stage, ml.total);
    uint16_t *dk = to_dev(kc, cache * 2), *dv = to_dev(vc, cache * 2);
    float *dq = to_dev(q, (size_t)T * ldq * 4);
    uint16_t *dout = dmalloc((size_t)T * ldq * 2);
    float *dpart = dmalloc((size_t)c->n_seqs * c->KV * d.max_splits * c->G * (hd + 2) * 4);
    cuda_attn_args a = {.q = dq, .ldq = ldq, .kc = dk, .vc = dv, .out = dout, .ldo = ldq,
                        .positions = (int32_t *)(dmeta + ml.positions),
                        .tok_seq = (int32_t *)(dmeta + ml.tok_seq),
                        .table = (int32_t *)(dmeta + ml.table), .MB = MB, .KVl = c->KV,
                        .G = c->G, .hd = hd, .block_size = c->bs,
                        .scale = 1.0f / sqrtf((float)hd), .dec = (int32_t *)(dmeta + ml.dec),
                        .chunk = d.chunk, .max_splits = d.max_splits, .part = dpart,
                        .tiles = (int32_t *)(dmeta + ml.tiles)};
    CK(cuda_k_attn_setup(hd));
    CK(cuda_k_attn_decode(&a, st.n_dec, 0));
    CK(cuda_k_attn_prefill(&a, st.n_tiles, 0));
    CK(cudaDeviceSynchronize());
    uint16_t *out = malloc((size_t)T * ldq * 2);
    to_host(out, dout, (size_t)T * ldq * 2);
    double *ref = malloc((size_t)ldq * sizeof *ref), worst = 0;
    for (int t = 0; t < T; t++) {
        attn_ref(c, q, ldq, kc, vc, table, MB, seq, pos, t, ref);
        for (int i = 0; i < ldq; i++) {
            double e = fabs(bf(out[t * ldq + i]) - ref[i]);
            if (e > worst)
                worst = e;
            if (e > 5e-3)
                fail_msg("attention hd %d G %d KV %d bs %d: token %d (pos %d) dim %d: gpu %g, "
                         "reference %g", hd, c->G, c->KV, c->bs, t, pos[t], i,
                         bf(out[t * ldq + i]), ref[i]);
        }
    }
    print_message("attention hd %d G %d KV %d bs %d: %d tokens (%d decode, %d tiles), worst "
                  "|error| %.2e\n", hd, c->G, c->KV, c->bs, T, st.n_dec, st.n_tiles, worst);

    /* Batch-invariant: every token through the tensor-core tiles, within the
     * same tolerance; then every token alone in a tile of its own, which must
     * give the same bits (a token's result does not depend on its tile). */
    lim.invariant = 1;
    cuda_dims di;
    assert_int_equal(cuda_plan_dims(&mc, &sh, &lim, &di, NULL), INF_OK);
    assert_int_equal(di.attn_mma, hd % 8 == 0 && hd <= 256 && c->G <= 16);
    uint16_t *first = malloc((size_t)T * ldq * 2), *again = malloc((size_t)T * ldq * 2);
    for (int pass = 0; di.attn_mma && pass < 2; pass++) {
        if (pass)
            di.tile_tokens = 1;
        cuda_mlayout mi;
        cuda_plan_meta(&di, &mi);
        void *st2 = calloc(1, mi.total);
        cuda_step s2;
        cuda_plan_batch(&di, &mi, &b, 0, NULL, NULL, st2, &s2);
        assert_int_equal(s2.n_dec, T);
        unsigned char *dm2 = to_dev(st2, mi.total);
        float *dp2 = dmalloc((size_t)T * c->KV * di.max_splits * c->G * (hd + 2) * 4);
        cuda_attn_args a2 = a;
        a2.positions = (int32_t *)(dm2 + mi.positions);
        a2.tok_seq = (int32_t *)(dm2 + mi.tok_seq);
        a2.table = (int32_t *)(dm2 + mi.table);
        a2.dec = (int32_t *)(dm2 + mi.dec);
        a2.tiles = (int32_t *)(dm2 + mi.tiles);
        a2.part = dp2;
        CK(cudaMemset(dout, 0xff, (size_t)T * ldq * 2)); /* NaN: unwritten rows show */
        CK(cuda_k_attn_tiles(&a2, s2.n_tiles, s2.n_dec, 0));
        CK(cudaDeviceSynchronize());
        to_host(pass ? again : first, dout, (size_t)T * ldq * 2);
        double worst2 = 0;
        for (int t = 0; !pass && t < T; t++) {
            attn_ref(c, q, ldq, kc, vc, table, MB, seq, pos, t, ref);
            for (int i = 0; i < ldq; i++) {
                double e = fabs(bf(first[t * ldq + i]) - ref[i]);
                worst2 = e > worst2 || e != e ? e : worst2;
                if (!(e <= 5e-3))
                    fail_msg("tensor-core attention hd %d G %d KV %d bs %d: token %d (pos %d) "
                             "dim %d: gpu %g, reference %g", hd, c->G, c->KV, c->bs, t, pos[t],
                             i, bf(first[t * ldq + i]), ref[i]);
            }
        }
        if (!pass)
            print_message("  tensor cores, batch-invariant: %d tiles, worst |error| %.2e\n",
                          s2.n_tiles, worst2);
        else if (memcmp(first, again, (size_t)T * ldq * 2))
            fail_msg("tensor-core attention hd %d G %d: a token alone in its tile differs from "
                     "the same token in a shared tile", hd, c->G);
        cudaFree(dm2);
        cudaFree(dp2);
        free(st2);
    }
    free(first);
    free(again);
    cudaFree(dmeta);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dpart);
    free(perm);
    free(table);
    free(tok);
    free(pos);
    free(slot);
    free(seq);
    free(rows);
    free(stage);
    free(kc);
    free(vc);
    free(q);
    free(out);
    free(ref);
}

/* Decode (split-K: contexts from 1 to max_ctx, one split to many) and
 * prefill tiles (a fresh prompt, a chunk after earlier context, verification
 * rows) in one batch, for head dims 8..256, GQA groups 1..12 (more than one
 * decode head group), block sizes 7..32. */
static void test_cuda_kern_attention_paged(void **state)
{
    (void)state;
    NEED_GPU();
    const attn_case cases[] = {
        {.hd = 64, .G = 4, .KV = 2, .bs = 16, .max_ctx = 4096, .n_seqs = 8,
         .first = {0, 16, 255, 256, 999, 4095, 0, 100},
         .count = {1, 1, 1, 1, 1, 1, 70, 33}},
        {.hd = 8, .G = 2, .KV = 4, .bs = 16, .max_ctx = 512, .n_seqs = 4,
         .first = {0, 300, 40, 511}, .count = {60, 1, 5, 1}},
        {.hd = 128, .G = 1, .KV = 3, .bs = 32, .max_ctx = 2048, .n_seqs = 3,
         .first = {2047, 10, 1500}, .count = {1, 40, 1}},
        {.hd = 256, .G = 8, .KV = 1, .bs = 16, .max_ctx = 1024, .n_seqs = 2,
         .first = {700, 0}, .count = {1, 9}},
        {.hd = 16, .G = 5, .KV = 1, .bs = 7, .max_ctx = 300, .n_seqs = 3,
         .first = {0, 150, 299}, .count = {30, 12, 1}},
        {.hd = 32, .G = 12, .KV = 2, .bs = 16, .max_ctx = 600, .n_seqs = 2,
         .first = {599, 20}, .count = {1, 4}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_attn_case(&cases[i]);
}

/* ---- sampling ------------------------------------------------------------------------ */

/* Moves u off the CPU distribution's CDF boundaries (by at least 1e-7 of the
 * mass), where float summation order could legitimately pick a neighbour. */
static double safe_u(const float *probs, int V, double u)
{
    for (int tries = 0; tries < 100; tries++, u = fmod(u + 0.123456789, 1.0)) {
        double total = 0, acc = 0, near = INFINITY;
        for (int i = 0; i < V; i++)
            total += probs[i] > 0 ? probs[i] : 0;
        double target = u * total;
        for (int i = 0; i < V; i++)
            if (probs[i] > 0) {
                acc += probs[i];
                if (fabs(acc - target) < near)
                    near = fabs(acc - target);
            }
        if (near > 1e-7 * total)
            return u;
    }
    return u;
}

/* Device sampling equals smp_probs + smp_draw (what smp_sample does) for
 * greedy, temperature, top-k, top-p, min-p and their mixes, on rows with
 * ties, NaN and -inf, for small and real vocabulary sizes. */
static void test_cuda_kern_sample_matches_smp(void **state)
{
    (void)state;
    NEED_GPU();
    const int Vs[] = {100, 512, 32000};
    const smp_params base = smp_params_default();
    smp_params ps[12];
    for (int i = 0; i < 12; i++)
        ps[i] = base;
    ps[0].temperature = 0.0f;
    ps[1].temperature = 1.0f;
    ps[2].temperature = 0.7f, ps[2].top_k = 1;
    ps[3].temperature = 0.7f, ps[3].top_k = 50;
    ps[4].temperature = 1.3f, ps[4].top_p = 0.9f;
    ps[5].temperature = 1.0f, ps[5].top_k = 40, ps[5].top_p = 0.8f;
    ps[6].temperature = 1.0f, ps[6].min_p = 0.05f;
    ps[7].temperature = 0.8f, ps[7].top_k = 1 << 20, ps[7].top_p = 0.5f, ps[7].min_p = 0.1f;
    ps[8].temperature = 2.0f, ps[8].top_p = 0.3f;
    ps[9].temperature = 1.0f, ps[9].top_k = 99;
    ps[10].temperature = 0.5f, ps[10].top_k = 7, ps[10].top_p = 0.95f, ps[10].min_p = 0.01f;
    ps[11].temperature = 1e-3f, ps[11].top_p = 0.99f;
    for (size_t vi = 0; vi < 3; vi++) {
        int V = Vs[vi], n = 12 * 4;
        float *logits = malloc((size_t)n * V * 4), *probs = malloc((size_t)V * 4);
        cuda_smp_row rows[48];
        int32_t want[48], got[48];
        smp_ctx *sc = NULL;
        assert_int_equal(smp_create(V, &sc, NULL), INF_OK);
        for (int r = 0; r < n; r++) {
            float *x = logits + (size_t)r * V;
            int kind = r / 12; /* 0 smooth, 1 ties, 2 NaN and -inf, 3 peaked */
            for (int i = 0; i < V; i++) {
                float v = 3.0f * frand();
                x[i] = kind == 1 ? roundf(v * 2.0f) / 2.0f : kind == 3 ? 12.0f * v : v;
            }
            if (kind == 2) {
                x[urand() % (unsigned)V] = NAN;
                x[urand() % (unsigned)V] = -INFINITY;
                x[urand() % (unsigned)V] = NAN;
            }
            const smp_params *p = &ps[r % 12];
            smp_probs(sc, p, x, probs);
            double u = safe_u(probs, V, (double)(urand() >> 8) / 16777216.0);
            want[r] = p->temperature > 0 ? smp_draw(probs, V, u) : smp_argmax(x, V);
            rows[r] = (cuda_smp_row){.temperature = p->temperature, .top_k = p->top_k,
                                     .top_p = p->top_p, .min_p = p->min_p, .u = u};
        }
        float *dl = to_dev(logits, (size_t)n * V * 4);
        cuda_smp_row *dr = to_dev(rows, sizeof rows);
        int32_t *di = dmalloc(sizeof got);
        CK(cuda_k_sample(dl, V, n, dr, di, 0));
        to_host(got, di, sizeof got);
        for (int r = 0; r < n; r++)
            if (got[r] != want[r])
                fail_msg("sample V %d row %d (params %d, kind %d): gpu %d, smp %d", V, r,
                         r % 12, r / 12, got[r], want[r]);
        cudaFree(dl);
        cudaFree(dr);
        cudaFree(di);
        smp_destroy(sc);
        free(logits);
        free(probs);
    }
}

/* The host path's mask, written here from its definition (engine/be.h):
 * a token whose bit is clear gets logit -inf. */
static void mask_logits(float *x, int V, const uint32_t *words)
{
    for (int i = 0; i < V; i++)
        if (!(words[i >> 5] >> (i & 31) & 1u))
            x[i] = -INFINITY;
}

/* Device sampling with token masks equals masking on the host (logit -inf)
 * then smp_argmax / smp_probs + smp_draw: greedy and every filter, masks
 * that keep one token, a few, most, or none of the unmasked argmax's
 * neighbours, beside unmasked rows in the same launch. */
static void test_cuda_kern_sample_masked(void **state)
{
    (void)state;
    NEED_GPU();
    const int Vs[] = {70, 32000};
    smp_params ps[6];
    for (int i = 0; i < 6; i++)
        ps[i] = smp_params_default();
    ps[0].temperature = 0.0f;
    ps[1].temperature = 1.0f;
    ps[2].temperature = 0.7f, ps[2].top_k = 5;
    ps[3].temperature = 1.3f, ps[3].top_p = 0.8f;
    ps[4].temperature = 1.0f, ps[4].top_k = 40, ps[4].top_p = 0.9f, ps[4].min_p = 0.02f;
    ps[5].temperature = 0.5f, ps[5].min_p = 0.1f;
    for (size_t vi = 0; vi < 2; vi++) {
        int V = Vs[vi], n = 6 * 5, W = (V + 31) / 32;
        float *logits = malloc((size_t)n * V * 4), *x = malloc((size_t)V * 4);
        float *probs = malloc((size_t)V * 4);
        uint32_t *masks = calloc((size_t)n * W, 4);
        cuda_smp_row rows[30];
        int32_t want[30], got[30];
        smp_ctx *sc = NULL;
        assert_int_equal(smp_create(V, &sc, NULL), INF_OK);
        for (int r = 0; r < n; r++) {
            float *l = logits + (size_t)r * V;
            for (int i = 0; i < V; i++)
                l[i] = 4.0f * frand();
            int kind = r / 6; /* 0 none, 1 the last token and about one more, 2 about
                                 1/8, 3 all but about 1/8, 4 every third, tied */
            uint32_t *w = masks + (size_t)r * W;
            for (int i = 0; i < V; i++) {
                int on = kind == 1 ? i == (int)(urand() % (unsigned)V) || i == V - 1
                         : kind == 2 ? urand() % 8 == 0
                         : kind == 3 ? urand() % 8 != 0
                                     : i % 3 == 0;
                if (on)
                    w[i >> 5] |= 1u << (i & 31);
            }
            if (kind == 4) /* ties between allowed tokens */
                for (int i = 0; i < V; i += 3)
                    l[i] = 1.5f;
            memcpy(x, l, (size_t)V * 4);
            if (kind > 0)
                mask_logits(x, V, w);
            const smp_params *p = &ps[r % 6];
            smp_probs(sc, p, x, probs);
            double u = safe_u(probs, V, (double)(urand() >> 8) / 16777216.0);
            want[r] = p->temperature > 0 ? smp_draw(probs, V, u) : smp_argmax(x, V);
            rows[r] = (cuda_smp_row){.temperature = p->temperature, .top_k = p->top_k,
                                     .top_p = p->top_p, .min_p = p->min_p, .u = u};
            if (kind > 0 && !(w[want[r] >> 5] >> (want[r] & 31) & 1u))
                fail_msg("V %d row %d: the host reference picked masked token %d", V, r,
                         want[r]);
        }
        float *dl = to_dev(logits, (size_t)n * V * 4);
        uint32_t *dm = to_dev(masks, (size_t)n * W * 4);
        for (int r = 0; r < n; r++)
            rows[r].mask = r / 6 > 0 ? dm + (size_t)r * W : NULL;
        cuda_smp_row *dr = to_dev(rows, sizeof rows);
        int32_t *di = dmalloc(sizeof got);
        CK(cuda_k_sample(dl, V, n, dr, di, 0));
        to_host(got, di, sizeof got);
        for (int r = 0; r < n; r++)
            if (got[r] != want[r])
                fail_msg("masked sample V %d row %d (params %d, mask kind %d): gpu %d, host %d",
                         V, r, r % 6, r / 6, got[r], want[r]);
        cudaFree(dl);
        cudaFree(dm);
        cudaFree(dr);
        cudaFree(di);
        smp_destroy(sc);
        free(logits);
        free(x);
        free(probs);
        free(masks);
    }
}

/* ---- whole models -------------------------------------------------------------------- */

/* Models to compare on: the tests' own fixtures, and the real ones when
 * ../shared is here (said when not). */
static int model_dirs(char dirs[][600], int want_real_only)
{
    int n = 0;
    if (!want_real_only) {
        snprintf(dirs[n++], 600, "%s/tiny", fixtures());
        snprintf(dirs[n++], 600, "%s/wide", fixtures());
    }
    const char *real[] = {"../shared/models/stories260K", "../shared/models/babyllama-105"};
    for (int i = 0; i < 2; i++) {
        if (is_dir(real[i]))
            snprintf(dirs[n++], 600, "%s", real[i]);
        else
            print_message("note: %s is absent; not compared\n", real[i]);
    }
    return n;
}

/* The model with its matrices and embedding rounded to bf16 (norm gains
 * kept): what the GPU holds, for the CPU backend to run. */
typedef struct mcopy {
    model m;
    void *blob[2 + 7 * 64];
    int n;
} mcopy;

static void round_tensor(mcopy *mc, model_tensor *t)
{
    size_t n = (size_t)(t->rows * t->cols);
    uint16_t *b = malloc(n * 2);
    cuda_plan_to_bf16(t->data, t->dtype, n, b);
    t->data = b;
    t->dtype = INF_BF16;
    mc->blob[mc->n++] = b;
}

static mcopy *bf16_copy(const model *m)
{
    mcopy *mc = calloc(1, sizeof *mc);
    mc->m = *m;
    assert_true(m->cfg.n_layers <= 64);
    mc->m.layers = malloc((size_t)m->cfg.n_layers * sizeof *mc->m.layers);
    memcpy(mc->m.layers, m->layers, (size_t)m->cfg.n_layers * sizeof *mc->m.layers);
    int tied = m->lm_head.data == m->embed.data;
    round_tensor(mc, &mc->m.embed);
    if (tied)
        mc->m.lm_head = mc->m.embed;
    else
        round_tensor(mc, &mc->m.lm_head);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        model_layer *w = &mc->m.layers[l];
        model_tensor *ts[7] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        for (int i = 0; i < 7; i++)
            round_tensor(mc, ts[i]);
    }
    return mc;
}

static void mcopy_free(mcopy *mc)
{
    for (int i = 0; i < mc->n; i++)
        free(mc->blob[i]);
    free(mc->m.layers);
    free(mc);
}

enum { BS = 16, MAXB = 48, MAXT = 1024, MAXS = 64 };

/* The CPU backend, its layer matrices quantized as quant says (cpu_quant). */
static be_backend *cpu_make_q(const model *m, int T, int ctx, int nb, int quant)
{
    cpu_config c = cpu_config_default();
    c.quant = quant;
    c.max_tokens = T;
    c.max_context = ctx;
    c.block_size = BS;
    c.num_blocks = nb;
    be_backend *be = NULL;
    inf_err err = {0};
    if (cpu_backend_create(m, &c, &be, &err))
        fail_msg("cpu backend: %s", err.msg);
    return be;
}

static be_backend *cpu_make(const model *m, int T, int ctx, int nb)
{
    return cpu_make_q(m, T, ctx, nb, CPU_QUANT_NONE);
}

/* A backend's config for these tests; gpu_create builds it. */
static cuda_config gpu_config(int T, int S, int ctx, int nb, int graphs, int tp)
{
    cuda_config c = cuda_config_default();
    c.max_tokens = T;
    c.max_seqs = S;
    c.max_context = ctx;
    c.block_size = BS;
    c.num_blocks = nb;
    c.cuda_graphs = graphs;
    c.tensor_parallel_size = tp;
    return c;
}

static be_backend *gpu_create(const model *m, const cuda_config *c)
{
    be_backend *be = NULL;
    inf_err err = {0};
    if (cuda_backend_create(m, c, &be, &err))
        fail_msg("cuda backend: %s", err.msg);
    return be;
}

static be_backend *gpu_make(const model *m, int T, int S, int ctx, int nb, int graphs, int tp)
{
    cuda_config c = gpu_config(T, S, ctx, nb, graphs, tp);
    return gpu_create(m, &c);
}

/* One batch under construction: sequences with their new tokens. */
typedef struct bb {
    int32_t tok[MAXT], pos[MAXT], slot[MAXT], rows[MAXT], start[MAXS + 1], len[MAXS];
    int32_t table[MAXS * MAXB];
    int n, s, nl;
} bb;

/* Adds a sequence whose blocks are `blocks` with toks[0..n) at positions
 * pos0..; logits for every new token, or only the last. */
static void bb_add(bb *b, const int32_t *blocks, const int32_t *toks, int pos0, int n, int all)
{
    b->start[b->s] = b->n;
    b->len[b->s] = pos0 + n;
    memcpy(b->table + b->s * MAXB, blocks, MAXB * sizeof *blocks);
    for (int i = 0; i < n; i++, b->n++) {
        int p = pos0 + i;
        b->tok[b->n] = toks[i];
        b->pos[b->n] = p;
        b->slot[b->n] = blocks[p / BS] * BS + p % BS;
        if (all || i == n - 1)
            b->rows[b->nl++] = b->n;
    }
    b->s++;
    b->start[b->s] = b->n;
}

static be_batch bb_batch(bb *b)
{
    be_batch x = {.n_tokens = b->n, .tokens = b->tok, .positions = b->pos, .slots = b->slot,
                  .n_seqs = b->s, .seq_start = b->start, .seq_len = b->len,
                  .block_table = b->table, .max_blocks = MAXB, .logit_rows = b->rows,
                  .n_logits = b->nl};
    return x;
}

static void forward_ok(be_backend *be, const be_batch *b, float *logits)
{
    inf_err err = {0};
    int rc = be_forward(be, b, logits, &err);
    if (rc)
        fail_msg("%s forward: %s", be->ops->name, err.msg);
}

/* Logits of one sequence, every position, fed in chunks of `chunk` tokens
 * (0: at once) on blocks 1, 2, ... */
static void seq_logits(be_backend *be, const int32_t *toks, int n, int chunk, float *out)
{
    int32_t blocks[MAXB];
    for (int i = 0; i < MAXB; i++)
        blocks[i] = i + 1;
    int V = be->vocab_size;
    bb *b = malloc(sizeof *b);
    for (int done = 0; done < n;) {
        int take = chunk > 0 && n - done > chunk ? chunk : n - done;
        memset(b, 0, sizeof *b);
        bb_add(b, blocks, toks + done, done, take, 1);
        be_batch x = bb_batch(b);
        forward_ok(be, &x, out + (size_t)done * V);
        done += take;
    }
    free(b);
}

/* Largest |a - b| over a row, against the tolerance 3% of b's range + 1e-3. */
static double row_err(const float *a, const float *b, int V, double *tol)
{
    float lo = b[0], hi = b[0];
    double e = 0;
    for (int i = 0; i < V; i++) {
        lo = fminf(lo, b[i]);
        hi = fmaxf(hi, b[i]);
        e = fmax(e, fabs((double)a[i] - b[i]));
    }
    *tol = 0.03 * (hi - lo) + 1e-3;
    return e;
}

/* The MLP speculator's stages on the device (cuda/mlp.h: cuBLAS GEMMs in
 * bf16 and cuda_k_mlp_mix) against the host's (engine/spec_mlp.c: f32
 * weights, double sums), on a random speculator in the real format, tied
 * and untied, 5 rows at once, vocabulary 3000: every stage's logits within
 * 3% of the host row's range + 1e-3 (bf16 weights and state), and the
 * device's argmax the host's wherever the host's top two logits are further
 * apart than that. Each stage is fed the host's tokens, so both follow one
 * path. */
static void test_cuda_mlp_matches_host(void **state)
{
    (void)state;
    NEED_GPU();
    enum { V = 3000, D = 96, I = 128, K = 3, N = 5 };
    tdir td;
    assert_int_equal(tdir_make(&td, "test_cuda_mlp"), 0);
    static float hid[N][D], s0[N][D], lh[N][K][V], ld[N][V];
    int32_t toks[N][K], feed[N];
    for (int tied = 0; tied < 2; tied++) {
        char dir[700];
        snprintf(dir, sizeof dir, "%s/spec%d", td.path, tied);
        mlp_fix_write(dir, V, D, I, K, tied, 1.0f, 21 + (unsigned)tied);
        spec_proposer *sp = NULL;
        inf_err err = {0};
        spec_mlp_config sc = {.dir = dir, .target_vocab = V, .target_hidden = D};
        if (spec_mlp_create(&sc, &sp, &err))
            fail_msg("spec_mlp_create: %s", err.msg);
        spec_mlp_weights w;
        spec_mlp_weights_of(sp, &w);
        spec_mlp_device dev;
        if (cuda_mlp_create(0, &w, 8, &dev, &err))
            fail_msg("cuda_mlp_create: %s", err.msg);
        for (int r = 0; r < N; r++) {
            double ss = 0;
            for (int c = 0; c < D; c++) {
                hid[r][c] = 2.0f * frand();
                ss += (double)hid[r][c] * hid[r][c];
            }
            /* scale_input: RMS-normalized, / sqrt 2 (the state before stage 0) */
            double k = 1.0 / sqrt(ss / D + 1e-6) / sqrt(2.0);
            for (int c = 0; c < D; c++)
                s0[r][c] = (float)(hid[r][c] * k);
            feed[r] = (int32_t)(urand() % V);
            spec_mlp_run(sp, hid[r], feed[r], K, toks[r], &lh[r][0][0]);
        }
        double worst = 0;
        int compared = 0;
        for (int j = 0; j < K; j++) {
            if (dev.stage(dev.user, j, N, &s0[0][0], feed, &ld[0][0], &err))
                fail_msg("stage %d: %s", j, err.msg);
            for (int r = 0; r < N; r++) {
                double tol, e = row_err(ld[r], lh[r][j], V, &tol);
                if (e > tol)
                    fail_msg("%s, stage %d, row %d: |device - host| %.4g > %.4g",
                             tied ? "tied" : "untied", j, r, e, tol);
                worst = fmax(worst, e / tol);
                int a = smp_argmax(lh[r][j], V), b = -1;
                for (int v = 0; v < V; v++)
                    if (v != a && (b < 0 || lh[r][j][v] > lh[r][j][b]))
                        b = v;
                if (lh[r][j][a] - lh[r][j][b] > tol) {
                    assert_int_equal(smp_argmax(ld[r], V), a);
                    compared++;
                }
                feed[r] = toks[r][j];
            }
        }
        assert_true(compared > 0);
        print_message("mlp speculator (%s): device stages within %.2f of the tolerance of the "
                      "host's; %d of %d greedy drafts compared, all equal\n",
                      tied ? "tied" : "untied", worst, compared, N * K);
        dev.destroy(dev.user);
        sp->ops->destroy(sp);
    }
    tdir_remove(&td);
}

/* Every prompt position's logits on the GPU match the CPU backend run on
 * the same bf16 weights (3% of the row's range), prefilled at once, in
 * chunks of 7 and one token at a time (decode), with the batch-invariant
 * kernels and with cuBLAS. Batch-invariant, the three are the same bits. */
/* Worst over n rows of |a - b| as a fraction of row_err's tolerance. */
static double worst_err(const float *a, const float *b, int n, int V)
{
    double w = 0;
    for (int i = 0; i < n; i++) {
        double tol, e = row_err(a + (size_t)i * V, b + (size_t)i * V, V, &tol);
        w = fmax(w, e / tol);
    }
    return w;
}

/* The GPU's logits of a 40-token sequence, at once, in chunks of 7 and
 * decoded, against the CPU backend on the same bf16-rounded weights, in
 * both GPU modes (batch-invariant: the same bits all three ways).
 *
 * With quant (cuda_config.quant) both backends quantize the layer matrices
 * from the checkpoint by engine/qdef's rules and sum exactly, but the GPU
 * quantizes its bf16 activations where the CPU takes f32 ones: a bf16
 * rounding moves a value near amax by up to a quarter of an int8 step, so
 * many int8 activations differ by one, as if quantized afresh. On the
 * random fixtures that alone moves the logits by about the scheme's own
 * distance from bf16 for int8 (1.1 to 2.3 tolerances on the fake device).
 * So the quantized runs allow 2.5 tolerances, and for int4, whose distance
 * from bf16 is 13 to 17 tolerances there, the GPU must also be within 30% of
 * that distance: it runs the CPU's scheme, not merely some 4-bit one. */
static void logits_match_cpu_q_with(const char *dir, int quant, const model_load_opts *lo)
{
    model *m = NULL;
    inf_err err = {0};
    if (model_load_with(dir, lo, &m, &err))
        fail_msg("%s", err.msg);
    int V = m->cfg.vocab_size, n = 40;
    int32_t toks[40];
    toks[0] = 1;
    for (int i = 1; i < n; i++)
        toks[i] = (int32_t)((i * 37 + 11) % V);
    size_t bytes = (size_t)n * V * 4;
    float *lc = malloc(bytes), *lg = malloc(bytes), *lg7 = malloc(bytes);
    float *lg1 = malloc(bytes);
    mcopy *mc = quant ? NULL : bf16_copy(m); /* the CPU reference, once for both GPU modes */
    be_backend *cpu = cpu_make_q(mc ? &mc->m : m, MAXT, 256, MAXB + 1, quant);
    seq_logits(cpu, toks, n, 0, lc);
    be_destroy(cpu);
    if (mc)
        mcopy_free(mc);
    double k = quant ? 2.5 : 1.0, qdist = 0; /* int4's distance from bf16 on the CPU */
    if (quant == CUDA_QUANT_INT4) {
        mcopy *mb = bf16_copy(m);
        be_backend *cb = cpu_make(&mb->m, MAXT, 256, MAXB + 1);
        seq_logits(cb, toks, n, 0, lg);
        be_destroy(cb);
        mcopy_free(mb);
        qdist = worst_err(lc, lg, n, V);
    }
    for (int inv = 1; inv >= 0; inv--) {
        cuda_config gc = gpu_config(MAXT, MAXS, 256, MAXB + 1, 1, 1);
        gc.batch_invariant = inv;
        gc.quant = quant;
        be_backend *gpu = gpu_create(m, &gc);
        seq_logits(gpu, toks, n, 0, lg);
        seq_logits(gpu, toks, n, 7, lg7);
        seq_logits(gpu, toks, n, 1, lg1);
        be_destroy(gpu);
        double worst = 0, worst7 = 0;
        for (int i = 0; i < n; i++) {
            double tol, e = row_err(lg + (size_t)i * V, lc + (size_t)i * V, V, &tol);
            double e7 = row_err(lg7 + (size_t)i * V, lc + (size_t)i * V, V, &tol);
            double e1 = row_err(lg1 + (size_t)i * V, lc + (size_t)i * V, V, &tol);
            worst = fmax(worst, e / tol);
            worst7 = fmax(worst7, fmax(e7, e1) / tol);
            if (e > k * tol || e7 > k * tol || e1 > k * tol)
                fail_msg("%s position %d: |gpu - cpu| %g (chunks of 7 %g, decode %g) > %g",
                         dir, i, e, e7, e1, k * tol);
        }
        int same = !memcmp(lg, lg7, bytes) && !memcmp(lg, lg1, bytes);
        print_message("%s%s, %s: worst |gpu - cpu| is %.2f of the tolerance (%.2f chunked or "
                      "decoded); at once, in chunks and decoded: %s\n", dir,
                      quant == CUDA_QUANT_INT8 ? " (int8)" : quant ? " (int4)" : "",
                      inv ? "batch-invariant" : "cuBLAS", worst, worst7,
                      same ? "the same bits" : "different bits");
        if (qdist > 0) {
            print_message("  int4 on the CPU is %.2f tolerances from bf16\n", qdist);
            if (worst > 0.3 * qdist)
                fail_msg("%s: the GPU's int4 is %.2f tolerances from the CPU's, over 30%% of "
                         "int4's own %.2f from bf16", dir, worst, qdist);
        }
        if (inv && !same)
            fail_msg("%s: batch-invariant logits differ between prefill at once, chunks "
                     "of 7 and decode", dir);
    }
    model_destroy(m);
    free(lc);
    free(lg);
    free(lg7);
    free(lg1);
}

static void logits_match_cpu_q(const char *dir, int quant)
{
    const model_load_opts lo = {0};
    logits_match_cpu_q_with(dir, quant, &lo);
}

static void logits_match_cpu(const char *dir)
{
    logits_match_cpu_q(dir, CUDA_QUANT_NONE);
}

static void test_cuda_model_logits_match_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    char dirs[4][600];
    int nd = model_dirs(dirs, 0);
    for (int k = 0; k < nd; k++)
        logits_match_cpu(dirs[k]);
}

/* The same for every architecture family's fixture (biases, QK-norm,
 * Gemma's norms, soft-caps and windows, partial rotary, LongRoPE). */
static void test_cuda_families_match_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    static const char *const fams[] = {"llama3", "mistral", "qwen2", "qwen3",
                                       "gemma2", "gemma3", "phi3"};
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/fam-%s", fixtures(), fams[i]);
        if (!is_dir(dir))
            fail_msg("%s is missing (the Makefile makes it)", dir);
        logits_match_cpu(dir);
    }
}

/* --quantization int8 and int4 on the GPU against the CPU's, on the
 * fixtures, a family with biases (qwen2) and Gemma 3's, and a
 * compressed-tensors W8A8 checkpoint (int8 as stored; int4 refused); a
 * W8A16 one loaded as `--quantization int8` loads it (its int8 rows as
 * stored, model_load_opts.packed_q8); and a compressed-tensors FP8
 * checkpoint (dequantized to f32 at load) as bf16, int8 and int4. */
static void test_cuda_quantized_match_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    static const char *const names[] = {"tiny", "wide", "fam-qwen2", "fam-gemma3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/%s", fixtures(), names[i]);
        if (!is_dir(dir))
            fail_msg("%s is missing (the Makefile makes it)", dir);
        logits_match_cpu_q(dir, CUDA_QUANT_INT8);
        logits_match_cpu_q(dir, CUDA_QUANT_INT4);
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tiny-fp8", fixtures());
    if (!is_dir(dir))
        fail_msg("%s is missing (the Makefile makes it)", dir);
    for (int q = CUDA_QUANT_NONE; q <= CUDA_QUANT_INT4; q++)
        logits_match_cpu_q(dir, q);
    snprintf(dir, sizeof dir, "%s/tiny-w8a16", fixtures());
    if (!is_dir(dir))
        fail_msg("%s is missing (the Makefile makes it)", dir);
    const model_load_opts rows = {.packed_q8 = 1};
    model *mr = NULL;
    inf_err er = {0};
    if (model_load_with(dir, &rows, &mr, &er))
        fail_msg("%s", er.msg);
    assert_true(model_is_w8a8(mr)); /* the rows as stored, not f32 */
    model_destroy(mr);
    logits_match_cpu_q_with(dir, CUDA_QUANT_INT8, &rows);
    /* per-token and static input scales (the device quantizes with the
     * checkpoint's input_scale, the largest of those fused on one input) */
    snprintf(dir, sizeof dir, "%s/tiny-w8a8s", fixtures());
    if (!is_dir(dir))
        fail_msg("%s is missing (the Makefile makes it)", dir);
    logits_match_cpu_q(dir, CUDA_QUANT_INT8);
    snprintf(dir, sizeof dir, "%s/tiny-w8a8", fixtures());
    if (!is_dir(dir))
        fail_msg("%s is missing (the Makefile makes it)", dir);
    logits_match_cpu_q(dir, CUDA_QUANT_INT8);
    model *m = NULL;
    inf_err err = {0};
    if (model_load(dir, &m, &err))
        fail_msg("%s", err.msg);
    cuda_config gc = gpu_config(MAXT, MAXS, 256, MAXB + 1, 1, 1);
    gc.quant = CUDA_QUANT_INT4;
    be_backend *be = NULL;
    assert_int_equal(cuda_backend_create(m, &gc, &be, &err), INF_ERR_UNSUPPORTED);
    assert_null(be);
    assert_non_null(strstr(err.msg, "runs with --quantization int8 (or none), not int4"));
    model_destroy(m);
}

/* cuda_config.gemm_wgmma (a measurement switch): refused at create off
 * compute capability 9.0, saying why; on it, a 120-token prefill (its GEMMs
 * through wgmma) within the tolerance of mma.sync's logits, and whether the
 * bits are the same said. Runs last, after the wgmma kernel's own test. */
static void test_cuda_gemm_wgmma_switch(void **state)
{
    (void)state;
    NEED_GPU();
    int hopper = cuda_k_gemm_wg_setup() == cudaSuccess;
    cudaGetLastError();
    char dir[600];
    model *m = load_test_model(0, dir);
    cuda_config gc = gpu_config(MAXT, MAXS, 256, MAXB + 1, 1, 1);
    gc.gemm_wgmma = 1;
    be_backend *be = NULL;
    inf_err err = {0};
    int rc = cuda_backend_create(m, &gc, &be, &err);
    if (hopper) {
        if (rc)
            fail_msg("gemm_wgmma on compute capability 9.0: %s", err.msg);
        /* a 120-token prefill: its GEMMs (more than 64 rows) through wgmma,
         * against the same backend without the switch */
        enum { N = 120 };
        int32_t toks[N];
        toks[0] = 1;
        for (int i = 1; i < N; i++)
            toks[i] = (int32_t)((i * 37 + 11) % m->cfg.vocab_size);
        size_t bytes = (size_t)N * m->cfg.vocab_size * sizeof(float);
        float *wg = malloc(bytes), *mma = malloc(bytes);
        seq_logits(be, toks, N, 0, wg);
        be_destroy(be);
        gc.gemm_wgmma = 0;
        be = gpu_create(m, &gc);
        seq_logits(be, toks, N, 0, mma);
        be_destroy(be);
        double worst = worst_err(wg, mma, N, m->cfg.vocab_size);
        print_message("gemm_wgmma: a %d-token prefill %s mma.sync's logits (worst %.2f of the "
                      "tolerance)\n", N, memcmp(wg, mma, bytes) ? "differs from" : "is the same "
                      "bits as", worst);
        if (!(worst <= 1.0))
            fail_msg("gemm_wgmma: logits %.2f tolerances from mma.sync's", worst);
        free(wg);
        free(mma);
    } else {
        assert_int_equal(rc, INF_ERR_UNSUPPORTED);
        assert_null(be);
        assert_non_null(strstr(err.msg, "compute capability 9.0"));
    }
    print_message("gemm_wgmma: %s\n", hopper ? "accepted (Hopper)" : err.msg);
    model_destroy(m);
}

/* 4-bit codes (model_load_opts.packed_q4) are read by the int4 upload
 * alone: a model bound so is refused with the other schemes, saying so, and
 * once a backend has let its codes go. */
static void test_cuda_refuses_cpu_only_linears(void **state)
{
    (void)state;
    NEED_GPU();
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tiny-gptq", fixtures());
    if (!is_dir(dir))
        fail_msg("%s is missing (the Makefile makes it)", dir);
    model_load_opts lo = {.packed_q4 = 1};
    model *m = NULL;
    inf_err err = {0};
    if (model_load_with(dir, &lo, &m, &err))
        fail_msg("%s", err.msg);
    for (int q = CUDA_QUANT_NONE; q <= CUDA_QUANT_INT8; q++) {
        cuda_config gc = gpu_config(MAXT, MAXS, 256, MAXB + 1, 1, 1);
        gc.quant = q;
        be_backend *be = NULL;
        assert_int_equal(cuda_backend_create(m, &gc, &be, &err), INF_ERR_UNSUPPORTED);
        assert_null(be);
        if (!strstr(err.msg, "run with --quantization int4"))
            fail_msg("quantization %d: %s", q, err.msg);
    }
    model_drop_codes(m);
    cuda_config gc = gpu_config(MAXT, MAXS, 256, MAXB + 1, 1, 1);
    gc.quant = CUDA_QUANT_INT4;
    be_backend *be = NULL;
    assert_int_equal(cuda_backend_create(m, &gc, &be, &err), INF_ERR_INVALID);
    assert_null(be);
    if (!strstr(err.msg, "codes were released"))
        fail_msg("after model_drop_codes: %s", err.msg);
    model_destroy(m);
}

/* The int4 logits of fixture `name` (packed: bound as its 4-bit codes) on
 * the GPU (cpu 0) or the CPU, n positions at once, into a new *out; returns
 * the vocabulary. requant, when not NULL, gets the GPU's count of code
 * pieces requantized, and of the model's layer matrices (pieces) in [1]. */
static int int4_logits(const char *name, int packed, int cpu, const int32_t *toks, int n,
                       float **out, int *requant)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", fixtures(), name);
    model_load_opts lo = {.packed_q4 = packed};
    model *m = NULL;
    inf_err err = {0};
    if (model_load_with(path, &lo, &m, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(model_has_q4(m), packed);
    int V = m->cfg.vocab_size;
    *out = malloc((size_t)n * V * sizeof **out);
    be_backend *be = NULL;
    if (cpu) {
        be = cpu_make_q(m, MAXT, 256, MAXB + 1, CUDA_QUANT_INT4);
    } else {
        cuda_config gc = gpu_config(MAXT, MAXS, 256, MAXB + 1, 1, 1);
        gc.quant = CUDA_QUANT_INT4;
        be = gpu_create(m, &gc);
        if (requant) {
            cuda_info ci;
            cuda_backend_info(be, &ci);
            requant[0] = ci.q4_requant;
            requant[1] = 7 * m->cfg.n_layers;
        }
    }
    seq_logits(be, toks, n, 0, *out);
    be_destroy(be);
    model_destroy(m);
    return V;
}

/* 4-bit codes on the GPU's int4 (cuda/upload.c). A GGUF Q4_0 file's go up
 * as stored: a file whose codes requantizing would change
 * (tiny-q4_0-seven.gguf, d = a / -7) runs its own integers, so the GPU sits
 * within the quantized tolerance of the CPU's int4 of the same codes and
 * closer to it than the GPU's int4 of the same file dequantized; a file
 * written by llama.cpp's rule (which qdef gives again) runs the same bits
 * either way. GPTQ codes with zero points, and desc_act's sorted ones, go
 * through f32 as the loader would dequantize them: the same bits as the
 * checkpoint's dequantized copy (-deq). */
static void test_cuda_q4_codes_as_stored(void **state)
{
    (void)state;
    NEED_GPU();
    enum { N = 40 };
    int32_t toks[N];
    toks[0] = 1;
    for (int i = 1; i < N; i++)
        toks[i] = (int32_t)((i * 37 + 11) % 64); /* within every fixture's vocabulary */
    float *cpu, *codes, *deq;
    int rq[2];
    int V = int4_logits("tiny-q4_0-seven.gguf", 1, 1, toks, N, &cpu, NULL);
    int4_logits("tiny-q4_0-seven.gguf", 1, 0, toks, N, &codes, rq);
    assert_int_equal(rq[0], 0); /* every piece as stored */
    int4_logits("tiny-q4_0-seven.gguf", 0, 0, toks, N, &deq, NULL);
    double e_codes = worst_err(codes, cpu, N, V), e_deq = worst_err(deq, cpu, N, V);
    print_message("tiny-q4_0-seven.gguf: the GPU's int4 of the codes is %.2f tolerances from "
                  "the CPU's, of the file dequantized (requantized) %.2f\n", e_codes, e_deq);
    if (e_codes > 2.5)
        fail_msg("the codes as stored: %.2f tolerances from the CPU's int4", e_codes);
    if (!(e_codes < 0.5 * e_deq))
        fail_msg("the codes as stored (%.2f) are not nearer the CPU's int4 of the same codes "
                 "than a requantized copy (%.2f)", e_codes, e_deq);
    free(cpu);
    free(codes);
    free(deq);

    static const char *const same[][2] = {{"tiny-q4_0.gguf", "tiny-q4_0.gguf"},
                                          {"tiny-gptq", "tiny-gptq-deq"},
                                          {"tiny-gptq-desc", "tiny-gptq-desc-deq"}};
    for (int i = 0; i < 3; i++) {
        V = int4_logits(same[i][0], 1, 0, toks, N, &codes, rq);
        if (rq[0] != (i ? rq[1] : 0)) /* GPTQ's zero points: every piece requantized */
            fail_msg("%s: %d of %d pieces requantized", same[i][0], rq[0], rq[1]);
        int4_logits(same[i][1], 0, 0, toks, N, &deq, NULL);
        if (memcmp(codes, deq, (size_t)N * V * sizeof *codes))
            fail_msg("%s as codes and %s dequantized give different int4 logits on the GPU",
                     same[i][0], same[i][1]);
        print_message("%s as codes: the same bits as %s dequantized\n", same[i][0], same[i][1]);
        free(codes);
        free(deq);
    }
}

/* Greedy continuation of "Once upon a time" for 64 tokens: the GPU's
 * (argmax on the device) equals the CPU backend's on the checkpoint as it
 * is, on stories260K and babyllama-105; the host-argmax path over the GPU's
 * logits gives the same tokens. */
static void test_cuda_model_greedy_64_matches_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    char dirs[4][600];
    int nd = model_dirs(dirs, 1);
    if (nd == 0) {
        print_message("skipped: neither real model is present\n");
        skip();
    }
    for (int k = 0; k < nd; k++) {
        model *m = NULL;
        tok *tk = NULL;
        inf_err err = {0};
        if (model_load(dirs[k], &m, &err) || tok_create(dirs[k], &tk, &err))
            fail_msg("%s", err.msg);
        int32_t *ids = NULL, np = 0;
        const char *prompt = "Once upon a time";
        assert_int_equal(tok_encode(tk, prompt, strlen(prompt), 1, &ids, &np, &err), INF_OK);
        int V = m->cfg.vocab_size, total = np + 64;
        assert_true(total <= MAXB * BS);
        be_backend *cpu = cpu_make(m, MAXT, MAXB * BS, MAXB + 1);
        be_backend *gpu = gpu_make(m, MAXT, MAXS, MAXB * BS, MAXB + 1, 1, 1);
        int32_t seq_c[MAXB * BS], seq_g[MAXB * BS], seq_h[MAXB * BS], blocks[MAXB];
        for (int i = 0; i < MAXB; i++)
            blocks[i] = i + 1;
        memcpy(seq_c, ids, (size_t)np * 4);
        memcpy(seq_g, ids, (size_t)np * 4);
        memcpy(seq_h, ids, (size_t)np * 4);
        float *lc = malloc((size_t)V * 4), *lh = malloc((size_t)V * 4);
        bb *b = malloc(sizeof *b);
        cuda_smp_row greedy = {.temperature = 0.0f, .top_p = 1.0f};
        for (int n = np; n < total; n++) {
            int first = n == np ? 0 : n - 1, cnt = n - first;
            memset(b, 0, sizeof *b);
            bb_add(b, blocks, seq_c + first, first, cnt, 0);
            be_batch x = bb_batch(b);
            forward_ok(cpu, &x, lc);
            seq_c[n] = smp_argmax(lc, V);
            memset(b, 0, sizeof *b);
            bb_add(b, blocks, seq_g + first, first, cnt, 0);
            x = bb_batch(b);
            int32_t id;
            if (be_submit(gpu, &x, &greedy, &err) || be_wait(gpu, &(be_out){.ids = &id}, &err))
                fail_msg("be_submit + be_wait: %s", err.msg);
            seq_g[n] = id;
            /* the same step again through be_forward, on the same slots */
            memset(b, 0, sizeof *b);
            bb_add(b, blocks, seq_g + first, first, cnt, 0);
            x = bb_batch(b);
            forward_ok(gpu, &x, lh);
            seq_h[n] = smp_argmax(lh, V);
            if (seq_g[n] != seq_c[n] || seq_h[n] != seq_g[n]) {
                float top = lc[seq_c[n]], alt = lc[seq_g[n]];
                fail_msg("%s: token %d: cpu %d (logit %g), gpu %d (cpu logit %g), gpu host "
                         "argmax %d", dirs[k], n - np, seq_c[n], top, seq_g[n], alt, seq_h[n]);
            }
        }
        char *text = NULL;
        tok_decode(tk, seq_g + np, 64, &text, NULL, &err);
        print_message("%s: 64 greedy tokens equal: \"%.60s...\"\n", dirs[k], text ? text : "");
        free(text);
        free(ids);
        free(lc);
        free(lh);
        free(b);
        be_destroy(cpu);
        be_destroy(gpu);
        tok_destroy(tk);
        model_destroy(m);
    }
}

/* Many sequences at once on scattered blocks, prompts prefilled in chunks of
 * 7 alongside other sequences' decode tokens: every position's logits are
 * the same bits as the same sequence run alone on the GPU (batch-invariant
 * kernels) and match the CPU (bf16 weights). */
static void test_cuda_model_batched_chunked_paged(void **state)
{
    (void)state;
    NEED_GPU();
    char dir[600];
    model *m = load_test_model(1, dir);
    enum { NS = 16, MAXLEN = 70, PER = (MAXLEN + BS - 1) / BS };
    int V = m->cfg.vocab_size, len[NS];
    int32_t toks[NS][MAXLEN], blocks[NS][MAXB];
    int nb = NS * PER + 1;
    int32_t *perm = shuffled_blocks(nb);
    for (int s = 0, k = 0; s < NS; s++) {
        len[s] = 8 + (int)(urand() % (MAXLEN - 8));
        toks[s][0] = 1;
        for (int i = 1; i < len[s]; i++)
            toks[s][i] = (int32_t)(3 + urand() % (unsigned)(V - 3));
        memset(blocks[s], 0, sizeof blocks[s]);
        for (int i = 0; i < PER; i++)
            blocks[s][i] = perm[k++];
    }
    mcopy *mc = bf16_copy(m);
    be_backend *cpu = cpu_make(&mc->m, MAXT, MAXB * BS, MAXB + 1);
    be_backend *alone = gpu_make(m, MAXT, MAXS, MAXB * BS, MAXB + 1, 1, 1);
    be_backend *gpu = gpu_make(m, MAXT, MAXS, MAXB * BS, nb, 1, 1);
    float *ref_c = malloc((size_t)MAXLEN * V * 4), *ref_g = malloc((size_t)MAXLEN * V * 4);
    float *got[NS];
    for (int s = 0; s < NS; s++)
        got[s] = malloc((size_t)MAXLEN * V * 4);
    /* together: every unfinished sequence each step, 7 prompt tokens at a
     * time for the first 40 tokens, then one at a time (decode) */
    int done[NS] = {0};
    float *logits = malloc((size_t)MAXT * V * 4);
    bb *b = malloc(sizeof *b);
    for (;;) {
        memset(b, 0, sizeof *b);
        int who[NS], ns = 0;
        for (int s = 0; s < NS; s++) {
            if (done[s] >= len[s])
                continue;
            int take = done[s] < 40 ? 7 : 1;
            if (take > len[s] - done[s])
                take = len[s] - done[s];
            bb_add(b, blocks[s], toks[s] + done[s], done[s], take, 1);
            who[ns++] = s;
        }
        if (ns == 0)
            break;
        be_batch x = bb_batch(b);
        forward_ok(gpu, &x, logits);
        for (int i = 0; i < ns; i++) {
            int s = who[i], t0 = b->start[i], cnt = b->start[i + 1] - t0;
            memcpy(got[s] + (size_t)done[s] * V, logits + (size_t)t0 * V, (size_t)cnt * V * 4);
            done[s] += cnt;
        }
    }
    double worst_g = 0, worst_c = 0;
    for (int s = 0; s < NS; s++) {
        seq_logits(alone, toks[s], len[s], 0, ref_g);
        seq_logits(cpu, toks[s], len[s], 0, ref_c);
        if (memcmp(got[s], ref_g, (size_t)len[s] * V * 4))
            fail_msg("sequence %d: batched logits are not the same bits as alone", s);
        for (int i = 0; i < len[s]; i++) {
            double tg, tc;
            double eg = row_err(got[s] + (size_t)i * V, ref_g + (size_t)i * V, V, &tg);
            double ec = row_err(got[s] + (size_t)i * V, ref_c + (size_t)i * V, V, &tc);
            worst_g = fmax(worst_g, eg / tg);
            worst_c = fmax(worst_c, ec / tc);
            if (eg > tg || ec > tc)
                fail_msg("sequence %d position %d: batched vs alone %g (tol %g), vs cpu %g "
                         "(tol %g)", s, i, eg, tg, ec, tc);
        }
    }
    print_message("%s: %d sequences batched and chunked: worst error %.2f (vs GPU alone), "
                  "%.2f (vs CPU) of the tolerance\n", dir, NS, worst_g, worst_c);
    for (int s = 0; s < NS; s++)
        free(got[s]);
    free(ref_c);
    free(ref_g);
    free(logits);
    free(b);
    free(perm);
    be_destroy(cpu);
    be_destroy(alone);
    be_destroy(gpu);
    mcopy_free(mc);
    model_destroy(m);
}

/* Decode steps replayed from CUDA graphs give the eager path's logits, the
 * same bits whether the batch fills its bucket or is padded (batch-invariant
 * kernels: padding rows change nothing). */
static void test_cuda_graphs_match_eager(void **state)
{
    (void)state;
    NEED_GPU();
    char dir[600];
    model *m = load_test_model(0, dir);
    int V = m->cfg.vocab_size;
    const int sizes[] = {8, 5};
    for (int k = 0; k < 2; k++) {
        int S = sizes[k];
        be_backend *g = gpu_make(m, MAXT, MAXS, 256, S * 4 + 1, 1, 1);
        be_backend *e = gpu_make(m, MAXT, MAXS, 256, S * 4 + 1, 0, 1);
        float *lg = malloc((size_t)S * V * 4), *le = malloc((size_t)S * V * 4);
        int32_t blocks[8][MAXB];
        memset(blocks, 0, sizeof blocks);
        for (int s = 0; s < S; s++)
            for (int i = 0; i < 4; i++)
                blocks[s][i] = 1 + s * 4 + i;
        bb *b = malloc(sizeof *b);
        int exact = 1;
        double worst = 0;
        for (int step = 0; step < 12; step++) {
            memset(b, 0, sizeof *b);
            for (int s = 0; s < S; s++) {
                int32_t t = (int32_t)((step * 31 + s * 7 + 1) % V);
                bb_add(b, blocks[s], &t, step, 1, 0);
            }
            be_batch x = bb_batch(b);
            forward_ok(g, &x, lg);
            forward_ok(e, &x, le);
            exact &= memcmp(lg, le, (size_t)S * V * 4) == 0;
            for (int s = 0; s < S; s++) {
                double tol, er = row_err(lg + (size_t)s * V, le + (size_t)s * V, V, &tol);
                worst = fmax(worst, er / tol);
                assert_true(er <= tol);
            }
        }
        print_message("graphs vs eager, %d sequences: %s, worst %.3f of the tolerance\n", S,
                      exact ? "bit-identical" : "not bit-identical", worst);
        assert_true(exact);
        free(lg);
        free(le);
        free(b);
        be_destroy(g);
        be_destroy(e);
    }
    model_destroy(m);
}

/* Logits and final hidden states (want_hidden) of one sequence, every
 * position, fed in chunks of `chunk` tokens (0: at once; 1: decode steps,
 * which run from a CUDA graph where graphs are on). */
static void seq_hidden(be_backend *be, const int32_t *toks, int n, int chunk, float *logits,
                       float *hidden)
{
    int32_t blocks[MAXB];
    for (int i = 0; i < MAXB; i++)
        blocks[i] = i + 1;
    bb *b = malloc(sizeof *b);
    for (int done = 0; done < n;) {
        int take = chunk > 0 && n - done > chunk ? chunk : n - done;
        memset(b, 0, sizeof *b);
        bb_add(b, blocks, toks + done, done, take, 1);
        be_batch x = bb_batch(b);
        x.want_hidden = 1;
        be_out o = {.logits = logits + (size_t)done * be->vocab_size,
                    .hidden = hidden + (size_t)done * be->hidden_size};
        inf_err err = {0};
        if (be_forward_out(be, &x, &o, &err))
            fail_msg("%s forward: %s", be->ops->name, err.msg);
        done += take;
    }
    free(b);
}

/* want_hidden: the final norm's rows (the LM head's input) come back beside
 * the logits, within bf16 rounding of the CPU backend's on the same bf16
 * weights, for a prompt at once, in chunks of 5 and as decode steps (from
 * CUDA graphs: bit-identical to the eager ones). */
static void test_cuda_hidden_matches_cpu(void **state)
{
    (void)state;
    NEED_GPU();
    char dir[600];
    model *m = load_test_model(0, dir);
    int V = m->cfg.vocab_size, D = m->cfg.hidden_size, n = 24;
    int32_t toks[24];
    toks[0] = 1;
    for (int i = 1; i < n; i++)
        toks[i] = (int32_t)((i * 37 + 11) % V);
    float *lg = malloc((size_t)n * V * 4), *hc = malloc((size_t)n * D * 4);
    float *hg[3];
    mcopy *mc = bf16_copy(m);
    be_backend *cpu = cpu_make(&mc->m, MAXT, 256, MAXB + 1);
    assert_int_equal(cpu->hidden_size, D);
    seq_hidden(cpu, toks, n, 0, lg, hc);
    be_destroy(cpu);
    mcopy_free(mc);
    const int chunks[3] = {0, 5, 1};
    for (int k = 0; k < 3; k++) {
        hg[k] = malloc((size_t)n * D * 4);
        be_backend *gpu = gpu_make(m, MAXT, MAXS, 256, MAXB + 1, 1, 1);
        assert_int_equal(gpu->hidden_size, D);
        seq_hidden(gpu, toks, n, chunks[k], lg, hg[k]);
        be_destroy(gpu);
        for (int i = 0; i < n; i++) {
            double tol, e = row_err(hg[k] + (size_t)i * D, hc + (size_t)i * D, D, &tol);
            if (e > tol)
                fail_msg("chunks of %d, position %d: |gpu - cpu| hidden %g > %g", chunks[k], i,
                         e, tol);
        }
    }
    /* batch-invariant: at once, chunked and decoded are the same bits */
    assert_memory_equal(hg[0], hg[1], (size_t)n * D * 4);
    assert_memory_equal(hg[0], hg[2], (size_t)n * D * 4);
    for (int k = 0; k < 3; k++)
        free(hg[k]);
    free(lg);
    free(hc);
    model_destroy(m);
}

/* A decode pipeline two steps deep, each step's tokens given as
 * placeholders for the previous step's sampled ids, produces the same
 * tokens as waiting for every step. */
static void test_cuda_submit_pipeline_placeholders(void **state)
{
    (void)state;
    NEED_GPU();
    char dir[600];
    model *m = load_test_model(1, dir);
    inf_err err = {0};
    enum { NS = 4, STEPS = 24 };
    int32_t prompt[NS][3], ref[NS][STEPS], got[NS][STEPS], blocks[NS][MAXB];
    memset(blocks, 0, sizeof blocks);
    for (int s = 0; s < NS; s++) {
        prompt[s][0] = 1;
        prompt[s][1] = (int32_t)(5 + s);
        prompt[s][2] = (int32_t)(9 + 2 * s);
        for (int i = 0; i < 4; i++)
            blocks[s][i] = 1 + s * 4 + i;
    }
    cuda_smp_row smp[NS];
    for (int s = 0; s < NS; s++)
        smp[s] = (cuda_smp_row){.temperature = 0.9f, .top_k = 20, .top_p = 0.9f,
                                .u = 0.1 + 0.2 * s};
    for (int mode = 0; mode < 2; mode++) {
        be_backend *be = gpu_make(m, MAXT, MAXS, 256, NS * 4 + 1, 1, 1);
        bb *b = malloc(sizeof *b);
        int32_t ids[NS];
        for (int step = 0; step < STEPS; step++) {
            memset(b, 0, sizeof *b);
            for (int s = 0; s < NS; s++) {
                if (step == 0)
                    bb_add(b, blocks[s], prompt[s], 0, 3, 0);
                else {
                    /* mode 0: the real previous token; mode 1: a placeholder */
                    int32_t t = mode == 0 ? ref[s][step - 1] : -1 - s;
                    bb_add(b, blocks[s], &t, 2 + step, 1, 0);
                }
            }
            be_batch x = bb_batch(b);
            if (be_submit(be, &x, smp, &err))
                fail_msg("submit step %d: %s", step, err.msg);
            if (mode == 0 || step > 0) { /* mode 1 waits one step behind */
                if (be_wait(be, &(be_out){.ids = ids}, &err))
                    fail_msg("wait: %s", err.msg);
                for (int s = 0; s < NS; s++)
                    (mode == 0 ? ref : got)[s][mode == 0 ? step : step - 1] = ids[s];
            }
        }
        if (mode == 1) {
            if (be_wait(be, &(be_out){.ids = ids}, &err))
                fail_msg("wait: %s", err.msg);
            for (int s = 0; s < NS; s++)
                got[s][STEPS - 1] = ids[s];
        }
        free(b);
        be_destroy(be);
    }
    for (int s = 0; s < NS; s++)
        assert_memory_equal(ref[s], got[s], sizeof ref[s]);
    model_destroy(m);
}

/* How lazy_upload_same binds a checkpoint: its matrices as f32, a W8A16
 * one's int8 rows (model_load_opts.packed_q8), or 4-bit codes (packed_q4,
 * run by int4 alone). */
enum { LZ_F32, LZ_Q8, LZ_Q4 };

/* A GGUF file (tiny as Q8_0 and Q4_0 blocks), a compressed-tensors FP8
 * checkpoint, a GPTQ one with desc_act and a W8A16 one (their codes as f32;
 * LZ_Q8: the W8A16 one's int8 rows) loaded with lazy layers, as serve loads
 * them for --device cuda: each layer's matrices converted just before its
 * upload and let go after (model_layer_need / _packed as the config's
 * hooks), with the logits of the same checkpoint converted whole at load,
 * bf16 and int8 (LZ_Q4, a GGUF Q4_0 file's codes unpacked a layer at a
 * time: int4); without the hooks the backend refuses it. */
static void lazy_upload_same(const char *path, int mode)
{
    const model_load_opts eager_o = {.packed_q8 = mode == LZ_Q8, .packed_q4 = mode == LZ_Q4};
    model_load_opts lazy = eager_o;
    lazy.lazy_layers = 1;
    model *eager = NULL, *m = NULL;
    inf_err err = {0};
    if (model_load_with(path, &eager_o, &eager, &err) || model_load_with(path, &lazy, &m, &err))
        fail_msg("%s", err.msg);
    assert_true(model_has_lazy(m));
    assert_int_equal(model_is_w8a8(m), mode == LZ_Q8);
    assert_int_equal(model_has_q4(m), mode == LZ_Q4);
    enum { N = 9 };
    int32_t toks[N] = {1, 5, 9, 33, 2, 17, 60, 8, 41};
    int V = m->cfg.vocab_size;
    float *a = malloc(sizeof(float) * N * (size_t)V), *b = malloc(sizeof(float) * N * (size_t)V);
    const int quants[2][2] = {{CUDA_QUANT_NONE, CUDA_QUANT_INT8}, {CUDA_QUANT_INT4, -1}};
    for (int qi = 0; qi < 2 && quants[mode == LZ_Q4][qi] >= 0; qi++) {
        cuda_config c = gpu_config(MAXT, MAXS, 256, 16, 0, 1);
        c.quant = quants[mode == LZ_Q4][qi];
        be_backend *be = NULL;
        assert_int_not_equal(cuda_backend_create(m, &c, &be, &err), INF_OK);
        assert_non_null(strstr(err.msg, "lazy layers"));
        be_backend *be_e = gpu_create(eager, &c);
        c.layer_need = model_layer_need;
        c.layer_packed = model_layer_packed;
        c.layer_ctx = m;
        be_backend *be_l = gpu_create(m, &c);
        for (int l = 0; l < m->cfg.n_layers; l++) { /* let go once uploaded */
            assert_null(m->layers[l].w_down.data);
            assert_null(m->layers[l].w_down.q8);
            assert_null(m->layers[l].w_down.q4);
        }
        seq_logits(be_e, toks, N, 0, a);
        seq_logits(be_l, toks, N, 0, b);
        assert_memory_equal(a, b, sizeof(float) * N * (size_t)V);
        be_destroy(be_e);
        be_destroy(be_l);
    }
    free(a), free(b);
    model_destroy(m);
    model_destroy(eager);
}

static void test_cuda_lazy_layers(void **state)
{
    (void)state;
    NEED_GPU();
    static const char *const names[] = {"tiny-q8_0.gguf", "tiny-fp8",   "tiny-gptq-desc",
                                        "tiny-w8a16",     "tiny-w8a16", "tiny-q4_0-seven.gguf"};
    static const int modes[] = {LZ_F32, LZ_F32, LZ_F32, LZ_F32, LZ_Q8, LZ_Q4};
    for (int i = 0; i < 6; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", fixtures(), names[i]);
        lazy_upload_same(path, modes[i]);
    }
}

/* The engine on this backend, running ahead (its next decode step queued,
 * with placeholders, before this one's tokens are back) and not
 * (no_async_scheduling, serve's --no-async-scheduling): four requests at once, greedy and
 * seeded sampled, of different lengths, give the same tokens, and the first
 * run queued steps ahead. */
static void test_cuda_engine_ahead_same_tokens(void **state)
{
    (void)state;
    NEED_GPU();
    char dir[600];
    model *m = load_test_model(0, dir);
    tok *tk = NULL;
    inf_err err = {0};
    if (tok_create(dir, &tk, &err))
        fail_msg("tokenizer: %s", err.msg);
    enum { NR = 4, OUT = 40 };
    int32_t got[2][NR][OUT + 1];
    int n[2][NR];
    for (int run = 0; run < 2; run++) {
        be_backend *be = gpu_make(m, MAXT, MAXS, 256, 64, 1, 1);
        eng_config c = {.max_num_seqs = 8, .max_num_batched_tokens = 256,
                        .max_model_len = 256, .block_size = BS, .num_blocks = 64,
                        .seed = 3, .no_async_scheduling = run}; /* run 1: one at a time */
        eng *e = NULL;
        if (eng_create(&c, m, tk, be, &e, &err))
            fail_msg("engine: %s", err.msg);
        eng_req *r[NR];
        for (int i = 0; i < NR; i++) {
            int32_t prompt[4] = {1, (int32_t)(7 + i), (int32_t)(20 + 3 * i), 11};
            eng_params p = {.sampling = smp_params_default(), .max_tokens = OUT - 6 * i,
                            .logprobs = -1, .ignore_eos = 1};
            p.sampling.temperature = i % 2 ? 0.8f : 0.0f;
            p.sampling.seed = (uint64_t)(40 + i);
            p.has_seed = 1;
            if (eng_req_create(prompt, 4, &p, &r[i], &err) || eng_submit(e, r[i], 0, &err))
                fail_msg("request %d: %s", i, err.msg);
        }
        for (int i = 0; i < NR; i++) {
            for (int ms = 0; !eng_req_finished(r[i]); ms++) { /* a watchdog, not a timing */
                if (ms == 60000)
                    fail_msg("request %d never finished", i);
                usleep(1000);
            }
            eng_out o = {0};
            eng_req_take(r[i], &o);
            if (o.finish != ENG_FINISH_LENGTH)
                fail_msg("run %d request %d: finish %d %s", run, i, o.finish, o.error);
            n[run][i] = o.n_ids;
            memcpy(got[run][i], o.ids, sizeof(int32_t) * (size_t)o.n_ids);
            eng_out_free(&o);
            eng_req_unref(r[i]);
        }
        long ahead = e->ahead_steps; /* the engine is done with its requests */
        eng_destroy(e);
        be_destroy(be);
        if (run == 0)
            assert_true(ahead > 0);
        else
            assert_int_equal(ahead, 0);
    }
    for (int i = 0; i < NR; i++) {
        assert_int_equal(n[0][i], OUT - 6 * i);
        assert_int_equal(n[1][i], n[0][i]);
        assert_memory_equal(got[0][i], got[1][i], sizeof(int32_t) * (size_t)n[0][i]);
    }
    tok_destroy(tk);
    model_destroy(m);
}

/* Constrained decoding: a grammar's mask on the device sampler (be_smp_row
 * mask) gives the tokens the host path gives (the same step's logits, the
 * mask applied on the host as -inf, then smp_argmax or smp_probs +
 * smp_draw), greedy and sampled, and every token is one the grammar allows.
 * The vocabulary's bytes are made up here (the grammar engine needs only
 * bytes per token), so the fixture model needs no tokenizer. The two paths
 * run as two sequences on one batch-invariant backend, whose logits for the
 * same history are the same bits. */
static void test_cuda_constrained_decode_matches_host(void **state)
{
    (void)state;
    NEED_GPU();
    char dir[600];
    model *m = load_test_model(0, dir);
    inf_err err = {0};
    int V = m->cfg.vocab_size, W = (V + 31) / 32, eos = 2;
    static const char *const pieces[] = {"a", "b", "ab", "{", "}", "0", "1", "ba", "x", "\"",
                                         "aa", " ", "{a", "b}", "01", "q"};
    const char **bytes = malloc((size_t)V * sizeof *bytes);
    int *len = malloc((size_t)V * sizeof *len);
    for (int i = 0; i < V; i++) {
        bytes[i] = i < 3 ? "" : pieces[i % 16]; /* 0..2: control tokens */
        len[i] = (int)strlen(bytes[i]);
    }
    const char *gbnf = "root ::= \"{\" ( [ab] | \"01\" )+ \"}\"\n";
    gram *g = NULL;
    gram_vocab *gv = NULL;
    gram_auto *ga = NULL;
    if (gram_parse(gbnf, strlen(gbnf), &g, &err) ||
        gram_vocab_create(V, bytes, len, &gv, &err) ||
        gram_auto_create(g, gv, (int32_t[]){eos}, 1, &ga, &err))
        fail_msg("grammar: %s", err.msg);
    enum { N = 40 };
    const int32_t prompt[3] = {1, 7, 11};
    int32_t blk_d[MAXB] = {0}, blk_h[MAXB] = {0};
    for (int i = 0; i < 4; i++) {
        blk_d[i] = 1 + i;
        blk_h[i] = 5 + i;
    }
    be_backend *be = gpu_make(m, MAXT, MAXS, 256, 10, 1, 1);
    float *lg = malloc((size_t)V * 4), *probs = malloc((size_t)V * 4);
    uint32_t *words = malloc((size_t)W * 4);
    smp_ctx *sc = NULL;
    assert_int_equal(smp_create(V, &sc, NULL), INF_OK);
    bb *b = malloc(sizeof *b);
    for (int mode = 0; mode < 2; mode++) { /* greedy, then sampled */
        smp_params sp = smp_params_default();
        sp.temperature = 0.0f;
        if (mode == 1) {
            sp.temperature = 1.0f;
            sp.top_k = 20;
            sp.top_p = 0.95f;
        }
        gram_match *md = NULL, *mh = NULL;
        assert_int_equal(gram_match_create(ga, &md, &err), INF_OK);
        assert_int_equal(gram_match_create(ga, &mh, &err), INF_OK);
        int32_t sd[3 + N], sh[3 + N];
        memcpy(sd, prompt, sizeof prompt);
        memcpy(sh, prompt, sizeof prompt);
        int n = 3, overruled = 0, ended = 0;
        for (; n < 3 + N && !ended; n++) {
            int first = n == 3 ? 0 : n - 1, cnt = n - first;
            /* host path: logits, mask as -inf, the host sampler */
            memset(b, 0, sizeof *b);
            bb_add(b, blk_h, sh + first, first, cnt, 0);
            be_batch x = bb_batch(b);
            forward_ok(be, &x, lg);
            int free_pick = smp_argmax(lg, V);
            gram_match_apply(mh, lg, V);
            smp_probs(sc, &sp, lg, probs);
            double u = mode ? safe_u(probs, V, (double)(urand() >> 8) / 16777216.0) : 0.0;
            sh[n] = mode ? smp_draw(probs, V, u) : smp_argmax(lg, V);
            overruled += sh[n] != free_pick;
            /* device path: the mask goes with the sampling row */
            assert_true(gram_match_mask(md, words) > 0);
            cuda_smp_row row = {.temperature = sp.temperature, .top_k = sp.top_k,
                                .top_p = sp.top_p, .min_p = sp.min_p, .u = u, .mask = words};
            memset(b, 0, sizeof *b);
            bb_add(b, blk_d, sd + first, first, cnt, 0);
            x = bb_batch(b);
            int32_t id = -1;
            if (be_submit(be, &x, &row, &err) || be_wait(be, &(be_out){.ids = &id}, &err))
                fail_msg("be_submit + be_wait: %s", err.msg);
            sd[n] = id;
            if (sd[n] != sh[n])
                fail_msg("%s, token %d: device %d, host %d", mode ? "sampled" : "greedy",
                         n - 3, sd[n], sh[n]);
            if (gram_match_accept(md, sd[n]) || gram_match_accept(mh, sh[n]))
                fail_msg("token %d (%d) is not allowed by the grammar", n - 3, sd[n]);
            ended = sd[n] == eos;
        }
        print_message("%s: %d constrained tokens equal on device and host (%d differ from "
                      "the unconstrained argmax)%s\n", mode ? "sampled" : "greedy", n - 3,
                      overruled, ended ? ", ended by the grammar" : "");
        assert_true(overruled > 0); /* the mask mattered */
        gram_match_destroy(md);
        gram_match_destroy(mh);
    }
    free(b);
    smp_destroy(sc);
    free(words);
    free(probs);
    free(lg);
    be_destroy(be);
    gram_auto_destroy(ga);
    gram_vocab_destroy(gv);
    gram_destroy(g);
    free(bytes);
    free(len);
    model_destroy(m);
}

/* Bad input (token ids, placeholders, more logit rows than max_logits, a
 * third step in flight) fails the step with INF_ERR_INVALID and leaves the
 * backend usable; start-up without room says so with the sizes. */
static void test_cuda_errors(void **state)
{
    (void)state;
    NEED_GPU();
    char dir[600];
    model *m = load_test_model(0, dir);
    inf_err err = {0};
    int V = m->cfg.vocab_size;
    be_backend *be = gpu_make(m, 64, 8, 256, 17, 1, 1);
    int32_t blocks[MAXB] = {1, 2, 3}, t = V + 5, good = 3;
    bb *b = calloc(1, sizeof *b);
    bb_add(b, blocks, &t, 0, 1, 0);
    be_batch x = bb_batch(b);
    float *lg = malloc((size_t)V * 4);
    assert_int_equal(be_forward(be, &x, lg, &err), INF_ERR_INVALID);
    b->tok[0] = -1; /* a placeholder with no sampled step before it */
    assert_int_equal(be_forward(be, &x, lg, &err), INF_ERR_INVALID);
    memset(b, 0, sizeof *b);
    bb_add(b, blocks, &good, 0, 1, 0);
    x = bb_batch(b);
    forward_ok(be, &x, lg);
    cuda_smp_row g = {.temperature = 0.0f, .top_p = 1.0f};
    assert_int_equal(be_submit(be, &x, &g, &err), INF_OK);
    assert_int_equal(be_submit(be, &x, &g, &err), INF_OK);
    assert_int_equal(be_submit(be, &x, &g, &err), INF_ERR_INVALID); /* two in flight */
    int32_t id;
    assert_int_equal(be_wait(be, &(be_out){.ids = &id}, &err), INF_OK);
    assert_int_equal(be_wait(be, &(be_out){.ids = &id}, &err), INF_OK);
    assert_int_equal(be_wait(be, &(be_out){.ids = &id}, &err), INF_ERR_INVALID); /* none */
    be_destroy(be);

    cuda_config c = cuda_config_default(); /* more logit rows than max_logits */
    c.max_tokens = 64;
    c.max_seqs = 4;
    c.max_logits = 8;
    c.max_context = 256;
    c.num_blocks = 17;
    assert_int_equal(cuda_backend_create(m, &c, &be, &err), INF_OK);
    int32_t nine[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    memset(b, 0, sizeof *b);
    bb_add(b, blocks, nine, 0, 9, 1);
    x = bb_batch(b);
    float *l9 = malloc((size_t)9 * V * 4);
    assert_int_equal(be_forward(be, &x, l9, &err), INF_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_logits 8"));
    b->nl = 8;
    x = bb_batch(b);
    forward_ok(be, &x, l9);
    free(l9);
    be_destroy(be);

    c = cuda_config_default();
    c.gpu_memory_utilization = 0.001;
    be = NULL;
    assert_int_equal(cuda_backend_create(m, &c, &be, &err), INF_ERR_NOMEM);
    assert_null(be);
    assert_non_null(strstr(err.msg, "gpu_memory_utilization"));
    print_message("startup message: %s\n", err.msg);
    c = cuda_config_default();
    c.num_blocks = 1 << 30;
    assert_int_equal(cuda_backend_create(m, &c, &be, &err), INF_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "KV blocks"));
    c = cuda_config_default();
    c.tensor_parallel_size = 3; /* 4 heads, 2 KV heads */
    int n_dev = 0;
    cudaGetDeviceCount(&n_dev);
    if (n_dev >= 3) {
        assert_int_equal(cuda_backend_create(m, &c, &be, &err), INF_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, "tensor_parallel_size 3"));
    } else {
        assert_int_equal(cuda_backend_create(m, &c, &be, &err), INF_ERR_INVALID);
    }
    free(b);
    free(lg);
    model_destroy(m);
}

/* A GPU without the shared memory the batch-invariant GEMM's largest tile
 * needs per block (sm_86 and sm_89 allow 99 KiB) is refused at create with
 * a message that says so; batch_invariant 0 (cuBLAS) starts on it. Only on
 * the fake device, whose limit INFERD_FAKE_SMEM sets. */
static void test_cuda_small_shared_memory_refused(void **state)
{
    (void)state;
    NEED_GPU();
    struct cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    if (!strstr(p.name, "fake")) {
        print_message("skipped: needs the fake device to play a smaller GPU\n");
        skip();
    }
    char dir[600];
    model *m = load_test_model(0, dir);
    setenv("INFERD_FAKE_SMEM", "101376", 1);
    cuda_config c = gpu_config(MAXT, MAXS, 256, MAXB + 1, 0, 1);
    be_backend *be = NULL;
    inf_err err = {0};
    int rc = cuda_backend_create(m, &c, &be, &err);
    assert_int_equal(rc, INF_ERR_UNSUPPORTED);
    assert_null(be);
    assert_non_null(strstr(err.msg, "shared memory"));
    c.batch_invariant = 0;
    be = gpu_create(m, &c);
    unsetenv("INFERD_FAKE_SMEM");
    be_destroy(be);
    model_destroy(m);
}

/* Tensor parallelism over two GPUs gives tp=1's logits (within tolerance:
 * the all-reduce sums partial products in another order). */
/* tp = 2 against tp = 1 on one model's logits (chunks of 5 on tp = 2). */
static void tp_matches(model *m, const char *what)
{
    int V = m->cfg.vocab_size, n = 30;
    int32_t toks[30];
    for (int i = 0; i < n; i++)
        toks[i] = (int32_t)((i * 13 + 1) % V);
    be_backend *one = gpu_make(m, MAXT, MAXS, 256, MAXB + 1, 1, 1);
    be_backend *two = gpu_make(m, MAXT, MAXS, 256, MAXB + 1, 1, 2);
    float *a = malloc((size_t)n * V * 4), *b = malloc((size_t)n * V * 4);
    seq_logits(one, toks, n, 0, a);
    seq_logits(two, toks, n, 5, b);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double tol, e = row_err(b + (size_t)i * V, a + (size_t)i * V, V, &tol);
        worst = fmax(worst, e / tol);
        if (e > tol)
            fail_msg("%s position %d: |tp2 - tp1| %g > %g", what, i, e, tol);
    }
    print_message("%s: tp = 2 within %.2f of the tolerance of tp = 1\n", what, worst);
    free(a);
    free(b);
    be_destroy(one);
    be_destroy(two);
}

/* Tensor parallelism over 2 GPUs against one: the tiny fixture; Qwen2's
 * (q, k and v biases, sliced with their heads); and the same with an o
 * bias added here (no fixture has one), which rank 0 alone adds before the
 * all-reduce; that bias is checked to move the logits, so adding it twice
 * or never would show. */
static void test_cuda_tensor_parallel_matches_tp1(void **state)
{
    (void)state;
    NEED_GPU();
    int n_dev = 0;
    cudaGetDeviceCount(&n_dev);
    if (n_dev < 2) {
        print_message("skipped: tensor parallelism needs 2 GPUs, %d visible; UNTESTED\n", n_dev);
        skip();
    }
    char dir[600];
    model *m = load_test_model(0, dir);
    tp_matches(m, dir);
    model_destroy(m);

    snprintf(dir, sizeof dir, "%s/fam-qwen2", fixtures());
    inf_err err = {0};
    if (model_load(dir, &m, &err))
        fail_msg("%s", err.msg);
    assert_true(m->cfg.desc.bias_qkv && m->layers[0].bq.data);
    tp_matches(m, "fam-qwen2 (q, k, v biases)");

    int V = m->cfg.vocab_size, D = m->cfg.hidden_size, L = m->cfg.n_layers, n = 12;
    int32_t toks[12];
    for (int i = 0; i < n; i++)
        toks[i] = (int32_t)((i * 29 + 3) % V);
    float *before = malloc((size_t)n * V * 4), *after = malloc((size_t)n * V * 4);
    be_backend *one = gpu_make(m, MAXT, MAXS, 256, MAXB + 1, 1, 1);
    seq_logits(one, toks, n, 0, before);
    be_destroy(one);
    float *bo = malloc((size_t)L * D * 4);
    for (int i = 0; i < L * D; i++)
        bo[i] = 0.5f * frand();
    for (int l = 0; l < L; l++)
        m->layers[l].bo = (model_tensor){.dtype = INF_F32, .data = bo + (size_t)l * D,
                                         .rows = D, .cols = 1, .name = "test o bias"};
    m->cfg.desc.bias_o = 1;
    one = gpu_make(m, MAXT, MAXS, 256, MAXB + 1, 1, 1);
    seq_logits(one, toks, n, 0, after);
    be_destroy(one);
    double moved = 0, tol = 0;
    for (int i = 0; i < n; i++)
        moved = fmax(moved, row_err(after + (size_t)i * V, before + (size_t)i * V, V, &tol) / tol);
    print_message("the o bias moves tp = 1's logits by %.1f of the tolerance\n", moved);
    assert_true(moved > 2.0);
    tp_matches(m, "fam-qwen2 with an o bias");
    free(before);
    free(after);
    model_destroy(m); /* the layers' bo point into bo, which outlives it */
    free(bo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_available_never_crashes),
        cmocka_unit_test(test_cuda_kern_embed_exact),
        cmocka_unit_test(test_cuda_kern_add_rmsnorm),
        cmocka_unit_test(test_cuda_kern_add_rmsnorm_q_exact),
        cmocka_unit_test(test_cuda_kern_glu_q_exact),
        cmocka_unit_test(test_cuda_kern_rope_kv),
        cmocka_unit_test(test_cuda_kern_swiglu),
        cmocka_unit_test(test_cuda_kern_gemm_invariant),
        cmocka_unit_test(test_cuda_kern_quant_rows_exact),
        cmocka_unit_test(test_cuda_kern_gemm_i8_exact),
        cmocka_unit_test(test_cuda_kern_gemm_i4_exact),
        cmocka_unit_test(test_cuda_kern_attention_paged),
        cmocka_unit_test(test_cuda_kern_sample_matches_smp),
        cmocka_unit_test(test_cuda_kern_sample_masked),
        cmocka_unit_test(test_cuda_model_logits_match_cpu),
        cmocka_unit_test(test_cuda_families_match_cpu),
        cmocka_unit_test(test_cuda_quantized_match_cpu),
        cmocka_unit_test(test_cuda_refuses_cpu_only_linears),
        cmocka_unit_test(test_cuda_q4_codes_as_stored),
        cmocka_unit_test(test_cuda_model_greedy_64_matches_cpu),
        cmocka_unit_test(test_cuda_model_batched_chunked_paged),
        cmocka_unit_test(test_cuda_graphs_match_eager),
        cmocka_unit_test(test_cuda_submit_pipeline_placeholders),
        cmocka_unit_test(test_cuda_engine_ahead_same_tokens),
        cmocka_unit_test(test_cuda_lazy_layers),
        cmocka_unit_test(test_cuda_constrained_decode_matches_host),
        cmocka_unit_test(test_cuda_hidden_matches_cpu),
        cmocka_unit_test(test_cuda_mlp_matches_host),
        cmocka_unit_test(test_cuda_errors),
        cmocka_unit_test(test_cuda_small_shared_memory_refused),
        cmocka_unit_test(test_cuda_tensor_parallel_matches_tp1),
        /* last: written without a GPU, a fault there would leave the
         * device unusable for the tests after it */
        cmocka_unit_test(test_cuda_kern_gemm_wgmma),
        cmocka_unit_test(test_cuda_gemm_wgmma_switch),
    };
    /* e.g. "test_cuda_kern_*": a slow tool (racecheck) on the kernels alone */
    const char *filter = getenv("INFERD_CUDA_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
