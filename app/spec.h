/* app_spec: speculative decoding as the user asks for it, for the server
 * and `inferd generate` alike. The flags (vLLM's --speculative-config JSON,
 * or the older --speculative-model / --num-speculative-tokens /
 * --ngram-prompt-lookup-max/min) are declared, parsed and turned into a
 * proposer here, once: the n-gram lookup, a draft model with its own
 * backend, or an MLP speculator fed the target's hidden states. */
#ifndef INFERD_APP_SPEC_H
#define INFERD_APP_SPEC_H

#include "app/args.h"
#include "app/backend.h"
#include "engine/log.h"
#include "engine/model.h"
#include "engine/spec.h"
#include "engine/tok.h"

/* The flags as given (strings borrowed from argv, the environment or the
 * config file). */
typedef struct app_spec_args {
    const char *config;   /* --speculative-config JSON                      */
    const char *model;    /* --speculative-model "[ngram]" | DIR            */
    int num_tokens;       /* --num-speculative-tokens; 0: not given         */
    int ngram_max, ngram_min; /* --ngram-prompt-lookup-max/min; 0: not given */
} app_spec_args;

/* The five option entries of an arg_spec table, pointing into *a. */
#define APP_SPEC_ARG_SPECS(a)                                                                    \
    {"speculative-config", ARG_STR, &(a)->config, "JSON",                                        \
     "speculative decoding, as vLLM: {\"method\":\"ngram\",\"num_speculative_tokens\":4,"        \
     "\"prompt_lookup_max\":4}, {\"model\":\"DRAFT_DIR\",\"num_speculative_tokens\":4} or "       \
     "{\"model\":\"MLP_SPECULATOR_DIR\"}"},                                                       \
    {"speculative-model", ARG_STR, &(a)->model, "DIR", "older spelling: \"[ngram]\", a draft "   \
                                                       "model or an MLP speculator directory"},  \
    {"num-speculative-tokens", ARG_INT, &(a)->num_tokens, "K", "older spelling (default 4; "     \
                                                                "an MLP speculator's n_predict "  \
                                                                "if fewer)"},                     \
    {"ngram-prompt-lookup-max", ARG_INT, &(a)->ngram_max, "N", "older spelling (default 4)"},   \
    {"ngram-prompt-lookup-min", ARG_INT, &(a)->ngram_min, "N", "older spelling (default 1)"}

typedef enum app_spec_method {
    APP_SPEC_OFF, APP_SPEC_NGRAM, APP_SPEC_DRAFT, APP_SPEC_MLP
} app_spec_method;

typedef struct app_spec {
    app_spec_method method;
    const char *model;        /* draft model or MLP speculator directory   */
    int k;                    /* num_speculative_tokens                    */
    int k_given;              /* k came from the options                   */
    int lookup_max, lookup_min;
    int disable_by_batch_size;
    double min_acceptance;
    char model_buf[4096];
    /* built by app_spec_load_draft / app_spec_open, freed by app_spec_close */
    model *dm;                /* the draft model, its tokenizer, backend   */
    tok *dtk;
    be_backend *dbe;
    spec_proposer *proposer;
    int on_gpu;               /* the MLP speculator's stages run on the GPU */
} app_spec;

/* Fills s from the flags (nothing loaded): the method, k (default 4),
 * n-gram lookup, disable_by_batch_size (default 8), min_acceptance
 * (default 0.3). Bad JSON or values: INF_ERR_INVALID naming the key. */
int app_spec_parse(const app_spec_args *a, app_spec *s, inf_err *err);

/* Tokens drafted per step as the backend must be sized: 0 when off. */
int app_spec_k(const app_spec *s);

/* A draft model is loaded before the target's backend (on CUDA the target
 * budgets its memory around it): s->dm, or nothing for other methods. */
int app_spec_load_draft(app_spec *s, inf_err *err);

/* Builds s->proposer for the target m (tokenizer tk) whose backend was
 * opened with target_bc and holds num_blocks KV blocks: a draft model's
 * backend shares that block count; an MLP speculator is checked against
 * m's vocabulary and hidden size, and k capped by its n_predict when k was
 * not given (refused when it was and is larger). log may be NULL. */
int app_spec_open(app_spec *s, const model *m, const tok *tk,
                  const app_backend_config *target_bc, int num_blocks, int max_len, logger *log,
                  inf_err *err);

/* A short description for logs: "n-gram prompt lookup" or the directory. */
const char *app_spec_name(const app_spec *s);

/* Frees what load_draft and open built (NULL-safe fields). */
void app_spec_close(app_spec *s);

#endif
