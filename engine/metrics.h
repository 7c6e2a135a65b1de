/* met_: the daemon's Prometheus metrics (text exposition format 0.0.4), with
 * vLLM v1's names under an `inferd:` prefix and a model_name label on every
 * sample.
 *
 * Threads: the engine thread updates (many times per step), the HTTP loop
 * thread renders GET /metrics and the engine takes snapshots for its periodic
 * log line. Every update is one or two relaxed atomic operations on memory
 * allocated at met_create: no lock, no allocation, no string lookup. Any
 * thread may update or read at any time; a render never blocks a writer.
 *
 * Consistency of one render: each value is read once, so a histogram's
 * buckets are monotone and its +Inf bucket equals its _count (both come from
 * the same reads); its _sum may lag or lead _count by observations made
 * during the render, and different families may be a few updates apart.
 * After the writers stop, every total is exact.
 *
 * Families (sorted by name in the output; spec_decode_* only when the
 * registry was created with spec_k > 0, as vLLM shows them only with
 * speculative decoding on):
 *   gauges      inferd:num_requests_running, inferd:num_requests_waiting,
 *               inferd:kv_cache_usage_perc (0..1)
 *   counters    inferd:prompt_tokens_total, inferd:generation_tokens_total,
 *               inferd:request_success_total{finished_reason},
 *               inferd:num_preemptions_total,
 *               inferd:prefix_cache_queries_total,
 *               inferd:prefix_cache_hits_total (both in tokens),
 *               inferd:spec_decode_num_drafts_total,
 *               inferd:spec_decode_num_draft_tokens_total,
 *               inferd:spec_decode_num_accepted_tokens_total,
 *               inferd:spec_decode_num_accepted_tokens_per_pos_total{position}
 *   histograms  inferd:time_to_first_token_seconds,
 *               inferd:inter_token_latency_seconds and its older name
 *               inferd:time_per_output_token_seconds (the same observations),
 *               inferd:e2e_request_latency_seconds,
 *               inferd:request_queue_time_seconds,
 *               inferd:request_prompt_tokens, inferd:request_generation_tokens,
 *               inferd:iteration_tokens_total (tokens per engine step)
 * Buckets are vLLM v1's defaults (see metrics.c). */
#ifndef INFERD_METRICS_H
#define INFERD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/common.h"

/* Most speculative positions a registry tracks (the largest usable spec_k). */
#define MET_SPEC_POS_MAX 32

/* Monotonic counters (met_add). */
typedef enum met_counter {
    MET_PROMPT_TOKENS = 0,     /* prefill tokens computed                     */
    MET_GENERATION_TOKENS,     /* tokens emitted                              */
    MET_NUM_PREEMPTIONS,       /* requests preempted                          */
    MET_PREFIX_CACHE_QUERIES,  /* prompt tokens looked up in the prefix cache */
    MET_PREFIX_CACHE_HITS,     /* of those, tokens found                      */
    MET_SPEC_DRAFTS,           /* verification steps that carried a draft     */
    MET_SPEC_DRAFT_TOKENS,     /* drafted tokens verified                     */
    MET_SPEC_ACCEPTED_TOKENS,  /* drafted tokens accepted                     */
    MET_DEVICE_SAMPLED_TOKENS, /* tokens the backend sampled on its device     */
    MET_NUM_COUNTERS
} met_counter;

/* Gauges (met_set): the latest value wins. */
typedef enum met_gauge {
    MET_NUM_REQUESTS_RUNNING = 0,
    MET_NUM_REQUESTS_WAITING,
    MET_KV_CACHE_USAGE,        /* fraction of KV blocks in use, 0..1          */
    MET_NUM_GAUGES
} met_gauge;

/* Histograms (met_observe). */
typedef enum met_hist {
    MET_TTFT_SECONDS = 0,      /* arrival to first output token               */
    MET_ITL_SECONDS,           /* between consecutive output tokens           */
    MET_E2E_SECONDS,           /* arrival to finish                           */
    MET_QUEUE_SECONDS,         /* arrival to first scheduled                  */
    MET_REQUEST_PROMPT_TOKENS, /* per finished request                        */
    MET_REQUEST_GENERATION_TOKENS,
    MET_ITERATION_TOKENS,      /* tokens in one engine step                   */
    MET_NUM_HISTS
} met_hist;

/* Why a request finished: the finished_reason label, in vLLM's spelling. */
typedef enum met_finish {
    MET_FINISH_STOP = 0,       /* "stop": EOS or a stop string                */
    MET_FINISH_LENGTH,         /* "length": max_tokens or the context         */
    MET_FINISH_ABORT,          /* "abort": the client went away / cancelled   */
    MET_FINISH_ERROR,          /* "error": an internal failure                */
    MET_NUM_FINISH
} met_finish;

typedef struct met_config {
    const char *model_name;  /* the model_name label value (copied); required */
    int max_model_len;       /* top of the 1-2-5 token-count buckets; default
                                2048                                          */
    int spec_k;              /* speculative positions tracked, 0..
                                MET_SPEC_POS_MAX; 0 = speculation off
                                (spec_decode_* families not rendered)        */
} met_config;

met_config met_config_default(void); /* model_name NULL, 2048, 0 */

typedef struct met_registry met_registry;

/* Allocates everything the registry will ever need. INF_ERR_INVALID for a
 * missing model name, max_model_len < 1 or spec_k out of range;
 * INF_ERR_NOMEM. */
int met_create(const met_config *cfg, met_registry **out, inf_err *err);
void met_destroy(met_registry *m); /* NULL-safe */

/* Hot-path updates: lock-free, allocation-free. Out-of-range enum values
 * and positions are ignored (never a crash), as are NaN observations. */
void met_add(met_registry *m, met_counter c, uint64_t n);
void met_set(met_registry *m, met_gauge g, double v);
void met_observe(met_registry *m, met_hist h, double v);
/* Counts one finished request under its reason. */
void met_request_finished(met_registry *m, met_finish reason);
/* Adds n to the per-position accepted counter of draft position `position`
 * (0-based, < spec_k). */
void met_spec_accepted_at(met_registry *m, int position, uint64_t n);
/* One verification of one sequence's draft, as vLLM counts it: drafts += 1,
 * draft tokens += num_draft_tokens, accepted += num_accepted, and positions
 * 0..num_accepted-1 each += 1 (the accepted run is a prefix). */
void met_spec_draft(met_registry *m, int num_draft_tokens, int num_accepted);

/* Renders the whole exposition into a new NUL-terminated buffer (*out, to
 * be free()d; *len excludes the NUL). INF_ERR_NOMEM. Safe alongside writers
 * and other renders. */
int met_render(const met_registry *m, char **out, size_t *len, inf_err *err);

/* The counters and gauges at one moment, for rates over an interval. */
typedef struct met_snap {
    uint64_t counters[MET_NUM_COUNTERS];
    double gauges[MET_NUM_GAUGES];
    uint64_t finished[MET_NUM_FINISH];
    uint64_t spec_accepted_per_pos[MET_SPEC_POS_MAX]; /* [spec_k], rest 0 */
} met_snap;

void met_snapshot(const met_registry *m, met_snap *out);

/* What happened between two snapshots taken `seconds` apart. Rates whose
 * denominator is zero are 0 (has_spec says whether any draft was verified). */
typedef struct met_rates {
    double prompt_tps;          /* prompt tokens per second                   */
    double generation_tps;      /* generation tokens per second               */
    double prefix_hit_rate;     /* hits / queries in the interval, 0..1       */
    int has_spec;               /* drafts > 0 in the interval                 */
    double spec_acceptance;     /* accepted / draft tokens, 0..1              */
    double spec_mean_len;       /* 1 + accepted / drafts: tokens emitted per
                                   verification step                          */
    double spec_efficiency;     /* spec_mean_len / (spec_k + 1), 0..1         */
} met_rates;

void met_rates_between(const met_snap *prev, const met_snap *now,
                       double seconds, int spec_k, met_rates *out);

/* Formats the periodic log line (no trailing newline), vLLM style:
 *   Avg prompt throughput: X tokens/s, Avg generation throughput: Y tokens/s,
 *   Running: R reqs, Waiting: W reqs, KV cache usage: P%, Prefix cache hit
 *   rate: H%
 * then, when spec_k > 0, ", Spec decode: acceptance rate A%, mean acceptance
 * length L, efficiency E%" (or ", Spec decode: no drafts" when none were
 * verified in the interval). Running/Waiting/KV usage are now's gauges; the
 * rest are over the interval. Returns what snprintf returns (the untruncated
 * length). */
int met_log_line(const met_snap *prev, const met_snap *now, double seconds,
                 int spec_k, char *buf, size_t len);

#endif
