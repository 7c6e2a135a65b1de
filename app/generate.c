#include "app/generate.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/args.h"
#include "app/backend.h"
#include "app/hub.h"
#include "app/spec.h"
#include "engine/eng.h"
#include "engine/model.h"
#include "engine/gguf_model.h"
#include "engine/metrics.h"
#include "engine/tok.h"

typedef struct gen_opts {
    const char *model, *prompt, *prompt_ids, *quantization, *tokenizer;
    const char *revision, *download_dir; /* a model by Hub id (app/hub.h) */
    const char *tokenizer_revision;      /* a tokenizer by Hub id         */
    /* the backend as the flags choose it (device, threads, kernels, quant,
     * block_size, max_tokens); run() fills in the rest */
    app_backend_config bc;
    app_spec_args spec;                  /* the speculative decoding flags */
    int max_tokens, seed, top_k, max_model_len;
    int ignore_eos, output_ids, quiet, chunk;
    float temperature, top_p, min_p, presence, frequency, repetition;
} gen_opts;

/* The one request's wake-ups: the engine's notify hook (on its thread)
 * raises a flag; the main thread waits for it and takes the output. */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
    double t_last; /* when the engine last had news (the latest token) */
} waiter;

static void on_output(void *user, eng_req *r)
{
    waiter *w = user;
    (void)r;
    pthread_mutex_lock(&w->mu);
    w->pending = 1;
    w->t_last = inf_now();
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Prints out's new part: its ids, or its text (whole UTF-8 characters, as
 * the engine detokenizes for the server). n: ids printed so far. */
static void print_new(const eng_out *out, int ids, int *n)
{
    if (ids) {
        for (int i = 0; i < out->n_ids; i++)
            printf((*n)++ ? " %d" : "%d", out->ids[i]);
    } else if (out->len) {
        fwrite(out->text, 1, out->len, stdout);
    }
    fflush(stdout);
}

/* The speculation summary on stderr: drafts verified, acceptance, and the
 * share of drafts accepted at each position (vLLM's counters). */
static void print_spec(const app_spec *spec, const met_registry *met)
{
    met_snap s;
    met_snapshot(met, &s);
    uint64_t drafts = s.counters[MET_SPEC_DRAFTS], dt = s.counters[MET_SPEC_DRAFT_TOKENS],
             acc = s.counters[MET_SPEC_ACCEPTED_TOKENS];
    fprintf(stderr, "inferd: speculation (%s, k=%d): %llu drafts of %llu tokens, %llu accepted "
            "(%.3f), mean acceptance length %.2f, acceptance per position",
            app_spec_name(spec), spec->k, (unsigned long long)drafts, (unsigned long long)dt,
            (unsigned long long)acc, dt ? (double)acc / (double)dt : 0.0,
            drafts ? 1.0 + (double)acc / (double)drafts : 1.0);
    for (int i = 0; i < spec->k && i < MET_SPEC_POS_MAX; i++)
        fprintf(stderr, " %.3f", drafts ? (double)s.spec_accepted_per_pos[i] / (double)drafts : 0.0);
    fputc('\n', stderr);
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

/* Runs the prompt through the engine the server uses, as its only request:
 * offline and served output are one path. */
/* *bad_file is set when a tokenizer file is malformed or asks for what
 * inferd does not implement (exit 2, as a usage problem). */
/* spec: parsed by the caller; what it opens here is closed here. */
static int run(const gen_opts *o, app_spec *spec, int *bad_file, inf_err *err)
{
    model *m = NULL;
    tok *tk = NULL;
    be_backend *be = NULL;
    eng *e = NULL;
    met_registry *met = NULL; /* with speculation: its counters, for the summary */
    eng_req *r = NULL;
    eng_out out = {0};
    int32_t *prompt = NULL;
    char *model_dir = NULL, *tok_dir_hub = NULL;
    int n_prompt = 0, rc, printed = 0;
    waiter w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    double t0 = inf_now(), t1 = 0;

    /* ORG/NAME, for the model or the tokenizer: from the Hub cache, fetched
     * if need be (app/hub.h); a directory that exists wins */
    const char *dir, *tok_path = NULL;
    hub_config hc;
    hub_config_from_env(&hc);
    hc.revision = o->revision ? o->revision : "main";
    if (o->download_dir)
        hc.cache = o->download_dir;
    rc = hub_local_path(&hc, o->model, &dir, &model_dir, err);
    if (!rc && o->tokenizer) {
        hc.tokenizer_only = 1;
        hc.revision = o->tokenizer_revision ? o->tokenizer_revision : "main";
        rc = hub_local_path(&hc, o->tokenizer, &tok_path, &tok_dir_hub, err);
    }
    if (rc) {
        *bad_file = 1; /* a usage problem: the id, the token, the network (exit 2) */
        goto done;
    }
    model_load_opts lo = app_backend_load_opts(&o->bc);
    if ((rc = model_load_with(dir, &lo, &m, err)))
        goto done;
    const model_config *c = &m->cfg;
    /* the engine detokenizes (stop checks, text out), so even ids in and out
     * need the tokenizer */
    const char *tok_dir;
    if ((rc = gguf_model_tokenizer_dir(dir, tok_path, &tok_dir, err)))
        goto done;
    if ((rc = tok_create(tok_dir, &tk, err))) {
        *bad_file = rc == INF_ERR_FORMAT || rc == INF_ERR_UNSUPPORTED;
        goto done;
    }
    if (tok_vocab_size(tk) > c->vocab_size) {
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: tokenizer has %d pieces but the model only %d",
                      o->model, tok_vocab_size(tk), c->vocab_size);
        goto done;
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
    if ((rc = app_spec_load_draft(spec, err)))
        goto done;
    app_backend_config bc = o->bc;
    bc.max_context = max_ctx;
    bc.max_seqs = 1;
    bc.spec_k = app_spec_k(spec);
    bc.draft = spec->dm;
    bc.kv_bytes = SIZE_MAX; /* the pool holds the one sequence at full length */
    bc.layer_need = model_layer_need; /* layer by layer: the loader's copy */
    bc.layer_packed = model_layer_packed; /* goes once packed */
    bc.layer_ctx = m;
    app_backend ab;
    if ((rc = app_backend_open(m, &bc, &ab, err)))
        goto done;
    be = ab.be;
    if ((rc = app_spec_open(spec, m, tk, &bc, ab.num_blocks, max_ctx, NULL, err)))
        goto done;

    eng_params p = {.sampling = smp_params_default(), .has_seed = 1,
                    .max_tokens = o->max_tokens, .ignore_eos = o->ignore_eos, .logprobs = -1};
    smp_params *sp = &p.sampling;
    sp->temperature = o->temperature;
    sp->top_k = o->top_k;
    sp->top_p = o->top_p;
    sp->min_p = o->min_p;
    sp->presence_penalty = o->presence;
    sp->frequency_penalty = o->frequency;
    sp->repetition_penalty = o->repetition;
    sp->seed = (uint64_t)(int64_t)o->seed;
    if ((rc = smp_params_check(sp, err)))
        goto done;
    /* --prefill-chunk: with one sequence the step budget is its chunk */
    if (spec->proposer) {
        met_config mc = met_config_default();
        mc.model_name = o->model;
        mc.max_model_len = max_ctx;
        mc.spec_k = spec->k;
        if ((rc = met_create(&mc, &met, err)))
            goto done;
    }
    int batched = o->bc.max_tokens;
    int step = o->chunk > 0 && o->chunk < batched ? o->chunk : batched;
    eng_config ec = {.max_num_seqs = 1, .max_num_batched_tokens = step,
                     .max_model_len = max_ctx, .block_size = o->bc.block_size,
                     .num_blocks = ab.num_blocks, .seed = (uint64_t)(int64_t)o->seed,
                     .spec = spec->proposer, .spec_k = spec->k,
                     .spec_disable_batch = spec->disable_by_batch_size,
                     .spec_min_accept = spec->min_acceptance, .met = met,
                     .notify = on_output, .notify_user = &w};
    if ((rc = eng_create(&ec, m, tk, be, &e, err)))
        goto done;
    t1 = inf_now();
    if (o->max_tokens > 0) { /* --max-tokens 0: the prompt is checked, nothing runs */
        if ((rc = eng_req_create(prompt, n_prompt, &p, &r, err)) ||
            (rc = eng_submit(e, r, 0, err)))
            goto done;
        for (;;) {
            pthread_mutex_lock(&w.mu);
            while (!w.pending)
                pthread_cond_wait(&w.cv, &w.mu);
            w.pending = 0;
            pthread_mutex_unlock(&w.mu);
            eng_req_take(r, &out);
            print_new(&out, o->output_ids, &printed);
            if (out.finish != ENG_FINISH_NONE)
                break;
        }
        if (out.finish == ENG_FINISH_ERROR || out.finish == ENG_FINISH_ABORT) {
            rc = inf_fail(err, INF_ERR_IO, "%s", out.error[0] ? out.error : "generation stopped");
            goto done;
        }
    }
    if (o->output_ids || isatty(STDOUT_FILENO))
        putchar('\n');
    fflush(stdout);
    double t2 = inf_now();
    int n = out.n_output;
    const char *ckpt = model_quant_desc(m); /* a pre-quantized checkpoint's scheme */
    if (!o->quiet)
        fprintf(stderr, "inferd: %s: %d prompt + %d generated tokens (%s), load %.2f s, "
                "generate %.2f s (%.1f tokens/s), ttft %.3f ms, decode %.3f ms/token, %s kernels%s%s%s, "
                "%d threads\n",
                o->model, n_prompt, n, out.finish == ENG_FINISH_STOP ? "eos" : "length",
                t1 - t0, t2 - t1, (t2 - t1) > 0 ? n / (t2 - t1) : 0.0,
                out.t_first > 0 ? (out.t_first - t1) * 1e3 : 0.0,
                n > 1 ? (w.t_last - out.t_first) * 1e3 / (n - 1) : 0.0,
                ab.kernels, model_is_w8a8(m) ? " (int8 weights as stored)"
                : o->bc.quant == APP_QUANT_NONE ? ""
                : strcmp(o->quantization, "int4") ? " (int8 weights)" : " (int4 weights)",
                ckpt ? ", checkpoint " : "", ckpt ? ckpt : "",
                o->bc.threads > 0 ? o->bc.threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
    if (met && !o->quiet)
        print_spec(spec, met);
done:
    eng_destroy(e); /* before r: it may still hold its reference */
    eng_req_unref(r);
    app_spec_close(spec); /* after the engine, before the target's backend */
    met_destroy(met);
    eng_out_free(&out);
    free(prompt);
    free(model_dir);
    free(tok_dir_hub);
    be_destroy(be);
    tok_destroy(tk);
    model_destroy(m);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}

int generate_main(int argc, char **argv)
{
    gen_opts o = {.max_tokens = 128, .top_p = 1.0f, .repetition = 1.0f,
                  .bc = app_backend_config_default()};
    const arg_spec specs[] = {
        {"model", ARG_STR, &o.model, "DIR", "Hugging Face Llama directory, a GGUF file, or a "
                                            "Hub id ORG/NAME (required)"},
        {"tokenizer", ARG_STR, &o.tokenizer, "DIR", "tokenizer directory or Hub id ORG/NAME "
                                                    "(default: --model; a GGUF file's own "
                                                    "metadata)"},
        {"revision", ARG_STR, &o.revision, "REV", "Hub branch, tag or commit (default main)"},
        {"tokenizer-revision", ARG_STR, &o.tokenizer_revision, "REV", "Hub branch, tag or "
                                                                      "commit of a tokenizer "
                                                                      "given by id (default "
                                                                      "main)"},
        {"download-dir", ARG_STR, &o.download_dir, "DIR", "the Hub cache (default: "
                                                          "$HF_HUB_CACHE, $HF_HOME/hub or "
                                                          "~/.cache/huggingface/hub)"},
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
        {"threads", ARG_INT, &o.bc.threads, "N", "CPU threads (default: all cores)"},
        {"kernels", ARG_STR, &o.bc.kernels, "NAME", "auto, avx512bf16, avx512, avx2, generic or generic-bf16 (default auto)"},
        {"device", ARG_STR, &o.bc.device, "DEV", "cpu or cuda (a CUDA build; default cpu)"},
        {"quantization", ARG_STR, &o.quantization, "NAME", "none (default), int8 (W8A8) or int4 (W4A8)"},
        {"max-model-len", ARG_INT, &o.max_model_len, "N", "context limit (default: the model's)"},
        {"max-num-batched-tokens", ARG_INT, &o.bc.max_tokens, "N", "tokens per forward step (default 512)"},
        {"prefill-chunk", ARG_INT, &o.chunk, "N", "prompt tokens per step (default: the step budget)"},
        {"block-size", ARG_INT, &o.bc.block_size, "N", "KV cache block size in tokens (default 16)"},
        {"quiet", ARG_FLAG, &o.quiet, NULL, "no summary line on stderr"},
        APP_SPEC_ARG_SPECS(&o.spec),
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
    app_backend_config *bc = &o.bc;
    if (strcmp(bc->device, "cpu") && strcmp(bc->device, "cuda")) {
        fprintf(stderr, "inferd generate: --device is cpu or cuda\n");
        return 2;
    }
    bc->quant = app_backend_quant(o.quantization);
    if (bc->quant < 0) {
        fprintf(stderr, "inferd generate: --quantization is none, int8 or int4\n");
        return 2;
    }
    if (bc->max_tokens < 1 || bc->block_size < 1 || o.max_tokens < 0) {
        fprintf(stderr, "inferd generate: --max-num-batched-tokens and --block-size must be "
                        "positive, --max-tokens not negative\n");
        return 2;
    }
    /* the speculative options mean what they mean to the server */
    app_spec spec;
    if (app_spec_parse(&o.spec, &spec, &err)) {
        fprintf(stderr, "inferd generate: %s\n", err.msg);
        return 2;
    }
    int bad_file = 0;
    if (run(&o, &spec, &bad_file, &err)) {
        fflush(stdout);
        fprintf(stderr, "inferd: error: %s\n", err.msg);
        return bad_file ? 2 : 1;
    }
    return 0;
}
