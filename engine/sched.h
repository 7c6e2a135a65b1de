/* sched_: continuous batching. Each step, one loop over a token budget
 * decides how many tokens every sequence computes (vLLM's v1 design: no
 * separate prefill and decode paths): running sequences first (their next
 * decode token, or the next chunk of a prompt being prefilled), then waiting
 * sequences in arrival order, their prompts cut into chunks so a long prompt
 * never stalls the decoding ones. KV blocks are taken from kv_ as sequences
 * grow; when none are left, the most recently admitted running sequence is
 * preempted (its blocks freed, itself put back at the head of the waiting
 * queue to be recomputed later), never failed. With prefix caching on in the
 * KV pool, a sequence admitted from the queue starts from the cached blocks of
 * its longest cached prefix, and every full computed block is registered for
 * the sequences that come after. */
#ifndef INFERD_SCHED_H
#define INFERD_SCHED_H

#include "kv.h"

/* A prompt is long (capped while others decode) when its uncached tokens
 * exceed this many times max_prefill_while_decoding. */
#define SCHED_LONG_PROMPT 8

typedef struct sched_config {
    int max_num_seqs;           /* running at most                        */
    int max_num_batched_tokens; /* tokens per step                        */
    int max_model_len;          /* a sequence never grows past this       */
    /* Tokens of long prompts (over SCHED_LONG_PROMPT times this, uncached; recompute after
     * preemption counts) one step may hold while other sequences are
     * decoding, or one per decoding sequence when that is more; 0: only the
     * step budget limits them. On a CPU a prompt token costs about a tenth
     * of a decode step, so a 512-token chunk would stall every stream for
     * dozens of decode steps. */
    int max_prefill_while_decoding;
    /* Every layer attends to at most this many positions (the model's
     * sliding window; 0: none): a running sequence's blocks wholly before
     * its window are given back each step (kv_seq_drop_front). */
    int kv_window;
} sched_config;

enum { SCHED_WAITING = 0, SCHED_RUNNING = 1, SCHED_DONE = 2 };

/* A sequence as the scheduler sees it. The engine owns the struct and its
 * tokens; the scheduler owns state, n_computed and kv between sched_add and
 * sched_remove. */
typedef struct sched_seq {
    int32_t *tokens;     /* prompt, then output; capacity >= max_model_len */
    int n_tokens;
    int n_prompt;
    int n_computed;      /* leading tokens whose KV is in the cache        */
    kv_seq kv;
    int state;
    int n_preempt;       /* times preempted                                */
    uint64_t salt;       /* prefix-cache isolation (0: shared)             */
    int n_cached;        /* prompt tokens its first admission found cached */
    int no_prefix_hit;   /* computes every token (never starts from cached
                            blocks): prompt logprobs need every row        */
    int admitted;        /* has been admitted once                         */
    uint64_t order;      /* admission order: FCFS and preemption victims   */
    int prefill_end;     /* n_tokens when last admitted: below it, prefill  */
    int prefill_long;    /* that prefill is long: it is fed in capped chunks */
    struct sched_seq *prev, *next; /* queue links (scheduler-private)      */
} sched_seq;

typedef struct sched sched;

int sched_create(const sched_config *cfg, kv_pool *kv, sched **out, inf_err *err);
void sched_destroy(sched *s); /* NULL-safe; sequences still inside are not freed */

/* Queues a sequence (state WAITING, n_computed 0) at the tail. A sequence
 * that can never fit (prompt longer than max_model_len - 1, or more blocks
 * than the whole pool) is refused with INF_ERR_INVALID and a message. */
int sched_add(sched *s, sched_seq *q, inf_err *err);

/* Takes a sequence out wherever it is and frees its blocks. */
void sched_remove(sched *s, sched_seq *q);

/* One step's work: seqs[i] computes n_new[i] tokens starting at its
 * n_computed (the engine advances n_computed after the forward pass). */
typedef struct sched_plan {
    int n;
    sched_seq **seqs;    /* [max_num_seqs]                                */
    int *n_new;          /* [max_num_seqs]                                */
    int n_tokens;        /* sum of n_new                                  */
    int n_preempted;     /* preemptions this step                         */
    int cache_queries;   /* prefix-cache lookups this step, in tokens     */
    int cache_hits;      /* of which found cached, in tokens              */
} sched_plan;

/* Plans the next step; blocks for every planned token are reserved. An
 * empty plan (n == 0) means there is nothing to run. plan's arrays belong
 * to the scheduler and are valid until the next call. */
void sched_schedule(sched *s, sched_plan **plan);

int sched_num_running(const sched *s);
int sched_num_waiting(const sched *s);

/* Fraction of usable KV blocks in use, 0..1. */
double sched_kv_usage(const sched *s);

#endif
