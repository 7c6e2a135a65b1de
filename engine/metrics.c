/* met_: Prometheus metrics. Storage is a fixed set of 64-bit atomics made at
 * met_create; updates are relaxed atomic adds/stores (nothing orders one
 * metric against another, so nothing needs more), and a render reads each
 * value once. Histograms keep per-bucket (not cumulative) counts and derive
 * _count from them, so _count always equals the +Inf bucket in a render and
 * an observation is two atomics: the bucket and the sum. */
#include "engine/metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "inferd:"

/* Finite bounds per histogram at most: 1-2-5 buckets up to INT_MAX are 29. */
#define HIST_MAX_BOUNDS 32

/* vLLM v1's default buckets (vllm/v1/metrics/loggers.py). */
static const double ttft_bounds[] = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
};
static const double itl_bounds[] = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
};
static const double latency_bounds[] = { /* e2e and queue time */
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
};
static const double iteration_bounds[] = {
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
};
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct met_hist_store {
    const double *bounds;       /* [nb] ascending finite upper bounds (le)   */
    int nb;
    _Atomic uint64_t *counts;   /* [nb + 1] per bucket; [nb] is the +Inf one */
    _Atomic uint64_t sum;       /* bits of a double                          */
} met_hist_store;

struct met_registry {
    char *label;                /* model_name="<escaped name>"               */
    int spec_k;
    _Atomic uint64_t counters[MET_NUM_COUNTERS];
    _Atomic uint64_t gauges[MET_NUM_GAUGES];  /* bits of doubles            */
    _Atomic uint64_t finished[MET_NUM_FINISH];
    _Atomic uint64_t per_pos[MET_SPEC_POS_MAX];
    met_hist_store hists[MET_NUM_HISTS];
    double token_bounds[HIST_MAX_BOUNDS];     /* 1-2-5 up to max_model_len  */
    _Atomic uint64_t *bucket_mem;             /* every histogram's counts   */
};

/* ---- atomics over doubles ---------------------------------------------- */

static uint64_t dbits(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static double bitsd(uint64_t u)
{
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Loads through a const path (readers hold a const registry). */
static uint64_t ld(const _Atomic uint64_t *p)
{
    return atomic_load_explicit((_Atomic uint64_t *)p, memory_order_relaxed);
}

static void add_double(_Atomic uint64_t *p, double v)
{
    uint64_t old = atomic_load_explicit(p, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(
        p, &old, dbits(bitsd(old) + v), memory_order_relaxed,
        memory_order_relaxed))
        ;
}

/* ---- life cycle -------------------------------------------------------- */

met_config met_config_default(void)
{
    met_config c = {.model_name = NULL, .max_model_len = 2048, .spec_k = 0};
    return c;
}

/* Label value escaping of the exposition format: \ " and newline. */
static char *label_for(const char *name)
{
    static const char key[] = "model_name=\"";
    size_t n = strlen(name), k = sizeof key - 1;
    char *s = malloc(k + 2 * n + 2);
    if (!s)
        return NULL;
    memcpy(s, key, k);
    char *w = s + k;
    for (const char *r = name; *r; r++) {
        if (*r == '\\' || *r == '"') {
            *w++ = '\\';
            *w++ = *r;
        } else if (*r == '\n') {
            *w++ = '\\';
            *w++ = 'n';
        } else {
            *w++ = *r;
        }
    }
    *w++ = '"';
    *w = '\0';
    return s;
}

/* vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... while <= max. */
static int build_125(double *out, int max_value)
{
    static const int mant[3] = {1, 2, 5};
    int n = 0;
    for (double p = 1;; p *= 10)
        for (int i = 0; i < 3; i++) {
            double v = mant[i] * p;
            if (v > max_value || n == HIST_MAX_BOUNDS)
                return n;
            out[n++] = v;
        }
}

int met_create(const met_config *cfg, met_registry **out, inf_err *err)
{
    *out = NULL;
    if (!cfg || !cfg->model_name)
        return inf_fail(err, INF_ERR_INVALID,
                        "metrics: model_name is required");
    if (cfg->max_model_len < 1)
        return inf_fail(err, INF_ERR_INVALID, "metrics: max_model_len %d < 1",
                        cfg->max_model_len);
    if (cfg->spec_k < 0 || cfg->spec_k > MET_SPEC_POS_MAX)
        return inf_fail(err, INF_ERR_INVALID,
                        "metrics: spec_k %d outside 0..%d", cfg->spec_k,
                        MET_SPEC_POS_MAX);
    met_registry *m = calloc(1, sizeof *m);
    if (!m)
        goto nomem;
    m->spec_k = cfg->spec_k;
    m->label = label_for(cfg->model_name);
    if (!m->label)
        goto nomem;
    int n125 = build_125(m->token_bounds, cfg->max_model_len);
    const struct { const double *b; int n; } src[MET_NUM_HISTS] = {
        [MET_TTFT_SECONDS] = {ttft_bounds, NELEM(ttft_bounds)},
        [MET_ITL_SECONDS] = {itl_bounds, NELEM(itl_bounds)},
        [MET_E2E_SECONDS] = {latency_bounds, NELEM(latency_bounds)},
        [MET_QUEUE_SECONDS] = {latency_bounds, NELEM(latency_bounds)},
        [MET_REQUEST_PROMPT_TOKENS] = {m->token_bounds, n125},
        [MET_REQUEST_GENERATION_TOKENS] = {m->token_bounds, n125},
        [MET_ITERATION_TOKENS] = {iteration_bounds, NELEM(iteration_bounds)},
    };
    size_t total = 0;
    for (int h = 0; h < MET_NUM_HISTS; h++)
        total += (size_t)src[h].n + 1;
    m->bucket_mem = malloc(total * sizeof *m->bucket_mem);
    if (!m->bucket_mem)
        goto nomem;
    for (size_t i = 0; i < total; i++)
        atomic_init(&m->bucket_mem[i], 0);
    _Atomic uint64_t *next = m->bucket_mem;
    for (int h = 0; h < MET_NUM_HISTS; h++) {
        m->hists[h].bounds = src[h].b;
        m->hists[h].nb = src[h].n;
        m->hists[h].counts = next;
        next += src[h].n + 1;
        atomic_init(&m->hists[h].sum, dbits(0.0));
    }
    for (int i = 0; i < MET_NUM_COUNTERS; i++)
        atomic_init(&m->counters[i], 0);
    for (int i = 0; i < MET_NUM_GAUGES; i++)
        atomic_init(&m->gauges[i], dbits(0.0));
    for (int i = 0; i < MET_NUM_FINISH; i++)
        atomic_init(&m->finished[i], 0);
    for (int i = 0; i < MET_SPEC_POS_MAX; i++)
        atomic_init(&m->per_pos[i], 0);
    *out = m;
    return INF_OK;
nomem:
    met_destroy(m);
    return inf_fail(err, INF_ERR_NOMEM, "metrics: out of memory");
}

void met_destroy(met_registry *m)
{
    if (!m)
        return;
    free(m->bucket_mem);
    free(m->label);
    free(m);
}

/* ---- updates (engine thread, hot) -------------------------------------- */

void met_add(met_registry *m, met_counter c, uint64_t n)
{
    if (m && (unsigned)c < MET_NUM_COUNTERS)
        atomic_fetch_add_explicit(&m->counters[c], n, memory_order_relaxed);
}

/* An exchange rather than a plain store: it costs a few cycles a step more,
 * but valgrind's helgrind, which does not model C11 atomics, takes a relaxed
 * store (a plain mov) racing the renderer's load for a data race. */
void met_set(met_registry *m, met_gauge g, double v)
{
    if (m && (unsigned)g < MET_NUM_GAUGES)
        (void)atomic_exchange_explicit(&m->gauges[g], dbits(v),
                                       memory_order_relaxed);
}

/* Index of the first bucket whose bound is >= v (le is inclusive); nb for
 * the +Inf bucket. */
static int bucket_of(const double *b, int nb, double v)
{
    int lo = 0, hi = nb;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v <= b[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void met_observe(met_registry *m, met_hist h, double v)
{
    if (!m || (unsigned)h >= MET_NUM_HISTS || isnan(v))
        return;
    met_hist_store *s = &m->hists[h];
    atomic_fetch_add_explicit(&s->counts[bucket_of(s->bounds, s->nb, v)], 1,
                              memory_order_relaxed);
    add_double(&s->sum, v);
}

void met_request_finished(met_registry *m, met_finish reason)
{
    if (m && (unsigned)reason < MET_NUM_FINISH)
        atomic_fetch_add_explicit(&m->finished[reason], 1,
                                  memory_order_relaxed);
}

void met_spec_accepted_at(met_registry *m, int position, uint64_t n)
{
    if (m && position >= 0 && position < m->spec_k)
        atomic_fetch_add_explicit(&m->per_pos[position], n,
                                  memory_order_relaxed);
}

void met_spec_draft(met_registry *m, int num_draft_tokens, int num_accepted)
{
    if (!m || num_draft_tokens < 0 || num_accepted < 0 ||
        num_accepted > num_draft_tokens)
        return;
    met_add(m, MET_SPEC_DRAFTS, 1);
    met_add(m, MET_SPEC_DRAFT_TOKENS, (uint64_t)num_draft_tokens);
    met_add(m, MET_SPEC_ACCEPTED_TOKENS, (uint64_t)num_accepted);
    for (int i = 0; i < num_accepted && i < m->spec_k; i++)
        atomic_fetch_add_explicit(&m->per_pos[i], 1, memory_order_relaxed);
}

/* ---- rendering (HTTP thread) ------------------------------------------- */

/* Numbers as prometheus_client (vLLM's exporter) writes them, so scrapes
 * and le labels match vLLM's byte for byte: Python's shortest round-trip
 * repr ("3.0", "0.001", "1e-05"), with Go's exponent form for positive
 * values of 7 or more integer digits ("1.234567e+06"). Python writes
 * exponents 10..15 as "e+010"; we write Go's "e+10". out: >= 40 bytes. */
static void fmt_num(double d, char *out)
{
    if (isnan(d)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(d)) {
        strcpy(out, d > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (d == 0) {
        strcpy(out, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char e[40];
    for (int p = 1; p <= 17; p++) { /* fewest digits that read back as d */
        snprintf(e, sizeof e, "%.*e", p - 1, d);
        if (strtod(e, NULL) == d)
            break;
    }
    /* e is "[-]D[.DDD]e[+-]XX": collect the digits and the exponent. */
    const char *r = e;
    int neg = (*r == '-');
    r += neg;
    char dig[20];
    int nd = 0;
    for (; *r != 'e'; r++)
        if (*r != '.')
            dig[nd++] = *r;
    while (nd > 1 && dig[nd - 1] == '0') /* shortest form has no trailing 0 */
        nd--;
    int x = atoi(r + 1);
    char *w = out;
    if (neg)
        *w++ = '-';
    if (x >= 16 || x < -4 || (!neg && x >= 6)) {
        *w++ = dig[0];
        if (nd > 1) {
            *w++ = '.';
            memcpy(w, dig + 1, (size_t)nd - 1);
            w += nd - 1;
        }
        sprintf(w, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
        return;
    }
    if (x < 0) {
        *w++ = '0';
        *w++ = '.';
        for (int i = 0; i < -x - 1; i++)
            *w++ = '0';
        memcpy(w, dig, (size_t)nd);
        w += nd;
    } else {
        for (int i = 0; i <= x; i++)
            *w++ = i < nd ? dig[i] : '0';
        *w++ = '.';
        if (nd > x + 1) {
            memcpy(w, dig + x + 1, (size_t)(nd - x - 1));
            w += nd - x - 1;
        } else {
            *w++ = '0';
        }
    }
    *w = '\0';
}

/* One sample: name{label[,extra]} value. */
static void sample(inf_buf *b, const met_registry *m, const char *name,
                   const char *suffix, const char *extra, double v)
{
    char num[40];
    fmt_num(v, num);
    inf_buf_printf(b, PREFIX "%s%s{%s%s} %s\n", name, suffix, m->label,
               extra ? extra : "", num);
}

static void render_hist(inf_buf *b, const met_registry *m, const char *name,
                        const met_hist_store *s)
{
    uint64_t cnt[HIST_MAX_BOUNDS + 1];
    for (int i = 0; i <= s->nb; i++) /* one read per bucket */
        cnt[i] = ld(&s->counts[i]);
    double sum = bitsd(ld(&s->sum));
    uint64_t cum = 0;
    char le[56], num[40];
    for (int i = 0; i <= s->nb; i++) {
        cum += cnt[i];
        if (i < s->nb)
            fmt_num(s->bounds[i], num);
        else
            strcpy(num, "+Inf");
        snprintf(le, sizeof le, ",le=\"%s\"", num);
        sample(b, m, name, "_bucket", le, (double)cum);
    }
    sample(b, m, name, "_count", NULL, (double)cum);
    sample(b, m, name, "_sum", NULL, sum);
}

typedef enum fam_kind {
    FAM_GAUGE, FAM_COUNTER, FAM_HIST, FAM_SUCCESS, FAM_PER_POS
} fam_kind;

typedef struct met_family {
    const char *name;   /* after the prefix; counters end in _total */
    fam_kind kind;
    int idx;            /* into gauges, counters or hists           */
    int spec;           /* shown only when spec_k > 0               */
    const char *help;
} met_family;

/* Sorted by name: the output is in this order. */
static const met_family families[] = {
    {"device_sampled_tokens_total", FAM_COUNTER, MET_DEVICE_SAMPLED_TOKENS, 0,
     "Tokens sampled on the device (their logits never came to the host)."},
    {"e2e_request_latency_seconds", FAM_HIST, MET_E2E_SECONDS, 0,
     "Histogram of e2e request latency in seconds."},
    {"generation_tokens_total", FAM_COUNTER, MET_GENERATION_TOKENS, 0,
     "Number of generation tokens processed."},
    {"inter_token_latency_seconds", FAM_HIST, MET_ITL_SECONDS, 0,
     "Histogram of inter-token latency in seconds."},
    {"iteration_tokens_total", FAM_HIST, MET_ITERATION_TOKENS, 0,
     "Histogram of number of tokens per engine step."},
    {"kv_cache_usage_perc", FAM_GAUGE, MET_KV_CACHE_USAGE, 0,
     "KV-cache usage. 1 means 100 percent usage."},
    {"num_preemptions_total", FAM_COUNTER, MET_NUM_PREEMPTIONS, 0,
     "Cumulative number of preemptions from the engine."},
    {"num_requests_running", FAM_GAUGE, MET_NUM_REQUESTS_RUNNING, 0,
     "Number of requests in model execution batches."},
    {"num_requests_waiting", FAM_GAUGE, MET_NUM_REQUESTS_WAITING, 0,
     "Number of requests waiting to be processed."},
    {"prefix_cache_hits_total", FAM_COUNTER, MET_PREFIX_CACHE_HITS, 0,
     "Prefix cache hits, in terms of number of cached tokens."},
    {"prefix_cache_queries_total", FAM_COUNTER, MET_PREFIX_CACHE_QUERIES, 0,
     "Prefix cache queries, in terms of number of queried tokens."},
    {"prompt_tokens_total", FAM_COUNTER, MET_PROMPT_TOKENS, 0,
     "Number of prefill tokens processed."},
    {"request_generation_tokens", FAM_HIST, MET_REQUEST_GENERATION_TOKENS, 0,
     "Number of generation tokens processed, per request."},
    {"request_prompt_tokens", FAM_HIST, MET_REQUEST_PROMPT_TOKENS, 0,
     "Number of prefill tokens processed, per request."},
    {"request_queue_time_seconds", FAM_HIST, MET_QUEUE_SECONDS, 0,
     "Histogram of time spent in WAITING phase for request."},
    {"request_success_total", FAM_SUCCESS, 0, 0,
     "Count of successfully processed requests."},
    {"spec_decode_num_accepted_tokens_per_pos_total", FAM_PER_POS, 0, 1,
     "Accepted tokens per draft position."},
    {"spec_decode_num_accepted_tokens_total", FAM_COUNTER,
     MET_SPEC_ACCEPTED_TOKENS, 1, "Number of accepted tokens."},
    {"spec_decode_num_draft_tokens_total", FAM_COUNTER, MET_SPEC_DRAFT_TOKENS,
     1, "Number of draft tokens."},
    {"spec_decode_num_drafts_total", FAM_COUNTER, MET_SPEC_DRAFTS, 1,
     "Number of spec decoding drafts."},
    {"time_per_output_token_seconds", FAM_HIST, MET_ITL_SECONDS, 0,
     "Histogram of time per output token in seconds. "
     "DEPRECATED: use inferd:inter_token_latency_seconds."},
    {"time_to_first_token_seconds", FAM_HIST, MET_TTFT_SECONDS, 0,
     "Histogram of time to first token in seconds."},
};

static const char *const finish_names[MET_NUM_FINISH] = {
    "stop", "length", "abort", "error",
};

static void render_family(inf_buf *b, const met_registry *m,
                          const met_family *f)
{
    static const char *const types[] = {
        [FAM_GAUGE] = "gauge", [FAM_COUNTER] = "counter",
        [FAM_HIST] = "histogram", [FAM_SUCCESS] = "counter",
        [FAM_PER_POS] = "counter",
    };
    char extra[48];
    inf_buf_printf(b, "# HELP " PREFIX "%s %s\n# TYPE " PREFIX "%s %s\n", f->name,
               f->help, f->name, types[f->kind]);
    switch (f->kind) {
    case FAM_GAUGE:
        sample(b, m, f->name, "", NULL, bitsd(ld(&m->gauges[f->idx])));
        break;
    case FAM_COUNTER:
        sample(b, m, f->name, "", NULL, (double)ld(&m->counters[f->idx]));
        break;
    case FAM_HIST:
        render_hist(b, m, f->name, &m->hists[f->idx]);
        break;
    case FAM_SUCCESS:
        for (int r = 0; r < MET_NUM_FINISH; r++) {
            snprintf(extra, sizeof extra, ",finished_reason=\"%s\"",
                     finish_names[r]);
            sample(b, m, f->name, "", extra, (double)ld(&m->finished[r]));
        }
        break;
    case FAM_PER_POS:
        for (int p = 0; p < m->spec_k; p++) {
            snprintf(extra, sizeof extra, ",position=\"%d\"", p);
            sample(b, m, f->name, "", extra, (double)ld(&m->per_pos[p]));
        }
        break;
    }
}

int met_render(const met_registry *m, char **out, size_t *len, inf_err *err)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (!m)
        return inf_fail(err, INF_ERR_INVALID, "metrics: no registry");
    inf_buf b = {0};
    for (int i = 0; i < NELEM(families); i++)
        if (!families[i].spec || m->spec_k > 0)
            render_family(&b, m, &families[i]);
    if (b.oom) {
        free(b.p);
        return inf_fail(err, INF_ERR_NOMEM, "metrics: out of memory");
    }
    *out = b.p;
    if (len)
        *len = b.len;
    return INF_OK;
}

/* ---- snapshots and the log line ---------------------------------------- */

void met_snapshot(const met_registry *m, met_snap *out)
{
    memset(out, 0, sizeof *out);
    if (!m)
        return;
    for (int i = 0; i < MET_NUM_COUNTERS; i++)
        out->counters[i] = ld(&m->counters[i]);
    for (int i = 0; i < MET_NUM_GAUGES; i++)
        out->gauges[i] = bitsd(ld(&m->gauges[i]));
    for (int i = 0; i < MET_NUM_FINISH; i++)
        out->finished[i] = ld(&m->finished[i]);
    for (int i = 0; i < m->spec_k; i++)
        out->spec_accepted_per_pos[i] = ld(&m->per_pos[i]);
}

/* Counter growth between snapshots (0 if they were passed in the wrong
 * order). */
static double grew(const met_snap *prev, const met_snap *now, met_counter c)
{
    uint64_t a = prev->counters[c], b = now->counters[c];
    return b > a ? (double)(b - a) : 0.0;
}

void met_rates_between(const met_snap *prev, const met_snap *now,
                       double seconds, int spec_k, met_rates *out)
{
    memset(out, 0, sizeof *out);
    if (seconds > 0) {
        out->prompt_tps = grew(prev, now, MET_PROMPT_TOKENS) / seconds;
        out->generation_tps = grew(prev, now, MET_GENERATION_TOKENS) / seconds;
    }
    double q = grew(prev, now, MET_PREFIX_CACHE_QUERIES);
    if (q > 0)
        out->prefix_hit_rate = grew(prev, now, MET_PREFIX_CACHE_HITS) / q;
    double drafts = grew(prev, now, MET_SPEC_DRAFTS);
    double drafted = grew(prev, now, MET_SPEC_DRAFT_TOKENS);
    double accepted = grew(prev, now, MET_SPEC_ACCEPTED_TOKENS);
    if (drafts > 0) {
        out->has_spec = 1;
        out->spec_acceptance = drafted > 0 ? accepted / drafted : 0.0;
        /* Each verification step emits the accepted run plus one target
         * token (the correction or the bonus). */
        out->spec_mean_len = 1.0 + accepted / drafts;
        out->spec_efficiency =
            spec_k > 0 ? out->spec_mean_len / (spec_k + 1) : 0.0;
    }
}

int met_log_line(const met_snap *prev, const met_snap *now, double seconds,
                 int spec_k, char *buf, size_t len)
{
    met_rates r;
    met_rates_between(prev, now, seconds, spec_k, &r);
    int n = snprintf(buf, len,
                     "Avg prompt throughput: %.1f tokens/s, "
                     "Avg generation throughput: %.1f tokens/s, "
                     "Running: %.0f reqs, Waiting: %.0f reqs, "
                     "KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
                     r.prompt_tps, r.generation_tps,
                     now->gauges[MET_NUM_REQUESTS_RUNNING],
                     now->gauges[MET_NUM_REQUESTS_WAITING],
                     now->gauges[MET_KV_CACHE_USAGE] * 100.0,
                     r.prefix_hit_rate * 100.0);
    if (n < 0 || spec_k <= 0)
        return n;
    size_t used = (size_t)n < len ? (size_t)n : (len ? len - 1 : 0);
    char *tail = len ? buf + used : NULL;
    size_t room = len ? len - used : 0;
    int t;
    if (r.has_spec)
        t = snprintf(tail, room,
                     ", Spec decode: acceptance rate %.1f%%, "
                     "mean acceptance length %.2f, efficiency %.1f%%",
                     r.spec_acceptance * 100.0, r.spec_mean_len,
                     r.spec_efficiency * 100.0);
    else
        t = snprintf(tail, room, ", Spec decode: no drafts");
    return t < 0 ? t : n + t;
}
