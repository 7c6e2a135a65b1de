#include "cpu/qw.h"


#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct qw_job {
    const model_tensor *t;
    const cpu_kern *k;
    cpu_qw *q;
    float *rows;        /* [threads][K] one weight row widened to f32 */
    int8_t *qrow;       /* [threads][K4 * 4]                          */
    atomic_int next;    /* next group of CPU_QG rows                  */
} qw_job;

/* Quantizes each row of a group and scatters it into the packed layout. */
static void qw_run(void *ctx, int t, int nt)
{
    qw_job *j = ctx;
    cpu_qw *q = j->q;
    (void)nt;
    size_t es = inf_dtype_size(j->t->dtype);
    float *row = j->rows + (size_t)t * q->K;
    int8_t *qr = j->qrow + (size_t)t * q->K4 * 4;
    for (;;) {
        int g = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (g * CPU_QG >= q->N)
            break;
        /* the rows below write every byte of their group; a last group's
         * padding rows are zeroed here (the padding relies on it) */
        if ((g + 1) * CPU_QG > q->N)
            memset(q->w + (size_t)g * q->K4 * 64, 0, (size_t)q->K4 * 64);
        for (int r = 0; r < CPU_QG && g * CPU_QG + r < q->N; r++) {
            int n = g * CPU_QG + r;
            memset(qr, 0, (size_t)q->K4 * 4);
            if (j->t->q8) { /* pre-quantized (compressed-tensors): packed as stored */
                memcpy(qr, j->t->q8 + (size_t)n * q->K, (size_t)q->K);
                q->scale[n] = j->t->q8_scale[n];
            } else {
                j->k->to_f32((const char *)j->t->data + (size_t)n * q->K * es, j->t->dtype, row,
                             q->K);
                q->scale[n] = j->k->quant(row, q->K, qr, 0);
            }
            int32_t sum = 0;
            int8_t *dst = q->w + (size_t)g * q->K4 * 64 + (size_t)r * 4;
            for (int k4 = 0; k4 < q->K4; k4++)
                for (int i = 0; i < 4; i++) {
                    dst[(size_t)k4 * 64 + i] = qr[4 * k4 + i];
                    sum += qr[4 * k4 + i];
                }
            q->wsum[n] = 128 * sum;
        }
    }
}

/* Bytes of the packed weights. */
static size_t map_bytes(const cpu_qw *q)
{
    return (size_t)q->N64 * q->K4 * 4;
}

static void *zalloc64(size_t bytes)
{
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n ? n : 64);
    if (p)
        memset(p, 0, n ? n : 64);
    return p;
}

int cpu_qw_create(const model_tensor *t, const cpu_kern *k, cpu_pool *pool, cpu_qw **out,
                  inf_err *err)
{
    *out = NULL;
    if (t->cols >= CPU_QK_MAX || t->rows > 1 << 30)
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "int8: %s is %lld x %lld; rows of %d or more inputs cannot be summed "
                        "exactly in int32", t->name ? t->name : "a weight", (long long)t->rows,
                        (long long)t->cols, CPU_QK_MAX);
    cpu_qw *q = calloc(1, sizeof *q);
    if (!q)
        return inf_fail(err, INF_ERR_NOMEM, "int8: out of memory");
    q->N = (int)t->rows;
    q->K = (int)t->cols;
    q->N64 = (q->N + CPU_QN - 1) / CPU_QN * CPU_QN;
    q->K4 = (q->K + 3) / 4;
    int nt = pool ? cpu_pool_size(pool) : 1;
    q->w = inf_alloc_big(map_bytes(q));
    size_t used = (size_t)(q->N + CPU_QG - 1) / CPU_QG * q->K4 * 64; /* qw_run zeroes these */
    if (q->w) /* the groups of padding rows alone */
        memset(q->w + used, 0, map_bytes(q) - used);
    q->scale = zalloc64((size_t)q->N64 * sizeof(float));
    q->wsum = zalloc64((size_t)q->N64 * sizeof(int32_t));
    qw_job j = {.t = t, .k = k, .q = q};
    j.rows = malloc((size_t)nt * q->K * sizeof(float));
    j.qrow = malloc((size_t)nt * q->K4 * 4);
    if (!q->w || !q->scale || !q->wsum || !j.rows || !j.qrow) {
        size_t mib = (size_t)q->N64 * q->K4 * 4 >> 20;
        free(j.rows);
        free(j.qrow);
        cpu_qw_destroy(q);
        return inf_fail(err, INF_ERR_NOMEM, "int8: cannot allocate %zu MiB for %s", mib,
                        t->name ? t->name : "a weight");
    }
    atomic_init(&j.next, 0);
    if (pool)
        cpu_pool_run(pool, qw_run, &j);
    else
        qw_run(&j, 0, 1);
    free(j.rows);
    free(j.qrow);
    *out = q;
    return INF_OK;
}

void cpu_qw_destroy(cpu_qw *q)
{
    if (!q)
        return;
    free(q->w);
    free(q->scale);
    free(q->wsum);
    free(q);
}

size_t cpu_qw_bytes(const cpu_qw *q)
{
    return (size_t)q->N64 * q->K4 * 4 + (size_t)q->N64 * (sizeof(float) + sizeof(int32_t));
}

cpu_mmq cpu_qw_args(const cpu_qw *q, const uint8_t *x, size_t ldx, const float *sx, float *y,
                    size_t ldy, int M)
{
    cpu_mmq a = {.x = x, .ldx = ldx, .sx = sx, .w = q->w, .sw = q->scale, .wsum = q->wsum,
                 .y = y, .ldy = ldy, .M = M, .N = q->N, .K4 = q->K4};
    return a;
}
