/* cpu_q4w: quantizing and packing weights for the int4 kernels (q4.h), and
 * the activations' int8 rows with their group sums. */
#include "cpu/q4.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/qdef.h"

_Static_assert(CPU_Q4_GROUP == QDEF_Q4_GROUP, "int4 groups are qdef's");

static size_t q4_rec(const cpu_q4w *q)
{
    return q->zp ? CPU_Q4_RECZ : CPU_Q4_REC;
}

static size_t q4_bytes(const cpu_q4w *q)
{
    return (size_t)q->tiles * q->G * q4_rec(q);
}

/* Tiles [t0, t1) as a fresh matrix: every weight q = 0 (nibble 8, zero 8),
 * every scale 0. */
static void q4_fill(cpu_q4w *q, int t0, int t1)
{
    for (size_t r = (size_t)t0 * q->G; r < (size_t)t1 * q->G; r++) {
        memset(q->w + r * q4_rec(q), 0x88, 4 * 256);
        memset(q->w + r * q4_rec(q) + 4 * 256, 0, 64 * 2);
        if (q->zp)
            memset(q->w + r * q4_rec(q) + CPU_Q4_REC, 8, 64);
    }
}

/* fill 0: the caller writes every byte (q4_run fills a last tile's padding
 * rows, the rows themselves write the rest). */
static int q4_alloc(int N, int K, int zp, int fill, const char *name, cpu_q4w **out,
                    inf_err *err)
{
    *out = NULL;
    /* s_g is bounded per group, but the float chain is not: the limit only
     * keeps the sizes in int. */
    if (N <= 0 || K <= 0 || N > (1 << 30) || K > (1 << 30))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "int4: %s is %d x %d", name ? name : "a weight",
                        N, K);
    cpu_q4w *q = calloc(1, sizeof *q);
    if (!q)
        return inf_fail(err, INF_ERR_NOMEM, "int4: out of memory");
    q->N = N;
    q->K = K;
    q->G = (K + CPU_Q4_GROUP - 1) / CPU_Q4_GROUP;
    q->tiles = (N + CPU_Q4_ROWS - 1) / CPU_Q4_ROWS;
    q->zp = zp != 0;
    q->w = inf_alloc_big(q4_bytes(q));
    if (!q->w) {
        size_t mib = q4_bytes(q) >> 20;
        free(q);
        return inf_fail(err, INF_ERR_NOMEM, "int4: cannot allocate %zu MiB for %s", mib,
                        name ? name : "a weight");
    }
    if (fill)
        q4_fill(q, 0, q->tiles);
    *out = q;
    return INF_OK;
}

int cpu_q4w_alloc(int N, int K, int zp, const char *name, cpu_q4w **out, inf_err *err)
{
    return q4_alloc(N, K, zp, 1, name, out, err);
}

/* Byte and shift of row n's weight k of group g (see q4.h's layout). */
static uint8_t *q4_at(const cpu_q4w *q, int n, int g, int k, int *shift)
{
    int t = n / CPU_Q4_ROWS, j = (n % CPU_Q4_ROWS) / 16, r = n % 16;
    int s = k / 4, i = k % 4, p = s % 4;
    *shift = s >= 4 ? 4 : 0;
    return q->w + ((size_t)t * q->G + g) * q4_rec(q) + (size_t)j * 256 + p * 64 + r * 4 + i;
}

static uint16_t *q4_scale(const cpu_q4w *q, int n, int g)
{
    int t = n / CPU_Q4_ROWS;
    return (uint16_t *)(q->w + ((size_t)t * q->G + g) * q4_rec(q) + 4 * 256) + n % CPU_Q4_ROWS;
}

static uint8_t *q4_zero_at(const cpu_q4w *q, int n, int g)
{
    int t = n / CPU_Q4_ROWS;
    return q->w + ((size_t)t * q->G + g) * q4_rec(q) + CPU_Q4_REC + n % CPU_Q4_ROWS;
}

void cpu_q4w_set_zero(cpu_q4w *q, int n, int g, uint8_t z)
{
    if (q->zp)
        *q4_zero_at(q, n, g) = z;
}

int cpu_q4w_zero(const cpu_q4w *q, int n, int g)
{
    return q->zp ? *q4_zero_at(q, n, g) : 8;
}

void cpu_q4w_set_group(cpu_q4w *q, int n, int g, const uint8_t u[CPU_Q4_GROUP], uint16_t d)
{
    /* both nibbles of a byte are this row's: no other row's bits to keep.
     * Byte p * 64 + i holds k = 4p + i low and 4p + 16 + i high: eight k
     * at a time, their four bytes of p and of p + 1 */
    int sh;
    uint8_t *b = q4_at(q, n, g, 0, &sh);
    const uint64_t m = 0x0f0f0f0f0f0f0f0fu;
    for (int h = 0; h < 2; h++) {
        uint64_t lo, hi;
        memcpy(&lo, u + 8 * h, 8);
        memcpy(&hi, u + 16 + 8 * h, 8);
        uint64_t v = (lo & m) | (hi & m) << 4;
        uint32_t w0 = (uint32_t)v, w1 = (uint32_t)(v >> 32); /* little-endian: k first */
        memcpy(b + 128 * h, &w0, 4);
        memcpy(b + 128 * h + 64, &w1, 4);
    }
    *q4_scale(q, n, g) = d;
}

void cpu_q4w_get_group(const cpu_q4w *q, int n, int g, uint8_t u[CPU_Q4_GROUP], uint16_t *d)
{
    for (int k = 0; k < CPU_Q4_GROUP; k++) {
        int sh;
        const uint8_t *b = q4_at(q, n, g, k, &sh);
        u[k] = (uint8_t)((*b >> sh) & 0x0f);
    }
    *d = *q4_scale(q, n, g);
}

typedef struct q4_job {
    const model_tensor *t;
    const cpu_kern *k;
    const cpu_q4k *q4k; /* its quant: the rule at the kernel table's width */
    cpu_q4w *q;
    float *rows;     /* [threads][K] one row widened to f32 */
    uint8_t *codes;  /* [threads][G * 32] its q + 8         */
    uint16_t *scales; /* [threads][G]                        */
    atomic_int next; /* next tile: rows of one tile share bytes, so
                        a tile is one thread's                   */
} q4_job;

/* Row n of a 4-bit linear bound as its codes (model.h: GPTQ, AWQ, W4A16), as stored. */
static void q4_row_codes(q4_job *j, int n)
{
    cpu_q4w *q = j->q;
    const model_tensor *t = j->t;
    const uint8_t *codes = t->q4 + (size_t)n * (size_t)(q->K / 2);
    for (int g = 0; g < q->G; g++) {
        uint8_t u[CPU_Q4_GROUP];
        size_t b = (size_t)n * q->G + g;
        qdef_q4_codes(codes, q->K, g, 0, u); /* past K any code: activations are 0 */
        cpu_q4w_set_group(q, n, g, u, t->q4_scale[b]);
        cpu_q4w_set_zero(q, n, g, t->q4_zero[b]);
    }
}

static void q4_row(q4_job *j, int t, int n)
{
    cpu_q4w *q = j->q;
    if (j->t->q4) {
        q4_row_codes(j, n);
        return;
    }
    float *row = j->rows + (size_t)t * q->K;
    uint8_t *u = j->codes + (size_t)t * q->G * CPU_Q4_GROUP;
    uint16_t *d = j->scales + (size_t)t * q->G;
    size_t es = inf_dtype_size(j->t->dtype);
    j->k->to_f32((const char *)j->t->data + (size_t)n * q->K * es, j->t->dtype, row, q->K);
    j->q4k->quant(row, q->K, u, d);
    for (int g = 0; g < q->G; g++)
        cpu_q4w_set_group(q, n, g, u + g * CPU_Q4_GROUP, d[g]);
}

static void q4_run(void *ctx, int t, int nt)
{
    q4_job *j = ctx;
    (void)nt;
    for (;;) {
        int tile = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (tile >= j->q->tiles)
            break;
        /* the rows below write every byte of their records (codes, scale,
         * zero); a last tile's padding rows are filled here */
        if ((tile + 1) * CPU_Q4_ROWS > j->q->N)
            q4_fill(j->q, tile, tile + 1);
        for (int n = tile * CPU_Q4_ROWS; n < j->q->N && n < (tile + 1) * CPU_Q4_ROWS; n++)
            q4_row(j, t, n);
    }
}

int cpu_q4w_create(const model_tensor *t, const cpu_kern *k, const cpu_q4k *k4, cpu_pool *pool,
                   cpu_q4w **out,
                   inf_err *err)
{
    *out = NULL;
    if (t->rows > INT32_MAX || t->cols > INT32_MAX)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "int4: %s is too large",
                        t->name ? t->name : "a weight");
    if (t->q4 && t->cols % 2)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "int4: %s has %lld inputs; codes come in pairs",
                        t->name ? t->name : "a weight", (long long)t->cols);
    /* zero points only where one is not 8: a symmetric checkpoint's codes
     * (every zero 8) are the symmetric layout's, without the zero bytes */
    int zp = 0;
    for (size_t i = 0; t->q4 && !zp && i < (size_t)t->rows * (size_t)((t->cols + 31) / 32); i++)
        zp = t->q4_zero[i] != 8;
    cpu_q4w *q;
    int rc = q4_alloc((int)t->rows, (int)t->cols, zp, 0, t->name, &q, err);
    if (rc)
        return rc;
    int nt = pool ? cpu_pool_size(pool) : 1;
    q4_job j = {.t = t, .k = k, .q4k = k4, .q = q,
                .rows = malloc((size_t)nt * q->K * sizeof(float)),
                .codes = malloc((size_t)nt * q->G * CPU_Q4_GROUP),
                .scales = malloc((size_t)nt * q->G * sizeof(uint16_t))};
    if (!j.rows || !j.codes || !j.scales) {
        free(j.rows), free(j.codes), free(j.scales);
        cpu_q4w_destroy(q);
        return inf_fail(err, INF_ERR_NOMEM, "int4: out of memory");
    }
    q->perm = t->q4 ? t->q4_perm : NULL;
    atomic_init(&j.next, 0);
    if (pool)
        cpu_pool_run(pool, q4_run, &j);
    else
        q4_run(&j, 0, 1);
    free(j.rows), free(j.codes), free(j.scales);
    *out = q;
    return INF_OK;
}

void cpu_q4w_destroy(cpu_q4w *q)
{
    if (!q)
        return;
    free(q->w);
    free(q);
}

size_t cpu_q4w_bytes(const cpu_q4w *q)
{
    return q4_bytes(q);
}

/* qx's zeros past K and group sums. */
static void q4_act_sums(int8_t *qx, int K, int32_t *xs8)
{
    int G = (K + CPU_Q4_GROUP - 1) / CPU_Q4_GROUP;
    memset(qx + K, 0, (size_t)(G * CPU_Q4_GROUP - K));
    for (int g = 0; g < G; g++) {
        int32_t sum = 0;
        for (int i = 0; i < CPU_Q4_GROUP; i++)
            sum += qx[g * CPU_Q4_GROUP + i];
        xs8[g] = 8 * sum;
    }
}

float cpu_q4_quant_act(const cpu_kern *k, const float *x, int K, int8_t *qx, int32_t *xs8)
{
    float s = k->quant(x, K, qx, 0);
    q4_act_sums(qx, K, xs8);
    return s;
}

void cpu_q4_gather_act(const int8_t *qx, const int32_t *perm, int K, int8_t *out, int32_t *xs8)
{
    for (int j = 0; j < K; j++)
        out[j] = qx[perm[j]];
    q4_act_sums(out, K, xs8);
}

cpu_mm4 cpu_q4w_args(const cpu_q4w *q, const int8_t *x, size_t ldx, const int32_t *xs8,
                     size_t ldxs, const float *sx, float *y, size_t ldy, int M)
{
    cpu_mm4 a = {.x = x, .ldx = ldx, .xs8 = xs8, .ldxs = ldxs, .sx = sx, .w = q->w, .y = y,
                 .ldy = ldy, .M = M, .N = q->N, .G = q->G, .zp = q->zp};
    return a;
}

static int q4_has_vnni(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

const cpu_q4k *cpu_q4k_select(const char *kern_name)
{
    /* the int4 tables need what the cpu_kern table of that name needs */
    const cpu_kern *k = cpu_kern_select(kern_name);
    if (!k)
        return NULL;
    /* avx512bf16 (vdpbf16ps for bf16 weights) is chosen only with VNNI: its
     * int4 matmuls are the VNNI ones (every table gives the same integer sums) */
    if (!strcmp(k->name, "avx512bf16"))
        return &cpu_q4k_avx512_vnni;
    if (!strcmp(k->name, "avx512"))
        return q4_has_vnni() ? &cpu_q4k_avx512_vnni : &cpu_q4k_avx512;
    if (!strcmp(k->name, "avx2"))
        return &cpu_q4k_avx2;
    return &cpu_q4k_generic;
}
