/* `inferd --model DIR [options]`: the OpenAI-compatible server. Options use
 * vLLM's names; each can also come from INFERD_<NAME> (flags override the
 * environment). The HTTP server listens at once and answers 503 until the
 * loader thread has the model ready. */
#include "app/serve.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "app/args.h"
#include "app/backend.h"
#include "app/cfg.h"
#include "app/hub.h"
#include "app/sdn.h"
#include "app/spec.h"
#include "app/vargs.h"
#include "engine/be_fault.h"
#include "engine/eng.h"
#include "engine/gguf_model.h"
#include "engine/kv.h"
#include "engine/metrics.h"
#include "engine/version.h"
#include "server/api.h"
#include "server/gcall.h"
#include "server/reason.h"
#include "server/tcall.h"
#include "server/srv.h"

typedef struct serve_opts {
    const char *model, *host, *served_name, *kv_mem;
    const char *quantization, *tokenizer;
    /* the target's backend as the flags choose it (device, threads,
     * kernels, quant, block_size, max_tokens, gpu_mem, tp); the rest of it
     * is filled in by backend_config */
    app_backend_config bc;
    app_spec_args spec;       /* the speculative decoding flags            */
    const char *chat_template, *config;
    const char *revision, *download_dir; /* a model by Hub id (app/hub.h)   */
    const char *tokenizer_revision;      /* a tokenizer by Hub id          */
    int port, max_num_seqs, max_model_len, seed;
    int prefill_decoding; /* -1: by device */
    int max_waiting, max_connections, timeout_s, grace_s, max_body_mb, max_logprobs, max_n;
    int request_timeout_s;
    int disable_log_stats, prefix_caching, disable_access_log, async_scheduling;
    const char *log_format, *log_level;
    /* TLS, keys and CORS (server/tls.h, keys.h, cors.h) */
    arg_strs api_keys;
    const char *api_key_file, *ssl_keyfile, *ssl_certfile, *ssl_ca_certs;
    int ssl_cert_reqs;
    const char *allowed_origins, *allowed_methods, *allowed_headers;
    int allow_credentials;
    int fault_token;          /* -1: no fault injection (engine/be_fault.h) */
    const char *tool_parser, *reasoning_parser;
    int auto_tools;
    int tool_kind, reasoning_kind; /* parsed from the two names; -1: none */
} serve_opts;

/* Everything the loader builds, torn down in reverse. */
typedef struct app {
    serve_opts o;
    srv *srv;
    api *api;
    model *m;
    tok *tk;
    tmpl *t;
    be_backend *be;
    be_backend *fault;        /* --fault-token-id: wraps be for the engine */
    app_spec spec;            /* the proposer and what it owns             */
    met_registry *met;
    eng *e;
    int max_len;
    int failed;
    inf_err err;
    pthread_t loader;
    logger *log;
    sdn *notify;
    /* the systemd watchdog: pinged while the engine is alive */
    pthread_t watchdog;
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    int wd_stop, wd_running;
    char *model_dir;          /* the Hub snapshot of a model given by id   */
    char *tok_dir;            /* and of a tokenizer given by id            */
    const char *tok_path;     /* --tokenizer as a local path (or NULL)     */
    /* load progress */
    int tty;
    int last_pct, last_decile;
} app;

/* "4GiB", "512MiB", "2G", "1000000" in bytes; 0 on a malformed value. */
static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return 0;
    while (*end == ' ')
        end++;
    double mul = 1;
    if (!strcasecmp(end, "k") || !strcasecmp(end, "kib") || !strcasecmp(end, "kb"))
        mul = 1024.0;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib") || !strcasecmp(end, "mb"))
        mul = 1024.0 * 1024;
    else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib") || !strcasecmp(end, "gb"))
        mul = 1024.0 * 1024 * 1024;
    else if (*end)
        return 0;
    return (size_t)(v * mul);
}

/* The backend settings a target of these options gets (the draft's are
 * derived from them). */
static app_backend_config backend_config(const app *a, int max_len)
{
    const serve_opts *o = &a->o;
    app_backend_config bc = o->bc;
    bc.max_context = max_len;
    bc.max_seqs = o->max_num_seqs;
    bc.spec_k = app_spec_k(&a->spec);
    bc.kv_bytes = o->kv_mem ? parse_size(o->kv_mem) : 0;
    bc.draft = a->spec.dm;
    return bc;
}

static void on_ready(void *user)
{
    app *a = user;
    api_set_ready(a->api, a->m, a->tk, a->t, a->e, a->met, a->max_len);
    const char *id = a->o.served_name ? a->o.served_name : a->o.model;
    log_msg(a->log, LOG_INFO, "server", NULL, "ready: serving %s on %s:%d", id, a->o.host,
            srv_port(a->srv));
    /* the model is loaded and the port listens: now systemd may route to us */
    sdn_send(a->notify, "READY=1\nSTATUS=serving %s on port %d", id, srv_port(a->srv));
}

static void on_failed(void *user)
{
    app *a = user;
    log_msg(a->log, LOG_ERROR, "server", NULL, "%s", a->err.msg);
    sdn_send(a->notify, "STATUS=failed: %s", a->err.msg);
    srv_stop(a->srv);
}

/* SIGHUP: the API key file is read again (a bad file keeps the old keys). */
static void on_reload(void *user)
{
    app *a = user;
    inf_err err = {0};
    if (api_reload(a->api, &err))
        log_msg(a->log, LOG_ERROR, "server", NULL, "SIGHUP: %s; the keys in force stay",
                err.msg);
    else
        log_msg(a->log, LOG_INFO, "server", NULL, "SIGHUP: API keys reloaded");
}

static void on_shutdown(void *user)
{
    app *a = user;
    sdn_send(a->notify, "STOPPING=1\nSTATUS=draining requests");
}

/* Pings the systemd watchdog at half its period while the engine lives: a
 * stuck engine thread stops the pings and systemd restarts the service. */
static void *watchdog_main(void *arg)
{
    app *a = arg;
    double period = (double)sdn_watchdog_usec(a->notify) / 1e6;
    pthread_mutex_lock(&a->wd_mu);
    while (!a->wd_stop) {
        if (!a->e || eng_alive(a->e, period))
            sdn_send(a->notify, "WATCHDOG=1");
        else
            log_msg(a->log, LOG_ERROR, "server", NULL,
                    "the engine thread has not stepped for %.0f s: not feeding the watchdog",
                    period);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + period / 2;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&a->wd_cv, &a->wd_mu, &ts);
    }
    pthread_mutex_unlock(&a->wd_mu);
    return NULL;
}

/* Weight loading progress: a bar on a terminal, a line per 10% otherwise,
 * and systemd's STATUS=. */
static void on_progress(void *user, size_t done, size_t total)
{
    app *a = user;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (pct == a->last_pct)
        return;
    a->last_pct = pct;
    sdn_send(a->notify, "STATUS=loading weights: %d%%", pct);
    if (a->tty && !log_is_json(a->log)) {
        char bar[41];
        int fill = pct * 40 / 100;
        memset(bar, '#', (size_t)fill);
        memset(bar + fill, '.', (size_t)(40 - fill));
        bar[40] = '\0';
        fprintf(stderr, "\rloading weights [%s] %3d%% (%.0f / %.0f MB)%s", bar, pct,
                (double)done / 1e6, (double)total / 1e6, pct == 100 ? "\n" : "");
    } else if (pct / 10 != a->last_decile) {
        a->last_decile = pct / 10;
        log_msg(a->log, LOG_INFO, "loader", NULL, "loading weights: %d%% (%.0f / %.0f MB)", pct,
                (double)done / 1e6, (double)total / 1e6);
    }
}

/* Hub download progress: a line per finished file and systemd's STATUS=. */
static void on_download(void *user, const char *file, size_t done, size_t total)
{
    app *a = user;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 0;
    if (pct == a->last_pct)
        return;
    a->last_pct = pct;
    sdn_send(a->notify, "STATUS=downloading %s: %d%%", file, pct);
    if (pct == 100)
        log_msg(a->log, LOG_INFO, "loader", NULL, "downloaded %s (%.1f MB)", file,
                (double)total / 1e6);
}

/* The loader's outcome, on the loop thread (an offline run reads a->failed
 * once load returns instead). */
static void loaded(app *a, void (*fn)(void *user))
{
    if (a->srv)
        srv_post(a->srv, fn, a);
}

static void *load(void *arg)
{
    app *a = arg;
    const serve_opts *o = &a->o;
    double t0 = inf_now();
    sdn_send(a->notify, "STATUS=loading %s", o->model);
    const char *dir = o->model, *tok_dir = NULL;
    /* ORG/NAME, for the model or the tokenizer: from the Hub cache, fetched
     * if need be (app/hub.h); a directory that exists wins */
    hub_config hc;
    hub_config_from_env(&hc);
    hc.revision = o->revision ? o->revision : "main";
    if (o->download_dir)
        hc.cache = o->download_dir;
    hc.progress = on_download;
    hc.user = a;
    int rc = hub_local_path(&hc, o->model, &dir, &a->model_dir, &a->err);
    if (!rc && o->tokenizer) {
        hc.tokenizer_only = 1;
        hc.revision = o->tokenizer_revision ? o->tokenizer_revision : "main";
        rc = hub_local_path(&hc, o->tokenizer, &a->tok_path, &a->tok_dir, &a->err);
    }
    if (rc) {
        a->failed = 2; /* a usage problem: the id, the token, the network */
        loaded(a, on_failed);
        return NULL;
    }
    if (a->model_dir)
        log_msg(a->log, LOG_INFO, "loader", NULL, "%s: %s", o->model, dir);
    if (a->tok_dir)
        log_msg(a->log, LOG_INFO, "loader", NULL, "tokenizer %s: %s", o->tokenizer, a->tok_dir);
    model_load_opts lo = app_backend_load_opts(&o->bc);
    rc = model_load_with(dir, &lo, &a->m, &a->err);
    if (!rc) {
        a->last_pct = a->last_decile = -1;
        model_prefetch(a->m, on_progress, a);
    }
    int bad_tok = 0; /* a malformed or unsupported tokenizer file: exit 2 */
    if (!rc)
        rc = gguf_model_tokenizer_dir(dir, a->tok_path, &tok_dir, &a->err);
    if (!rc && (rc = tok_create(tok_dir, &a->tk, &a->err)))
        bad_tok = rc == INF_ERR_FORMAT || rc == INF_ERR_UNSUPPORTED;
    if (!rc) {
        char note[256] = "";
        rc = tmpl_from_config(tok_dir, o->chat_template, &a->t, note, sizeof note, &a->err);
        if (!rc)
            log_msg(a->log, tmpl_get_origin(a->t) == TMPL_FROM_FALLBACK ? LOG_WARN : LOG_INFO,
                    "loader", NULL, "%s", note);
    }
    const model_config *c = rc ? NULL : &a->m->cfg;
    int max_len = 0;
    if (!rc) {
        max_len = model_context(c);
        if (o->max_model_len > max_len)
            rc = inf_fail(&a->err, INF_ERR_INVALID,
                          "--max-model-len %d is longer than the model's context (%d)",
                          o->max_model_len, max_len);
        else if (o->max_model_len > 0)
            max_len = o->max_model_len;
    }
    if (!rc && tok_vocab_size(a->tk) > c->vocab_size)
        rc = inf_fail(&a->err, INF_ERR_FORMAT, "%s: the tokenizer has %d pieces, the model %d",
                      o->model, tok_vocab_size(a->tk), c->vocab_size);
    if (!rc)
        rc = app_spec_load_draft(&a->spec, &a->err);
    app_backend tb = {0};
    app_backend_config bc = backend_config(a, max_len);
    bc.layer_need = model_layer_need; /* layer by layer: the loader's copy */
    bc.layer_packed = model_layer_packed; /* goes once packed */
    bc.layer_ctx = a->m;
    if (!rc) {
        rc = app_backend_open(a->m, &bc, &tb, &a->err);
        a->be = tb.be;
        if (!rc && tb.note[0])
            log_msg(a->log, LOG_INFO, "loader", NULL, "%s", tb.note);
        if (!rc && (size_t)(tb.num_blocks - 1) * (size_t)o->bc.block_size < (size_t)max_len)
            log_msg(a->log, LOG_WARN, "loader", NULL,
                    "the KV pool (%d blocks) cannot hold one sequence of %d tokens; long "
                    "requests will be refused",
                    tb.num_blocks - 1, max_len);
    }
    if (!rc)
        rc = app_spec_open(&a->spec, a->m, a->tk, &bc, tb.num_blocks, max_len, a->log, &a->err);
    if (!rc) {
        met_config mc = met_config_default();
        mc.model_name = o->served_name ? o->served_name : o->model;
        mc.max_model_len = max_len;
        mc.spec_k = app_spec_k(&a->spec);
        rc = met_create(&mc, &a->met, &a->err);
    }
    if (!rc) {
        eng_config ec = {.max_num_seqs = o->max_num_seqs, .max_num_batched_tokens = o->bc.max_tokens,
                         .max_prefill_while_decoding = o->prefill_decoding,
                         .max_model_len = max_len, .block_size = o->bc.block_size,
                         .num_blocks = tb.num_blocks, .seed = (uint64_t)(int64_t)o->seed,
                         .enable_prefix_caching = o->prefix_caching,
                         .no_async_scheduling = !o->async_scheduling,
                         .met = a->met, .log_interval_s = o->disable_log_stats ? 0 : 10,
                         .notify = gcall_on_engine_output,
                         .spec = a->spec.proposer, .spec_k = a->spec.k,
                         .spec_disable_batch = a->spec.disable_by_batch_size,
                         .spec_min_accept = a->spec.min_acceptance, .log = a->log};
        eng *e = NULL;
        if (o->fault_token >= 0 &&
            !(rc = be_fault_create(a->be, &(be_fault_config){o->fault_token}, &a->fault,
                                   &a->err)))
            log_msg(a->log, LOG_WARN, "loader", NULL, "fault injection: a step holding token "
                    "%d fails (--fault-token-id; for tests)", o->fault_token);
        if (!rc)
            rc = eng_create(&ec, a->m, a->tk, a->fault ? a->fault : a->be, &e, &a->err);
        pthread_mutex_lock(&a->wd_mu); /* the watchdog reads it under wd_mu */
        a->e = e;
        pthread_mutex_unlock(&a->wd_mu);
    }
    if (rc) {
        a->failed = bad_tok ? 2 : 1;
        loaded(a, on_failed);
        return NULL;
    }
    log_msg(a->log, LOG_INFO, "loader", NULL,
            "loaded %s in %.2f s: %d layers, hidden %d, vocab %d, %s weights%s; context %d, KV "
            "pool %d blocks of %d tokens, on %s (%s kernels)",
            o->model, inf_now() - t0, c->n_layers, c->hidden_size, c->vocab_size,
            model_quant_desc(a->m) ? model_quant_desc(a->m) /* pre-quantized: as run */
                                   : inf_dtype_name(a->m->layers[0].wq.dtype),
            o->bc.quant == APP_QUANT_NONE || model_is_w8a8(a->m) ? ""
            : strcmp(o->quantization, "int4") ? " (layers quantized to int8)"
                                              : " (layers quantized to int4)", max_len,
            tb.num_blocks - 1, o->bc.block_size, o->bc.device, tb.kernels);
    if (o->bc.quant == APP_QUANT_NONE && !strcmp(o->bc.device, "cpu") && model_quant_desc(a->m) &&
        a->m->layers[0].wq.dtype == INF_F32) /* a 4-bit file at 4 bytes a weight: say so */
        log_msg(a->log, LOG_WARN, "loader", NULL,
                "the checkpoint's quantized weights are held as f32 (%.2f GiB, 4 bytes a "
                "weight) to compute its exact function; --quantization int8 holds about 1 "
                "byte a weight, int4 about 0.56 (docs/quantization.md)",
                (double)model_weight_bytes(a->m) / (1 << 30));
    if (a->spec.proposer)
        log_msg(a->log, LOG_INFO, "loader", NULL,
                "speculative decoding: %s%s, %d tokens per step, off at %d or more running, "
                "acceptance floor %.2f", app_spec_name(&a->spec),
                a->spec.on_gpu ? " (its stages on the GPU)" : "", a->spec.k,
                a->spec.disable_by_batch_size,
                a->spec.min_acceptance);
    a->max_len = max_len;
    loaded(a, on_ready);
    return NULL;
}

static void usage(FILE *f, const arg_spec *specs, int n)
{
    fprintf(f, "usage: inferd [serve] (DIR | --model DIR) [options]\n\n"
               "An OpenAI-compatible server: /v1/completions, /v1/chat/completions,\n"
               "/v1/responses, /v1/models, /tokenize, /detokenize, /health, /metrics,\n"
               "/version. `inferd run-batch --help`: OpenAI batch files offline.\n"
               "Every option can also be set as INFERD_<NAME> (e.g. INFERD_API_KEY);\n"
               "underscore spellings (--max_model_len) work too, and so do vLLM's\n"
               "short aliases (-tp, -pp, -dp, -q) and the vLLM flags that change\n"
               "nothing here (said at start-up; docs/vllm-flags.md lists them).\n\n"
               "  inferd generate --help    offline generation\n\noptions:\n");
    args_help(f, specs, n);
}

static int serve_run(int argc, char **argv, const vargs *v, serve_offline_fn off, void *off_user)
{
    app *a = calloc(1, sizeof *a);
    if (!a)
        return 1;
    serve_opts *o = &a->o;
    *o = (serve_opts){.host = "127.0.0.1", .port = 8000, .max_num_seqs = 64,
                      .bc = app_backend_config_default(), .prefill_decoding = -1,
                      .prefix_caching = 1, .async_scheduling = 1,
                      .max_waiting = 1024, .max_connections = 1024, .timeout_s = 30,
                      .request_timeout_s = 60,
                      .grace_s = 30, .max_body_mb = 8, .max_logprobs = 20, .max_n = 16,
                      .fault_token = -1};
    o->bc.device = NULL; /* none named: chosen after parsing */
    const arg_spec specs[] = {
        {"model", ARG_STR, &o->model, "DIR", "Hugging Face Llama model directory, a GGUF file, "
                                             "or a Hub id ORG/NAME (required; may come first, "
                                             "positionally)"},
        {"tokenizer", ARG_STR, &o->tokenizer, "DIR", "tokenizer and chat template directory, "
                                                     "or a Hub id ORG/NAME whose tokenizer "
                                                     "files alone are fetched (default: "
                                                     "--model; a GGUF file's own metadata)"},
        {"tokenizer-revision", ARG_STR, &o->tokenizer_revision, "REV",
         "Hub branch, tag or commit of a tokenizer given by id (default main)"},
        {"revision", ARG_STR, &o->revision, "REV", "Hub branch, tag or commit of a model given "
                                                    "by id (default main)"},
        {"download-dir", ARG_STR, &o->download_dir, "DIR", "the Hub cache (default: "
                                                          "$HF_HUB_CACHE, $HF_HOME/hub or "
                                                          "~/.cache/huggingface/hub)"},
        {"host", ARG_STR, &o->host, "ADDR", "listen address (default 127.0.0.1)"},
        {"port", ARG_INT, &o->port, "N", "listen port (default 8000)"},
        {"api-key", ARG_STRS, &o->api_keys, "KEY", "require \"Authorization: Bearer KEY\" on "
                                                   "/v1, /tokenize, /detokenize (repeatable: "
                                                   "any of the keys)"},
        {"api-key-file", ARG_STR, &o->api_key_file, "FILE", "API keys, one per line; read again "
                                                            "on SIGHUP"},
        {"ssl-keyfile", ARG_STR, &o->ssl_keyfile, "FILE", "TLS private key (PEM): serve HTTPS"},
        {"ssl-certfile", ARG_STR, &o->ssl_certfile, "FILE", "TLS certificate chain (PEM)"},
        {"ssl-ca-certs", ARG_STR, &o->ssl_ca_certs, "FILE", "CA certificates (PEM) that sign "
                                                            "client certificates"},
        {"ssl-cert-reqs", ARG_INT, &o->ssl_cert_reqs, "N", "client certificates: 0 none "
                                                           "(default), 1 optional, 2 required"},
        {"allowed-origins", ARG_STR, &o->allowed_origins, "JSON", "CORS: origins allowed, e.g. "
                                                                  "'[\"https://a.example\"]' "
                                                                  "(default: CORS off)"},
        {"allowed-methods", ARG_STR, &o->allowed_methods, "JSON", "CORS: methods allowed "
                                                                  "(default [\"*\"])"},
        {"allowed-headers", ARG_STR, &o->allowed_headers, "JSON", "CORS: request headers "
                                                                  "allowed (default [\"*\"])"},
        {"allow-credentials", ARG_FLAG, &o->allow_credentials, NULL, "CORS: allow credentials"},
        {"served-model-name", ARG_STR, &o->served_name, "NAME", "model id in the API (default: "
                                                                "--model as given)"},
        {"max-model-len", ARG_INT, &o->max_model_len, "N", "context length (default: the "
                                                           "model's)"},
        {"max-num-seqs", ARG_INT, &o->max_num_seqs, "N", "sequences running at once (default 64)"},
        {"max-num-batched-tokens", ARG_INT, &o->bc.max_tokens, "N", "tokens per engine step "
                                                              "(default 512)"},
        {"max-prefill-tokens-while-decoding", ARG_INT, &o->prefill_decoding, "N",
         "tokens per step of prompts longer than 8N while other requests decode, or one "
         "per decoding request if more (default 8 on the CPU; 0, the step budget alone, "
         "on CUDA)"},
        {"block-size", ARG_INT, &o->bc.block_size, "N", "KV cache block size in tokens (default 16)"},
        {"kv-cache-memory", ARG_STR, &o->kv_mem, "BYTES", "KV cache size, e.g. 4GiB (default "
                                                          "4GiB or what the sequences need; on "
                                                          "CUDA: from --gpu-memory-utilization)"},
        {"device", ARG_STR, &o->bc.device, "DEV", "cpu or cuda (default: cuda when a CUDA build "
                                                "finds a GPU, else cpu)"},
        {"gpu-memory-utilization", ARG_FLOAT, &o->bc.gpu_mem, "F", "share of each GPU's memory "
                                                                "to use (default 0.9)"},
        {"threads", ARG_INT, &o->bc.threads, "N", "CPU threads (default: all cores)"},
        {"kernels", ARG_STR, &o->bc.kernels, "NAME", "CPU kernels: auto, avx512bf16, avx512, avx2, generic, generic-bf16"},
        {"quantization", ARG_STR, &o->quantization, "NAME", "none (default), int8 (W8A8) "
                                                            "or int4 (W4A8, groups of 32): "
                                                            "the layers' weights (one GPU on CUDA)"},
        {"tensor-parallel-size", ARG_INT, &o->bc.tp, "N", "1 on the CPU"},
        {"seed", ARG_INT, &o->seed, "N", "seed for requests that bring none (default 0)"},
        {"chat-template", ARG_STR, &o->chat_template, "FILE|TEMPLATE|NAME",
         "a Jinja file, an inline Jinja template, or llama-2, mistral, chatml, zephyr, "
         "llama-3, plain (default: the model's own)"},
        {"tool-call-parser", ARG_STR, &o->tool_parser, "NAME", "find tool calls in the output: "
         "hermes, qwen3, llama3_json, mistral, deepseek_v3 or openai"},
        {"enable-auto-tool-choice", ARG_FLAG, &o->auto_tools, NULL, "allow tool_choice \"auto\" "
                                                                     "(needs --tool-call-parser)"},
        {"reasoning-parser", ARG_STR, &o->reasoning_parser, "NAME", "split reasoning into "
         "reasoning_content: deepseek_r1 or qwen3"},
        {"max-waiting", ARG_INT, &o->max_waiting, "N", "queued requests before 503 (default "
                                                       "1024)"},
        {"max-connections", ARG_INT, &o->max_connections, "N", "concurrent connections "
                                                               "(default 1024)"},
        {"timeout", ARG_INT, &o->timeout_s, "SECONDS", "idle time allowed while a request is "
                                                       "read (default 30)"},
        {"request-timeout", ARG_INT, &o->request_timeout_s, "SECONDS", "a whole request (headers "
                                                                      "and body) must arrive in "
                                                                      "this (default 60; 0: none)"},
        {"shutdown-grace", ARG_INT, &o->grace_s, "SECONDS", "on SIGTERM, time in-flight requests "
                                                            "get (default 30)"},
        {"max-body-mb", ARG_INT, &o->max_body_mb, "N", "request body limit in MiB (default 8)"},
        {"max-logprobs", ARG_INT, &o->max_logprobs, "N", "logprobs/top_logprobs limit (default "
                                                         "20)"},
        {"max-n", ARG_INT, &o->max_n, "N", "choices per request limit (default 16)"},
        {"disable-log-stats", ARG_FLAG, &o->disable_log_stats, NULL, "no periodic stats line"},
        {"disable-access-log", ARG_FLAG, &o->disable_access_log, NULL, "no line per HTTP "
                                                                       "request"},
        {"log-format", ARG_STR, &o->log_format, "FMT", "text (default) or json"},
        {"log-level", ARG_STR, &o->log_level, "LEVEL", "debug, info (default), warn, error"},
        {"enable-prefix-caching", ARG_FLAG, &o->prefix_caching, NULL, "reuse cached KV blocks of "
                                                                     "shared prefixes (default)"},
        {"no-enable-prefix-caching", ARG_FLAG_OFF, &o->prefix_caching, NULL, "turn prefix "
                                                                            "caching off"},
        {"async-scheduling", ARG_FLAG, &o->async_scheduling, NULL, "plan the next decode step "
                                                                   "while the device runs this "
                                                                   "one (CUDA; default)"},
        {"no-async-scheduling", ARG_FLAG_OFF, &o->async_scheduling, NULL, "one step at a "
                                                                         "time"},
        APP_SPEC_ARG_SPECS(&o->spec),
        {"fault-token-id", ARG_INT, &o->fault_token, "N", "testing: a step whose batch holds "
                                                          "token N fails (the fault path)"},
        {"config", ARG_STR, &o->config, "FILE", "YAML config file: keys are these option names; "
                                                "flags override it, it overrides INFERD_*"},
    };
    int n_specs = (int)(sizeof specs / sizeof *specs), help = 0, rc = 1;
    inf_err err = {0};
    cfg_file *cf = NULL;
    /* environment < config file < command line */
    if (args_from_env(specs, n_specs, "INFERD_", &err) ||
        args_parse(specs, n_specs, argc, argv, &help, &err)) {
        fprintf(stderr, "inferd: %s\n", err.msg);
        free(a);
        return 2;
    }
    if (o->config && !help) {
        const char *path = o->config;
        if (args_from_env(specs, n_specs, "INFERD_", &err) ||
            cfg_load(path, specs, n_specs, &cf, &err) ||
            args_parse(specs, n_specs, argc, argv, &help, &err)) {
            fprintf(stderr, "inferd: %s\n", err.msg);
            cfg_free(cf);
            free(a);
            return 2;
        }
    }
    if (help) {
        usage(stdout, specs, n_specs);
        free(a);
        return 0;
    }
    app_backend_config *bc = &o->bc;
    if (!bc->device) /* cuda when a CUDA build finds a GPU, else cpu */
        bc->device = app_backend_default_device();
    bc->quant = app_backend_quant(o->quantization);
    const char *bad = !o->model ? "--model is required (see --help)"
                      : (strcmp(bc->device, "cpu") && strcmp(bc->device, "cuda"))
                          ? "--device is cpu or cuda"
                      : (bc->tp != 1 && !strcmp(bc->device, "cpu"))
                          ? "--tensor-parallel-size: only 1 on the CPU"
                      : bc->quant < 0 ? "--quantization is none, int8 or int4"
                      : (bc->quant != APP_QUANT_NONE && bc->tp != 1)
                          ? "--quantization int8 and int4 run on one GPU (--tensor-parallel-size 1)"
                      : (bc->gpu_mem <= 0 || bc->gpu_mem > 1)
                          ? "--gpu-memory-utilization is in (0, 1]"
                      : (o->max_num_seqs < 1 || bc->max_tokens < 1 || bc->block_size < 1 ||
                         o->max_body_mb < 1 || o->port < 0 || o->port > 65535 ||
                         o->prefill_decoding < -1)
                          ? "sizes and limits must be positive"
                      : (o->kv_mem && !parse_size(o->kv_mem)) ? "--kv-cache-memory: expected e.g. "
                                                                "4GiB or 512MiB"
                                                              : NULL;
    if (bad) {
        fprintf(stderr, "inferd: %s\n", bad);
        free(a);
        return 2;
    }
    inf_err perr = {0};
    tcall_kind tk = TCALL_HERMES;
    rsn_kind rk = RSN_QWEN3;
    if ((o->tool_parser && tcall_kind_parse(o->tool_parser, &tk, &perr)) ||
        (o->reasoning_parser && rsn_kind_parse(o->reasoning_parser, &rk, &perr)) ||
        (o->auto_tools && !o->tool_parser &&
         inf_fail(&perr, INF_ERR_INVALID, "--enable-auto-tool-choice needs --tool-call-parser"))) {
        fprintf(stderr, "inferd: %s\n", perr.msg);
        free(a);
        return 2;
    }
    o->tool_kind = o->tool_parser ? (int)tk : -1;
    o->reasoning_kind = o->reasoning_parser ? (int)rk : -1;
    if (bc->max_tokens < o->max_num_seqs)
        o->max_num_seqs = bc->max_tokens; /* every running sequence needs a token per step */
    if (o->prefill_decoding < 0) /* a CPU pays per token; a GPU hardly does until it is full */
        o->prefill_decoding = !strcmp(bc->device, "cpu") ? 8 : 0;
    log_config lc = log_config_default();
    static const char *levels[] = {"debug", "info", "warn", "error"};
    int lv = -1;
    for (int i = 0; i < 4 && o->log_level; i++)
        if (!strcmp(o->log_level, levels[i]))
            lv = i;
    if ((o->log_format && strcmp(o->log_format, "text") && strcmp(o->log_format, "json")) ||
        (o->log_level && lv < 0)) {
        fprintf(stderr, "inferd: --log-format is text or json; --log-level is debug, info, warn "
                        "or error\n");
        cfg_free(cf);
        free(a);
        return 2;
    }
    lc.format = o->log_format && !strcmp(o->log_format, "json") ? LOG_JSON : LOG_TEXT;
    lc.min_level = lv >= 0 ? (log_level)lv : LOG_INFO;
    a->tty = isatty(STDERR_FILENO);
    if (app_spec_parse(&o->spec, &a->spec, &err) || log_create(&lc, &a->log, &err) ||
        sdn_create(&a->notify, &err)) {
        fprintf(stderr, "inferd: %s\n", err.msg);
        log_destroy(a->log);
        cfg_free(cf);
        free(a);
        return 2;
    }
    for (int i = 0; i < v->n_notes; i++) /* vLLM's flags that change nothing here */
        log_msg(a->log, LOG_WARN, "args", NULL, "%s", v->notes[i]);
    api_config ac = {.model_id = o->served_name ? o->served_name : o->model,
                     .api_keys = o->api_keys.v, .n_api_keys = o->api_keys.n,
                     .api_key_file = o->api_key_file,
                     .cors = {o->allowed_origins, o->allowed_methods, o->allowed_headers,
                              o->allow_credentials},
                     .max_model_len = 0, .max_waiting = o->max_waiting,
                     .limits = oai_limits_default()};
    ac.limits.max_logprobs = o->max_logprobs;
    ac.limits.auto_tools = o->auto_tools;
    ac.tool_parser = o->tool_kind;
    ac.reasoning_parser = o->reasoning_kind;
    ac.limits.max_n = o->max_n;
    srv_config sc = srv_config_default();
    sc.host = o->host;
    sc.port = o->port;
    sc.max_body = (size_t)o->max_body_mb << 20;
    sc.max_connections = o->max_connections;
    sc.timeout_s = o->timeout_s;
    sc.request_timeout_s = o->request_timeout_s;
    sc.grace_s = o->grace_s;
    sc.log = a->log;
    sc.access_log = !o->disable_access_log;
    sc.on_shutdown = on_shutdown;
    sc.on_reload = on_reload;
    sc.user = a;
    sc.tls = (tls_config){o->ssl_keyfile, o->ssl_certfile, o->ssl_ca_certs, o->ssl_cert_reqs};
    if (api_create(&ac, &a->api, &err) ||
        (!off && srv_create(&sc, api_handle, a->api, &a->srv, &err))) {
        /* a bad key file, TLS or CORS setting is a usage error (2: systemd
         * does not restart); a port in use may pass (1) */
        rc = err.code == INF_ERR_INVALID || err.code == INF_ERR_FORMAT ? 2 : 1;
        log_msg(a->log, LOG_ERROR, "server", NULL, "%s", err.msg);
        sdn_send(a->notify, "STATUS=failed: %s", err.msg);
        api_destroy(a->api);
        sdn_destroy(a->notify);
        log_destroy(a->log);
        cfg_free(cf);
        free(a);
        return rc;
    }
    pthread_mutex_init(&a->wd_mu, NULL);
    pthread_cond_init(&a->wd_cv, NULL);
    if (off) { /* no HTTP: load here, then the command runs on this thread */
        load(a);
        if (a->failed) {
            log_msg(a->log, LOG_ERROR, "loader", NULL, "%s", a->err.msg);
            rc = a->failed;
        } else {
            api_set_ready(a->api, a->m, a->tk, a->t, a->e, a->met, a->max_len);
            rc = off(off_user, a->api);
        }
        goto teardown;
    }
    api_set_server(a->api, a->srv);
    log_msg(a->log, LOG_INFO, "server", NULL, "inferd %s (%s) listening on %s://%s:%d, loading %s",
            inf_version(), inf_version_build(), srv_is_tls(a->srv) ? "https" : "http", o->host, srv_port(a->srv), o->model);
    if (sdn_watchdog_usec(a->notify) &&
        pthread_create(&a->watchdog, NULL, watchdog_main, a) == 0)
        a->wd_running = 1;
    if (pthread_create(&a->loader, NULL, load, a) != 0) {
        log_msg(a->log, LOG_ERROR, "server", NULL, "cannot start the loader thread");
    } else {
        srv_run(a->srv);
        pthread_join(a->loader, NULL);
        rc = a->failed;
    }
    if (a->wd_running) {
        pthread_mutex_lock(&a->wd_mu);
        a->wd_stop = 1;
        pthread_cond_signal(&a->wd_cv);
        pthread_mutex_unlock(&a->wd_mu);
        pthread_join(a->watchdog, NULL);
    }
teardown:
    pthread_cond_destroy(&a->wd_cv);
    pthread_mutex_destroy(&a->wd_mu);
    eng_destroy(a->e);
    srv_destroy(a->srv);
    app_spec_close(&a->spec);
    be_destroy(a->fault);
    be_destroy(a->be);
    met_destroy(a->met);
    tmpl_destroy(a->t);
    tok_destroy(a->tk);
    model_destroy(a->m);
    free(a->model_dir);
    free(a->tok_dir);
    api_destroy(a->api);
    if (!off)
        log_msg(a->log, LOG_INFO, "server", NULL, "stopped");
    sdn_destroy(a->notify);
    log_destroy(a->log);
    cfg_free(cf);
    free(a);
    return rc;
}

int serve_main(int argc, char **argv)
{
    vargs v;
    inf_err err = {0};
    if (vargs_normalize(argc, argv, &v, &err)) {
        fprintf(stderr, "inferd: %s\n", err.msg);
        return 2;
    }
    int rc = serve_run(v.argc, v.argv, &v, NULL, NULL);
    vargs_free(&v);
    return rc;
}

int serve_offline(int argc, char **argv, serve_offline_fn fn, void *user)
{
    vargs v;
    inf_err err = {0};
    if (vargs_normalize(argc, argv, &v, &err)) {
        fprintf(stderr, "inferd: %s\n", err.msg);
        return 2;
    }
    int rc = serve_run(v.argc, v.argv, &v, fn, user);
    vargs_free(&v);
    return rc;
}
