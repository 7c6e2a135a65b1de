/* bench_engine: the CPU engine's speed, each figure next to the machine's own
 * limit measured in the same round (these VMs swing 2-4x within minutes):
 *
 *   limits: memory bandwidth (STREAM-like triad, best of 3 passes) and peak
 *           arithmetic (register-only FMA loop; a bf16 dot-product loop too
 *           where the CPU has AVX512_BF16)
 *   engine: single-sequence decode, prefill of a 512-token prompt, decode at
 *           batch 8 and 32 (tokens/s)
 *
 * decode is reported as a fraction of bandwidth (tokens/s x weight bytes per
 * token / triad bandwidth), prefill and batches as a fraction of peak FLOP/s.
 * Rounds interleave limits and figures; the table shows medians.
 *
 * With --quantization int8 (or int4, or int8,int4) the same four engine
 * figures are also taken with quantized weights (a backend per scheme) in the
 * same rounds, and reported with their ratio to the weights as stored, round
 * by round; the quantized limits are the scheme's weight bytes and the
 * vpdpbusd loop's int8 ops/s.
 *
 *   bench_engine --model DIR [--rounds 3] [--threads N] [--kernels auto] [--json FILE]
 *                [--decode-steps 32] [--batch-steps 16 (0: no batch figures)] [--prefill 512]
 *                [--quantization int8[,int4]] */
#include <cJSON.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cpu/backend.h"
#include "cpu/pool.h"
#include "cpu/q4.h"
#include "engine/batch.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "engine/smp.h"
#include "app/args.h"

enum { PROMPT = 16, N_FIG = 6 };
static const char *fig_names[N_FIG] = {"triad_gbs", "peak_gflops", "decode_1_tps",
                                       "prefill_tps", "decode_8_tps", "decode_32_tps"};

/* ---- machine limits -------------------------------------------------- */

typedef struct triad_job {
    float *a, *b, *c;
    size_t n;
} triad_job;

static void triad_run(void *ctx, int t, int nt)
{
    triad_job *j = ctx;
    size_t lo = j->n * (size_t)t / (size_t)nt, hi = j->n * (size_t)(t + 1) / (size_t)nt;
    for (size_t i = lo; i < hi; i++)
        j->a[i] = j->b[i] + 3.0f * j->c[i];
}

/* Best of 3 passes, in GB/s counting 3 arrays as STREAM does. */
static double triad(cpu_pool *pool, triad_job *j)
{
    double best = 0;
    for (int pass = 0; pass < 3; pass++) {
        double t0 = inf_now();
        cpu_pool_run(pool, triad_run, j);
        double gbs = 3.0 * j->n * sizeof(float) / (inf_now() - t0) / 1e9;
        if (gbs > best)
            best = gbs;
    }
    return best;
}

enum { FMA_ITERS = 20 * 1000 * 1000 };

/* 24 independent FMA chains: enough to cover 2 ports x 4 cycles latency. */
__attribute__((target("avx512f"))) static float fma_avx512(void)
{
    __m512 acc[24], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    for (int i = 0; i < 24; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < FMA_ITERS; it++)
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    __m512 s = acc[0];
    for (int i = 1; i < 24; i++)
        s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float fma_avx2(void)
{
    __m256 acc[12], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < FMA_ITERS; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    float out[8];
    __m256 s = acc[0];
    for (int i = 1; i < 12; i++)
        s = _mm256_add_ps(s, acc[i]);
    _mm256_storeu_ps(out, s);
    return out[0];
}

/* vdpbf16ps: 32 bf16 products into 16 f32 lanes, 64 FLOP per instruction. */
__attribute__((target("avx512f,avx512bf16"))) static float bf16dot_avx512(void)
{
    __m512 acc[24];
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f80);
    for (int i = 0; i < 24; i++)
        acc[i] = _mm512_setzero_ps();
    for (long it = 0; it < FMA_ITERS; it++)
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < 24; i++)
        s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

/* vpdpbusd: 64 int8 products into 16 int32 lanes, 128 ops per instruction.
 * Written in assembly: GCC spills a 24-register array of __m512i here, and
 * the loop then measured 448 GOP/s where the instruction does about 1200. */
__attribute__((target("avx512f"))) static float vnni_avx512(void)
{
    long n = FMA_ITERS;
    int out;
    __asm__ volatile(
        "vpternlogd $0xff, %%zmm0, %%zmm0, %%zmm0\n\t"
        "vpabsb %%zmm0, %%zmm1\n\t"
#define Z(i) "vpxord %%zmm" #i ", %%zmm" #i ", %%zmm" #i "\n\t"
        Z(2) Z(3) Z(4) Z(5) Z(6) Z(7) Z(8) Z(9) Z(10) Z(11) Z(12) Z(13)
        Z(14) Z(15) Z(16) Z(17) Z(18) Z(19) Z(20) Z(21) Z(22) Z(23) Z(24) Z(25)
#undef Z
        "1:\n\t"
#define D(i) "vpdpbusd %%zmm1, %%zmm1, %%zmm" #i "\n\t"
        D(2) D(3) D(4) D(5) D(6) D(7) D(8) D(9) D(10) D(11) D(12) D(13)
        D(14) D(15) D(16) D(17) D(18) D(19) D(20) D(21) D(22) D(23) D(24) D(25)
#undef D
        "dec %1\n\t"
        "jnz 1b\n\t"
        "vmovd %%xmm2, %0\n\t"
        : "=r"(out), "+r"(n)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",
          "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "cc");
    return (float)out;
}

typedef struct peak_job {
    int kind; /* 0 avx512 fma, 1 avx2 fma, 2 avx512 bf16 dot, 3 avx512 vnni */
    float sink[64];
} peak_job;

static void peak_run(void *ctx, int t, int nt)
{
    peak_job *j = ctx;
    (void)nt;
    j->sink[t] = j->kind == 0   ? fma_avx512()
                 : j->kind == 1 ? fma_avx2()
                 : j->kind == 2 ? bf16dot_avx512()
                                : vnni_avx512();
}

/* GFLOP/s of all threads running the register-only loop. */
static double peak(cpu_pool *pool, int kind)
{
    peak_job j = {.kind = kind};
    double t0 = inf_now();
    cpu_pool_run(pool, peak_run, &j);
    double dt = inf_now() - t0;
    double per_iter = kind == 0 ? 24 * 16 * 2 : kind == 1 ? 12 * 8 * 2 : kind == 2 ? 24 * 32 * 2
                                                                              : 24 * 64 * 2;
    return per_iter * FMA_ITERS * cpu_pool_size(pool) / dt / 1e9;
}

/* ---- engine figures ---------------------------------------------------- */

typedef struct eng {
    const model *m;
    be_backend *be;
    kv_pool *kv;
    int V, max_tokens, per_seq_blocks;
    batch_builder *bb;
    int32_t *tok;          /* [max_tokens] one sequence's new tokens */
    float *logits;
    unsigned seed;
} eng;

static int32_t rand_tok(eng *e)
{
    e->seed = e->seed * 1103515245u + 12345u;
    return 3 + (int32_t)((e->seed >> 8) % (unsigned)(e->V - 3));
}

/* One forward over B sequences each adding n tokens (positions from
 * done[s]); logits for each sequence's last token; next tokens greedy. */
static int step(eng *e, kv_seq *seqs, int *done, int32_t *next, int B, int n, inf_err *err)
{
    batch_reset(e->bb);
    for (int s = 0; s < B; s++) {
        if (kv_seq_reserve(e->kv, &seqs[s], done[s] + n))
            return inf_fail(err, INF_ERR_NOSPACE, "bench: KV pool too small");
        for (int i = 0; i < n; i++)
            e->tok[i] = n == 1 ? next[s] : (done[s] + i == 0 ? 1 : rand_tok(e));
        int t0 = batch_add_seq(e->bb, e->kv, &seqs[s], e->tok, done[s], n);
        if (t0 < 0 || batch_add_logits(e->bb, t0 + n - 1) < 0)
            return inf_fail(err, INF_ERR_INVALID, "bench: the step does not fit its batch");
        done[s] += n;
    }
    int rc = be_forward(e->be, batch_get(e->bb), e->logits, err);
    for (int s = 0; s < B && !rc; s++)
        next[s] = smp_argmax(e->logits + (size_t)s * e->V, e->V);
    return rc;
}

/* Decode tokens/s at batch B: prompts of PROMPT tokens, then `steps` timed
 * decode steps with every sequence in each. */
static int decode(eng *e, int B, int steps, double *tps, inf_err *err)
{
    kv_seq seqs[64] = {{0}};
    int done[64] = {0};
    int32_t next[64];
    int rc = step(e, seqs, done, next, B, PROMPT, err);
    double t0 = inf_now();
    for (int i = 0; i < steps && !rc; i++)
        rc = step(e, seqs, done, next, B, 1, err);
    *tps = (double)B * steps / (inf_now() - t0);
    for (int s = 0; s < B; s++)
        kv_seq_release(e->kv, &seqs[s]);
    return rc;
}

static int prefill(eng *e, int n, double *tps, inf_err *err)
{
    kv_seq seq = {0};
    int done = 0;
    int32_t next;
    double t0 = inf_now();
    int rc = step(e, &seq, &done, &next, 1, n, err);
    *tps = n / (inf_now() - t0);
    kv_seq_release(e->kv, &seq);
    return rc;
}

/* ---- reporting ---------------------------------------------------------- */

static double median(double *v, int n)
{
    double s[64];
    memcpy(s, v, sizeof(double) * (size_t)n);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
            double t = s[j];
            s[j] = s[j - 1];
            s[j - 1] = t;
        }
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static void cpu_name(char *out, size_t len)
{
    snprintf(out, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                snprintf(out, len, "%s", p + 2);
                out[strcspn(out, "\n")] = 0;
            }
            break;
        }
    if (f)
        fclose(f);
}

static long peak_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* FLOPs of one token at context length ctx (matmuls + attention), with or
 * without the LM head. */
static double token_flops(const model_config *c, int ctx, int lm_head)
{
    double D = c->hidden_size, F = c->intermediate_size, q = (double)c->n_heads * c->head_dim,
           kv = (double)c->n_kv_heads * c->head_dim;
    double layer = 2 * (D * q + 2 * D * kv + q * D + 3 * D * F) + 4.0 * ctx * q;
    return c->n_layers * layer + (lm_head ? 2.0 * c->vocab_size * D : 0);
}

enum { NQ_MAX = 2 }; /* quantized schemes measured beside the stored weights */

/* "int8", "int4", "int8,int4" ("" or "none": no scheme) into qs and names;
 * the count, or -1 for anything else. */
static int parse_quant(const char *list, int *qs, const char **names)
{
    int n = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        int q = len != 4                  ? -1
                : !strncmp(p, "int8", 4) ? CPU_QUANT_INT8
                : !strncmp(p, "int4", 4) ? CPU_QUANT_INT4
                : !strncmp(p, "none", 4) ? CPU_QUANT_NONE : -1;
        if (q < 0 || (q != CPU_QUANT_NONE && n == NQ_MAX))
            return -1;
        if (q != CPU_QUANT_NONE) {
            names[n] = q == CPU_QUANT_INT8 ? "int8" : "int4";
            qs[n++] = q;
        }
        p += len + (p[len] == ',');
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *json = NULL, *quant = "", *kernels = "auto";
    int rounds = 3, threads = 0, dsteps = 32, bsteps = 16, pre = 512, help = 0;
    const arg_spec specs[] = {
        {"model", ARG_STR, &dir, "DIR", "model directory"},
        {"rounds", ARG_INT, &rounds, "N", "rounds of limits + figures (default 3)"},
        {"threads", ARG_INT, &threads, "N", "threads (default: all cores)"},
        {"kernels", ARG_STR, &kernels, "NAME", "auto, avx512bf16, avx512, avx2, generic or generic-bf16 (default auto)"},
        {"json", ARG_STR, &json, "FILE", "write results as JSON"},
        {"decode-steps", ARG_INT, &dsteps, "N", "timed single-sequence decode steps (default 32)"},
        {"batch-steps", ARG_INT, &bsteps, "N", "timed decode steps at batch 8 and 32 (default 16; 0: not measured)"},
        {"prefill", ARG_INT, &pre, "N", "prompt tokens for the prefill figure (default 512)"},
        {"quantization", ARG_STR, &quant, "NAME", "int8, int4 or int8,int4: also measure those side by side"},
    };
    inf_err err = {0};
    int qs[NQ_MAX], nq = 0;
    const char *qname[NQ_MAX];
    if (args_parse(specs, 9, argc - 1, argv + 1, &help, &err) || help || !dir || rounds < 1 ||
        rounds > 64 || bsteps < 0 || pre < PROMPT || pre > 4096 || (nq = parse_quant(quant, qs, qname)) < 0) {
        fprintf(stderr, "%s\nusage: bench_engine --model DIR [options]\n", err.msg);
        args_help(stderr, specs, 9);
        return 2;
    }
    double quant_s[NQ_MAX] = {0}; /* creating a quantized backend: reading and quantizing */
    be_backend *qbe[NQ_MAX] = {NULL};
    model *m = NULL;
    cpu_pool *pool = NULL;
    eng e = {.seed = 99};
    triad_job tj = {.n = (size_t)48 << 20}; /* 3 x 192 MiB: far beyond the caches */
    int rc = model_load(dir, &m, &err);
    if (rc)
        goto done;
    const model_config *c = &m->cfg;
    int ctx = PROMPT + (dsteps > bsteps ? dsteps : bsteps) + 1;
    if (ctx < pre)
        ctx = pre;
    cpu_config cc = cpu_config_default();
    cc.n_threads = threads;
    cc.kernels = kernels;
    cc.max_tokens = pre > 32 * PROMPT ? pre : 32 * PROMPT;
    cc.max_context = ctx;
    e.per_seq_blocks = (ctx + cc.block_size - 1) / cc.block_size;
    cc.num_blocks = 32 * e.per_seq_blocks + 1;
    kv_config kc = {.num_blocks = cc.num_blocks, .block_size = cc.block_size};
    if ((rc = cpu_backend_create(m, &cc, &e.be, &err)) || (rc = kv_create(&kc, &e.kv, &err)) ||
        (rc = cpu_pool_create(threads, &pool, &err)))
        goto done;
    for (int q = 0; q < nq; q++) {
        cpu_config qc = cc;
        qc.quant = qs[q];
        double t0 = inf_now();
        if ((rc = cpu_backend_create(m, &qc, &qbe[q], &err)))
            goto done;
        quant_s[q] = inf_now() - t0;
    }
    e.m = m;
    e.V = c->vocab_size;
    e.max_tokens = cc.max_tokens;
    e.tok = malloc(sizeof(int32_t) * cc.max_tokens);
    batch_limits bl = {.max_tokens = cc.max_tokens, .max_seqs = 64, .max_rows = 64,
                       .max_blocks = e.per_seq_blocks};
    if ((rc = batch_create(&bl, &e.bb, &err)))
        goto done;
    e.logits = malloc(sizeof(float) * (size_t)64 * e.V);
    tj.a = malloc(tj.n * sizeof(float));
    tj.b = malloc(tj.n * sizeof(float));
    tj.c = malloc(tj.n * sizeof(float));
    if (!e.tok || !e.logits || !tj.a || !tj.b || !tj.c) {
        rc = inf_fail(&err, INF_ERR_NOMEM, "bench: out of memory");
        goto done;
    }
    memset(tj.a, 0, tj.n * sizeof(float));
    for (size_t i = 0; i < tj.n; i++)
        tj.b[i] = 1.0f, tj.c[i] = 2.0f;
    __builtin_cpu_init();
    int have512 = __builtin_cpu_supports("avx512f"), have_bf16 = 0;
#if defined(__GNUC__) && __GNUC__ >= 12
    have_bf16 = __builtin_cpu_supports("avx512bf16");
#endif
    int peak_kind = have512 ? 0 : 1, have_vnni = __builtin_cpu_supports("avx512vnni");
    double wbytes = (double)cpu_backend_weight_bytes(e.be);
    double fl_pre = 0;
    for (int p = 0; p < pre; p++)
        fl_pre += token_flops(c, p + 1, p == pre - 1);
    double fl_b8 = 0, fl_b32 = 0; /* per decode token, average context */
    fl_b8 = token_flops(c, PROMPT + bsteps / 2, 1);
    fl_b32 = fl_b8;
    {
        double warm;
        if ((rc = decode(&e, 1, 2, &warm, &err))) /* pages in the weights */
            goto done;
    }
    double fig[N_FIG][64] = {{0}}, frac[4][64] = {{0}}, bf16peak[64]; /* batch figures stay 0 when not measured */
    /* per scheme: decode 1, prefill, decode 8, decode 32; their ratio to the
     * stored weights' figure of the same round; fractions of the limits */
    static double qfig[NQ_MAX][4][64], qratio[NQ_MAX][4][64], qfrac[NQ_MAX][4][64];
    double vnnipeak[64], qbytes[NQ_MAX];
    for (int q = 0; q < nq; q++)
        qbytes[q] = (double)cpu_backend_weight_bytes(qbe[q]);
    fprintf(stderr, "bench: %s, %s kernels, %d threads, %d rounds\n", dir,
            cpu_backend_kernels(e.be), cpu_pool_size(pool), rounds);
    for (int r = 0; r < rounds; r++) {
        fig[0][r] = triad(pool, &tj);
        fig[1][r] = peak(pool, peak_kind);
        bf16peak[r] = have_bf16 ? peak(pool, 2) : 0;
        if ((rc = decode(&e, 1, dsteps, &fig[2][r], &err)) ||
            (rc = prefill(&e, pre, &fig[3][r], &err)) ||
            (bsteps && (rc = decode(&e, 8, bsteps, &fig[4][r], &err))) ||
            (bsteps && (rc = decode(&e, 32, bsteps, &fig[5][r], &err))))
            goto done;
        frac[0][r] = fig[2][r] * wbytes / (fig[0][r] * 1e9);
        frac[1][r] = fig[3][r] * (fl_pre / pre) / (fig[1][r] * 1e9);
        frac[2][r] = fig[4][r] * fl_b8 / (fig[1][r] * 1e9);
        frac[3][r] = fig[5][r] * fl_b32 / (fig[1][r] * 1e9);
        fprintf(stderr, "round %d: triad %.1f GB/s, peak %.0f GFLOP/s, decode %.2f tok/s, "
                "prefill %.1f tok/s, batch8 %.1f tok/s, batch32 %.1f tok/s\n", r + 1,
                fig[0][r], fig[1][r], fig[2][r], fig[3][r], fig[4][r], fig[5][r]);
        if (nq)
            vnnipeak[r] = have_vnni ? peak(pool, 3) : fig[1][r];
        for (int q = 0; q < nq; q++) {
            be_backend *stored = e.be;
            double (*qf)[64] = qfig[q];
            e.be = qbe[q];
            rc = decode(&e, 1, dsteps, &qf[0][r], &err);
            if (!rc)
                rc = prefill(&e, pre, &qf[1][r], &err);
            if (!rc && bsteps)
                rc = decode(&e, 8, bsteps, &qf[2][r], &err);
            if (!rc && bsteps)
                rc = decode(&e, 32, bsteps, &qf[3][r], &err);
            e.be = stored;
            if (rc)
                goto done;
            double fl[4] = {0, fl_pre / pre, fl_b8, fl_b32};
            for (int i = 0; i < 4; i++) {
                qratio[q][i][r] = fig[i + 2][r] > 0 ? qf[i][r] / fig[i + 2][r] : 0;
                qfrac[q][i][r] = i == 0 ? qf[0][r] * qbytes[q] / (fig[0][r] * 1e9)
                                        : qf[i][r] * fl[i] / (vnnipeak[r] * 1e9);
            }
            fprintf(stderr, "round %d %s: peak %.0f GOP/s, decode %.2f tok/s, prefill %.1f "
                    "tok/s, batch8 %.1f tok/s, batch32 %.1f tok/s\n", r + 1, qname[q],
                    vnnipeak[r], qf[0][r], qf[1][r], qf[2][r], qf[3][r]);
        }
    }
    long rss_kb = peak_rss_kb();
    struct stat st;
    double file_bytes = 0;
    {
        char path[4096];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        file_bytes = stat(path, &st) == 0 ? (double)st.st_size : (double)st_data_bytes(m->st);
    }
    double kv_bytes = (double)cc.num_blocks * cc.block_size * cpu_kv_bytes_per_token(m);
    double triad_bytes = 3.0 * tj.n * sizeof(float);
    double rss_budget = (file_bytes + kv_bytes) * 1.10;
    double rss_engine = rss_kb * 1024.0 - triad_bytes; /* the triad arrays are the bench's */

    char prefill_label[32]; /* the prompt length is an option */
    snprintf(prefill_label, sizeof prefill_label, "prefill, %d-token prompt", pre);
    const char *labels[N_FIG] = {"memory bandwidth (triad)", "peak FLOP/s (FMA loop)",
                                 "decode, 1 sequence", prefill_label,
                                 "decode, batch 8", "decode, batch 32"};
    const char *units[N_FIG] = {"GB/s", "GFLOP/s", "tok/s", "tok/s", "tok/s", "tok/s"};
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    printf("\ninferd engine benchmark: %s\n", dir);
    printf("machine: %s, %ld cores, %s kernels, %d threads; %d rounds, medians\n", cpu,
           sysconf(_SC_NPROCESSORS_ONLN), cpu_backend_kernels(e.be), cpu_pool_size(pool), rounds);
    printf("model: %d layers, hidden %d, %.0f MB of weights read per token (%s)\n\n",
           c->n_layers, c->hidden_size, wbytes / 1e6, inf_dtype_name(m->layers[0].wq.dtype));
    printf("| %-28s | %10s | %-8s | %-26s |\n", "figure", "median", "unit", "fraction of its limit");
    printf("|------------------------------|------------|----------|----------------------------|\n");
    for (int i = 0; i < N_FIG; i++) {
        if (!bsteps && i >= 4) /* batch figures not measured */
            continue;
        char f[64] = "";
        if (i >= 2)
            snprintf(f, sizeof f, "%.0f%% of %s", 100 * median(frac[i - 2], rounds),
                     i == 2 ? "bandwidth" : "peak FLOP/s");
        printf("| %-28s | %10.2f | %-8s | %-26s |\n", labels[i], median(fig[i], rounds), units[i], f);
    }
    if (have_bf16) /* the avx512bf16 table runs bf16 weights on it, two per product (hi + lo) */
        printf("| %-28s | %10.2f | %-8s | %-26s |\n", "bf16 dot peak (vdpbf16ps)",
               median(bf16peak, rounds), "GFLOP/s",
               strcmp(cpu_backend_kernels(e.be), "avx512bf16") == 0 &&
                       m->layers[0].wq.dtype == INF_BF16
                   ? "bf16 matmuls: 2 per product"
                   : "not used by these kernels");
    const char *const *qlabels = labels + 2; /* the four engine figures */
    for (int q = 0; q < nq; q++) {
        printf("\n%s weights (--quantization %s, %s kernels), same rounds: %.0f MB read per "
               "token, quantized at start in %.2f s; int8 peak (%s) %.0f GOP/s\n\n", qname[q],
               qname[q], qs[q] == CPU_QUANT_INT4 ? cpu_q4k_select("auto")->name
                                                 : cpu_backend_kernels(qbe[q]),
               qbytes[q] / 1e6, quant_s[q], have_vnni ? "vpdpbusd loop" : "no VNNI: the FMA loop",
               median(vnnipeak, rounds));
        printf("| %-28s | %10s | %-8s | %-12s | %-26s |\n", "figure", "median", "unit",
               "x as stored", "fraction of its limit");
        printf("|------------------------------|------------|----------|--------------|"
               "----------------------------|\n");
        for (int i = 0; i < 4; i++) {
            char f[64];
            snprintf(f, sizeof f, "%.0f%% of %s", 100 * median(qfrac[q][i], rounds),
                     i == 0 ? "bandwidth" : "int8 peak");
            printf("| %-28s | %10.2f | %-8s | %11.2fx | %-26s |\n", qlabels[i],
                   median(qfig[q][i], rounds), "tok/s", median(qratio[q][i], rounds), f);
        }
    }
    printf("\npeak RSS %.0f MB (engine, without the triad arrays); weights file %.0f MB + KV pool "
           "%.0f MB + 10%% = %.0f MB\n", rss_engine / 1e6, file_bytes / 1e6, kv_bytes / 1e6,
           rss_budget / 1e6);

    if (json) {
        cJSON *root = cJSON_CreateObject(), *mach = cJSON_AddObjectToObject(root, "machine");
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        time_t now = time(NULL);
        char date[64];
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        cJSON_AddStringToObject(root, "benchmark", "inferd engine (bench_engine)");
        cJSON_AddStringToObject(root, "date", date);
        cJSON_AddStringToObject(mach, "host", host);
        cJSON_AddStringToObject(mach, "cpu", cpu);
        cJSON_AddNumberToObject(mach, "cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
        cJSON_AddBoolToObject(mach, "avx512f", have512);
        cJSON_AddBoolToObject(mach, "avx512_bf16", have_bf16);
        cJSON_AddBoolToObject(mach, "avx512_vnni", have_vnni);
        cJSON_AddBoolToObject(mach, "avx2", __builtin_cpu_supports("avx2"));
        cJSON_AddStringToObject(mach, "device", "cpu");
        cJSON *mod = cJSON_AddObjectToObject(root, "model");
        cJSON_AddStringToObject(mod, "dir", dir);
        cJSON_AddNumberToObject(mod, "layers", c->n_layers);
        cJSON_AddNumberToObject(mod, "hidden", c->hidden_size);
        cJSON_AddNumberToObject(mod, "intermediate", c->intermediate_size);
        cJSON_AddNumberToObject(mod, "heads", c->n_heads);
        cJSON_AddNumberToObject(mod, "kv_heads", c->n_kv_heads);
        cJSON_AddNumberToObject(mod, "vocab", c->vocab_size);
        cJSON_AddStringToObject(mod, "dtype", inf_dtype_name(m->layers[0].wq.dtype));
        cJSON_AddNumberToObject(mod, "weight_bytes_per_token", wbytes);
        cJSON_AddNumberToObject(mod, "file_bytes", file_bytes);
        cJSON *set = cJSON_AddObjectToObject(root, "settings");
        cJSON_AddStringToObject(set, "kernels", cpu_backend_kernels(e.be));
        cJSON_AddNumberToObject(set, "threads", cpu_pool_size(pool));
        cJSON_AddNumberToObject(set, "rounds", rounds);
        cJSON_AddNumberToObject(set, "prompt_tokens_for_decode", PROMPT);
        cJSON_AddNumberToObject(set, "decode_steps", dsteps);
        cJSON_AddNumberToObject(set, "batch_steps", bsteps);
        cJSON_AddNumberToObject(set, "prefill_tokens", pre);
        cJSON_AddNumberToObject(set, "kv_block_size", cc.block_size);
        cJSON *per = cJSON_AddObjectToObject(root, "rounds");
        cJSON *med = cJSON_AddObjectToObject(root, "median");
        for (int i = 0; i < N_FIG; i++) {
            cJSON_AddItemToObject(per, fig_names[i], cJSON_CreateDoubleArray(fig[i], rounds));
            cJSON_AddNumberToObject(med, fig_names[i], median(fig[i], rounds));
        }
        if (have_bf16)
            cJSON_AddNumberToObject(med, "bf16_dot_peak_gflops", median(bf16peak, rounds));
        const char *fn[4] = {"decode_1_of_bandwidth", "prefill_of_peak", "decode_8_of_peak",
                             "decode_32_of_peak"};
        cJSON *fr = cJSON_AddObjectToObject(root, "fraction_of_limit_median");
        cJSON *frr = cJSON_AddObjectToObject(root, "fraction_of_limit_rounds");
        for (int i = 0; i < 4; i++) {
            cJSON_AddNumberToObject(fr, fn[i], median(frac[i], rounds));
            cJSON_AddItemToObject(frr, fn[i], cJSON_CreateDoubleArray(frac[i], rounds));
        }
        for (int q = 0; q < nq; q++) {
            const char *const *qn = fig_names + 2;
            cJSON *qo = cJSON_AddObjectToObject(root, qname[q]);
            cJSON_AddStringToObject(qo, "kernels", qs[q] == CPU_QUANT_INT4
                                                       ? cpu_q4k_select("auto")->name
                                                       : cpu_backend_kernels(qbe[q]));
            cJSON_AddNumberToObject(qo, "weight_bytes_per_token", qbytes[q]);
            cJSON_AddNumberToObject(qo, "quantize_at_start_s", quant_s[q]);
            cJSON_AddStringToObject(qo, "peak_kind", have_vnni ? "vpdpbusd" : "fma");
            cJSON_AddNumberToObject(qo, "peak_gops_median", median(vnnipeak, rounds));
            cJSON_AddItemToObject(qo, "peak_gops_rounds", cJSON_CreateDoubleArray(vnnipeak, rounds));
            cJSON *qm = cJSON_AddObjectToObject(qo, "median");
            cJSON *qr = cJSON_AddObjectToObject(qo, "rounds");
            cJSON *qx = cJSON_AddObjectToObject(qo, "ratio_to_stored_median");
            cJSON *qf = cJSON_AddObjectToObject(qo, "fraction_of_limit_median");
            for (int i = 0; i < 4; i++) {
                cJSON_AddNumberToObject(qm, qn[i], median(qfig[q][i], rounds));
                cJSON_AddItemToObject(qr, qn[i], cJSON_CreateDoubleArray(qfig[q][i], rounds));
                cJSON_AddNumberToObject(qx, qn[i], median(qratio[q][i], rounds));
                cJSON_AddNumberToObject(qf, qn[i], median(qfrac[q][i], rounds));
            }
        }
        cJSON *mem = cJSON_AddObjectToObject(root, "memory");
        cJSON_AddNumberToObject(mem, "peak_rss_bytes_engine", rss_engine);
        cJSON_AddNumberToObject(mem, "kv_pool_bytes", kv_bytes);
        cJSON_AddNumberToObject(mem, "budget_bytes", rss_budget);
        char *s = cJSON_Print(root);
        FILE *f = fopen(json, "w");
        if (!f || !s || fputs(s, f) < 0)
            rc = inf_fail(&err, INF_ERR_IO, "%s: cannot write", json);
        if (f)
            fclose(f);
        free(s);
        cJSON_Delete(root);
    }
done:
    if (rc)
        fprintf(stderr, "bench_engine: %s\n", err.msg);
    batch_destroy(e.bb);
    free(e.tok), free(e.logits);
    free(tj.a), free(tj.b), free(tj.c);
    cpu_pool_destroy(pool);
    kv_destroy(e.kv);
    be_destroy(e.be);
    for (int q = 0; q < NQ_MAX; q++)
        be_destroy(qbe[q]);
    model_destroy(m);
    return rc ? 1 : 0;
}
