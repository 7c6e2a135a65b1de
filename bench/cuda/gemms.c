/* bench_cuda's GEMM-level timings (bench/cuda/gemms.h). */
#include "bench/cuda/gemms.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>

#include "cuda/kern.h"
#include "cuda/plan.h"

/* n bf16 values uniform in [-scale, scale) into a new device buffer (timing
 * on constant data or zeros flatters tensor cores). */
uint16_t *dev_random_bf16(size_t n, float scale, uint32_t seed)
{
    uint16_t *h = malloc(n * 2), *d = NULL;
    if (!h) {
        fprintf(stderr, "bench_cuda: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++, seed = seed * 1664525u + 1013904223u)
        h[i] = inf_f32_to_bf16(((float)(seed >> 8) / 8388608.0f - 1.0f) * scale);
    TRY(cudaMalloc((void **)&d, n * 2));
    TRY(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* ---- the batch-invariant GEMM's tile shapes ------------------------------------------ */

/* else a candidate shape of cuda_k_gemm */
enum { K_WGMMA = -3, K_CUBLAS = -2, K_DEFAULT = -1 };

static void gemm_once(int kind, cublasHandle_t h, const uint16_t *x, const uint16_t *w, int N,
                      int K, float *y, int M, float *ws)
{
    int splits = cuda_plan_gemm_splits(N, K);
    const float one = 1.0f, zero = 0.0f;
    if (kind == K_CUBLAS)
        TRY(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, CUDA_R_16BF, K, x,
                         CUDA_R_16BF, K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT));
    else if (kind == K_DEFAULT)
        TRY(cuda_k_gemm(x, K, w, N, K, y, N, M, splits, ws, 0));
    else if (kind == K_WGMMA)
        TRY(cuda_k_gemm_wg(0, x, K, w, N, K, y, N, M, splits, ws, 0));
    else
        TRY(cuda_k_gemm_variant(kind, x, K, w, N, K, y, N, M, splits, ws, 0));
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of 15 timed runs of fn(ctx) after 3 warm-ups. */
static double median_ms(void (*fn)(const void *), const void *ctx)
{
    cudaEvent_t e0, e1;
    TRY(cudaEventCreate(&e0));
    TRY(cudaEventCreate(&e1));
    float t[15];
    for (int i = 0; i < 18; i++) {
        TRY(cudaEventRecord(e0, 0));
        fn(ctx);
        TRY(cudaEventRecord(e1, 0));
        TRY(cudaEventSynchronize(e1));
        if (i >= 3)
            TRY(cudaEventElapsedTime(&t[i - 3], e0, e1));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(t, 15, sizeof *t, cmp_float);
    return t[7];
}

typedef struct gemm_call {
    int kind, N, K, M;
    cublasHandle_t h;
    const uint16_t *x, *w;
    float *y, *ws;
} gemm_call;

static void gemm_call_once(const void *p)
{
    const gemm_call *c = p;
    gemm_once(c->kind, c->h, c->x, c->w, c->N, c->K, c->y, c->M, c->ws);
}

static double gemm_ms(int kind, cublasHandle_t h, const uint16_t *x, const uint16_t *w, int N,
                      int K, float *y, int M, float *ws)
{
    gemm_call c = {.kind = kind, .N = N, .K = K, .M = M, .h = h, .x = x, .w = w, .y = y,
                   .ws = ws};
    return median_ms(gemm_call_once, &c);
}

/* The layer's four GEMMs (N, K): fused q|k|v, o, fused gate|up, down. */
static const char *const gemm_names[4] = {"qkv", "o", "gate_up", "down"};

/* The four shapes, and the largest weight (N x K), K and N among them:
 * what the sweeps' buffers hold. */
typedef struct gemm_set {
    int shapes[4][2];
    size_t wmax, kmax, nmax;
} gemm_set;

static void layer_gemms(const model *m, gemm_set *g)
{
    const model_config *c = &m->cfg;
    int D = c->hidden_size, hd = c->head_dim, F = c->intermediate_size;
    const int s[4][2] = {{(c->n_heads + 2 * c->n_kv_heads) * hd, D},
                         {D, c->n_heads * hd},
                         {2 * F, D},
                         {D, F}};
    memcpy(g->shapes, s, sizeof s);
    g->wmax = g->kmax = g->nmax = 0;
    for (int i = 0; i < 4; i++) {
        size_t n = (size_t)s[i][0], k = (size_t)s[i][1];
        g->wmax = n * k > g->wmax ? n * k : g->wmax;
        g->kmax = k > g->kmax ? k : g->kmax;
        g->nmax = n > g->nmax ? n : g->nmax;
    }
}

/* A sweep's JSON entry for GEMM s of the layer at M x N x K (bf16: with
 * its K ranges). */
static cJSON *bf16_entry(int s, int M, int N, int K)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "gemm", gemm_names[s]);
    cJSON_AddNumberToObject(e, "M", M);
    cJSON_AddNumberToObject(e, "N", N);
    cJSON_AddNumberToObject(e, "K", K);
    cJSON_AddNumberToObject(e, "k_ranges", cuda_plan_gemm_splits(N, K));
    return e;
}

/* The buffers of a sweep: x (2048 rows) and w (the largest weight) random
 * on the device, y and the K ranges' workspace for 2048 rows, host rows for
 * the bits compared (host floats), a cuBLAS handle. */
typedef struct gemm_bufs {
    uint16_t *dx, *dw;
    float *dy, *dws, *ref, *got;
    cublasHandle_t h;
} gemm_bufs;

static void bufs_make(gemm_bufs *b, const gemm_set *g, size_t host, uint32_t seed)
{
    size_t yn = 2048 * g->nmax;
    b->dx = dev_random_bf16(2048 * g->kmax, 1.0f, seed);
    b->dw = dev_random_bf16(g->wmax, 0.05f, seed + 2);
    b->ref = malloc(host * 4);
    b->got = malloc(host * 4);
    if (!b->ref || !b->got) {
        fprintf(stderr, "bench_cuda: out of memory\n");
        exit(1);
    }
    TRY(cudaMalloc((void **)&b->dy, yn * 4));
    TRY(cudaMalloc((void **)&b->dws, CUDA_GEMM_MAX_SPLITS * yn * 4));
    TRY(cublasCreate(&b->h));
}

static void bufs_free(gemm_bufs *b)
{
    cublasDestroy(b->h);
    cudaFree(b->dx);
    cudaFree(b->dw);
    cudaFree(b->dy);
    cudaFree(b->dws);
    free(b->ref);
    free(b->got);
}

/* Times cuBLAS, cuda_k_gemm and every candidate shape on the model's four
 * GEMMs at several M, on random data; checks that every candidate gives the
 * default's bits (first 64 rows). Returns 0 when one does not. */
int gemm_sweep(const model *m, cJSON *out)
{
    gemm_set g;
    layer_gemms(m, &g);
    int(*shapes)[2] = g.shapes;
    const int Ms[] = {1, 4, 16, 32, 64, 256, 2048};
    int nM = (int)(sizeof Ms / sizeof *Ms), nv = cuda_k_gemm_variants(), ok = 1;
    gemm_bufs b;
    bufs_make(&b, &g, 64 * g.nmax, 99);
    TRY(cuda_k_gemm_setup());
    TRY(cuda_k_gemm_variants_setup());
    cJSON *arr = cJSON_AddArrayToObject(out, "gemm_shapes");
    printf("\n%-8s %5s %6s %6s %10s %10s  %-22s %10s\n", "gemm", "M", "N", "K", "cuBLAS us",
           "ours us", "best shape", "best us");
    for (int s = 0; s < 4; s++)
        for (int mi = 0; mi < nM; mi++) {
            int N = shapes[s][0], K = shapes[s][1], M = Ms[mi];
            size_t cmp = (size_t)(M < 64 ? M : 64) * N;
            double tc = gemm_ms(K_CUBLAS, b.h, b.dx, b.dw, N, K, b.dy, M, b.dws);
            double td = gemm_ms(K_DEFAULT, b.h, b.dx, b.dw, N, K, b.dy, M, b.dws);
            TRY(cudaMemcpy(b.ref, b.dy, cmp * 4, cudaMemcpyDeviceToHost));
            cJSON *e = bf16_entry(s, M, N, K);
            cJSON_AddNumberToObject(e, "cublas_us", tc * 1e3);
            cJSON_AddNumberToObject(e, "default_us", td * 1e3);
            cJSON *vs = cJSON_AddObjectToObject(e, "shapes_us");
            int best = -1;
            double tb = 1e30;
            for (int v = 0; v < nv; v++) {
                TRY(cudaMemset(b.dy, 0xff, cmp * 4));
                double tv = gemm_ms(v, b.h, b.dx, b.dw, N, K, b.dy, M, b.dws);
                TRY(cudaMemcpy(b.got, b.dy, cmp * 4, cudaMemcpyDeviceToHost));
                if (memcmp(b.got, b.ref, cmp * 4)) {
                    printf("shape %s: NOT the same bits as the default at M %d N %d K %d\n",
                           cuda_k_gemm_variant_name(v), M, N, K);
                    ok = 0;
                }
                cJSON_AddNumberToObject(vs, cuda_k_gemm_variant_name(v), tv * 1e3);
                if (tv < tb) {
                    tb = tv;
                    best = v;
                }
            }
            cJSON_AddItemToArray(arr, e);
            printf("%-8s %5d %6d %6d %10.1f %10.1f  %-22s %10.1f\n", gemm_names[s], M, N, K,
                   tc * 1e3, td * 1e3, cuda_k_gemm_variant_name(best), tb * 1e3);
        }
    bufs_free(&b);
    return ok;
}

/* ---- the quantized GEMMs' kernels ------------------------------------------------ */

/* One quantized GEMM (or, with kernel -1, the activations' quantization). */
typedef struct qcall {
    int quant, kernel, qr, M, N, K; /* kernel -1: cuda_k_quant_rows_with kernel qr */
    const uint16_t *x;
    int8_t *q;
    float *sx, *y;
    const int8_t *w;
    const float *sw;
    const uint8_t *w4;
    const uint16_t *d;
} qcall;

static void qcall_once(const void *p)
{
    const qcall *c = p;
    if (c->kernel < 0)
        TRY(cuda_k_quant_rows_with(c->qr, c->x, c->K, c->K, c->M, c->q, c->K, c->sx, 0));
    else if (c->quant == CUDA_QUANT_INT8)
        TRY(cuda_k_gemm_i8_with(c->kernel, c->q, c->K, c->sx, c->w, c->K, c->sw, c->N, c->K,
                                c->y, c->N, c->M, 0));
    else
        TRY(cuda_k_gemm_i4_with(c->kernel, c->q, c->K, c->sx, c->w4, c->d, c->N, c->K / 32,
                                c->y, c->N, c->M, 0));
}

/* n random bytes into a new device buffer: int8 weights and activations
 * ([-127, 127] with avoid_min), int4 nibbles. */
static void *dev_random_bytes(size_t n, uint32_t seed, int avoid_min)
{
    uint8_t *h = malloc(n);
    void *d = NULL;
    if (!h) {
        fprintf(stderr, "bench_cuda: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++, seed = seed * 1664525u + 1013904223u) {
        h[i] = (uint8_t)(seed >> 24);
        if (avoid_min && h[i] == 0x80)
            h[i] = 0x81;
    }
    TRY(cudaMalloc(&d, n));
    TRY(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* Times each kernel of cuda_k_gemm_i8 and _i4 (cuda/kern.h, CUDA_QK_*) and
 * the activations' quantization on the model's four GEMMs at several M, on
 * random data: microseconds, and the weight bytes read per second against
 * the copy bandwidth bw (GB/s); checks that every kernel timed gives the
 * same bits (first 64 rows). Returns 0 when one does not. */
int qgemm_sweep(const model *m, double bw, cJSON *out)
{
    gemm_set g;
    layer_gemms(m, &g);
    int(*shapes)[2] = g.shapes;
    const int Ms[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 2048};
    int nM = (int)(sizeof Ms / sizeof *Ms), ok = 1;
    size_t wmax = g.wmax, kmax = g.kmax, nmax = g.nmax;
    for (int s = 0; s < 4; s++)
        if (shapes[s][1] % 32) {
            printf("quantized kernels: K %d is not a multiple of 32; not timed\n", shapes[s][1]);
            return 1;
        }
    size_t cmp_max = 64 * nmax;
    qcall qc = {.x = dev_random_bf16(2048 * kmax, 1.0f, 5),
                .w = dev_random_bytes(wmax, 17, 0),
                .w4 = dev_random_bytes(wmax / 2, 19, 0),
                .d = dev_random_bf16(wmax / 32, 0.01f, 23)};
    /* f16 scales: bf16 bits read as f16 are finite, small and of both signs */
    float *hsw = malloc(nmax * 4);
    for (size_t n = 0; n < nmax; n++)
        hsw[n] = 0.001f * (float)(1 + n % 13);
    TRY(cudaMalloc((void **)&qc.sw, nmax * 4));
    TRY(cudaMemcpy((void *)qc.sw, hsw, nmax * 4, cudaMemcpyHostToDevice));
    free(hsw);
    TRY(cudaMalloc((void **)&qc.q, 2048 * kmax));
    TRY(cudaMalloc((void **)&qc.sx, 2048 * 4));
    TRY(cudaMalloc((void **)&qc.y, 2048 * nmax * 4));
    TRY(cuda_k_quant_rows(qc.x, (int)kmax, (int)kmax, 2048, qc.q, (int)kmax, qc.sx, 0));
    float *ref = malloc(cmp_max * 4), *got = malloc(cmp_max * 4);
    int8_t *qref = malloc(64 * kmax), *qgot = malloc(64 * kmax);
    float sxref[64], sxgot[64];
    cJSON *arr = cJSON_AddArrayToObject(out, "quantized_gemm_shapes");
    printf("\nquantized GEMMs (us; GB/s of weights read by the launcher's choice, %% of the "
           "copy bandwidth %.0f; qx_: the activations' quantization)\n%-8s %5s %6s %6s %5s",
           bw, "gemm", "M", "N", "K", "quant");
    for (int r = 0; r < CUDA_QR_KERNELS; r++)
        printf("  qx_%-6s", cuda_k_quant_rows_kernel_name(r));
    for (int k = 0; k < CUDA_QK_KERNELS; k++)
        printf(" %9s", cuda_k_qgemm_kernel_name(k));
    printf(" %6s %9s %6s\n", "chosen", "GB/s", "of bw");
    for (int s = 0; s < 4; s++)
        for (int mi = 0; mi < nM; mi++)
            for (int qi = 0; qi < 2; qi++) {
                int quant = qi ? CUDA_QUANT_INT4 : CUDA_QUANT_INT8;
                qc.quant = quant;
                qc.N = shapes[s][0];
                qc.K = shapes[s][1];
                qc.M = Ms[mi];
                qc.kernel = -1;
                double tq[CUDA_QR_KERNELS];
                size_t qn = (size_t)(qc.M < 64 ? qc.M : 64);
                /* vec first, into qgot; block last, into qref: the GEMMs read its q */
                for (int r = CUDA_QR_VEC; r >= CUDA_QR_BLOCK; r--) {
                    qc.qr = r;
                    tq[r] = median_ms(qcall_once, &qc);
                    TRY(cudaMemcpy(r ? qgot : qref, qc.q, qn * qc.K, cudaMemcpyDeviceToHost));
                    TRY(cudaMemcpy(r ? sxgot : sxref, qc.sx, qn * 4, cudaMemcpyDeviceToHost));
                }
                if (memcmp(qgot, qref, qn * qc.K) || memcmp(sxgot, sxref, qn * 4)) {
                    printf("\nquantizing kernel vec: NOT the block kernel's bits at M %d K %d\n",
                           qc.M, qc.K);
                    ok = 0;
                }
                size_t cmp = (size_t)(qc.M < 64 ? qc.M : 64) * qc.N;
                double wbytes = quant == CUDA_QUANT_INT8
                                    ? (double)qc.N * qc.K + 4.0 * qc.N
                                    : (double)qc.N * qc.K / 2 + 2.0 * qc.N * (qc.K / 32);
                int chosen = cuda_k_qgemm_kernel(qi ? 4 : 8, qc.M);
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "gemm", gemm_names[s]);
                cJSON_AddStringToObject(e, "quant", qi ? "int4" : "int8");
                cJSON_AddNumberToObject(e, "M", qc.M);
                cJSON_AddNumberToObject(e, "N", qc.N);
                cJSON_AddNumberToObject(e, "K", qc.K);
                cJSON_AddNumberToObject(e, "weight_bytes", wbytes);
                cJSON *qx = cJSON_AddObjectToObject(e, "quant_rows_us");
                for (int r = 0; r < CUDA_QR_KERNELS; r++)
                    cJSON_AddNumberToObject(qx, cuda_k_quant_rows_kernel_name(r), tq[r] * 1e3);
                cJSON_AddStringToObject(e, "chosen", cuda_k_qgemm_kernel_name(chosen));
                cJSON *ks = cJSON_AddObjectToObject(e, "kernels_us");
                printf("%-8s %5d %6d %6d %5s", gemm_names[s], qc.M, qc.N, qc.K,
                       qi ? "int4" : "int8");
                for (int r = 0; r < CUDA_QR_KERNELS; r++)
                    printf(" %10.1f", tq[r] * 1e3);
                double tch = 0;
                int have_ref = 0;
                for (int k = 0; k < CUDA_QK_KERNELS; k++) {
                    if ((k == CUDA_QK_ROWS || k == CUDA_QK_WARP) && k != chosen && qc.M > 256) {
                        printf(" %9s", "-"); /* a warp a weight row: minutes at large M */
                        continue;
                    }
                    qc.kernel = k;
                    TRY(cudaMemset(qc.y, 0xff, cmp * 4));
                    double t = median_ms(qcall_once, &qc);
                    TRY(cudaMemcpy(have_ref ? got : ref, qc.y, cmp * 4,
                                   cudaMemcpyDeviceToHost));
                    if (have_ref++ && memcmp(got, ref, cmp * 4)) {
                        printf("\nkernel %s: NOT the first kernel's bits at M %d N %d K %d\n",
                               cuda_k_qgemm_kernel_name(k), qc.M, qc.N, qc.K);
                        ok = 0;
                    }
                    cJSON_AddNumberToObject(ks, cuda_k_qgemm_kernel_name(k), t * 1e3);
                    printf(" %9.1f", t * 1e3);
                    if (k == chosen)
                        tch = t;
                }
                double gbs = wbytes / (tch * 1e-3) / 1e9;
                cJSON_AddNumberToObject(e, "chosen_weight_gbs", gbs);
                cJSON_AddNumberToObject(e, "chosen_fraction_of_copy_bw", gbs / bw);
                cJSON_AddItemToArray(arr, e);
                printf(" %6s %9.0f %5.1f%%\n", cuda_k_qgemm_kernel_name(chosen), gbs,
                       100 * gbs / bw);
            }
    cudaFree((void *)qc.x);
    cudaFree((void *)qc.w);
    cudaFree((void *)qc.w4);
    cudaFree((void *)qc.sw);
    cudaFree((void *)qc.d);
    cudaFree(qc.q);
    cudaFree(qc.sx);
    cudaFree(qc.y);
    free(ref);
    free(got);
    free(qref);
    free(qgot);
    return ok;
}

/* ---- the wgmma GEMM (cuda/k_gemm_wg.cu) ----------------------------------------------- */

int wg_sweep(const model *m, cJSON *out)
{
    if (cuda_k_gemm_wg_setup() != cudaSuccess) {
        cudaGetLastError();
        printf("wgmma: not run (the device is not compute capability 9.0)\n");
        cJSON_AddStringToObject(out, "not_run", "the device is not compute capability 9.0");
        return 1;
    }
    TRY(cuda_k_gemm_setup());
    gemm_set g;
    layer_gemms(m, &g);
    int(*shapes)[2] = g.shapes;
    const int Ms[] = {1, 64, 256, 2048};
    gemm_bufs b;
    bufs_make(&b, &g, 2048 * g.nmax, 7);
    cJSON *arr = cJSON_AddArrayToObject(out, "wgmma_gemm_shapes");
    printf("\nwgmma (cuda/k_gemm_wg.cu, variant 0) beside cuda_k_gemm (mma.sync) and cuBLAS\n"
           "%-8s %5s %6s %6s %10s %10s %10s %9s %12s %9s\n", "gemm", "M", "N", "K", "cuBLAS us",
           "mma us", "wgmma us", "TFLOP/s", "max rel diff", "same bits");
    for (int s = 0; s < 4; s++)
        for (int mi = 0; mi < 4; mi++) {
            int N = shapes[s][0], K = shapes[s][1], M = Ms[mi];
            size_t n = (size_t)M * N;
            double tc = gemm_ms(K_CUBLAS, b.h, b.dx, b.dw, N, K, b.dy, M, b.dws) * 1e3;
            double tm = gemm_ms(K_DEFAULT, b.h, b.dx, b.dw, N, K, b.dy, M, b.dws) * 1e3;
            TRY(cudaMemcpy(b.ref, b.dy, n * 4, cudaMemcpyDeviceToHost));
            TRY(cudaMemset(b.dy, 0xff, n * 4)); /* NaN: an unwritten output shows */
            double tw = gemm_ms(K_WGMMA, b.h, b.dx, b.dw, N, K, b.dy, M, b.dws) * 1e3;
            TRY(cudaMemcpy(b.got, b.dy, n * 4, cudaMemcpyDeviceToHost));
            double worst = 0; /* per row, over that row's largest |y| */
            for (int i = 0; i < M; i++) {
                double big = 0, d = 0;
                for (int j = 0; j < N; j++) {
                    big = fmax(big, fabs(b.ref[(size_t)i * N + j]));
                    double e = fabs((double)b.got[(size_t)i * N + j] - b.ref[(size_t)i * N + j]);
                    d = isfinite(e) ? fmax(d, e) : INFINITY;
                }
                worst = fmax(worst, d / (big > 0 ? big : 1));
            }
            int same = !memcmp(b.ref, b.got, n * 4);
            double tf = 2.0 * M * N * (double)K / (tw * 1e-6) / 1e12;
            printf("%-8s %5d %6d %6d %10.1f %10.1f %10.1f %9.1f %12.2e %9s\n", gemm_names[s], M,
                   N, K, tc, tm, tw, tf, worst, same ? "yes" : "no");
            cJSON *e = bf16_entry(s, M, N, K);
            cJSON_AddNumberToObject(e, "cublas_us", tc);
            cJSON_AddNumberToObject(e, "mma_us", tm);
            cJSON_AddNumberToObject(e, "wgmma_us", tw);
            cJSON_AddNumberToObject(e, "wgmma_tflops", tf);
            cJSON_AddNumberToObject(e, "max_rel_diff_from_mma", isfinite(worst) ? worst : -1);
            cJSON_AddBoolToObject(e, "same_bits_as_mma", same);
            cJSON_AddItemToArray(arr, e);
        }
    bufs_free(&b);
    return 0;
}
