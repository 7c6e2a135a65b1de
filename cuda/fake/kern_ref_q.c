/* Host references of the quantized kernels (cuda/kern.h, "quantized layer
 * matrices") for the fake device, written from the contract: the same
 * float operations in the same order (built with -ffp-contract=off, each
 * `*`, `/` and fmaf is one rounding, as the device's _rn intrinsics). The
 * argument checks are cuda/k_quant.cu's, so misuse fails alike. */
#include <math.h>
#include <stdint.h>

#include "cuda/fake/fake.h"
#include "cuda/kern.h"
#include "engine/common.h"

static int aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

typedef struct quant_args {
    const uint16_t *x;
    int ldx, K, T, ldq;
    float s; /* > 0: static */
    int8_t *q;
    float *sx;
} quant_args;

static void quant_static_run(const quant_args *a)
{
    for (int t = 0; t < a->T; t++) {
        const uint16_t *x = a->x + (size_t)t * a->ldx;
        int8_t *q = a->q + (size_t)t * a->ldq;
        for (int k = 0; k < a->ldq; k++) {
            float v = k < a->K ? fminf(fmaxf(inf_bf16_to_f32(x[k]) / a->s, -127.0f), 127.0f)
                               : 0.0f;
            q[k] = (int8_t)(int)rintf(v);
        }
        a->sx[t] = a->s;
    }
}

static void quant_run(const void *p)
{
    const quant_args *a = p;
    if (a->s > 0.0f) {
        quant_static_run(a);
        return;
    }
    for (int t = 0; t < a->T; t++) {
        const uint16_t *x = a->x + (size_t)t * a->ldx;
        int8_t *q = a->q + (size_t)t * a->ldq;
        float amax = 0.0f;
        for (int k = 0; k < a->K; k++) {
            float v = fabsf(inf_bf16_to_f32(x[k]));
            if (v > amax) /* false for NaN */
                amax = v;
        }
        float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int k = 0; k < a->ldq; k++) {
            float v = k < a->K ? fminf(fmaxf(inf_bf16_to_f32(x[k]) * inv, -127.0f), 127.0f)
                               : 0.0f; /* fmaxf: NaN -> -127 */
            q[k] = (int8_t)(int)rintf(v);
        }
        a->sx[t] = amax / 127.0f;
    }
}

const char *cuda_k_quant_rows_kernel_name(int kernel)
{
    return kernel == CUDA_QR_BLOCK ? "block" : kernel == CUDA_QR_VEC ? "vec" : "?";
}

cudaError_t cuda_k_quant_rows(const uint16_t *x, int ldx, int K, int T, int8_t *q, int ldq,
                              float *sx, cudaStream_t st)
{
    return cuda_k_quant_rows_with(CUDA_QR_BLOCK, x, ldx, K, T, q, ldq, sx, st);
}

/* The fake device's fused kernels: the two references in turn. */
cudaError_t cuda_k_glu_q(const float *gu, int F, int T, int gelu, uint16_t *out, int8_t *q,
                         int ldq, float *sx, cudaStream_t st)
{
    if (F < 0 || ldq < F || ldq % 32)
        return cudaErrorInvalidValue;
    cudaError_t e = gelu ? cuda_k_geglu(gu, F, T, out, st) : cuda_k_swiglu(gu, F, T, out, st);
    return e == cudaSuccess ? cuda_k_quant_rows(out, F, F, T, q, ldq, sx, st) : e;
}

cudaError_t cuda_k_add_rmsnorm_q(float *x, const float *delta, const float *gain, int D,
                                 float eps, int n, uint16_t *out, int8_t *q, int ldq, float *sx,
                                 cudaStream_t st)
{
    if (D < 0 || ldq < D || ldq % 32)
        return cudaErrorInvalidValue;
    cudaError_t e = cuda_k_add_rmsnorm(x, delta, gain, D, eps, NULL, n, out, st);
    return e == cudaSuccess ? cuda_k_quant_rows(out, D, D, n, q, ldq, sx, st) : e;
}


cudaError_t cuda_k_quant_rows_static(const uint16_t *x, int ldx, int K, int T, float s,
                                     int8_t *q, int ldq, float *sx, cudaStream_t st)
{
    (void)st;
    if (K < 0 || ldx < K || ldq < K || ldq % 32 || !(s > 0.0f))
        return cudaErrorInvalidValue;
    quant_args a = {.x = x, .ldx = ldx, .K = K, .T = T, .ldq = ldq, .s = s, .q = q, .sx = sx};
    return T > 0 ? fake_launch(quant_run, &a, sizeof a) : cudaSuccess;
}

cudaError_t cuda_k_quant_rows_with(int kernel, const uint16_t *x, int ldx, int K, int T,
                                   int8_t *q, int ldq, float *sx, cudaStream_t st)
{
    (void)st;
    if (K < 0 || ldx < K || ldq < K || ldq % 32 || kernel < 0 || kernel >= CUDA_QR_KERNELS)
        return cudaErrorInvalidValue;
    quant_args a = {.x = x, .ldx = ldx, .K = K, .T = T, .ldq = ldq, .q = q, .sx = sx};
    return T > 0 ? fake_launch(quant_run, &a, sizeof a) : cudaSuccess;
}

typedef struct gemmq_args {
    const int8_t *q, *w;
    const uint8_t *w4;
    const uint16_t *d;
    const float *sx, *sw;
    int ldq, ldw, N, K, G, ldy, M;
    float *y;
} gemmq_args;

static void gemm_i8_run(const void *p)
{
    const gemmq_args *a = p;
    for (int m = 0; m < a->M; m++)
        for (int n = 0; n < a->N; n++) {
            const int8_t *q = a->q + (size_t)m * a->ldq, *w = a->w + (size_t)n * a->ldw;
            int32_t s = 0;
            for (int k = 0; k < a->K; k++)
                s += (int32_t)q[k] * w[k];
            a->y[(size_t)m * a->ldy + n] = ((float)s * a->sx[m]) * a->sw[n];
        }
}

/* The fake device has one kernel: every choice runs the contract. */
const char *cuda_k_qgemm_kernel_name(int kernel)
{
    static const char *const names[] = {"rows", "tiled", "warp", "mma"};
    return kernel >= 0 && kernel < CUDA_QK_KERNELS ? names[kernel] : "?";
}

int cuda_k_qgemm_kernel(int bits, int M)
{
    (void)bits, (void)M;
    return CUDA_QK_ROWS;
}

cudaError_t cuda_k_gemm_i8(const int8_t *q, int ldq, const float *sx, const int8_t *w, int ldw,
                           const float *sw, int N, int K, float *y, int ldy, int M,
                           cudaStream_t st)
{
    return cuda_k_gemm_i8_with(CUDA_QK_ROWS, q, ldq, sx, w, ldw, sw, N, K, y, ldy, M, st);
}

cudaError_t cuda_k_gemm_i8_with(int kernel, const int8_t *q, int ldq, const float *sx,
                                const int8_t *w, int ldw, const float *sw, int N, int K,
                                float *y, int ldy, int M, cudaStream_t st)
{
    (void)st;
    if (K < 0 || ldw < K || ldw % 32 || ldq < ldw || ldq % 16)
        return cudaErrorInvalidValue;
    if (kernel < 0 || kernel >= CUDA_QK_KERNELS)
        return cudaErrorInvalidValue;
    if (M <= 0 || N <= 0)
        return cudaSuccess;
    if (!aligned16(q) || !aligned16(w))
        return cudaErrorInvalidValue;
    gemmq_args a = {.q = q, .w = w, .sx = sx, .sw = sw, .ldq = ldq, .ldw = ldw, .N = N,
                    .K = K, .ldy = ldy, .M = M, .y = y};
    return fake_launch(gemm_i8_run, &a, sizeof a);
}

static void gemm_i4_run(const void *p)
{
    const gemmq_args *a = p;
    for (int m = 0; m < a->M; m++)
        for (int n = 0; n < a->N; n++) {
            const int8_t *q = a->q + (size_t)m * a->ldq;
            float acc = 0.0f;
            for (int g = 0; g < a->G; g++) {
                const uint8_t *b = a->w4 + ((size_t)n * a->G + g) * 16;
                int32_t s = 0;
                for (int i = 0; i < 16; i++) /* low nibble k = 32g + i, high 32g + 16 + i */
                    s += (int32_t)q[32 * g + i] * ((b[i] & 15) - 8) +
                         (int32_t)q[32 * g + 16 + i] * ((b[i] >> 4) - 8);
                acc = fmaf((float)s, inf_f16_to_f32(a->d[(size_t)n * a->G + g]), acc);
            }
            a->y[(size_t)m * a->ldy + n] = acc * a->sx[m];
        }
}

cudaError_t cuda_k_gemm_i4(const int8_t *q, int ldq, const float *sx, const uint8_t *w4,
                           const uint16_t *d, int N, int G, float *y, int ldy, int M,
                           cudaStream_t st)
{
    return cuda_k_gemm_i4_with(CUDA_QK_ROWS, q, ldq, sx, w4, d, N, G, y, ldy, M, st);
}

cudaError_t cuda_k_gemm_i4_with(int kernel, const int8_t *q, int ldq, const float *sx,
                                const uint8_t *w4, const uint16_t *d, int N, int G, float *y,
                                int ldy, int M, cudaStream_t st)
{
    (void)st;
    if (G < 0 || (long long)ldq < 32LL * G || ldq % 16)
        return cudaErrorInvalidValue;
    if (kernel < 0 || kernel >= CUDA_QK_KERNELS)
        return cudaErrorInvalidValue;
    if (M <= 0 || N <= 0)
        return cudaSuccess;
    if (!aligned16(q) || !aligned16(w4))
        return cudaErrorInvalidValue;
    gemmq_args a = {.q = q, .w4 = w4, .d = d, .sx = sx, .ldq = ldq, .N = N, .G = G,
                    .ldy = ldy, .M = M, .y = y};
    return fake_launch(gemm_i4_run, &a, sizeof a);
}
