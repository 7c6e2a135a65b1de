/* bench_cuda --wgmma (bench/cuda/wg_sweep.h). */
#include "bench/cuda/wg_sweep.h"

#include <cJSON.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kern.h"
#include "cuda/plan.h"

enum { WG_REPS = 15, WG_WARM = 3 };
enum { RUN_CUBLAS, RUN_MMA, RUN_WG };

typedef struct wg_ctx {
    cublasHandle_t h;
    const uint16_t *x, *w;
    float *y, *ws;
    int N, K, M, splits;
} wg_ctx;

static int run_once(const wg_ctx *c, int which)
{
    const float one = 1.0f, zero = 0.0f;
    if (which == RUN_CUBLAS)
        return cublasGemmEx(c->h, CUBLAS_OP_T, CUBLAS_OP_N, c->N, c->M, c->K, &one, c->w,
                            CUDA_R_16BF, c->K, c->x, CUDA_R_16BF, c->K, &zero, c->y, CUDA_R_32F,
                            c->N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS;
    cudaError_t e = which == RUN_MMA
                        ? cuda_k_gemm(c->x, c->K, c->w, c->N, c->K, c->y, c->N, c->M, c->splits,
                                      c->ws, 0)
                        : cuda_k_gemm_wg(0, c->x, c->K, c->w, c->N, c->K, c->y, c->N, c->M,
                                         c->splits, c->ws, 0);
    return e != cudaSuccess;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median microseconds of run `which`, or a negative value on failure. */
static double time_us(const wg_ctx *c, int which)
{
    cudaEvent_t e0, e1;
    float t[WG_REPS];
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        return -1;
    int bad = 0;
    for (int i = 0; i < WG_WARM + WG_REPS && !bad; i++) {
        bad = cudaEventRecord(e0, 0) != cudaSuccess || run_once(c, which) ||
              cudaEventRecord(e1, 0) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess;
        if (!bad && i >= WG_WARM)
            bad = cudaEventElapsedTime(&t[i - WG_WARM], e0, e1) != cudaSuccess;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (bad)
        return -1;
    qsort(t, WG_REPS, sizeof *t, cmp_f);
    return t[WG_REPS / 2] * 1e3;
}

/* Random bf16 in [-scale, scale) on the device (an LCG: the same data every run). */
static uint16_t *dev_rand(size_t n, float scale, uint32_t seed)
{
    uint16_t *h = malloc(n * 2), *d = NULL;
    if (!h)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        float f = ((float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
        uint32_t u;
        memcpy(&u, &f, 4);
        h[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16); /* round to nearest even */
    }
    if (cudaMalloc((void **)&d, n * 2) != cudaSuccess ||
        cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        d = NULL;
    }
    free(h);
    return d;
}

int wg_sweep(const model *m, cJSON *o)
{
    if (cuda_k_gemm_wg_setup() != cudaSuccess || cuda_k_gemm_setup() != cudaSuccess) {
        cudaGetLastError();
        printf("wgmma: not run (the device is not compute capability 9.0)\n");
        cJSON_AddStringToObject(o, "not_run", "the device is not compute capability 9.0");
        return 1;
    }
    const model_config *c = &m->cfg;
    int D = c->hidden_size, hd = c->head_dim, F = c->intermediate_size;
    const char *names[4] = {"qkv", "o", "gate_up", "down"};
    const int shapes[4][2] = {{(c->n_heads + 2 * c->n_kv_heads) * hd, D},
                              {D, c->n_heads * hd},
                              {2 * F, D},
                              {D, F}};
    const int Ms[] = {1, 64, 256, 2048};
    size_t kmax = 0, nmax = 0, wmax = 0;
    for (int s = 0; s < 4; s++) {
        kmax = (size_t)shapes[s][1] > kmax ? (size_t)shapes[s][1] : kmax;
        nmax = (size_t)shapes[s][0] > nmax ? (size_t)shapes[s][0] : nmax;
        size_t nk = (size_t)shapes[s][0] * shapes[s][1];
        wmax = nk > wmax ? nk : wmax;
    }
    wg_ctx x = {0};
    size_t yn = 2048 * nmax;
    x.x = dev_rand(2048 * kmax, 1.0f, 7);
    x.w = dev_rand(wmax, 0.05f, 11);
    float *ref = malloc(yn * 4), *got = malloc(yn * 4);
    int rc = !x.x || !x.w || !ref || !got || cublasCreate(&x.h) != CUBLAS_STATUS_SUCCESS ||
             cudaMalloc((void **)&x.y, yn * 4) != cudaSuccess ||
             cudaMalloc((void **)&x.ws, CUDA_GEMM_MAX_SPLITS * yn * 4) != cudaSuccess;
    cJSON *arr = cJSON_AddArrayToObject(o, "wgmma_gemm_shapes");
    printf("\nwgmma (cuda/k_gemm_wg.cu, variant 0) beside cuda_k_gemm (mma.sync) and cuBLAS\n"
           "%-8s %5s %6s %6s %10s %10s %10s %9s %12s %9s\n", "gemm", "M", "N", "K", "cuBLAS us",
           "mma us", "wgmma us", "TFLOP/s", "max rel diff", "same bits");
    for (int s = 0; s < 4 && !rc; s++)
        for (int mi = 0; mi < 4 && !rc; mi++) {
            x.N = shapes[s][0];
            x.K = shapes[s][1];
            x.M = Ms[mi];
            x.splits = cuda_plan_gemm_splits(x.N, x.K);
            size_t n = (size_t)x.M * x.N;
            double tc = time_us(&x, RUN_CUBLAS), tm = time_us(&x, RUN_MMA);
            rc = tc < 0 || tm < 0 ||
                 cudaMemcpy(ref, x.y, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
                 cudaMemset(x.y, 0xff, n * 4) != cudaSuccess;
            double tw = rc ? -1 : time_us(&x, RUN_WG);
            rc = rc || tw < 0 || cudaMemcpy(got, x.y, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess;
            if (rc)
                break;
            double worst = 0; /* per row, over that row's largest |y| */
            for (int i = 0; i < x.M; i++) {
                double big = 0, d = 0;
                for (int j = 0; j < x.N; j++) {
                    big = fmax(big, fabs(ref[(size_t)i * x.N + j]));
                    double e = fabs((double)got[(size_t)i * x.N + j] - ref[(size_t)i * x.N + j]);
                    d = isfinite(e) ? fmax(d, e) : INFINITY;
                }
                worst = fmax(worst, d / (big > 0 ? big : 1));
            }
            int same = !memcmp(ref, got, n * 4);
            double tf = 2.0 * x.M * x.N * (double)x.K / (tw * 1e-6) / 1e12;
            printf("%-8s %5d %6d %6d %10.1f %10.1f %10.1f %9.1f %12.2e %9s\n", names[s], x.M, x.N,
                   x.K, tc, tm, tw, tf, worst, same ? "yes" : "no");
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "gemm", names[s]);
            cJSON_AddNumberToObject(e, "M", x.M);
            cJSON_AddNumberToObject(e, "N", x.N);
            cJSON_AddNumberToObject(e, "K", x.K);
            cJSON_AddNumberToObject(e, "k_ranges", x.splits);
            cJSON_AddNumberToObject(e, "cublas_us", tc);
            cJSON_AddNumberToObject(e, "mma_us", tm);
            cJSON_AddNumberToObject(e, "wgmma_us", tw);
            cJSON_AddNumberToObject(e, "wgmma_tflops", tf);
            cJSON_AddNumberToObject(e, "max_rel_diff_from_mma", isfinite(worst) ? worst : -1);
            cJSON_AddBoolToObject(e, "same_bits_as_mma", same);
            cJSON_AddItemToArray(arr, e);
        }
    if (rc)
        fprintf(stderr, "bench_cuda: the wgmma sweep failed: %s\n",
                cudaGetErrorString(cudaGetLastError()));
    if (x.h)
        cublasDestroy(x.h);
    cudaFree((void *)x.x);
    cudaFree((void *)x.w);
    cudaFree(x.y);
    cudaFree(x.ws);
    free(ref);
    free(got);
    return rc;
}
