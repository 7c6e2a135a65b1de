/* bench_cuda: the CUDA backend's speed, each figure beside the limit the
 * issue sets and the machine's own ceiling measured in the same run:
 *
 *   limits:  device-to-device copy bandwidth (bytes read + written per
 *            second, best of 10) and the bf16 GEMM rate through cuBLAS (bf16
 *            in, f32 accumulate and out, as the backend's GEMMs; best of 10)
 *            at 8192^3 and at the model's prefill shape
 *   decode1: one sequence, greedy on the device: time per token against the
 *            HBM roofline (bytes of weights a step reads / copy bandwidth);
 *            limit 85% of the roofline
 *   decode64: 64 sequences a step; limit 40x the single-sequence rate
 *   prefill: one prompt of --prefill tokens; model FLOP/s (matmuls + causal
 *            attention) against the GEMM rate; limit 60%
 *   spec:    greedy speculative decoding with --draft (k tokens a round, the
 *            draft on the same GPU) against plain greedy decode of one
 *            request; limit 1.8x. --spec-prompt gives its prompt as token
 *            ids (natural text the model continues as it was trained to;
 *            random ids make a draft model guess at noise)
 *   quantized: with --quantization int8,int4 the decode and prefill figures
 *            again for each scheme (batch-invariant), decode against the
 *            roofline of the scheme's own bytes (no limit set for them)
 *
 * Built only with `make CUDA=1`; run by scripts/gpu-check.
 *
 *   bench_cuda --model DIR [--draft DIR] [--json FILE] [--decode-steps 128]
 *              [--prefill 2048] [--spec-k 4] [--spec-tokens 256]
 *              [--spec-prompt "1 403 407 ..."] [--quantization int8,int4]
 *              [--wgmma FILE]
 *
 * --wgmma FILE: last, cuda_k_gemm_wg (Hopper's wgmma, not chosen by anything
 * yet) beside cuda_k_gemm and cuBLAS, its JSON to FILE (bench/cuda/gemms.h). */
#include <cJSON.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/backend.h"
#include "cuda/kern.h"
#include "cuda/plan.h"
#include "engine/model.h"
#include "app/args.h"
#include "bench/cuda/gemms.h"

enum { PROMPT = 32, BATCH = 64, BS = 16 };

/* o as JSON into path; 1, saying so, when it cannot be written. */
static int write_json(const cJSON *o, const char *path)
{
    char *txt = cJSON_Print(o);
    FILE *f = txt ? fopen(path, "w") : NULL;
    int ok = f && fputs(txt, f) >= 0;
    if (f && fclose(f))
        ok = 0;
    cJSON_free(txt);
    if (!ok)
        fprintf(stderr, "bench_cuda: cannot write %s\n", path);
    return !ok;
}

/* ---- machine limits ------------------------------------------------------------ */

/* Device-to-device copy of 1 GiB: bytes read + written per second (GB/s). */
static double copy_bandwidth(void)
{
    size_t n = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    TRY(cudaMalloc(&a, n));
    TRY(cudaMalloc(&b, n));
    TRY(cudaMemset(a, 1, n));
    TRY(cudaEventCreate(&e0));
    TRY(cudaEventCreate(&e1));
    double best = 0;
    for (int i = 0; i < 12; i++) {
        TRY(cudaEventRecord(e0, 0));
        TRY(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0));
        TRY(cudaEventRecord(e1, 0));
        TRY(cudaEventSynchronize(e1));
        float ms = 0;
        TRY(cudaEventElapsedTime(&ms, e0, e1));
        double gbs = 2.0 * (double)n / (ms * 1e-3) / 1e9;
        if (i >= 2 && gbs > best) /* two warm-ups */
            best = gbs;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return best;
}


/* y[M][N] = x[M][K] w[N][K]^T in bf16 with f32 accumulate and output, as
 * the backend calls it: TFLOP/s, best of 10 after warm-ups. */
static double gemm_rate(int M, int N, int K)
{
    cublasHandle_t h;
    void *y = NULL;
    cudaEvent_t e0, e1;
    TRY(cublasCreate(&h));
    uint16_t *x = dev_random_bf16((size_t)M * K, 1.0f, 7);
    uint16_t *w = dev_random_bf16((size_t)N * K, 0.05f, 11);
    TRY(cudaMalloc(&y, (size_t)M * N * 4));
    TRY(cudaEventCreate(&e0));
    TRY(cudaEventCreate(&e1));
    const float one = 1.0f, zero = 0.0f;
    double best = 0;
    for (int i = 0; i < 13; i++) {
        TRY(cudaEventRecord(e0, 0));
        TRY(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, CUDA_R_16BF, K, x,
                         CUDA_R_16BF, K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT));
        TRY(cudaEventRecord(e1, 0));
        TRY(cudaEventSynchronize(e1));
        float ms = 0;
        TRY(cudaEventElapsedTime(&ms, e0, e1));
        double tf = 2.0 * M * N * (double)K / (ms * 1e-3) / 1e12;
        if (i >= 3 && tf > best)
            best = tf;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
    cublasDestroy(h);
    return best;
}


/* ---- driving the backend ------------------------------------------------------------- */

/* Sequences on fixed block ranges; each holds ctx tokens of KV and the next
 * token to feed. */
typedef struct seqs {
    int n, per;          /* sequences, blocks each             */
    int ctx[BATCH];
    int32_t next[BATCH];
    int32_t *table;      /* [n][per]                           */
    int32_t *tok, *pos, *slot, *rows, *start, *len;
} seqs;

static void seqs_init(seqs *s, int n, int max_len, int first_block)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->per = (max_len + BS - 1) / BS;
    s->table = malloc((size_t)n * s->per * 4);
    for (int i = 0; i < n * s->per; i++)
        s->table[i] = first_block + i;
    size_t T = (size_t)n * (size_t)max_len + 8;
    s->tok = malloc(T * 4);
    s->pos = malloc(T * 4);
    s->slot = malloc(T * 4);
    s->rows = malloc(T * 4);
    s->start = malloc((size_t)(n + 1) * 4);
    s->len = malloc((size_t)n * 4);
}

static void seqs_free(seqs *s)
{
    free(s->table);
    free(s->tok);
    free(s->pos);
    free(s->slot);
    free(s->rows);
    free(s->start);
    free(s->len);
}

/* One forward: sequence i feeds cnt[i] tokens from toks[i] at positions
 * ctx[i].. (logits for the last `rows_each` of them), greedy on the device;
 * ids get one id per logit row. Returns the seconds it took. */
static double run(be_backend *be, seqs *s, const int32_t *const *toks, const int *cnt,
                  int rows_each, int32_t *ids)
{
    int T = 0, R = 0;
    for (int i = 0; i < s->n; i++) {
        s->start[i] = T;
        for (int j = 0; j < cnt[i]; j++, T++) {
            int p = s->ctx[i] + j;
            s->tok[T] = toks[i][j];
            s->pos[T] = p;
            s->slot[T] = s->table[i * s->per + p / BS] * BS + p % BS;
            if (j >= cnt[i] - rows_each)
                s->rows[R++] = T;
        }
        s->len[i] = s->ctx[i] + cnt[i];
    }
    s->start[s->n] = T;
    be_batch b = {.n_tokens = T, .tokens = s->tok, .positions = s->pos, .slots = s->slot,
                  .n_seqs = s->n, .seq_start = s->start, .seq_len = s->len,
                  .block_table = s->table, .max_blocks = s->per, .logit_rows = s->rows,
                  .n_logits = R};
    cuda_smp_row *smp = calloc((size_t)R, sizeof *smp);
    for (int i = 0; i < R; i++)
        smp[i].top_p = 1.0f; /* temperature 0: greedy */
    inf_err err = {0};
    double t0 = inf_now();
    if (be_submit(be, &b, smp, &err) || be_wait(be, &(be_out){.ids = ids}, &err)) {
        fprintf(stderr, "bench_cuda: forward: %s\n", err.msg);
        exit(1);
    }
    double dt = inf_now() - t0;
    free(smp);
    for (int i = 0; i < s->n; i++)
        s->ctx[i] += cnt[i];
    return dt;
}

/* Prefills every sequence with the same PROMPT tokens (one batch). */
static void prefill_all(be_backend *be, seqs *s, const int32_t *prompt)
{
    const int32_t *toks[BATCH];
    int cnt[BATCH];
    int32_t ids[BATCH];
    for (int i = 0; i < s->n; i++) {
        toks[i] = prompt;
        cnt[i] = PROMPT;
        s->ctx[i] = 0;
    }
    run(be, s, toks, cnt, 1, ids);
    for (int i = 0; i < s->n; i++)
        s->next[i] = ids[i];
}

/* steps decode steps of every sequence; seconds for all of them. */
static double decode(be_backend *be, seqs *s, int steps)
{
    const int32_t *toks[BATCH];
    int cnt[BATCH];
    int32_t ids[BATCH];
    double t = 0;
    for (int k = 0; k < steps; k++) {
        for (int i = 0; i < s->n; i++) {
            toks[i] = &s->next[i];
            cnt[i] = 1;
        }
        t += run(be, s, toks, cnt, 1, ids);
        for (int i = 0; i < s->n; i++)
            s->next[i] = ids[i];
    }
    return t;
}

/* The backend's GEMMs: cuBLAS, the batch-invariant kernels, or those with
 * wgmma for more than 64 rows (cuda_config.gemm_wgmma: --wgmma's figures). */
enum { INV_CUBLAS, INV_MMA, INV_WGMMA };

static be_backend *make(const model *m, int max_tokens, int num_blocks, int max_ctx, int inv,
                        int quant)
{
    cuda_config c = cuda_config_default();
    c.batch_invariant = inv != INV_CUBLAS;
    c.gemm_wgmma = inv == INV_WGMMA;
    c.quant = quant;
    c.max_tokens = max_tokens;
    c.max_seqs = BATCH;
    c.max_context = max_ctx;
    c.block_size = BS;
    c.num_blocks = num_blocks;
    be_backend *be = NULL;
    inf_err err = {0};
    if (cuda_backend_create(m, &c, &be, &err)) {
        fprintf(stderr, "bench_cuda: %s\n", err.msg);
        exit(1);
    }
    return be;
}

/* Bytes one decode step streams (the layers' matrices, bf16 or as quant
 * holds them, and the bf16 LM head) and the matmul parameters a prefill
 * token multiplies. */
static void model_sizes(const model *m, int quant, size_t *stream, double *params)
{
    cuda_shard sh;
    cuda_dims d;
    cuda_wlayout w;
    TRY(cuda_plan_shard(&m->cfg, 1, 0, &sh, NULL));
    cuda_limits lim = {.max_tokens = 1, .max_seqs = 1, .max_ctx = 1, .block_size = BS,
                       .quant = quant};
    TRY(cuda_plan_dims(&m->cfg, &sh, &lim, &d, NULL));
    cuda_plan_weights(&d, 0, &w);
    *stream = w.stream_bytes;
    *params = 0;
    for (int i = 0; i < CUDA_W_COUNT; i++) /* no LM head */
        *params += (double)w.w_rows[i] * (double)w.w_cols[i] * d.L;
}

/* Greedy speculative decoding of one request for `want` tokens: the draft
 * proposes k tokens one at a time, the target checks all of them in one
 * forward; returns tokens per second and the acceptance rate. */
static double speculate(be_backend *tgt, be_backend *dft, const int32_t *prompt, int k,
                        int want, double *accept)
{
    seqs st, sd;
    int max_len = PROMPT + want + 2 * k + 2;
    seqs_init(&st, 1, max_len, 1);
    seqs_init(&sd, 1, max_len, 1);
    int32_t ids[64], seq[4096];
    const int32_t *toks[1];
    int cnt[1];
    /* both models hold the prompt but its last token */
    toks[0] = prompt;
    cnt[0] = PROMPT - 1;
    run(tgt, &st, toks, cnt, 1, ids);
    run(dft, &sd, toks, cnt, 1, ids);
    memcpy(seq, prompt, PROMPT * 4);
    int n = PROMPT, drafted = 0, accepted = 0;
    double t0 = inf_now();
    while (n < PROMPT + want) {
        /* the draft catches up on what it has not seen, then drafts k */
        int32_t draft[64];
        toks[0] = seq + sd.ctx[0];
        cnt[0] = n - sd.ctx[0];
        run(dft, &sd, toks, cnt, 1, ids);
        draft[0] = ids[0];
        for (int i = 1; i < k; i++) {
            toks[0] = &draft[i - 1];
            cnt[0] = 1;
            run(dft, &sd, toks, cnt, 1, ids);
            draft[i] = ids[0];
        }
        /* the target checks seq[n-1], d1..dk: k+1 rows */
        int32_t check[65];
        check[0] = seq[n - 1];
        memcpy(check + 1, draft, (size_t)k * 4);
        toks[0] = check;
        cnt[0] = k + 1;
        run(tgt, &st, toks, cnt, k + 1, ids);
        int a = 0;
        while (a < k && draft[a] == ids[a])
            a++;
        memcpy(seq + n, draft, (size_t)a * 4);
        seq[n + a] = ids[a];
        drafted += k;
        accepted += a;
        n += a + 1;
        /* roll back: both caches keep only what the sequence holds */
        st.ctx[0] = n - 1;
        if (sd.ctx[0] > n - 1)
            sd.ctx[0] = n - 1;
    }
    double dt = inf_now() - t0;
    *accept = drafted ? (double)accepted / drafted : 0;
    seqs_free(&st);
    seqs_free(&sd);
    return (n - PROMPT) / dt;
}

/* Decode (1 and 64 sequences) and prefill figures of one kernel choice. */
typedef struct figs {
    double t1, t64, tps1, tps64, tp, pflops;
} figs;

static void measure(const model *m, int inv, int quant, const int32_t *prompt, int prefill,
                    int steps, double params, figs *f)
{
    int max_len = PROMPT + steps + 8;
    int per = (max_len + BS - 1) / BS, pre_blocks = (prefill + BS - 1) / BS;
    int blocks = BATCH * per + pre_blocks + 1;
    int max_tokens = prefill > BATCH * PROMPT ? prefill : BATCH * PROMPT;
    int max_ctx = prefill > max_len ? prefill : max_len;
    be_backend *be = make(m, max_tokens, blocks, max_ctx, inv, quant);

    /* decode, one sequence (warm-up first: captures the bucket's graph) */
    seqs s1;
    seqs_init(&s1, 1, max_len, 1);
    prefill_all(be, &s1, prompt);
    decode(be, &s1, 4);
    s1.ctx[0] = PROMPT;
    double t1 = decode(be, &s1, steps) / steps;
    /* decode, 64 sequences */
    seqs s64;
    seqs_init(&s64, BATCH, max_len, 1);
    prefill_all(be, &s64, prompt);
    decode(be, &s64, 4);
    for (int i = 0; i < BATCH; i++)
        s64.ctx[i] = PROMPT;
    double t64 = decode(be, &s64, steps) / steps;
    double tps1 = 1.0 / t1, tps64 = BATCH / t64;
    /* prefill */
    seqs sp;
    seqs_init(&sp, 1, prefill, 1 + BATCH * per);
    const int32_t *toks[1] = {prompt};
    int cnt[1] = {prefill};
    int32_t ids[64];
    run(be, &sp, toks, cnt, 1, ids); /* warm-up */
    sp.ctx[0] = 0;
    double tp = 1e30;
    for (int i = 0; i < 3; i++) {
        double t = run(be, &sp, toks, cnt, 1, ids);
        tp = t < tp ? t : tp;
        sp.ctx[0] = 0;
    }
    const model_config *c = &m->cfg;
    double attn = 2.0 * c->n_layers * c->n_heads * c->head_dim * (double)prefill * (prefill + 1);
    double pflops = (2.0 * params * prefill + attn) / tp / 1e12;

    f->t1 = t1;
    f->t64 = t64;
    f->tps1 = tps1;
    f->tps64 = tps64;
    f->tp = tp;
    f->pflops = pflops;
    seqs_free(&s1);
    seqs_free(&s64);
    seqs_free(&sp);
    be_destroy(be);
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *draft_dir = NULL, *json = NULL, *spec_text = NULL, *quants = "";
    const char *wg_json = NULL;
    int steps = 128, prefill = 2048, spec_k = 4, spec_tokens = 256, help = 0;
    const arg_spec specs[] = {
        {"model", ARG_STR, &dir, "DIR", "target model (bf16, e.g. Mistral-7B-shaped)"},
        {"draft", ARG_STR, &draft_dir, "DIR", "draft model for speculative decoding"},
        {"json", ARG_STR, &json, "FILE", "write results as JSON"},
        {"decode-steps", ARG_INT, &steps, "N", "decode steps timed (default 128)"},
        {"prefill", ARG_INT, &prefill, "N", "prompt tokens of the prefill figure (2048)"},
        {"spec-k", ARG_INT, &spec_k, "K", "draft tokens per round (4)"},
        {"spec-tokens", ARG_INT, &spec_tokens, "N", "tokens generated per spec run (256)"},
        {"spec-prompt", ARG_STR, &spec_text, "IDS",
         "the spec figure's prompt: at least 32 token ids, space-separated (default random)"},
        {"quantization", ARG_STR, &quants, "LIST",
         "also measure these schemes: int8, int4 or int8,int4 (default none)"},
        {"wgmma", ARG_STR, &wg_json, "FILE",
         "last, time the wgmma GEMM (Hopper) beside the others; its JSON to FILE"},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    inf_err err = {0};
    if (args_parse(specs, n_specs, argc - 1, argv + 1, &help, &err) || help || !dir) {
        if (!help)
            fprintf(stderr, "bench_cuda: %s\n", dir ? err.msg : "--model is required");
        args_help(help ? stdout : stderr, specs, n_specs);
        return help ? 0 : 2;
    }
    if (spec_k < 1 || spec_k > 32 || prefill < PROMPT || steps < 1 || spec_tokens > 3000) {
        fprintf(stderr, "bench_cuda: bad sizes\n");
        return 2;
    }
    int qs[2], nq = 0; /* the schemes asked for, each once */
    for (const char *q = quants; *q;) {
        size_t n = strcspn(q, ",");
        int v = n == 4 && !strncmp(q, "int8", 4) ? CUDA_QUANT_INT8
                : n == 4 && !strncmp(q, "int4", 4) ? CUDA_QUANT_INT4 : 0;
        if (!v || nq == 2 || (nq == 1 && qs[0] == v)) {
            fprintf(stderr, "bench_cuda: --quantization is a list of int8 and int4\n");
            return 2;
        }
        qs[nq++] = v;
        q += n + (q[n] == ',');
    }
    char why[256];
    if (!cuda_available(why, sizeof why)) {
        fprintf(stderr, "bench_cuda: %s\n", why);
        return 1;
    }
    model *m = NULL, *dm = NULL;
    if (model_load(dir, &m, &err) || (draft_dir && model_load(draft_dir, &dm, &err))) {
        fprintf(stderr, "bench_cuda: %s\n", err.msg);
        return 1;
    }
    printf("device: %s\nmodel: %s\n", why, dir);

    double bw = copy_bandwidth();
    double g8k = gemm_rate(8192, 8192, 8192);
    double gshape = gemm_rate(prefill, m->cfg.intermediate_size, m->cfg.hidden_size);
    double gemm = g8k > gshape ? g8k : gshape;
    printf("limits: copy %.0f GB/s (read + write), bf16 GEMM %.0f TFLOP/s at 8192^3, %.0f at "
           "%dx%dx%d\n", bw, g8k, gshape, prefill, m->cfg.intermediate_size,
           m->cfg.hidden_size);

    cJSON *o = cJSON_CreateObject();
    int same_bits = gemm_sweep(m, o);
    cJSON_AddBoolToObject(o, "gemm_shapes_same_bits", same_bits);

    size_t stream;
    double params;
    model_sizes(m, CUDA_QUANT_NONE, &stream, &params);
    int V = m->cfg.vocab_size;
    int32_t *prompt = malloc((size_t)prefill * 4);
    uint32_t x = 12345;
    prompt[0] = 1;
    for (int i = 1; i < prefill; i++) {
        x = x * 1103515245u + 12345u;
        prompt[i] = (int32_t)(3 + (x >> 8) % (unsigned)(V - 3));
    }
    /* the speculation prompt: natural text when given, else the random one */
    int32_t spec_prompt[PROMPT];
    memcpy(spec_prompt, prompt, sizeof spec_prompt);
    if (spec_text) {
        const char *q = spec_text;
        for (int i = 0; i < PROMPT; i++) {
            char *end;
            long id = strtol(q, &end, 10);
            if (end == q || id < 0 || id >= V) {
                fprintf(stderr, "bench_cuda: --spec-prompt needs %d token ids below %d\n",
                        PROMPT, V);
                return 2;
            }
            spec_prompt[i] = (int32_t)id;
            q = end;
        }
    }
    figs fi, fc; /* batch-invariant kernels; cuBLAS and prefill tiles */
    measure(m, INV_MMA, CUDA_QUANT_NONE, prompt, prefill, steps, params, &fi);
    measure(m, INV_CUBLAS, CUDA_QUANT_NONE, prompt, prefill, steps, params, &fc);
    double roof = (double)stream / (bw * 1e9);
    printf("\n%-34s %14s %14s %9s %12s\n", "figure", "invariant", "vs limit", "target",
           "cuBLAS");
    printf("%-34s %11.2f ms %13.1f%% %9s %9.2f ms\n", "decode, 1 sequence (per token)",
           fi.t1 * 1e3, 100 * roof / fi.t1, ">=85%", fc.t1 * 1e3);
    printf("%-34s %10.0f t/s %13.1fx %9s %8.0f t/s\n", "decode, 64 sequences", fi.tps64,
           fi.tps64 / fi.tps1, ">=40x", fc.tps64);
    printf("%-34s %8.1f TF/s %13.1f%% %9s %7.1f TF/s\n", "prefill", fi.pflops,
           100 * fi.pflops / gemm, ">=60%", fc.pflops);
    printf("  (roofline %.2f ms: %.2f GB of weights a step at %.0f GB/s; cuBLAS: %.1f%% of "
           "the roofline, %.1fx at 64, %.1f%% of the GEMM rate)\n", roof * 1e3, stream / 1e9,
           bw, 100 * roof / fc.t1, fc.tps64 / fc.tps1, 100 * fc.pflops / gemm);

    if (nq) {
        int qbits = qgemm_sweep(m, bw, o);
        cJSON_AddBoolToObject(o, "quantized_gemm_same_bits", qbits);
        same_bits = same_bits && qbits;
    }
    figs fq[2];
    size_t qstream[2];
    for (int i = 0; i < nq; i++) {
        const char *name = qs[i] == CUDA_QUANT_INT8 ? "int8" : "int4";
        model_sizes(m, qs[i], &qstream[i], &params);
        measure(m, INV_MMA, qs[i], prompt, prefill, steps, params, &fq[i]);
        double qroof = (double)qstream[i] / (bw * 1e9);
        printf("%s: decode 1 sequence %.2f ms (%.1f%% of its roofline %.2f ms, %.2f GB a "
               "step; %.2fx bf16's speed), 64 sequences %.0f t/s (%.1fx), prefill %.1f "
               "TOP/s\n", name, fq[i].t1 * 1e3, 100 * qroof / fq[i].t1, qroof * 1e3,
               qstream[i] / 1e9, fi.t1 / fq[i].t1, fq[i].tps64, fq[i].tps64 / fq[i].tps1,
               fq[i].pflops);
    }

    int max_tokens = prefill > BATCH * PROMPT ? prefill : BATCH * PROMPT;
    double spec_ratio = 0, acc = 0, spec_tps = 0, plain_tps = 0;
    be_backend *dbe = NULL;
    if (dm) {
        int sl = PROMPT + spec_tokens + 2 * spec_k + 2, sb = (sl + BS - 1) / BS + 1;
        be_backend *tgt = make(m, max_tokens, sb, sl, INV_MMA, CUDA_QUANT_NONE);
        dbe = make(dm, max_tokens, sb, sl, INV_MMA, CUDA_QUANT_NONE);
        seqs sq;
        seqs_init(&sq, 1, sl, 1);
        prefill_all(tgt, &sq, spec_prompt);
        double tplain = decode(tgt, &sq, spec_tokens) / spec_tokens;
        plain_tps = 1.0 / tplain;
        spec_tps = speculate(tgt, dbe, spec_prompt, spec_k, spec_tokens, &acc);
        spec_ratio = spec_tps / plain_tps;
        printf("%-34s %8.0f t/s %13.2fx %7s\n", "speculative decoding (draft model)", spec_tps,
               spec_ratio, ">=1.8x");
        printf("  (plain %.0f t/s; k %d, acceptance %.2f)\n", plain_tps, spec_k, acc);
        seqs_free(&sq);
        be_destroy(tgt);
    } else {
        printf("speculative decoding: not measured (no --draft)\n");
    }

    if (json) {
        cJSON_AddStringToObject(o, "device", why);
        cJSON_AddStringToObject(o, "model", dir);
        cJSON_AddStringToObject(o, "draft", draft_dir ? draft_dir : "");
        cJSON_AddNumberToObject(o, "copy_bandwidth_gbs", bw);
        cJSON_AddNumberToObject(o, "gemm_bf16_tflops_8192", g8k);
        cJSON_AddNumberToObject(o, "gemm_bf16_tflops_prefill_shape", gshape);
        cJSON_AddNumberToObject(o, "weights_streamed_bytes", (double)stream);
        cJSON_AddNumberToObject(o, "roofline_ms", roof * 1e3);
        const figs *fs[2] = {&fi, &fc};
        const char *names[2] = {"batch_invariant", "cublas"};
        for (int k = 0; k < 2; k++) {
            const figs *f = fs[k];
            cJSON *mo = cJSON_AddObjectToObject(o, names[k]);
            cJSON *d1 = cJSON_AddObjectToObject(mo, "decode_1");
            cJSON_AddNumberToObject(d1, "ms_per_token", f->t1 * 1e3);
            cJSON_AddNumberToObject(d1, "fraction_of_roofline", roof / f->t1);
            cJSON_AddNumberToObject(d1, "limit", 0.85);
            cJSON_AddBoolToObject(d1, "meets_limit", roof / f->t1 >= 0.85);
            cJSON *d64 = cJSON_AddObjectToObject(mo, "decode_64");
            cJSON_AddNumberToObject(d64, "tokens_per_s", f->tps64);
            cJSON_AddNumberToObject(d64, "ratio_to_single", f->tps64 / f->tps1);
            cJSON_AddNumberToObject(d64, "limit", 40);
            cJSON_AddBoolToObject(d64, "meets_limit", f->tps64 / f->tps1 >= 40);
            cJSON *pf = cJSON_AddObjectToObject(mo, "prefill");
            cJSON_AddNumberToObject(pf, "tokens", prefill);
            cJSON_AddNumberToObject(pf, "ms", f->tp * 1e3);
            cJSON_AddNumberToObject(pf, "tflops", f->pflops);
            cJSON_AddNumberToObject(pf, "fraction_of_gemm", f->pflops / gemm);
            cJSON_AddNumberToObject(pf, "limit", 0.6);
            cJSON_AddBoolToObject(pf, "meets_limit", f->pflops / gemm >= 0.6);
        }
        for (int i = 0; i < nq; i++) {
            cJSON *q = cJSON_AddObjectToObject(o, qs[i] == CUDA_QUANT_INT8 ? "int8" : "int4");
            double qroof = (double)qstream[i] / (bw * 1e9);
            cJSON_AddNumberToObject(q, "weights_streamed_bytes", (double)qstream[i]);
            cJSON_AddNumberToObject(q, "roofline_ms", qroof * 1e3);
            cJSON_AddNumberToObject(q, "decode_1_ms_per_token", fq[i].t1 * 1e3);
            cJSON_AddNumberToObject(q, "decode_1_fraction_of_roofline", qroof / fq[i].t1);
            cJSON_AddNumberToObject(q, "decode_1_speed_over_bf16", fi.t1 / fq[i].t1);
            cJSON_AddNumberToObject(q, "decode_64_tokens_per_s", fq[i].tps64);
            cJSON_AddNumberToObject(q, "prefill_ms", fq[i].tp * 1e3);
            cJSON_AddNumberToObject(q, "prefill_tops", fq[i].pflops);
        }
        if (dm) {
            cJSON *sp_ = cJSON_AddObjectToObject(o, "speculative");
            cJSON_AddNumberToObject(sp_, "k", spec_k);
            cJSON_AddStringToObject(sp_, "prompt", spec_text ? "natural text (--spec-prompt)"
                                                             : "random token ids");
            cJSON_AddNumberToObject(sp_, "acceptance", acc);
            cJSON_AddNumberToObject(sp_, "tokens_per_s", spec_tps);
            cJSON_AddNumberToObject(sp_, "plain_tokens_per_s", plain_tps);
            cJSON_AddNumberToObject(sp_, "ratio", spec_ratio);
            cJSON_AddNumberToObject(sp_, "limit", 1.8);
            cJSON_AddBoolToObject(sp_, "meets_limit", spec_ratio >= 1.8);
        }
        if (write_json(o, json))
            return 1;
    }
    cJSON_Delete(o);
    be_destroy(dbe);
    model_destroy(dm);
    if (wg_json) { /* last: a fault there loses nothing above */
        cJSON *wj = cJSON_CreateObject();
        int wrc = wg_sweep(m, wj);
        if (wrc == 0) { /* the model with it for more than 64 rows */
            figs fw;
            measure(m, INV_WGMMA, CUDA_QUANT_NONE, prompt, prefill, steps, params, &fw);
            printf("with wgmma above 64 rows: decode 1 sequence %.2f ms, 64 sequences %.0f t/s, "
                   "prefill %.1f TF/s (mma.sync alone: %.1f, cuBLAS mode %.1f)\n", fw.t1 * 1e3,
                   fw.tps64, fw.pflops, fi.pflops, fc.pflops);
            cJSON *mo = cJSON_AddObjectToObject(wj, "model_with_wgmma_above_64_rows");
            cJSON_AddNumberToObject(mo, "decode_1_ms_per_token", fw.t1 * 1e3);
            cJSON_AddNumberToObject(mo, "decode_64_tokens_per_s", fw.tps64);
            cJSON_AddNumberToObject(mo, "prefill_ms", fw.tp * 1e3);
            cJSON_AddNumberToObject(mo, "prefill_tflops", fw.pflops);
            cJSON_AddNumberToObject(mo, "prefill_tflops_mma", fi.pflops);
            cJSON_AddNumberToObject(mo, "prefill_tflops_cublas", fc.pflops);
        }
        cJSON_AddStringToObject(wj, "device", why);
        cJSON_AddStringToObject(wj, "model", dir);
        write_json(wj, wg_json);
        cJSON_Delete(wj);
    }
    model_destroy(m);
    free(prompt);
    if (!same_bits)
        fprintf(stderr, "bench_cuda: a candidate GEMM shape gave other bits than the default\n");
    return same_bits ? 0 : 1;
}
