/* gen_: offline generation for a fixed set of sequences through the backend
 * seam: every step is one flattened batch mixing prompt chunks and decode
 * tokens, over paged KV blocks from kv_. It serves `inferd generate`, tests
 * and benchmarks; the serving scheduler (continuous batching, preemption)
 * replaces it for the HTTP server. */
#ifndef INFERD_GEN_H
#define INFERD_GEN_H

#include "be.h"
#include "kv.h"
#include "smp.h"

enum { GEN_RUNNING = 0, GEN_FINISH_LENGTH = 1, GEN_FINISH_EOS = 2 };

typedef struct gen_seq gen_seq;

/* Called for every generated token, in order, as soon as it is sampled. */
typedef void (*gen_token_fn)(void *user, int seq, int32_t token);

typedef struct gen_request {
    const int32_t *prompt;   /* [n_prompt], BOS included if wanted          */
    int n_prompt;
    int max_tokens;          /* tokens to generate at most                  */
    smp_params sampling;
    int ignore_eos;          /* keep going past EOS (benchmarks)            */
} gen_request;

typedef struct gen_result {
    int32_t *tokens;         /* [n] generated tokens (malloc'd; gen_results_free) */
    int n;
    int finish;              /* GEN_FINISH_*                                 */
} gen_result;

typedef struct gen_config {
    int max_step_tokens;     /* token budget of one step (<= backend max)   */
    int chunk;               /* prompt tokens per sequence per step; <= 0: budget */
    const int32_t *eos;      /* ids that end a sequence                     */
    int n_eos;
    int vocab;
    int max_context;         /* prompt + output never exceed this           */
    gen_token_fn on_token;   /* may be NULL                                 */
    void *user;
} gen_config;

/* Runs every request to completion; results[i] belongs to reqs[i]. Fails
 * (nothing leaked, KV blocks returned) when the KV pool cannot hold the
 * sequences, a prompt is empty or too long, or the backend fails. */
int gen_run(be_backend *be, kv_pool *kv, smp_ctx *smp, const gen_config *cfg,
            const gen_request *reqs, int n, gen_result *results, inf_err *err);

void gen_results_free(gen_result *results, int n);

#endif
