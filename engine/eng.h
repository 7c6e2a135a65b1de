/* eng_: the engine thread. Any thread submits requests; the engine thread
 * loops: scheduler step -> one flattened batch through the backend -> sample
 * -> detokenize incrementally -> stop/EOS/length checks -> output appended to
 * each request's buffer -> the notify hook (the front end's wake-up). The
 * engine never touches a socket; the front end never calls into the step. */
#ifndef INFERD_ENG_H
#define INFERD_ENG_H

#include "be.h"
#include "log.h"
#include "lp.h"
#include "metrics.h"
#include "model.h"
#include "smp.h"
#include "spec.h"
#include "tok.h"

typedef struct eng eng;
typedef struct eng_req eng_req;

/* Called on the engine thread whenever r has new output (or finished).
 * Must be quick and must not call back into the engine. */
typedef void (*eng_notify_fn)(void *user, eng_req *r);

typedef struct eng_config {
    int max_num_seqs;           /* running sequences at most               */
    int max_num_batched_tokens; /* token budget of one step                */
    int max_prefill_while_decoding; /* prompt tokens per step while others
                                       decode (0: the step budget alone)   */
    int max_model_len;          /* context limit                           */
    int block_size;
    int num_blocks;             /* KV blocks (the backend holds as many)    */
    uint64_t seed;              /* seeds requests that bring no seed        */
    int enable_prefix_caching;
    int no_async_scheduling;    /* never run a decode step ahead (eng_step.c) */
    met_registry *met;          /* may be NULL                              */
    logger *log;                /* may be NULL (plain stderr)               */
    /* speculative decoding (spec NULL: off) */
    spec_proposer *spec;        /* borrowed; outlives the engine            */
    int spec_k;                 /* tokens drafted per step, at most         */
    int spec_disable_batch;     /* no drafting when this many or more run
                                   (0: never disabled)                      */
    double spec_min_accept;     /* a request whose recent acceptance falls
                                   below this pauses drafting, backing off  */
    double log_interval_s;      /* stats line on stderr while busy; 0: off  */
    eng_notify_fn notify;
    void *notify_user;
} eng_config;

/* The engine borrows m, tk and be (they must outlive it); it starts its
 * thread at once. */
int eng_create(const eng_config *cfg, const model *m, const tok *tk, be_backend *be,
               eng **out, inf_err *err);

/* Stops the thread: requests still inside finish with reason ABORT (their
 * owners are notified), then joins. NULL-safe. */
void eng_destroy(eng *e);

/* ---- requests ------------------------------------------------------------ */

enum {
    ENG_FINISH_NONE = 0,
    ENG_FINISH_STOP = 1,   /* EOS, a stop token id or a stop string         */
    ENG_FINISH_LENGTH = 2, /* max_tokens or the context limit               */
    ENG_FINISH_ABORT = 3,  /* cancelled                                     */
    ENG_FINISH_ERROR = 4,  /* the backend failed; message in eng_out.error  */
};

typedef struct eng_params {
    smp_params sampling;
    int has_seed;         /* else the engine draws a seed                  */
    int max_tokens;       /* >= 1                                          */
    int min_tokens;       /* EOS and stop ids are masked before this many   */
    int ignore_eos;
    const char *const *stop; /* stop strings (copied at submit)            */
    int n_stop;
    const int32_t *stop_ids; /* copied                                     */
    int n_stop_ids;
    const int32_t *bias_ids; /* logit_bias (copied)                        */
    const float *bias;
    int n_bias;
    int logprobs;         /* -1: none; else alternatives per token (0..20)  */
    int prompt_logprobs;  /* 0 (the default): none; else 1 + alternatives
                             per prompt token (1..21; zero-initialised
                             params ask nothing): each prompt token after
                             the first gets
                             its logprob given those before it (vLLM's
                             prompt_logprobs). Such a request computes every
                             prompt token (no prefix-cache hits)           */
    const char *cache_salt; /* NULL: share cached prefixes with everyone    */
    int no_speculation;   /* the request opted out of speculative decoding  */
    const char *grammar;  /* GBNF the output must match (gram_parse's syntax,
                             already checked by the caller; copied), or NULL.
                             The engine adds its mask to the request's logits
                             processors (after the caller's), sharing the
                             compiled automaton between requests with the
                             same grammar; the request stops (STOP) once only
                             EOS can follow                                */
    int keep_special;     /* special tokens in the text (skip_special_tokens
                             false; tok.h's TOK_KEEP_SPECIAL)               */
    int parse_special;    /* also decode the output with special tokens kept
                             into eng_out.stext, for the front end's output
                             parsers (harmony's <|channel|>, [TOOL_CALLS]);
                             text stays as keep_special says. Cut at the
                             same stop strings; the stop token is in neither */
    /* Logits processors of the caller's (a grammar mask), applied after the
     * built-in ones (logit_bias, min_tokens, penalties: lp.h). The request
     * owns them from eng_req_create on, also when it fails. */
    lp_proc *const *procs;
    int n_procs;
} eng_params;

/* Prompt-logprob rows one step computes, over all requests (beyond
 * max_num_seqs * (spec_k + 1) rows of next-token logits): a backend must
 * take that many logit rows in a batch. Longer prompts asking for prompt
 * logprobs are fed in chunks of this many tokens. */
#define ENG_PROMPT_LOGPROB_ROWS 32

/* Creates a request for one sequence (one choice): prompt ids (BOS included
 * as wanted) and parameters, all copied. The caller holds one reference. */
int eng_req_create(const int32_t *prompt, int n_prompt, const eng_params *p,
                   eng_req **out, inf_err *err);
void eng_req_ref(eng_req *r);
void eng_req_unref(eng_req *r); /* frees at zero; any thread */

/* Arbitrary pointer for the front end (e.g. its connection). */
void eng_req_set_user(eng_req *r, void *user);
void *eng_req_user(const eng_req *r);

/* Hands r to the engine (which takes its own reference). Refused with
 * INF_ERR_NOSPACE when max_waiting requests already wait (the caller answers
 * 503), INF_ERR_INVALID when the request can never fit. */
int eng_submit(eng *e, eng_req *r, int max_waiting, inf_err *err);

/* Asks the engine to stop r; it finishes with ENG_FINISH_ABORT at the next
 * step and its KV blocks are freed. Any thread; idempotent. */
void eng_cancel(eng *e, eng_req *r);

/* One token's logprob record; strings live in eng_out.pool. */
typedef struct eng_lp_alt {
    size_t off, len;      /* the piece's text in pool                      */
    float logprob;
    int32_t id;           /* its token id; its rank is its index + 1       */
} eng_lp_alt;

typedef struct eng_lp {
    size_t off, len;      /* text this token added to the output (a prompt
                             token: its piece), in pool                    */
    float logprob;
    int32_t id;           /* the token                                      */
    int rank;             /* 1 + tokens with a higher logit                 */
    int alt0, n_alt;      /* alternatives: alts[alt0 .. alt0+n_alt)         */
} eng_lp;

/* What happened since the last eng_req_take. */
typedef struct eng_out {
    char *text;           /* new output text (whole UTF-8 characters)       */
    size_t len, cap;
    char *stext;          /* parse_special: the same new output with special
                             tokens kept (else empty)                       */
    size_t slen, scap;
    eng_lp *lps;          /* one per new token, when logprobs were asked    */
    int n_lps, cap_lps;
    eng_lp *plps;         /* prompt logprobs (prompt_logprobs >= 0): the
                             next prompt tokens', from the second on, in order;
                             the last comes before the first output token   */
    int n_plps, cap_plps;
    eng_lp_alt *alts;
    int n_alts, cap_alts;
    char *pool;           /* strings of lps and alts                        */
    size_t pool_len, pool_cap;
    int32_t *ids;         /* the new tokens' ids, a stop token's included   */
    int n_ids, cap_ids;
    int finish;           /* ENG_FINISH_*; NONE while running                */
    int stop_index;       /* which stop string ended it, or -1              */
    int32_t stop_token;   /* which stop token id ended it, or -1            */
    int n_prompt;         /* prompt tokens                                  */
    int n_output;         /* generated tokens so far                        */
    int n_cached;         /* prompt tokens served from the prefix cache     */
    double t_first;       /* inf_now() of the first output token, 0 before  */
    char error[512];
} eng_out;

/* Moves r's pending output into *dst (dst's previous contents are
 * discarded, its buffers reused): text and lps are the new part; finish and
 * counters are current. Any thread. */
void eng_req_take(eng_req *r, eng_out *dst);

/* Whether r has finished (its last output may not be taken yet). Any
 * thread. The notify hook sees it true exactly once: on r's last notify. */
int eng_req_finished(eng_req *r);
void eng_out_free(eng_out *o);

/* Whether r has its first output token, or has finished: by then all its
 * prompt logprobs are out (a stream that sends them with its first chunk,
 * as vLLM, waits for this before taking). Any thread. */
int eng_req_started(eng_req *r);

/* ---- state for the front end --------------------------------------------- */

/* Whether the engine thread is healthy: waiting for work, or through a step
 * within the last max_age seconds (the systemd watchdog asks). Any thread. */
int eng_alive(eng *e, double max_age);

#endif
