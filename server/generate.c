#include "server/generate.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/backend.h"
#ifdef INFERD_CUDA
#include "cuda/backend.h"
#endif
#include "engine/gen.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "engine/tok.h"
#include "server/args.h"

typedef struct gen_opts {
    const char *model, *prompt, *prompt_ids, *kernels, *device, *quantization;
    int quant; /* cpu_quant, parsed from quantization */
    int max_tokens, threads, seed, top_k, max_model_len, batched, block_size;
    int ignore_eos, output_ids, quiet, chunk;
    float temperature, top_p, min_p, presence, frequency, repetition;
} gen_opts;

/* Streams detokenized text to stdout as tokens arrive. */
typedef struct printer {
    tok_stream *ts;
    int ids; /* print ids instead of text */
    int n;
    double t_first, t_last; /* when the first and the latest token came */
    int failed;
    inf_err err;
} printer;

static void on_token(void *user, int seq, int32_t t)
{
    printer *p = user;
    (void)seq;
    p->t_last = inf_now();
    if (p->t_first == 0)
        p->t_first = p->t_last;
    if (p->ids) {
        printf(p->n++ ? " %d" : "%d", t);
        return;
    }
    const char *text;
    size_t len;
    if (p->failed || tok_stream_push(p->ts, t, &text, &len, &p->err)) {
        p->failed = 1;
        return;
    }
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

/* "1,2,3" or "1 2 3" into a malloc'd array. */
static int parse_ids(const char *s, int32_t **out, int *n, inf_err *err)
{
    int cap = 16, cnt = 0;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    if (!ids)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    while (*s) {
        while (*s == ',' || *s == ' ')
            s++;
        if (!*s)
            break;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 0x7fffffff) {
            free(ids);
            return inf_fail(err, INF_ERR_INVALID, "--prompt-ids: bad token id near '%s'", s);
        }
        if (cnt == cap) {
            int32_t *g = realloc(ids, sizeof *ids * (size_t)(cap *= 2));
            if (!g) {
                free(ids);
                return inf_fail(err, INF_ERR_NOMEM, "out of memory");
            }
            ids = g;
        }
        ids[cnt++] = (int32_t)v;
        s = end;
    }
    *out = ids;
    *n = cnt;
    return INF_OK;
}

static void usage(FILE *f, const arg_spec *specs, int n)
{
    fprintf(f, "usage: inferd generate --model DIR (--prompt TEXT | --prompt-ids IDS) [options]\n\n"
               "Generates a completion offline and prints only its text on stdout.\n"
               "Greedy unless --temperature is given.\n\noptions:\n");
    args_help(f, specs, n);
}

/* The CPU backend, or the GPU's with the same fixed pool of one sequence. */
static int make_backend(const gen_opts *o, const model *m, const cpu_config *cc,
                        be_backend **be, inf_err *err)
{
    if (!strcmp(o->device, "cpu"))
        return cpu_backend_create(m, cc, be, err);
#ifdef INFERD_CUDA
    {
        cuda_config gc = cuda_config_for(cc->block_size, cc->max_tokens, cc->max_context, 1);
        gc.num_blocks = cc->num_blocks;
        gc.max_logits = 1;
        return cuda_backend_create(m, &gc, be, err);
    }
#endif
    return inf_fail(err, INF_ERR_UNSUPPORTED, "--device %s: this build has no CUDA backend "
                    "(build with make CUDA=1)", o->device);
}

static int run(const gen_opts *o, inf_err *err)
{
    model *m = NULL;
    tok *tk = NULL;
    be_backend *be = NULL;
    kv_pool *kv = NULL;
    smp_ctx *smp = NULL;
    int32_t *prompt = NULL;
    int n_prompt = 0, rc;
    printer pr = {.ids = o->output_ids};
    gen_result res = {0};
    double t0 = inf_now();

    if ((rc = model_load(o->model, &m, err)))
        goto done;
    const model_config *c = &m->cfg;
    if (!o->output_ids || !o->prompt_ids) {
        if ((rc = tok_create(o->model, &tk, err)))
            goto done;
        if (tok_vocab_size(tk) > c->vocab_size) {
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: tokenizer has %d pieces but the model "
                          "only %d", o->model, tok_vocab_size(tk), c->vocab_size);
            goto done;
        }
    }
    if (o->prompt_ids)
        rc = parse_ids(o->prompt_ids, &prompt, &n_prompt, err);
    else
        rc = tok_encode(tk, o->prompt, strlen(o->prompt), 1, &prompt, &n_prompt, err);
    if (rc)
        goto done;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] >= c->vocab_size) {
            rc = inf_fail(err, INF_ERR_INVALID, "prompt token %d is outside the vocabulary (%d)",
                          prompt[i], c->vocab_size);
            goto done;
        }

    int max_ctx = model_context(c);
    if (o->max_model_len > 0 && o->max_model_len < max_ctx)
        max_ctx = o->max_model_len;
    if (n_prompt < 1 || n_prompt >= max_ctx) {
        rc = inf_fail(err, INF_ERR_INVALID, "the prompt has %d tokens; the context holds %d",
                      n_prompt, max_ctx);
        goto done;
    }
    cpu_config cc = cpu_config_default();
    cc.n_threads = o->threads;
    cc.kernels = o->kernels;
    cc.quant = o->quant;
    cc.block_size = o->block_size;
    cc.max_tokens = o->batched;
    cc.max_context = max_ctx;
    cc.num_blocks = kv_pool_blocks(SIZE_MAX, 1, cc.block_size, 1, max_ctx);
    if ((rc = make_backend(o, m, &cc, &be, err)))
        goto done;
    kv_config kc = {.num_blocks = cc.num_blocks, .block_size = cc.block_size};
    if ((rc = kv_create(&kc, &kv, err)) || (rc = smp_create(c->vocab_size, &smp, err)))
        goto done;
    if (!o->output_ids && (rc = tok_stream_create(tk, prompt, n_prompt, &pr.ts, err)))
        goto done;

    smp_params sp = smp_params_default();
    sp.temperature = o->temperature;
    sp.top_k = o->top_k;
    sp.top_p = o->top_p;
    sp.min_p = o->min_p;
    sp.presence_penalty = o->presence;
    sp.frequency_penalty = o->frequency;
    sp.repetition_penalty = o->repetition;
    sp.seed = (uint64_t)(int64_t)o->seed;
    if ((rc = smp_params_check(&sp, err)))
        goto done;
    gen_request req = {.prompt = prompt, .n_prompt = n_prompt, .max_tokens = o->max_tokens,
                       .sampling = sp, .ignore_eos = o->ignore_eos};
    gen_config gc = {.max_step_tokens = o->batched, .chunk = o->chunk, .eos = c->eos_token_ids,
                     .n_eos = c->n_eos, .vocab = c->vocab_size, .max_context = max_ctx,
                     .on_token = on_token, .user = &pr};
    double t1 = inf_now();
    if ((rc = gen_run(be, kv, smp, &gc, &req, 1, &res, err)))
        goto done;
    if (pr.failed) {
        rc = pr.err.code ? pr.err.code : INF_ERR_INVALID;
        *err = pr.err;
        goto done;
    }
    if (!o->output_ids) {
        const char *text;
        size_t len;
        if ((rc = tok_stream_flush(pr.ts, &text, &len, err)))
            goto done;
        fwrite(text, 1, len, stdout);
    }
    if (o->output_ids || isatty(STDOUT_FILENO))
        putchar('\n');
    fflush(stdout);
    double t2 = inf_now();
    if (!o->quiet)
        fprintf(stderr, "inferd: %s: %d prompt + %d generated tokens (%s), load %.2f s, "
                "generate %.2f s (%.1f tokens/s), ttft %.3f ms, decode %.3f ms/token, %s kernels%s, "
                "%d threads\n",
                o->model, n_prompt, res.n, res.finish == GEN_FINISH_EOS ? "eos" : "length",
                t1 - t0, t2 - t1, (t2 - t1) > 0 ? res.n / (t2 - t1) : 0.0,
                pr.t_first > 0 ? (pr.t_first - t1) * 1e3 : 0.0,
                res.n > 1 ? (pr.t_last - pr.t_first) * 1e3 / (res.n - 1) : 0.0,
                strcmp(o->device, "cpu") ? o->device : cpu_backend_kernels(be),
                cc.quant == CPU_QUANT_INT8 ? " (int8 weights)" : "",
                o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
done:
    gen_results_free(&res, 1);
    tok_stream_destroy(pr.ts);
    free(prompt);
    smp_destroy(smp);
    kv_destroy(kv);
    be_destroy(be);
    tok_destroy(tk);
    model_destroy(m);
    return rc;
}

int generate_main(int argc, char **argv)
{
    gen_opts o = {.max_tokens = 128, .top_p = 1.0f, .repetition = 1.0f, .batched = 512,
                  .block_size = 16, .kernels = "auto", .device = "cpu"};
    const arg_spec specs[] = {
        {"model", ARG_STR, &o.model, "DIR", "Hugging Face Llama directory (required)"},
        {"prompt", ARG_STR, &o.prompt, "TEXT", "prompt text (BOS added as tokenizer_config.json says)"},
        {"prompt-ids", ARG_STR, &o.prompt_ids, "IDS", "prompt as token ids, e.g. 1,9038,2501 (no BOS added)"},
        {"max-tokens", ARG_INT, &o.max_tokens, "N", "tokens to generate at most (default 128)"},
        {"temperature", ARG_FLOAT, &o.temperature, "T", "sampling temperature (default 0: greedy)"},
        {"top-k", ARG_INT, &o.top_k, "K", "keep the K most likely tokens (default off)"},
        {"top-p", ARG_FLOAT, &o.top_p, "P", "nucleus sampling mass (default 1: off)"},
        {"min-p", ARG_FLOAT, &o.min_p, "P", "drop tokens below P x the top probability (default 0)"},
        {"presence-penalty", ARG_FLOAT, &o.presence, "X", "OpenAI presence penalty (default 0)"},
        {"frequency-penalty", ARG_FLOAT, &o.frequency, "X", "OpenAI frequency penalty (default 0)"},
        {"repetition-penalty", ARG_FLOAT, &o.repetition, "X", "repetition penalty (default 1: off)"},
        {"seed", ARG_INT, &o.seed, "S", "sampling seed (default 0)"},
        {"ignore-eos", ARG_FLAG, &o.ignore_eos, NULL, "keep generating past end-of-sequence"},
        {"output-ids", ARG_FLAG, &o.output_ids, NULL, "print generated token ids instead of text"},
        {"threads", ARG_INT, &o.threads, "N", "CPU threads (default: all cores)"},
        {"kernels", ARG_STR, &o.kernels, "NAME", "auto, avx512, avx2 or generic (default auto)"},
        {"device", ARG_STR, &o.device, "DEV", "cpu or cuda (a CUDA build; default cpu)"},
        {"quantization", ARG_STR, &o.quantization, "NAME", "none (default), int8 or int4 (CPU only)"},
        {"max-model-len", ARG_INT, &o.max_model_len, "N", "context limit (default: the model's)"},
        {"max-num-batched-tokens", ARG_INT, &o.batched, "N", "tokens per forward step (default 512)"},
        {"prefill-chunk", ARG_INT, &o.chunk, "N", "prompt tokens per step (default: the step budget)"},
        {"block-size", ARG_INT, &o.block_size, "N", "KV cache block size in tokens (default 16)"},
        {"quiet", ARG_FLAG, &o.quiet, NULL, "no summary line on stderr"},
    };
    int n_specs = (int)(sizeof specs / sizeof *specs), help = 0;
    inf_err err = {0};
    if (args_parse(specs, n_specs, argc, argv, &help, &err)) {
        fprintf(stderr, "inferd generate: %s\n", err.msg);
        return 2;
    }
    if (help) {
        usage(stdout, specs, n_specs);
        return 0;
    }
    if (!o.model || (!o.prompt == !o.prompt_ids)) {
        fprintf(stderr, "inferd generate: --model and one of --prompt or --prompt-ids are required "
                        "(see --help)\n");
        return 2;
    }
    if (strcmp(o.device, "cpu") && strcmp(o.device, "cuda")) {
        fprintf(stderr, "inferd generate: --device is cpu or cuda\n");
        return 2;
    }
    o.quant = cpu_quant_parse(o.quantization);
    if (o.quant < 0 || (o.quant != CPU_QUANT_NONE && strcmp(o.device, "cpu"))) {
        fprintf(stderr, "inferd generate: --quantization is none, int8 or int4, and the "
                        "quantized ones run on the CPU only\n");
        return 2;
    }
    if (o.batched < 1 || o.block_size < 1 || o.max_tokens < 0) {
        fprintf(stderr, "inferd generate: --max-num-batched-tokens and --block-size must be "
                        "positive, --max-tokens not negative\n");
        return 2;
    }
    if (run(&o, &err)) {
        fflush(stdout);
        fprintf(stderr, "inferd: error: %s\n", err.msg);
        return 1;
    }
    return 0;
}
