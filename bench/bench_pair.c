/* bench_pair: two models' single-sequence decode with their steps
 * interleaved in one process, so that a load on a shared machine hits both
 * alike (bench_engine's triad and decode of one model, then of the next, meet
 * different loads: bench_families' rounds swing by 2x). Each model decodes
 * from a 16-token prompt to 48 tokens, then starts again; every decode step
 * is timed. Prints, per model, the fastest, 20th-percentile and median step
 * and the weight GB/s they mean (weight bytes per token / step time), and the
 * second model's GB/s over the first's: with a common roofline, the ratio of
 * their roofline fractions (issue 19's family goal: at least 0.9 beside the
 * TinyLlama shape).
 *
 * --rows 1,2,3,4,5 instead times one model's steps of that many tokens of
 * one sequence, logits on every row (a speculative verification of R - 1
 * drafts is R rows), interleaved in the same way, and prints each step's
 * cost over the first size's.
 *
 * --quantization int8|int4 runs both models so (a GPTQ / AWQ checkpoint's
 * own codes with int4, as `serve` loads it).
 *
 *   bench_pair --model A --beside B [--steps 100] [--kernels auto] [--threads N]
 *   bench_pair --model A --rows 1,2,3,4,5 [--steps 100] [...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/args.h"
#include "app/backend.h"
#include "cpu/backend.h"
#include "engine/batch.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "engine/smp.h"

enum { PROMPT = 16, MAX_LEN = 48, MAX_ROWS = 8, MAX_SIDES = 8 };

typedef struct side {
    const char *dir;
    model *m;
    be_backend *be;
    kv_pool *kv;
    batch_builder *bb;
    float *logits;
    kv_seq seq;
    int done, V;
    int rows;  /* tokens per timed step, each with logits */
    int32_t next;
    double bytes;
    double *t; /* step times */
    int nt;
} side;

static int side_open(side *s, const char *kernels, int quant, int threads, int steps,
                     inf_err *err)
{
    app_backend_config bc = app_backend_config_default(); /* loaded as serve loads it */
    bc.quant = quant;
    model_load_opts lo = app_backend_load_opts(&bc);
    int rc = model_load_with(s->dir, &lo, &s->m, err);
    if (rc)
        return rc;
    cpu_config cc = cpu_config_default();
    cc.kernels = kernels;
    cc.quant = quant;
    cc.n_threads = threads;
    cc.max_tokens = MAX_LEN;
    cc.max_context = MAX_LEN + MAX_ROWS;
    cc.layer_need = model_layer_need; /* as serve does */
    cc.layer_packed = model_layer_packed;
    cc.layer_ctx = s->m;
    cc.num_blocks = (MAX_LEN + MAX_ROWS + cc.block_size - 1) / cc.block_size + 1;
    kv_config kc = {.num_blocks = cc.num_blocks, .block_size = cc.block_size};
    batch_limits bl = {.max_tokens = MAX_LEN, .max_seqs = 1, .max_rows = MAX_ROWS,
                       .max_blocks = cc.num_blocks};
    if ((rc = cpu_backend_create(s->m, &cc, &s->be, err)) || (rc = kv_create(&kc, &s->kv, err)) ||
        (rc = batch_create(&bl, &s->bb, err)))
        return rc;
    s->V = s->m->cfg.vocab_size;
    s->bytes = (double)cpu_backend_weight_bytes(s->be);
    s->logits = malloc(sizeof(float) * (size_t)s->V * MAX_ROWS);
    s->t = malloc(sizeof(double) * (size_t)steps);
    if (!s->logits || !s->t)
        return inf_fail(err, INF_ERR_NOMEM, "bench_pair: out of memory");
    return INF_OK;
}

static void side_close(side *s)
{
    be_destroy(s->be);
    kv_destroy(s->kv);
    batch_destroy(s->bb);
    model_destroy(s->m);
    free(s->logits);
    free(s->t);
}

/* One forward of n tokens: a prompt (logits for its last token), or the
 * last greedy token and n - 1 more after it (logits on every row). */
static int side_step(side *s, int n, int prompt, inf_err *err)
{
    int32_t tok[PROMPT > MAX_ROWS ? PROMPT : MAX_ROWS];
    for (int i = 0; i < n; i++)
        tok[i] = !prompt && i == 0 ? s->next : 3 + (int32_t)((i * 7919u) % (unsigned)(s->V - 3));
    batch_reset(s->bb);
    if (kv_seq_reserve(s->kv, &s->seq, s->done + n))
        return inf_fail(err, INF_ERR_NOSPACE, "bench_pair: KV pool too small");
    int t0 = batch_add_seq(s->bb, s->kv, &s->seq, tok, s->done, n);
    for (int i = prompt ? n - 1 : 0; t0 >= 0 && i < n; i++)
        if (batch_add_logits(s->bb, t0 + i) < 0)
            t0 = -1;
    if (t0 < 0)
        return inf_fail(err, INF_ERR_INVALID, "bench_pair: the step does not fit its batch");
    s->done += n;
    int rc = be_forward(s->be, batch_get(s->bb), s->logits, err);
    if (!rc)
        s->next = smp_argmax(s->logits, s->V);
    return rc;
}

/* A timed decode step, after a new prompt when the sequence is full. */
static int side_decode(side *s, int timed, inf_err *err)
{
    int rc;
    if (s->done == 0 || s->done + s->rows > MAX_LEN) {
        kv_seq_release(s->kv, &s->seq);
        memset(&s->seq, 0, sizeof s->seq);
        s->done = 0;
        if ((rc = side_step(s, PROMPT, 1, err)))
            return rc;
    }
    double t0 = inf_now();
    rc = side_step(s, s->rows, 0, err);
    if (timed)
        s->t[s->nt++] = inf_now() - t0;
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Fastest, 20th-percentile and median step of a side, in seconds. */
static void side_quantiles(side *s, double q[3])
{
    qsort(s->t, (size_t)s->nt, sizeof(double), cmp_double);
    q[0] = s->t[0];
    q[1] = s->t[(s->nt - 1) / 5];
    q[2] = s->t[(s->nt - 1) / 2];
}

/* "1,2,4" into rows (each 1..MAX_ROWS); the count, or -1. */
static int parse_rows(const char *list, int rows[MAX_SIDES])
{
    int n = 0;
    for (const char *p = list; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > MAX_ROWS || n == MAX_SIDES || (*end && *end != ','))
            return -1;
        rows[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n > 0 ? n : -1;
}

static void report_pair(side s[2])
{
    double gbs[2][3];
    for (int i = 0; i < 2; i++) {
        double q[3];
        side_quantiles(&s[i], q);
        for (int j = 0; j < 3; j++)
            gbs[i][j] = s[i].bytes / q[j] / 1e9;
        printf("%s (%s kernels): %.0f MB/token; step fastest %.2f, p20 %.2f, median %.2f ms "
               "= %.1f, %.1f, %.1f GB/s of weights\n", s[i].dir, cpu_backend_kernels(s[i].be),
               s[i].bytes / 1e6, 1e3 * q[0], 1e3 * q[1], 1e3 * q[2], gbs[i][0], gbs[i][1],
               gbs[i][2]);
    }
    printf("second / first, weights GB/s: fastest %.3f, p20 %.3f, median %.3f\n",
           gbs[1][0] / gbs[0][0], gbs[1][1] / gbs[0][1], gbs[1][2] / gbs[0][2]);
}

static void report_rows(side *s, int n)
{
    double q0[3];
    printf("%s (%s kernels), %d timed steps of each size, interleaved:\n", s[0].dir,
           cpu_backend_kernels(s[0].be), s[0].nt);
    printf("| rows | fastest ms | p20 ms | median ms | over %d row%s: fastest | p20 | median |\n",
           s[0].rows, s[0].rows > 1 ? "s" : "");
    printf("|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        double q[3];
        side_quantiles(&s[i], q);
        if (i == 0)
            memcpy(q0, q, sizeof q0);
        printf("| %d | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f |\n", s[i].rows, 1e3 * q[0],
               1e3 * q[1], 1e3 * q[2], q[0] / q0[0], q[1] / q0[1], q[2] / q0[2]);
    }
}

int main(int argc, char **argv)
{
    const char *a_dir = NULL, *b_dir = NULL, *kernels = "auto", *rows_list = NULL, *qname = NULL;
    int steps = 100, threads = 0, help = 0;
    const arg_spec specs[] = {
        {"model", ARG_STR, &a_dir, "DIR", "first model (the baseline)"},
        {"beside", ARG_STR, &b_dir, "DIR", "second model, its steps interleaved with the first's"},
        {"rows", ARG_STR, &rows_list, "LIST", "instead of --beside: steps of these many rows "
                                              "of --model (e.g. 1,2,3,4,5; at most 8 each)"},
        {"steps", ARG_INT, &steps, "N", "timed decode steps per model (default 100)"},
        {"kernels", ARG_STR, &kernels, "NAME", "auto, avx512bf16, avx512, avx2, generic or generic-bf16"},
        {"threads", ARG_INT, &threads, "N", "threads (default: all cores)"},
        {"quantization", ARG_STR, &qname, "NAME", "none, int8 or int4 (both models)"},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]), rows[MAX_SIDES] = {1, 1}, n = 2;
    inf_err err = {0};
    if (args_parse(specs, n_specs, argc - 1, argv + 1, &help, &err) || help || !a_dir ||
        !b_dir == !rows_list || steps < 1 || steps > 100000 || cpu_quant_parse(qname) < 0 ||
        (rows_list && (n = parse_rows(rows_list, rows)) < 0)) {
        fprintf(stderr, "%s\nusage: bench_pair --model A (--beside B | --rows LIST) [options]\n",
                err.msg);
        args_help(stderr, specs, n_specs);
        return 2;
    }
    side s[MAX_SIDES];
    memset(s, 0, sizeof s);
    for (int i = 0; i < n; i++) {
        s[i].dir = rows_list || i == 0 ? a_dir : b_dir;
        s[i].rows = rows[i];
    }
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = side_open(&s[i], kernels, cpu_quant_parse(qname), threads, steps, &err);
    for (int i = 0; i < n && !rc; i++) /* pages the weights in */
        for (int k = 0; k < 4 && !rc; k++)
            rc = side_decode(&s[i], 0, &err);
    for (int k = 0; k < steps && !rc; k++)
        for (int i = 0; i < n && !rc; i++)
            rc = side_decode(&s[i], 1, &err);
    if (rc)
        fprintf(stderr, "bench_pair: %s\n", err.msg);
    else if (rows_list)
        report_rows(s, n);
    else
        report_pair(s);
    for (int i = 0; i < n; i++)
        if (s[i].m)
            side_close(&s[i]);
    return rc ? 1 : 0;
}
