/* Prometheus metrics: exact exposition text, escaping, bucket placement,
 * the exposition grammar, concurrent updates and renders, snapshots and the
 * periodic log line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <cmocka.h>

#include "engine/metrics.h"

static met_registry *make_reg(const char *name, int max_model_len, int spec_k)
{
    met_config c = met_config_default();
    c.model_name = name;
    c.max_model_len = max_model_len;
    c.spec_k = spec_k;
    met_registry *m = NULL;
    inf_err e = {0};
    assert_int_equal(met_create(&c, &m, &e), INF_OK);
    assert_non_null(m);
    return m;
}

static char *render(const met_registry *m)
{
    char *text = NULL;
    size_t len = 0;
    inf_err e = {0};
    assert_int_equal(met_render(m, &text, &len, &e), INF_OK);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    return text;
}

/* The block of one family: from its HELP line to the next HELP (malloc'd). */
static char *family_block(const char *text, const char *name)
{
    char key[160];
    snprintf(key, sizeof key, "# HELP %s ", name);
    const char *s = strstr(text, key);
    if (!s)
        return NULL;
    const char *e = strstr(s + 1, "\n# HELP ");
    size_t n = e ? (size_t)(e - s) + 1 : strlen(s);
    char *out = malloc(n + 1);
    assert_non_null(out);
    memcpy(out, s, n);
    out[n] = '\0';
    return out;
}

/* The value of the sample whose name and labels are exactly `series`. */
static double value_of(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *l = text; *l; l = strchr(l, '\n') + 1) {
        if (strncmp(l, series, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
        if (!strchr(l, '\n'))
            break;
    }
    fail_msg("no sample %s", series);
    return NAN;
}

/* ---- a validator for the text exposition format 0.0.4 ----------------- */

static int is_name_start(int c, int colon)
{
    return isalpha(c) || c == '_' || (colon && c == ':');
}

/* Reads a metric (colon=1) or label (colon=0) name into out. */
static const char *read_name(const char *p, int colon, char *out, size_t n)
{
    size_t i = 0;
    if (!is_name_start((unsigned char)*p, colon))
        return NULL;
    while (is_name_start((unsigned char)*p, colon) || isdigit((unsigned char)*p))
        if (i + 1 < n)
            out[i++] = *p++;
        else
            return NULL;
    out[i] = '\0';
    return p;
}

/* A sample value: a Go ParseFloat number, +Inf, -Inf or NaN. */
static int read_value(const char *p, const char *end, double *v)
{
    size_t n = (size_t)(end - p);
    if (n == 4 && !strncmp(p, "+Inf", 4)) {
        *v = INFINITY;
        return 1;
    }
    if (n == 4 && !strncmp(p, "-Inf", 4)) {
        *v = -INFINITY;
        return 1;
    }
    if (n == 3 && !strncmp(p, "NaN", 3)) {
        *v = NAN;
        return 1;
    }
    for (const char *q = p; q < end; q++)
        if (!strchr("0123456789.eE+-", *q))
            return 0;
    char *e;
    *v = strtod(p, &e);
    return n > 0 && e == end;
}

typedef struct vstate {
    char family[160];
    char type[16];
    double last_le;       /* histogram: previous bucket's bound       */
    double last_bucket;   /* histogram: previous cumulative count      */
    int inf_seen;         /* histogram: the +Inf bucket was written    */
    int count_seen;
    int samples;
} vstate;

static int bad(char *why, size_t n, int line, const char *fmt, ...)
{
    int k = snprintf(why, n, "line %d: ", line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why + k, n - (size_t)k, fmt, ap);
    va_end(ap);
    return 0;
}

/* Checks a finished family: a histogram ended with +Inf, _count, _sum. */
static int family_done(const vstate *s, char *why, size_t n, int line)
{
    if (!s->family[0])
        return 1;
    if (!s->samples)
        return bad(why, n, line, "family %s has no samples", s->family);
    if (!strcmp(s->type, "histogram") && (!s->inf_seen || !s->count_seen))
        return bad(why, n, line, "histogram %s lacks +Inf or _count", s->family);
    return 1;
}

/* One sample line against the current family. */
static int check_sample(vstate *s, const char *p, const char *end, char *why,
                        size_t n, int line)
{
    char name[160], suffix[16] = "", lname[64], le[256] = "";
    int has_model = 0, nlabels = 0;
    const char *q = read_name(p, 1, name, sizeof name);
    if (!q)
        return bad(why, n, line, "bad metric name");
    size_t fl = strlen(s->family);
    if (!s->type[0] || strncmp(name, s->family, fl))
        return bad(why, n, line, "sample %s outside family %s", name, s->family);
    snprintf(suffix, sizeof suffix, "%s", name + fl);
    int hist = !strcmp(s->type, "histogram");
    if (hist ? strcmp(suffix, "_bucket") && strcmp(suffix, "_count") &&
                   strcmp(suffix, "_sum")
             : suffix[0] != '\0')
        return bad(why, n, line, "sample %s does not belong to %s", name,
                   s->family);
    if (*q == '{') {
        q++;
        while (*q != '}') {
            char val[256];
            size_t vi = 0;
            q = read_name(q, 0, lname, sizeof lname);
            if (!q || *q != '=' || q[1] != '"')
                return bad(why, n, line, "bad label");
            for (q += 2; *q != '"'; q++) {
                if (q >= end)
                    return bad(why, n, line, "unterminated label value");
                if (*q == '\\') {
                    q++;
                    if (*q != '\\' && *q != '"' && *q != 'n')
                        return bad(why, n, line, "bad escape \\%c", *q);
                }
                if (vi + 1 < sizeof val)
                    val[vi++] = *q;
            }
            val[vi] = '\0';
            q++;
            if (nlabels == 0 && !strcmp(lname, "model_name"))
                has_model = 1;
            if (!strcmp(lname, "le"))
                snprintf(le, sizeof le, "%s", val);
            nlabels++;
            if (*q == ',')
                q++;
            else if (*q != '}')
                return bad(why, n, line, "expected , or }");
        }
        q++;
    }
    if (!has_model)
        return bad(why, n, line, "model_name is not the first label");
    if (*q != ' ')
        return bad(why, n, line, "expected one space before the value");
    double v;
    if (!read_value(q + 1, end, &v))
        return bad(why, n, line, "bad value '%.*s'", (int)(end - q - 1), q + 1);
    if (strcmp(s->type, "gauge") && !(v >= 0))
        return bad(why, n, line, "negative or NaN count");
    s->samples++;
    if (!hist)
        return 1;
    if (!strcmp(suffix, "_bucket")) {
        double b;
        if (!le[0] || s->inf_seen || !read_value(le, le + strlen(le), &b))
            return bad(why, n, line, "bad or misplaced le");
        if (!(b > s->last_le) || v < s->last_bucket)
            return bad(why, n, line, "buckets not ascending/monotone");
        s->last_le = b;
        s->last_bucket = v;
        s->inf_seen = isinf(b) > 0;
    } else if (!strcmp(suffix, "_count")) {
        if (!s->inf_seen || v != s->last_bucket)
            return bad(why, n, line, "_count %g != +Inf bucket %g", v,
                       s->last_bucket);
        s->count_seen = 1;
    } else if (le[0]) {
        return bad(why, n, line, "_sum with le");
    }
    return 1;
}

/* Whole text: every line HELP, TYPE or a sample; HELP then TYPE once per
 * family, families in ascending name order, counters named *_total,
 * histogram buckets ascending with +Inf == _count. */
static int valid_exposition(const char *text, char *why, size_t n)
{
    vstate s;
    memset(&s, 0, sizeof s);
    char prev[160] = "";
    int line = 0;
    size_t tl = strlen(text);
    if (tl == 0 || text[tl - 1] != '\n')
        return bad(why, n, 0, "text does not end in a newline");
    for (const char *p = text; *p; p = strchr(p, '\n') + 1) {
        const char *end = strchr(p, '\n');
        line++;
        char name[160];
        if (!strncmp(p, "# HELP ", 7)) {
            if (!family_done(&s, why, n, line))
                return 0;
            const char *q = read_name(p + 7, 1, name, sizeof name);
            if (!q || *q != ' ')
                return bad(why, n, line, "bad HELP");
            for (q++; q < end; q++)
                if (*q == '\\' && q[1] != '\\' && q[1] != 'n')
                    return bad(why, n, line, "bad HELP escape");
            if (strcmp(name, prev) <= 0)
                return bad(why, n, line, "family %s not after %s", name, prev);
            memset(&s, 0, sizeof s);
            s.last_le = -INFINITY;
            snprintf(s.family, sizeof s.family, "%s", name);
            snprintf(prev, sizeof prev, "%s", name);
        } else if (!strncmp(p, "# TYPE ", 7)) {
            const char *q = read_name(p + 7, 1, name, sizeof name);
            if (!q || *q != ' ' || strcmp(name, s.family) || s.type[0])
                return bad(why, n, line, "TYPE not right after its HELP");
            size_t tn = (size_t)(end - q - 1);
            if (tn >= sizeof s.type)
                return bad(why, n, line, "bad type");
            memcpy(s.type, q + 1, tn);
            s.type[tn] = '\0';
            if (strcmp(s.type, "counter") && strcmp(s.type, "gauge") &&
                strcmp(s.type, "histogram"))
                return bad(why, n, line, "unknown type %s", s.type);
            size_t nl = strlen(name);
            if (!strcmp(s.type, "counter") &&
                (nl < 6 || strcmp(name + nl - 6, "_total")))
                return bad(why, n, line, "counter %s lacks _total", name);
        } else if (*p == '#' || p == end) {
            return bad(why, n, line, "unexpected comment or blank line");
        } else if (!check_sample(&s, p, end, why, n, line)) {
            return 0;
        }
    }
    return family_done(&s, why, n, line + 1);
}

static void assert_valid(const char *text)
{
    char why[256];
    if (!valid_exposition(text, why, sizeof why))
        fail_msg("invalid exposition: %s", why);
}

/* ---- tests -------------------------------------------------------------- */

/* A gauge renders HELP, TYPE and one labelled sample, value in Python's
 * float spelling. */
static void test_metrics_render_gauge_golden(void **state)
{
    (void)state;
    met_registry *m = make_reg("m", 2048, 0);
    met_set(m, MET_NUM_REQUESTS_RUNNING, 3);
    char *t = render(m), *b = family_block(t, "inferd:num_requests_running");
    assert_string_equal(
        b, "# HELP inferd:num_requests_running Number of requests in model "
           "execution batches.\n"
           "# TYPE inferd:num_requests_running gauge\n"
           "inferd:num_requests_running{model_name=\"m\"} 3.0\n");
    free(b);
    free(t);
    met_destroy(m);
}

/* A counter's family and sample names end in _total. */
static void test_metrics_render_counter_golden(void **state)
{
    (void)state;
    met_registry *m = make_reg("m", 2048, 0);
    met_add(m, MET_PROMPT_TOKENS, 40);
    met_add(m, MET_PROMPT_TOKENS, 2);
    char *t = render(m), *b = family_block(t, "inferd:prompt_tokens_total");
    assert_string_equal(
        b, "# HELP inferd:prompt_tokens_total Number of prefill tokens "
           "processed.\n"
           "# TYPE inferd:prompt_tokens_total counter\n"
           "inferd:prompt_tokens_total{model_name=\"m\"} 42.0\n");
    free(b);
    free(t);
    met_destroy(m);
}

/* request_success_total has one sample per finish reason, zeros included. */
static void test_metrics_render_success_by_reason_golden(void **state)
{
    (void)state;
    met_registry *m = make_reg("m", 2048, 0);
    met_request_finished(m, MET_FINISH_STOP);
    met_request_finished(m, MET_FINISH_STOP);
    met_request_finished(m, MET_FINISH_LENGTH);
    met_request_finished(m, MET_FINISH_ERROR);
    met_request_finished(m, (met_finish)99); /* ignored */
    char *t = render(m), *b = family_block(t, "inferd:request_success_total");
    assert_string_equal(
        b, "# HELP inferd:request_success_total Count of successfully "
           "processed requests.\n"
           "# TYPE inferd:request_success_total counter\n"
           "inferd:request_success_total{model_name=\"m\",finished_reason="
           "\"stop\"} 2.0\n"
           "inferd:request_success_total{model_name=\"m\",finished_reason="
           "\"length\"} 1.0\n"
           "inferd:request_success_total{model_name=\"m\",finished_reason="
           "\"abort\"} 0.0\n"
           "inferd:request_success_total{model_name=\"m\",finished_reason="
           "\"error\"} 1.0\n");
    free(b);
    free(t);
    met_destroy(m);
}

/* A histogram: cumulative buckets in bound order, +Inf, _count, _sum. */
static void test_metrics_render_histogram_golden(void **state)
{
    (void)state;
    met_registry *m = make_reg("m", 2048, 0);
    met_observe(m, MET_ITERATION_TOKENS, 1);
    met_observe(m, MET_ITERATION_TOKENS, 8);
    met_observe(m, MET_ITERATION_TOKENS, 9);
    met_observe(m, MET_ITERATION_TOKENS, 20000);
    char *t = render(m), *b = family_block(t, "inferd:iteration_tokens_total");
#define IT "inferd:iteration_tokens_total_bucket{model_name=\"m\",le="
    assert_string_equal(
        b, "# HELP inferd:iteration_tokens_total Histogram of number of "
           "tokens per engine step.\n"
           "# TYPE inferd:iteration_tokens_total histogram\n"
           IT "\"1.0\"} 1.0\n" IT "\"8.0\"} 2.0\n" IT "\"16.0\"} 3.0\n"
           IT "\"32.0\"} 3.0\n" IT "\"64.0\"} 3.0\n" IT "\"128.0\"} 3.0\n"
           IT "\"256.0\"} 3.0\n" IT "\"512.0\"} 3.0\n" IT "\"1024.0\"} 3.0\n"
           IT "\"2048.0\"} 3.0\n" IT "\"4096.0\"} 3.0\n" IT "\"8192.0\"} 3.0\n"
           IT "\"16384.0\"} 3.0\n" IT "\"+Inf\"} 4.0\n"
           "inferd:iteration_tokens_total_count{model_name=\"m\"} 4.0\n"
           "inferd:iteration_tokens_total_sum{model_name=\"m\"} 20018.0\n");
#undef IT
    free(b);
    free(t);
    met_destroy(m);
}

/* Per-position acceptance: one sample per position 0..k-1; a draft's
 * accepted run counts at each of its positions. */
static void test_metrics_render_spec_per_pos_golden(void **state)
{
    (void)state;
    met_registry *m = make_reg("m", 2048, 3);
    met_spec_draft(m, 3, 1);
    met_spec_draft(m, 3, 2);
    met_spec_draft(m, 3, 0);
    met_spec_accepted_at(m, 2, 5);
    met_spec_accepted_at(m, 3, 7); /* beyond k: ignored */
    met_spec_draft(m, 3, 4);       /* more accepted than drafted: ignored */
    char *t = render(m);
    char *b = family_block(t, "inferd:spec_decode_num_accepted_tokens_per_pos_total");
#define PP "inferd:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position="
    assert_string_equal(
        b, "# HELP inferd:spec_decode_num_accepted_tokens_per_pos_total "
           "Accepted tokens per draft position.\n"
           "# TYPE inferd:spec_decode_num_accepted_tokens_per_pos_total "
           "counter\n"
           PP "\"0\"} 2.0\n" PP "\"1\"} 1.0\n" PP "\"2\"} 5.0\n");
#undef PP
    assert_float_equal(
        value_of(t, "inferd:spec_decode_num_drafts_total{model_name=\"m\"}"),
        3, 0);
    assert_float_equal(
        value_of(t, "inferd:spec_decode_num_draft_tokens_total{model_name=\"m\"}"),
        9, 0);
    assert_float_equal(
        value_of(t, "inferd:spec_decode_num_accepted_tokens_total{model_name=\"m\"}"),
        3, 0);
    free(b);
    free(t);
    met_destroy(m);
}

/* With speculation off no spec_decode family is rendered; everything else
 * is, in sorted order, zero-valued and grammatical. */
static void test_metrics_render_spec_off_omits_spec_families(void **state)
{
    (void)state;
    met_registry *m = make_reg("m", 2048, 0);
    char *t = render(m);
    assert_null(strstr(t, "spec_decode"));
    static const char *const fams[] = {
        "inferd:e2e_request_latency_seconds", "inferd:generation_tokens_total",
        "inferd:inter_token_latency_seconds", "inferd:iteration_tokens_total",
        "inferd:kv_cache_usage_perc", "inferd:num_preemptions_total",
        "inferd:num_requests_running", "inferd:num_requests_waiting",
        "inferd:prefix_cache_hits_total", "inferd:prefix_cache_queries_total",
        "inferd:prompt_tokens_total", "inferd:request_generation_tokens",
        "inferd:request_prompt_tokens", "inferd:request_queue_time_seconds",
        "inferd:request_success_total", "inferd:time_per_output_token_seconds",
        "inferd:time_to_first_token_seconds",
    };
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
        char *b = family_block(t, fams[i]);
        assert_non_null(b);
        free(b);
    }
    assert_valid(t);
    free(t);
    met_destroy(m);
}

/* Backslash, double quote and newline in the model name are escaped as the
 * exposition format requires; other bytes pass through. */
static void test_metrics_label_escaping_special_chars(void **state)
{
    (void)state;
    met_registry *m = make_reg("a\"b\\c\nd/é", 2048, 2);
    char *t = render(m);
    assert_non_null(strstr(
        t, "inferd:num_requests_waiting{model_name=\"a\\\"b\\\\c\\nd/é\"} 0.0\n"));
    assert_null(strstr(t, "c\nd"));
    assert_valid(t);
    free(t);
    met_destroy(m);
}

/* le is inclusive: a value equal to a bound lands in that bucket, a value
 * just above it in the next; beyond the last bound only +Inf counts it;
 * _sum adds the values and _count counts them. */
static void test_metrics_histogram_bucket_boundaries_inclusive(void **state)
{
    (void)state;
    met_registry *m = make_reg("m", 2048, 0);
    met_observe(m, MET_TTFT_SECONDS, 0.001);
    met_observe(m, MET_TTFT_SECONDS, nextafter(0.001, 1.0));
    met_observe(m, MET_TTFT_SECONDS, 2560.0);
    met_observe(m, MET_TTFT_SECONDS, 2561.0);
    met_observe(m, MET_TTFT_SECONDS, -1.0); /* below all bounds: first */
    met_observe(m, MET_TTFT_SECONDS, NAN);  /* ignored */
    char *t = render(m);
#define TB "inferd:time_to_first_token_seconds_bucket{model_name=\"m\",le="
    assert_float_equal(value_of(t, TB "\"0.001\"}"), 2, 0);
    assert_float_equal(value_of(t, TB "\"0.005\"}"), 3, 0);
    assert_float_equal(value_of(t, TB "\"640.0\"}"), 3, 0);
    assert_float_equal(value_of(t, TB "\"2560.0\"}"), 4, 0);
    assert_float_equal(value_of(t, TB "\"+Inf\"}"), 5, 0);
#undef TB
    assert_float_equal(
        value_of(t, "inferd:time_to_first_token_seconds_count{model_name=\"m\"}"),
        5, 0);
    assert_float_equal(
        value_of(t, "inferd:time_to_first_token_seconds_sum{model_name=\"m\"}"),
        0.001 + nextafter(0.001, 1.0) + 2560.0 + 2561.0 - 1.0, 1e-9);
    assert_valid(t);
    free(t);
    met_destroy(m);
}

/* Token-count histograms use vLLM's 1-2-5 buckets up to max_model_len. */
static void test_metrics_histogram_token_buckets_125(void **state)
{
    (void)state;
    met_registry *m = make_reg("m", 100, 0);
    met_observe(m, MET_REQUEST_PROMPT_TOKENS, 50);
    met_observe(m, MET_REQUEST_PROMPT_TOKENS, 51);
    char *t = render(m), *b = family_block(t, "inferd:request_prompt_tokens");
#define PB "inferd:request_prompt_tokens_bucket{model_name=\"m\",le="
    const char *want =
        "# HELP inferd:request_prompt_tokens Number of prefill tokens "
        "processed, per request.\n"
        "# TYPE inferd:request_prompt_tokens histogram\n"
        PB "\"1.0\"} 0.0\n" PB "\"2.0\"} 0.0\n" PB "\"5.0\"} 0.0\n"
        PB "\"10.0\"} 0.0\n" PB "\"20.0\"} 0.0\n" PB "\"50.0\"} 1.0\n"
        PB "\"100.0\"} 2.0\n" PB "\"+Inf\"} 2.0\n"
        "inferd:request_prompt_tokens_count{model_name=\"m\"} 2.0\n"
        "inferd:request_prompt_tokens_sum{model_name=\"m\"} 101.0\n";
#undef PB
    assert_string_equal(b, want);
    free(b);
    free(t);
    met_destroy(m);
}

/* One inter-token observation shows under both the new name and the older
 * time_per_output_token alias. */
static void test_metrics_histogram_itl_alias_same_data(void **state)
{
    (void)state;
    met_registry *m = make_reg("m", 2048, 0);
    met_observe(m, MET_ITL_SECONDS, 0.02);
    char *t = render(m);
    assert_float_equal(
        value_of(t, "inferd:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"0.025\"}"),
        1, 0);
    assert_float_equal(
        value_of(t, "inferd:time_per_output_token_seconds_bucket{model_name=\"m\",le=\"0.025\"}"),
        1, 0);
    assert_float_equal(
        value_of(t, "inferd:time_per_output_token_seconds_bucket{model_name=\"m\",le=\"0.01\"}"),
        0, 0);
    free(t);
    met_destroy(m);
}

/* Sample values are written as Python's prometheus_client writes them
 * (shortest round trip, ".0" on integers, Go's exponent form from 1e6). */
static void test_metrics_render_number_spelling(void **state)
{
    (void)state;
    static const struct { double v; const char *s; } cases[] = {
        {0.0, "0.0"}, {0.25, "0.25"}, {1.0, "1.0"}, {0.1, "0.1"},
        {1e-05, "1e-05"}, {0.0001, "0.0001"}, {123456.0, "123456.0"},
        {1234567.0, "1.234567e+06"}, {1e6, "1e+06"}, {-2.5, "-2.5"},
        {1e16, "1e+16"}, {1.0 / 3, "0.3333333333333333"},
        {INFINITY, "+Inf"}, {-INFINITY, "-Inf"}, {NAN, "NaN"},
    };
    met_registry *m = make_reg("m", 2048, 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        met_set(m, MET_KV_CACHE_USAGE, cases[i].v);
        char *t = render(m), want[128];
        snprintf(want, sizeof want,
                 "\ninferd:kv_cache_usage_perc{model_name=\"m\"} %s\n",
                 cases[i].s);
        if (!strstr(t, want))
            fail_msg("%g not spelled %s", cases[i].v, cases[i].s);
        assert_valid(t);
        free(t);
    }
    met_destroy(m);
}

/* Bad configurations are refused with INF_ERR_INVALID and a message. */
static void test_metrics_create_rejects_bad_config(void **state)
{
    (void)state;
    met_config c = met_config_default();
    met_registry *m = (met_registry *)1;
    inf_err e = {0};
    assert_int_equal(met_create(&c, &m, &e), INF_ERR_INVALID);
    assert_null(m);
    assert_true(strlen(e.msg) > 0);
    c.model_name = "m";
    c.spec_k = MET_SPEC_POS_MAX + 1;
    assert_int_equal(met_create(&c, &m, &e), INF_ERR_INVALID);
    c.spec_k = -1;
    assert_int_equal(met_create(&c, &m, &e), INF_ERR_INVALID);
    c.spec_k = 0;
    c.max_model_len = 0;
    assert_int_equal(met_create(&c, &m, &e), INF_ERR_INVALID);
    met_destroy(NULL);
}

/* Every line of a busy registry's render (all families, spec on, odd
 * values) matches the exposition grammar. */
static void test_metrics_grammar_full_render_valid(void **state)
{
    (void)state;
    met_registry *m = make_reg("org/model-7B \"chat\"", 1 << 30, MET_SPEC_POS_MAX);
    for (int i = 0; i < 1000; i++) {
        met_add(m, (met_counter)(i % MET_NUM_COUNTERS), (uint64_t)i * 7919);
        met_set(m, (met_gauge)(i % MET_NUM_GAUGES), i * 0.37);
        met_observe(m, (met_hist)(i % MET_NUM_HISTS), i * 1.7 - 3);
        met_request_finished(m, (met_finish)(i % MET_NUM_FINISH));
        met_spec_draft(m, MET_SPEC_POS_MAX, i % (MET_SPEC_POS_MAX + 1));
    }
    char *t = render(m);
    assert_valid(t);
    /* And the validator itself rejects what it should. */
    char why[256];
    assert_false(valid_exposition("# TYPE x counter\n", why, sizeof why));
    assert_false(valid_exposition("# HELP a_total h\n# TYPE a_total counter\n"
                                  "a_total{model_name=\"m\"} 1\n# HELP a_total h\n",
                                  why, sizeof why));
    assert_false(valid_exposition("# HELP a h\n# TYPE a counter\n"
                                  "a{model_name=\"m\"} 1\n", why, sizeof why));
    assert_false(valid_exposition("# HELP h h\n# TYPE h histogram\n"
                                  "h_bucket{model_name=\"m\",le=\"1.0\"} 2\n"
                                  "h_bucket{model_name=\"m\",le=\"+Inf\"} 1\n"
                                  "h_count{model_name=\"m\"} 1\n",
                                  why, sizeof why));
    assert_false(valid_exposition("# HELP g h\n# TYPE g gauge\n"
                                  "g{model_name=\"a\\q\"} 1\n", why, sizeof why));
    assert_true(valid_exposition("# HELP g h\n# TYPE g gauge\n"
                                 "g{model_name=\"a\\\"\"} -1.5e+06\n", why,
                                 sizeof why));
    free(t);
    met_destroy(m);
}

/* ---- concurrency -------------------------------------------------------- */

/* The writer runs at least this many iterations, and on until the reader
 * has rendered MIN_RENDERS times, so renders do overlap updates. */
#define MIN_ITERS 100000
#define MIN_RENDERS 50

typedef struct hammer {
    met_registry *m;
    atomic_int renders;   /* reader -> writer                  */
    atomic_int done;      /* writer -> reader                  */
    int iters;            /* iterations run; read after join   */
} hammer;

static void *writer_main(void *arg)
{
    hammer *h = arg;
    int i;
    for (i = 0; i < MIN_ITERS || atomic_load(&h->renders) < MIN_RENDERS; i++) {
        met_add(h->m, MET_PROMPT_TOKENS, 3);
        met_add(h->m, MET_GENERATION_TOKENS, 1);
        met_set(h->m, MET_NUM_REQUESTS_RUNNING, i % 64);
        met_set(h->m, MET_KV_CACHE_USAGE, (i % 101) / 100.0);
        met_observe(h->m, MET_TTFT_SECONDS, (i % 300) * 0.01);
        met_observe(h->m, MET_ITL_SECONDS, 0.5);
        met_observe(h->m, MET_ITERATION_TOKENS, i % 20000);
        met_request_finished(h->m, (met_finish)(i % MET_NUM_FINISH));
        met_spec_draft(h->m, 4, i % 5);
    }
    h->iters = i;
    atomic_store(&h->done, 1);
    return NULL;
}

/* One writer hammers updates while this thread renders: every render is
 * grammatical with monotone buckets and +Inf == _count, counters never go
 * back, and the totals are exact once the writer has finished. */
static void test_metrics_concurrent_writer_reader_consistent(void **state)
{
    (void)state;
    hammer h = {.m = make_reg("m", 2048, 4)};
    atomic_init(&h.renders, 0);
    atomic_init(&h.done, 0);
    pthread_t w;
    assert_int_equal(pthread_create(&w, NULL, writer_main, &h), 0);
    double last_prompt = 0, last_ttft = 0;
    int finished = 0;
    while (!finished) {
        finished = atomic_load(&h.done); /* one more render after the end */
        char *t = render(h.m);
        assert_valid(t);
        double p = value_of(t, "inferd:prompt_tokens_total{model_name=\"m\"}");
        double c = value_of(t, "inferd:time_to_first_token_seconds_count{model_name=\"m\"}");
        assert_true(p >= last_prompt && c >= last_ttft);
        last_prompt = p;
        last_ttft = c;
        free(t);
        atomic_fetch_add(&h.renders, 1);
    }
    assert_int_equal(pthread_join(w, NULL), 0);
    assert_true(atomic_load(&h.renders) > MIN_RENDERS);

    double n = h.iters, abort_n = 0, accepted = 0, pos0 = 0, pos3 = 0;
    for (int i = 0; i < h.iters; i++) {
        abort_n += i % MET_NUM_FINISH == MET_FINISH_ABORT;
        accepted += i % 5;
        pos0 += i % 5 >= 1;
        pos3 += i % 5 >= 4;
    }
    char *t = render(h.m);
#define V(series) value_of(t, series)
    assert_float_equal(V("inferd:prompt_tokens_total{model_name=\"m\"}"), 3 * n, 0);
    assert_float_equal(V("inferd:generation_tokens_total{model_name=\"m\"}"), n, 0);
    assert_float_equal(V("inferd:time_to_first_token_seconds_count{model_name=\"m\"}"), n, 0);
    assert_float_equal(V("inferd:inter_token_latency_seconds_sum{model_name=\"m\"}"), 0.5 * n, 0);
    assert_float_equal(V("inferd:iteration_tokens_total_bucket{model_name=\"m\",le=\"+Inf\"}"), n, 0);
    assert_float_equal(V("inferd:request_success_total{model_name=\"m\",finished_reason=\"abort\"}"), abort_n, 0);
    assert_float_equal(V("inferd:spec_decode_num_drafts_total{model_name=\"m\"}"), n, 0);
    assert_float_equal(V("inferd:spec_decode_num_draft_tokens_total{model_name=\"m\"}"), 4 * n, 0);
    assert_float_equal(V("inferd:spec_decode_num_accepted_tokens_total{model_name=\"m\"}"), accepted, 0);
    assert_float_equal(V("inferd:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"}"), pos0, 0);
    assert_float_equal(V("inferd:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"3\"}"), pos3, 0);
#undef V
    assert_valid(t);
    free(t);
    met_destroy(h.m);
}

/* ---- snapshots and the log line ---------------------------------------- */

/* Two snapshots 10 s apart give throughput, hit rate and spec rates over
 * the interval; the gauges are the latest values; the line reads as
 * specified. */
static void test_metrics_log_line_spec_interval(void **state)
{
    (void)state;
    met_registry *m = make_reg("m", 2048, 4);
    met_add(m, MET_PROMPT_TOKENS, 500);          /* before the interval */
    met_add(m, MET_PREFIX_CACHE_QUERIES, 1000);
    met_spec_draft(m, 4, 0);
    met_snap a, b;
    met_snapshot(m, &a);
    met_add(m, MET_PROMPT_TOKENS, 1000);
    met_add(m, MET_GENERATION_TOKENS, 205);
    met_add(m, MET_PREFIX_CACHE_QUERIES, 120);
    met_add(m, MET_PREFIX_CACHE_HITS, 30);
    met_set(m, MET_NUM_REQUESTS_RUNNING, 3);
    met_set(m, MET_NUM_REQUESTS_WAITING, 2);
    met_set(m, MET_KV_CACHE_USAGE, 0.25);
    met_spec_draft(m, 4, 4);
    met_spec_draft(m, 4, 0);
    met_snapshot(m, &b);
    assert_int_equal(b.counters[MET_PROMPT_TOKENS] - a.counters[MET_PROMPT_TOKENS], 1000);
    assert_int_equal(b.spec_accepted_per_pos[3], 1);
    assert_int_equal(b.spec_accepted_per_pos[4], 0);

    met_rates r;
    met_rates_between(&a, &b, 10.0, 4, &r);
    assert_float_equal(r.prompt_tps, 100.0, 1e-12);
    assert_float_equal(r.generation_tps, 20.5, 1e-12);
    assert_float_equal(r.prefix_hit_rate, 0.25, 1e-12);
    assert_true(r.has_spec);
    assert_float_equal(r.spec_acceptance, 0.5, 1e-12);   /* 4 of 8        */
    assert_float_equal(r.spec_mean_len, 3.0, 1e-12);     /* 1 + 4/2       */
    assert_float_equal(r.spec_efficiency, 0.6, 1e-12);   /* 3 / (4 + 1)   */

    char line[512];
    const char *want =
        "Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: "
        "20.5 tokens/s, Running: 3 reqs, Waiting: 2 reqs, KV cache usage: "
        "25.0%, Prefix cache hit rate: 25.0%, Spec decode: acceptance rate "
        "50.0%, mean acceptance length 3.00, efficiency 60.0%";
    int n = met_log_line(&a, &b, 10.0, 4, line, sizeof line);
    assert_string_equal(line, want);
    assert_int_equal(n, strlen(want));
    /* A short buffer truncates but the return is the full length. */
    char small[40];
    assert_int_equal(met_log_line(&a, &b, 10.0, 4, small, sizeof small),
                     strlen(want));
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_int_equal(met_log_line(&a, &b, 10.0, 4, NULL, 0), strlen(want));
    met_destroy(m);
}

/* Without speculation the line stops after the hit rate; with speculation
 * but no drafts in the interval it says so; an idle interval is all zeros
 * (no division by zero). */
static void test_metrics_log_line_idle_and_no_spec(void **state)
{
    (void)state;
    met_snap a, b;
    met_registry *m = make_reg("m", 2048, 2);
    met_spec_draft(m, 2, 2);
    met_snapshot(m, &a);
    met_snapshot(m, &b);
    char line[512];
    met_log_line(&a, &b, 10.0, 0, line, sizeof line);
    assert_string_equal(line,
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
        "0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, KV cache usage: "
        "0.0%, Prefix cache hit rate: 0.0%");
    met_log_line(&a, &b, 0.0, 2, line, sizeof line);
    assert_string_equal(line,
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
        "0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, KV cache usage: "
        "0.0%, Prefix cache hit rate: 0.0%, Spec decode: no drafts");
    /* Snapshots passed in the wrong order count as no growth. */
    met_add(m, MET_GENERATION_TOKENS, 10);
    met_snapshot(m, &b);
    met_rates r;
    met_rates_between(&b, &a, 1.0, 2, &r);
    assert_float_equal(r.generation_tps, 0.0, 0);
    met_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_render_gauge_golden),
        cmocka_unit_test(test_metrics_render_counter_golden),
        cmocka_unit_test(test_metrics_render_success_by_reason_golden),
        cmocka_unit_test(test_metrics_render_histogram_golden),
        cmocka_unit_test(test_metrics_render_spec_per_pos_golden),
        cmocka_unit_test(test_metrics_render_spec_off_omits_spec_families),
        cmocka_unit_test(test_metrics_label_escaping_special_chars),
        cmocka_unit_test(test_metrics_histogram_bucket_boundaries_inclusive),
        cmocka_unit_test(test_metrics_histogram_token_buckets_125),
        cmocka_unit_test(test_metrics_histogram_itl_alias_same_data),
        cmocka_unit_test(test_metrics_render_number_spelling),
        cmocka_unit_test(test_metrics_create_rejects_bad_config),
        cmocka_unit_test(test_metrics_grammar_full_render_valid),
        cmocka_unit_test(test_metrics_concurrent_writer_reader_consistent),
        cmocka_unit_test(test_metrics_log_line_spec_interval),
        cmocka_unit_test(test_metrics_log_line_idle_and_no_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
