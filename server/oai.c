/* oai_: the OpenAI wire format (the contract is in oai.h).
 *
 * Parsing reads the body with cJSON into a local oai_request and hands it
 * over only when every field has passed, so a failure never leaves half a
 * request behind. Messages follow one pattern: "<param> must be <expected>,
 * got <what came>", one line, naming the parameter as OpenAI does.
 *
 * Encoding builds cJSON trees but writes every string through its own
 * escaper (as cJSON raw items): token pieces may be partial UTF-8 or hold a
 * NUL byte, and cJSON's printer neither validates UTF-8 nor sees past NUL. */
#include "oai.h"
#include "engine/common.h"

#include <cJSON.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OAI_INVALID "invalid_request_error"

oai_limits oai_limits_default(void)
{
    oai_limits l = {
        .max_n = 16,
        .max_logprobs = 20,
        .max_prompts = 64,
        .max_stop = 16,
    };
    return l;
}

/* The type OpenAI's clients expect for a status when the caller gave none. */
static const char *default_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : OAI_INVALID;
    }
}

int oai_fail(oai_error *err, int status, const char *type, const char *param,
             const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->status = status;
        err->type = type ? type : default_type(status);
        snprintf(err->param, sizeof err->param, "%s", param ? param : "");
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->code = NULL;
    }
    return status;
}

/* ---- UTF-8 --------------------------------------------------------------- */

/* Bytes to consume at s[0..n) (n >= 1): a whole valid character (*ok = 1),
 * or the maximal invalid subpart (*ok = 0), which becomes one U+FFFD as in
 * Python's errors="replace" and the WHATWG decoder. */
static size_t utf8_next(const unsigned char *s, size_t n, int *ok)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t len, i;

    *ok = 1;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80; /* no overlongs        */
        hi = c == 0xED ? 0x9F : 0xBF; /* no UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF; /* nothing above U+10FFFF */
    } else {
        *ok = 0;
        return 1;
    }
    for (i = 1; i < len; i++) {
        unsigned b = i < n ? s[i] : 0;
        int good = i == 1 ? (b >= lo && b <= hi) : (b & 0xC0) == 0x80;
        if (i >= n || !good) {
            *ok = 0;
            return i;
        }
    }
    return len;
}

/* ---- the JSON string escaper --------------------------------------------- */

/* s[0..n) as a quoted JSON string: valid UTF-8 kept, invalid bytes as
 * U+FFFD, control characters (NUL included) escaped. */
static void sb_json_str(inf_buf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;

    inf_buf_put(b, "\"", 1);
    while (i < n) {
        unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            inf_buf_put(b, e, 2);
            i++;
        } else if (c < 0x20) {
            char e[8];
            switch (c) {
            case '\n': inf_buf_put(b, "\\n", 2); break;
            case '\r': inf_buf_put(b, "\\r", 2); break;
            case '\t': inf_buf_put(b, "\\t", 2); break;
            case '\b': inf_buf_put(b, "\\b", 2); break;
            case '\f': inf_buf_put(b, "\\f", 2); break;
            default:
                snprintf(e, sizeof e, "\\u%04x", c);
                inf_buf_put(b, e, 6);
            }
            i++;
        } else {
            int ok;
            size_t k = utf8_next(u + i, n - i, &ok);
            if (ok)
                inf_buf_put(b, s + i, k);
            else
                inf_buf_put(b, "\xEF\xBF\xBD", 3);
            i += k;
        }
    }
    inf_buf_put(b, "\"", 1);
}

/* ---- parsing: helpers ---------------------------------------------------- */

/* A client's string quoted for a message: JSON-escaped (so the message
 * stays one line) and cut after 40 bytes. */
static void echo_str(const char *s, char *buf, size_t n)
{
    size_t len = strlen(s);
    inf_buf b = {0};

    sb_json_str(&b, s, len > 40 ? 40 : len);
    if (len > 40)
        inf_buf_put(&b, "...", 3);
    snprintf(buf, n, "%s", b.oom ? "\"\"" : b.p);
    free(b.p);
}

static const char *json_type(const cJSON *v)
{
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "boolean";
    if (cJSON_IsNumber(v)) return "number";
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsArray(v)) return "array";
    if (cJSON_IsObject(v)) return "object";
    return "unknown";
}

/* v for a message: integers as integers, others as the shortest %g text
 * that reads back as v. */
static void fmt_double(double v, char *buf, size_t n)
{
    if (v == floor(v) && fabs(v) < 1e17) {
        snprintf(buf, n, "%.0f", v);
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

/* A member by exact name; absent and JSON null read the same (every
 * optional field accepts null, as the SDKs send it). */
static const cJSON *get(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(v) ? NULL : v;
}

static int bad_type(oai_error *err, const char *param, const char *want,
                    const cJSON *v)
{
    return oai_fail(err, 400, OAI_INVALID, param, "%s must be %s, got %s",
                    param, want, json_type(v));
}

static int no_memory(oai_error *err)
{
    return oai_fail(err, 500, "server_error", "", "out of memory");
}

/* A range of accepted values; interval says whether messages show both
 * bounds ("in (0, 1]") or the lower one ("at least 1"). */
typedef struct span {
    double lo, hi;
    int lo_open, hi_open, interval;
} span;

static int in_span(double v, const char *param, span s, oai_error *err)
{
    char got[40], lo[40], hi[40];

    int low = !(s.lo_open ? v > s.lo : v >= s.lo);
    int high = !(s.hi_open ? v < s.hi : v <= s.hi);
    if (!low && !high)
        return 0;
    fmt_double(v, got, sizeof got);
    fmt_double(s.lo, lo, sizeof lo);
    fmt_double(s.hi, hi, sizeof hi);
    if (s.interval)
        return oai_fail(err, 400, OAI_INVALID, param,
                        "%s must be in %c%s, %s%c, got %s", param,
                        s.lo_open ? '(' : '[', lo, hi, s.hi_open ? ')' : ']',
                        got);
    if (low)
        return oai_fail(err, 400, OAI_INVALID, param, "%s must be %s %s, got %s",
                        param, s.lo_open ? "greater than" : "at least", lo, got);
    return oai_fail(err, 400, OAI_INVALID, param, "%s must be at most %s, got %s",
                    param, hi, got);
}

/* Optional number in s; *out untouched when absent. */
static int want_num(const cJSON *v, const char *param, span s, double *out,
                    oai_error *err)
{
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v))
        return bad_type(err, param, "a number", v);
    if (in_span(v->valuedouble, param, s, err))
        return 400;
    *out = v->valuedouble;
    return 0;
}

/* Optional integer in s (s within int64); 16.0 counts as 16, 16.5 does
 * not (JSON has one number type). Doubles at 2^63 saturate: cJSON reads
 * numbers as doubles, so INT64_MAX itself arrives as 2^63. */
static int want_int(const cJSON *v, const char *param, span s, int64_t *out,
                    oai_error *err)
{
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v))
        return bad_type(err, param, "an integer", v);
    double d = v->valuedouble;
    if (isfinite(d) && d != floor(d)) {
        char got[40];
        fmt_double(d, got, sizeof got);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "%s must be an integer, got %s", param, got);
    }
    if (in_span(d, param, s, err))
        return 400;
    *out = d >= 0x1p63 ? INT64_MAX : (int64_t)d;
    return 0;
}

static int want_int32(const cJSON *v, const char *param, span s, int *out,
                      oai_error *err)
{
    int64_t x = *out;
    int rc = want_int(v, param, s, &x, err);
    if (rc == 0)
        *out = (int)x;
    return rc;
}

static int want_bool(const cJSON *v, const char *param, int *out, oai_error *err)
{
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return bad_type(err, param, "a boolean", v);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 0;
}

static int want_str(const cJSON *v, const char *param, char **out,
                    oai_error *err)
{
    if (!v)
        return 0;
    if (!cJSON_IsString(v))
        return bad_type(err, param, "a string", v);
    free(*out);
    *out = strdup(v->valuestring);
    return *out ? 0 : no_memory(err);
}

/* A token id: a non-negative integer that fits int32 (the vocabulary range
 * is the caller's). */
static int want_id(const cJSON *v, const char *param, const char *what,
                   int32_t *out, oai_error *err)
{
    if (!cJSON_IsNumber(v))
        return oai_fail(err, 400, OAI_INVALID, param,
                        "%s must be non-negative integers, got %s", what,
                        json_type(v));
    double d = v->valuedouble;
    if (!(d >= 0 && d <= INT32_MAX && d == floor(d))) {
        char got[40];
        fmt_double(d, got, sizeof got);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "%s must be non-negative integers, got %s", what, got);
    }
    *out = (int32_t)d;
    return 0;
}

/* ---- parsing: fields ----------------------------------------------------- */

enum { K_ANY = 0, K_CMPL = 1, K_CHAT = 2 };

static int for_kind(int mask, oai_kind k)
{
    return mask == K_ANY || (mask == K_CMPL) == (k == OAI_COMPLETION);
}

/* Plain boolean fields, into int members. */
static const struct {
    const char *key;
    size_t off;
    int kinds;
} bool_fields[] = {
    {"stream", offsetof(oai_request, stream), K_ANY},
    {"echo", offsetof(oai_request, echo), K_CMPL},
    {"add_generation_prompt", offsetof(oai_request, add_generation_prompt), K_CHAT},
    {"continue_final_message", offsetof(oai_request, continue_final_message), K_CHAT},
    {"ignore_eos", offsetof(oai_request, ignore_eos), K_ANY},
    {"skip_special_tokens", offsetof(oai_request, skip_special_tokens), K_ANY},
    {"speculative", offsetof(oai_request, speculative), K_ANY},
};

/* Plain float fields. temperature: OpenAI documents [0, 2]; vLLM sets no
 * upper bound; we take [0, 100] (beyond that sampling is uniform anyway).
 * repetition_penalty must fit a float. */
static const struct {
    const char *key;
    size_t off;
    span s;
} num_fields[] = {
    {"temperature", offsetof(oai_request, temperature), {0, 100, 0, 0, 1}},
    {"top_p", offsetof(oai_request, top_p), {0, 1, 1, 0, 1}},
    {"min_p", offsetof(oai_request, min_p), {0, 1, 0, 0, 1}},
    {"presence_penalty", offsetof(oai_request, presence_penalty), {-2, 2, 0, 0, 1}},
    {"frequency_penalty", offsetof(oai_request, frequency_penalty), {-2, 2, 0, 0, 1}},
    {"repetition_penalty", offsetof(oai_request, repetition_penalty), {0, FLT_MAX, 1, 0, 0}},
};

static const span SPAN_INT_POS = {1, INT_MAX, 0, 0, 0};
static const span SPAN_INT_NONNEG = {0, INT_MAX, 0, 0, 0};

static int parse_simple(const cJSON *o, oai_kind kind, oai_request *r,
                        oai_error *err)
{
    for (size_t i = 0; i < sizeof bool_fields / sizeof bool_fields[0]; i++) {
        if (!for_kind(bool_fields[i].kinds, kind))
            continue;
        int *dst = (int *)((char *)r + bool_fields[i].off);
        int rc = want_bool(get(o, bool_fields[i].key), bool_fields[i].key, dst, err);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < sizeof num_fields / sizeof num_fields[0]; i++) {
        float *dst = (float *)((char *)r + num_fields[i].off);
        double d = *dst;
        int rc = want_num(get(o, num_fields[i].key), num_fields[i].key,
                          num_fields[i].s, &d, err);
        if (rc)
            return rc;
        *dst = (float)d;
        /* an open lower bound must also hold for the float we keep */
        if (num_fields[i].s.lo_open && !(*dst > num_fields[i].s.lo))
            return oai_fail(err, 400, OAI_INVALID, num_fields[i].key,
                            "%s must be greater than 0 (as a 32-bit float), "
                            "got %g", num_fields[i].key, d);
    }
    return 0;
}

/* max_tokens / max_completion_tokens (the latter wins, as in vLLM),
 * min_tokens, n, best_of, top_k, seed. */
static int parse_counts(const cJSON *o, const oai_limits *lim, oai_request *r,
                        oai_error *err)
{
    span n_span = {1, lim->max_n, 0, 0, 1};
    int best_of = -1, top_k = r->top_k;

    if (want_int32(get(o, "max_tokens"), "max_tokens", SPAN_INT_POS,
                   &r->max_tokens, err) ||
        want_int32(get(o, "max_completion_tokens"), "max_completion_tokens",
                   SPAN_INT_POS, &r->max_tokens, err))
        return 400;
    if (want_int32(get(o, "min_tokens"), "min_tokens", SPAN_INT_NONNEG,
                   &r->min_tokens, err))
        return 400;
    if (r->max_tokens >= 0 && r->min_tokens > r->max_tokens)
        return oai_fail(err, 400, OAI_INVALID, "min_tokens",
                        "min_tokens must be at most max_tokens (%d), got %d",
                        r->max_tokens, r->min_tokens);
    if (want_int32(get(o, "n"), "n", n_span, &r->n, err))
        return 400;
    /* best_of > n needs ranking by cumulative logprob, which we do not do. */
    if (want_int32(get(o, "best_of"), "best_of", SPAN_INT_POS, &best_of, err))
        return 400;
    if (best_of != -1 && best_of != r->n)
        return oai_fail(err, 400, OAI_INVALID, "best_of",
                        "best_of must be null or equal to n (%d), got %d",
                        r->n, best_of);
    if (want_int32(get(o, "top_k"), "top_k", (span){INT_MIN, INT_MAX, 0, 0, 0},
                   &top_k, err))
        return 400;
    if (top_k == 0)
        top_k = -1; /* vLLM: 0 also means off */
    if (top_k < -1)
        return oai_fail(err, 400, OAI_INVALID, "top_k",
                        "top_k must be -1 (off) or at least 1, got %d", top_k);
    r->top_k = top_k;
    const cJSON *seed = get(o, "seed");
    if (seed && cJSON_IsNumber(seed) &&
        !(seed->valuedouble >= -0x1p63 && seed->valuedouble <= 0x1p63))
        return oai_fail(err, 400, OAI_INVALID, "seed",
                        "seed must be a 64-bit integer, got %g",
                        seed->valuedouble);
    if (want_int(seed, "seed", (span){-0x1p63, 0x1p63, 0, 0, 1}, &r->seed, err))
        return 400;
    r->has_seed = seed != NULL;
    return 0;
}

/* logprobs: completions take an integer (null = off); chat takes a boolean
 * plus top_logprobs, which requires logprobs true (as OpenAI). */
static int parse_logprobs(const cJSON *o, oai_kind kind, const oai_limits *lim,
                          oai_request *r, oai_error *err)
{
    span s = {0, lim->max_logprobs, 0, 0, 1};
    const cJSON *lp = get(o, "logprobs");

    if (kind == OAI_COMPLETION) {
        if (lp && !cJSON_IsNumber(lp))
            return bad_type(err, "logprobs", "an integer or null", lp);
        return want_int32(lp, "logprobs", s, &r->logprobs, err);
    }
    int on = 0, top = 0;
    const cJSON *tl = get(o, "top_logprobs");
    if (want_bool(lp, "logprobs", &on, err) ||
        want_int32(tl, "top_logprobs", s, &top, err))
        return 400;
    if (tl && !on)
        return oai_fail(err, 400, OAI_INVALID, "top_logprobs",
                        "top_logprobs requires logprobs to be true, got "
                        "logprobs %s", lp ? "false" : "absent");
    r->logprobs = on ? top : -1;
    return 0;
}

static int parse_stream_options(const cJSON *o, oai_request *r, oai_error *err)
{
    const cJSON *so = get(o, "stream_options");

    if (!so)
        return 0;
    if (!cJSON_IsObject(so))
        return bad_type(err, "stream_options", "an object", so);
    if (!r->stream)
        return oai_fail(err, 400, OAI_INVALID, "stream_options",
                        "stream_options can only be set when stream is true, "
                        "got stream false");
    return want_bool(get(so, "include_usage"), "stream_options.include_usage",
                     &r->include_usage, err);
}

static int parse_stop(const cJSON *o, const oai_limits *lim, oai_request *r,
                      oai_error *err)
{
    const cJSON *v = get(o, "stop"), *it;
    int n, i = 0;

    if (!v)
        return 0;
    if (cJSON_IsString(v))
        n = 1;
    else if (cJSON_IsArray(v))
        n = cJSON_GetArraySize(v);
    else
        return bad_type(err, "stop", "a string or a list of strings", v);
    if (n > lim->max_stop)
        return oai_fail(err, 400, OAI_INVALID, "stop",
                        "stop must have at most %d strings, got %d",
                        lim->max_stop, n);
    if (n == 0)
        return 0;
    r->stop = calloc((size_t)n, sizeof *r->stop);
    if (!r->stop)
        return no_memory(err);
    for (it = cJSON_IsString(v) ? v : v->child; it && i < n; it = it->next) {
        if (!cJSON_IsString(it))
            return oai_fail(err, 400, OAI_INVALID, "stop",
                            "stop must be a string or a list of strings, got "
                            "a list holding a %s", json_type(it));
        if (!it->valuestring[0])
            return oai_fail(err, 400, OAI_INVALID, "stop",
                            "stop strings must not be empty, got \"\"");
        r->stop[i] = strdup(it->valuestring);
        if (!r->stop[i])
            return no_memory(err);
        r->n_stop = ++i;
    }
    return 0;
}

static int parse_stop_ids(const cJSON *o, oai_request *r, oai_error *err)
{
    const cJSON *v = get(o, "stop_token_ids"), *it;
    int n;

    if (!v)
        return 0;
    if (!cJSON_IsArray(v))
        return bad_type(err, "stop_token_ids", "a list of token ids", v);
    n = cJSON_GetArraySize(v);
    if (n == 0)
        return 0;
    r->stop_token_ids = malloc((size_t)n * sizeof *r->stop_token_ids);
    if (!r->stop_token_ids)
        return no_memory(err);
    cJSON_ArrayForEach(it, v) {
        int rc = want_id(it, "stop_token_ids", "stop_token_ids",
                         &r->stop_token_ids[r->n_stop_token_ids], err);
        if (rc)
            return rc;
        r->n_stop_token_ids++;
    }
    return 0;
}

/* A logit_bias key: decimal digits naming a token id that fits int32. */
static int parse_id_key(const char *s, int32_t *out)
{
    int64_t v = 0;

    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
        if (v > INT32_MAX)
            return -1;
    }
    *out = (int32_t)v;
    return 0;
}

typedef struct bias_ent {
    int32_t id;
    int ord;
    float v;
} bias_ent;

static int bias_cmp(const void *a, const void *b)
{
    const bias_ent *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* logit_bias: {"token id": bias}; a repeated key keeps its last value, as
 * a JSON object read into a dict would. */
static int parse_bias(const cJSON *o, oai_request *r, oai_error *err)
{
    const cJSON *v = get(o, "logit_bias"), *it;
    bias_ent *e = NULL;
    int n, k = 0, rc = 0;

    if (!v)
        return 0;
    if (!cJSON_IsObject(v))
        return bad_type(err, "logit_bias", "an object of token id -> bias", v);
    n = cJSON_GetArraySize(v);
    if (n == 0)
        return 0;
    e = malloc((size_t)n * sizeof *e);
    if (!e)
        return no_memory(err);
    cJSON_ArrayForEach(it, v) {
        if (parse_id_key(it->string, &e[k].id)) {
            char got[96];
            echo_str(it->string, got, sizeof got);
            rc = oai_fail(err, 400, OAI_INVALID, "logit_bias",
                          "logit_bias keys must be token ids (non-negative "
                          "integers), got %s", got);
            goto fail;
        }
        if (!cJSON_IsNumber(it)) {
            rc = oai_fail(err, 400, OAI_INVALID, "logit_bias",
                          "logit_bias values must be numbers, got %s",
                          json_type(it));
            goto fail;
        }
        if (!(it->valuedouble >= -100 && it->valuedouble <= 100)) {
            char got[40];
            fmt_double(it->valuedouble, got, sizeof got);
            rc = oai_fail(err, 400, OAI_INVALID, "logit_bias",
                          "logit_bias values must be in [-100, 100], got %s "
                          "for token %s", got, it->string);
            goto fail;
        }
        e[k].v = (float)it->valuedouble;
        e[k].ord = k;
        k++;
    }
    qsort(e, (size_t)n, sizeof *e, bias_cmp);
    r->bias_ids = malloc((size_t)n * sizeof *r->bias_ids);
    r->bias_values = malloc((size_t)n * sizeof *r->bias_values);
    if (!r->bias_ids || !r->bias_values) {
        rc = no_memory(err);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        if (i + 1 < n && e[i + 1].id == e[i].id)
            continue; /* a later value for the same id follows */
        r->bias_ids[r->n_bias] = e[i].id;
        r->bias_values[r->n_bias] = e[i].v;
        r->n_bias++;
    }
fail:
    free(e);
    return rc;
}

/* ---- parsing: prompt and messages ---------------------------------------- */

static int parse_ids(const cJSON *arr, oai_prompt *p, oai_error *err)
{
    const cJSON *it;
    int n = cJSON_GetArraySize(arr);

    if (n == 0)
        return oai_fail(err, 400, OAI_INVALID, "prompt",
                        "prompt must not hold an empty list of token ids, got []");
    p->ids = malloc((size_t)n * sizeof *p->ids);
    if (!p->ids)
        return no_memory(err);
    cJSON_ArrayForEach(it, arr) {
        int rc = want_id(it, "prompt", "prompt token ids", &p->ids[p->n_ids], err);
        if (rc)
            return rc;
        p->n_ids++;
    }
    return 0;
}

/* A string, a list of strings, a list of token ids, or a list of lists of
 * token ids; the shape is fixed by the first element. */
static int parse_prompt(const cJSON *o, const oai_limits *lim, oai_request *r,
                        oai_error *err)
{
    static const char shapes[] = "a string, a list of strings, a list of token "
                                 "ids or a list of lists of token ids";
    const cJSON *v = get(o, "prompt"), *it;
    int n;

    if (!v)
        return oai_fail(err, 400, OAI_INVALID, "prompt",
                        "prompt is required: expected %s", shapes);
    if (!cJSON_IsString(v) && !cJSON_IsArray(v))
        return bad_type(err, "prompt", shapes, v);
    n = cJSON_IsString(v) ? 1 : cJSON_GetArraySize(v);
    if (n == 0)
        return oai_fail(err, 400, OAI_INVALID, "prompt",
                        "prompt must not be empty, got []");
    if (cJSON_IsArray(v) && cJSON_IsNumber(v->child))
        n = 1; /* one flat prompt of token ids */
    if (n > lim->max_prompts)
        return oai_fail(err, 400, OAI_INVALID, "prompt",
                        "prompt must hold at most %d prompts, got %d",
                        lim->max_prompts, n);
    r->prompts = calloc((size_t)n, sizeof *r->prompts);
    if (!r->prompts)
        return no_memory(err);
    if (cJSON_IsString(v) || cJSON_IsNumber(v->child)) {
        r->n_prompts = 1;
        if (cJSON_IsNumber(v->child))
            return parse_ids(v, &r->prompts[0], err);
        r->prompts[0].text = strdup(v->valuestring);
        return r->prompts[0].text ? 0 : no_memory(err);
    }
    int strings = cJSON_IsString(v->child);
    if (!strings && !cJSON_IsArray(v->child))
        return oai_fail(err, 400, OAI_INVALID, "prompt",
                        "prompt must be %s, got a list of %s", shapes,
                        json_type(v->child));
    cJSON_ArrayForEach(it, v) {
        oai_prompt *p = &r->prompts[r->n_prompts++];
        if (strings && cJSON_IsString(it)) {
            p->text = strdup(it->valuestring);
            if (!p->text)
                return no_memory(err);
        } else if (!strings && cJSON_IsArray(it)) {
            int rc = parse_ids(it, p, err);
            if (rc)
                return rc;
        } else {
            return oai_fail(err, 400, OAI_INVALID, "prompt",
                            "prompt must be %s, got a list mixing %s and %s",
                            shapes, json_type(v->child), json_type(it));
        }
    }
    return 0;
}

/* Content parts: {"type":"text","text":...} only, joined with "\n". */
static int parse_parts(const cJSON *parts, int i, char **out, oai_error *err)
{
    const cJSON *it;
    size_t total = 0;
    int j = 0;
    char param[64];

    cJSON_ArrayForEach(it, parts) {
        if (!cJSON_IsObject(it)) {
            snprintf(param, sizeof param, "messages.[%d].content.[%d]", i, j);
            return oai_fail(err, 400, OAI_INVALID, param,
                            "messages[%d].content[%d] must be an object, got %s",
                            i, j, json_type(it));
        }
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(it, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text")) {
            snprintf(param, sizeof param, "messages.[%d].content.[%d].type", i, j);
            if (!cJSON_IsString(type))
                return oai_fail(err, 400, OAI_INVALID, param,
                                "messages[%d].content[%d].type must be \"text\", "
                                "got %s", i, j, type ? json_type(type) : "nothing");
            char got[96];
            echo_str(type->valuestring, got, sizeof got);
            return oai_fail(err, 400, OAI_INVALID, param,
                            "messages[%d].content[%d].type must be \"text\" "
                            "(other content types are not supported), got %s",
                            i, j, got);
        }
        if (!cJSON_IsString(text)) {
            snprintf(param, sizeof param, "messages.[%d].content.[%d].text", i, j);
            return oai_fail(err, 400, OAI_INVALID, param,
                            "messages[%d].content[%d].text must be a string, "
                            "got %s", i, j, text ? json_type(text) : "nothing");
        }
        total += strlen(text->valuestring) + 1;
        j++;
    }
    char *s = malloc(total + 1), *w = s;
    if (!s)
        return no_memory(err);
    j = 0;
    cJSON_ArrayForEach(it, parts) {
        const char *t = cJSON_GetObjectItemCaseSensitive(it, "text")->valuestring;
        size_t n = strlen(t);
        if (j++)
            *w++ = '\n';
        memcpy(w, t, n);
        w += n;
    }
    *w = '\0';
    *out = s;
    return 0;
}

static int parse_message(const cJSON *m, int i, oai_message *out, oai_error *err)
{
    char param[64];
    const char *role;

    if (!cJSON_IsObject(m)) {
        snprintf(param, sizeof param, "messages.[%d]", i);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "messages[%d] must be an object, got %s", i, json_type(m));
    }
    const cJSON *rv = cJSON_GetObjectItemCaseSensitive(m, "role");
    snprintf(param, sizeof param, "messages.[%d].role", i);
    if (!cJSON_IsString(rv))
        return oai_fail(err, 400, OAI_INVALID, param,
                        "messages[%d].role must be one of \"system\", \"developer\", "
                        "\"user\", \"assistant\", \"tool\", got %s", i,
                        rv ? json_type(rv) : "nothing");
    role = rv->valuestring;
    if (!strcmp(role, "developer"))
        role = "system"; /* OpenAI's newer name for the system role */
    if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
        strcmp(role, "tool")) {
        char got[96];
        echo_str(role, got, sizeof got);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "messages[%d].role must be one of \"system\", \"developer\", "
                        "\"user\", \"assistant\", \"tool\", got %s", i, got);
    }
    const cJSON *tc = get(m, "tool_calls");
    if (tc && (!cJSON_IsArray(tc) || strcmp(role, "assistant"))) {
        snprintf(param, sizeof param, "messages.[%d].tool_calls", i);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "messages[%d].tool_calls must be a list, on an assistant message", i);
    }
    out->role = strdup(role);
    if (!out->role)
        return no_memory(err);

    /* Only an assistant turn may come without content (null or absent). */
    const cJSON *raw = cJSON_GetObjectItemCaseSensitive(m, "content");
    const cJSON *c = get(m, "content");
    if (!c && !strcmp(role, "assistant")) {
        out->content = strdup("");
    } else if (cJSON_IsString(c)) {
        out->content = strdup(c->valuestring);
    } else if (cJSON_IsArray(c)) {
        return parse_parts(c, i, &out->content, err);
    } else {
        snprintf(param, sizeof param, "messages.[%d].content", i);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "messages[%d].content must be a string or a list of "
                        "text parts, got %s", i, raw ? json_type(raw) : "nothing");
    }
    return out->content ? 0 : no_memory(err);
}

static int parse_messages(const cJSON *o, oai_request *r, oai_error *err)
{
    const cJSON *v = get(o, "messages"), *it;
    int n, i = 0;

    if (!v)
        return oai_fail(err, 400, OAI_INVALID, "messages",
                        "messages is required: expected a non-empty list of "
                        "messages");
    if (!cJSON_IsArray(v))
        return bad_type(err, "messages", "a non-empty list of messages", v);
    n = cJSON_GetArraySize(v);
    if (n == 0)
        return oai_fail(err, 400, OAI_INVALID, "messages",
                        "messages must be a non-empty list of messages, got []");
    r->messages = calloc((size_t)n, sizeof *r->messages);
    if (!r->messages || !(r->messages_json = cJSON_PrintUnformatted(v)))
        return no_memory(err);
    cJSON_ArrayForEach(it, v) {
        r->n_messages = i + 1; /* so a failure frees what this one holds */
        int rc = parse_message(it, i, &r->messages[i], err);
        if (rc)
            return rc;
        i++;
    }
    return 0;
}

/* The chat template's extra inputs: tools and documents (lists),
 * chat_template_kwargs (an object), kept as JSON text. */
static int parse_template_inputs(const cJSON *o, oai_request *r, oai_error *err)
{
    static const struct {
        const char *key;
        size_t off;
        int object;
    } f[] = {
        {"tools", offsetof(oai_request, tools_json), 0},
        {"documents", offsetof(oai_request, documents_json), 0},
        {"chat_template_kwargs", offsetof(oai_request, chat_template_kwargs_json), 1},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        const cJSON *v = get(o, f[i].key);
        if (!v)
            continue;
        if (f[i].object ? !cJSON_IsObject(v) : !cJSON_IsArray(v))
            return bad_type(err, f[i].key, f[i].object ? "an object" : "a list", v);
        char **dst = (char **)((char *)r + f[i].off);
        if (!(*dst = cJSON_PrintUnformatted(v)))
            return no_memory(err);
    }
    if (r->continue_final_message && r->add_generation_prompt)
        return oai_fail(err, 400, OAI_INVALID, "continue_final_message",
                        "Cannot set both `continue_final_message` and `add_generation_prompt` "
                        "to True.");
    return 0;
}

/* ---- parsing: the body --------------------------------------------------- */

static void request_init(oai_request *r, oai_kind kind)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->add_generation_prompt = 1;
    r->max_tokens = -1;
    r->n = 1;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->top_k = -1;
    r->repetition_penalty = 1.0f;
    r->logprobs = -1;
    r->skip_special_tokens = 1;
    r->speculative = 1;
}

/* ---- parsing: strict JSON ----------------------------------------------- */

/* cJSON is lenient (01, 1., raw control characters in strings); clients
 * are held to RFC 8259 as Python's json module (vLLM) holds them, so the
 * body's grammar is checked first. Nesting is capped well below cJSON's
 * own limit. */
enum { OAI_JSON_DEPTH = 256 };

static size_t json_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The code unit of a \uXXXX escape at s[j] ('\\'), or -1. */
static long json_u16(const char *s, size_t n, size_t j)
{
    long v = 0;

    if (n - j < 6 || s[j] != '\\' || s[j + 1] != 'u')
        return -1;
    for (size_t k = j + 2; k < j + 6; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A string at s[*i] == '"'; *i moves past it. 0 when well formed. */
static int json_string(const char *s, size_t n, size_t *i)
{
    size_t j = *i + 1;

    while (j < n) {
        unsigned char c = (unsigned char)s[j];
        if (c == '"') {
            *i = j + 1;
            return 0;
        }
        if (c < 0x20)
            break;
        if (c != '\\') {
            j++;
            continue;
        }
        if (j + 1 >= n)
            break;
        c = (unsigned char)s[j + 1];
        if (c == 'u') {
            /* UTF-16 surrogates only as a high + low pair */
            long u = json_u16(s, n, j), lo;
            if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF))
                break;
            if (u >= 0xD800 && u <= 0xDBFF) {
                lo = json_u16(s, n, j + 6);
                if (lo < 0xDC00 || lo > 0xDFFF)
                    break;
                j += 6;
            }
            j += 6;
        } else if (c && strchr("\"\\/bfnrt", c)) {
            j += 2;
        } else {
            break;
        }
    }
    *i = j;
    return -1;
}

/* A number (RFC 8259 grammar) or a literal at s[*i]. */
static int json_scalar(const char *s, size_t n, size_t *i)
{
    static const char *const lits[] = {"true", "false", "null"};
    size_t j = *i;

    for (int k = 0; k < 3; k++) {
        size_t l = strlen(lits[k]);
        if (n - j >= l && !memcmp(s + j, lits[k], l)) {
            *i = j + l;
            return 0;
        }
    }
    if (j < n && s[j] == '-')
        j++;
    if (j < n && s[j] == '0')
        j++;
    else if (j < n && is_digit(s[j]))
        while (j < n && is_digit(s[j]))
            j++;
    else
        goto fail;
    if (j < n && s[j] == '.') {
        if (++j >= n || !is_digit(s[j]))
            goto fail;
        while (j < n && is_digit(s[j]))
            j++;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        j++;
        if (j < n && (s[j] == '+' || s[j] == '-'))
            j++;
        if (j >= n || !is_digit(s[j]))
            goto fail;
        while (j < n && is_digit(s[j]))
            j++;
    }
    *i = j;
    return 0;
fail:
    *i = j;
    return -1;
}

/* 0 when s[0..n) is one JSON value with optional whitespace around it;
 * else -1 with *at the offset of the first bad byte (or 1 when nested too
 * deeply). */
static int json_check(const char *s, size_t n, size_t *at, int *too_deep)
{
    char stack[OAI_JSON_DEPTH]; /* '{' or '[' per open container */
    int depth = 0;
    enum { VALUE, VALUE_OR_CLOSE, KEY, KEY_OR_CLOSE, NEXT } want = VALUE;
    size_t i = 0;

    *too_deep = 0;
    if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3))
        i = 3; /* a UTF-8 byte order mark, as cJSON and Python allow */
    for (;;) {
        i = json_ws(s, n, i);
        if (want == NEXT && depth == 0)
            break;
        if (i >= n)
            goto fail;
        char c = s[i];
        if (want == VALUE || want == VALUE_OR_CLOSE) {
            if (c == ']' && want == VALUE_OR_CLOSE) {
                depth--;
                i++;
                want = NEXT;
            } else if (c == '{' || c == '[') {
                if (depth == OAI_JSON_DEPTH) {
                    *too_deep = 1;
                    goto fail;
                }
                stack[depth++] = c;
                i++;
                want = c == '{' ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
            } else if (c == '"') {
                if (json_string(s, n, &i))
                    goto fail;
                want = NEXT;
            } else {
                if (json_scalar(s, n, &i))
                    goto fail;
                want = NEXT;
            }
        } else if (want == KEY || want == KEY_OR_CLOSE) {
            if (c == '}' && want == KEY_OR_CLOSE) {
                depth--;
                i++;
                want = NEXT;
            } else if (c == '"') {
                if (json_string(s, n, &i))
                    goto fail;
                i = json_ws(s, n, i);
                if (i >= n || s[i] != ':')
                    goto fail;
                i++;
                want = VALUE;
            } else {
                goto fail;
            }
        } else if (c == ',') {
            i++;
            want = stack[depth - 1] == '{' ? KEY : VALUE;
        } else if (c == (stack[depth - 1] == '{' ? '}' : ']')) {
            depth--;
            i++;
        } else {
            goto fail;
        }
    }
    if (i == n)
        return 0;
fail:
    *at = i;
    return -1;
}

/* The body as a JSON object in *root; 400 with err filled otherwise. */
static int parse_body(const char *body, size_t len, cJSON **root, oai_error *err)
{
    const unsigned char *u = (const unsigned char *)body;
    size_t i = 0;
    int deep;

    *root = NULL;
    if (!body || len == 0)
        return oai_fail(err, 400, OAI_INVALID, "",
                        "request body is empty: expected a JSON object");
    while (i < len) { /* cJSON does not check UTF-8; JSON must be UTF-8 */
        int ok;
        size_t k = utf8_next(u + i, len - i, &ok);
        if (!ok)
            return oai_fail(err, 400, OAI_INVALID, "",
                            "request body must be UTF-8 JSON, got an invalid "
                            "byte at offset %zu", i);
        i += k;
    }
    if (json_check(body, len, &i, &deep))
        return oai_fail(err, 400, OAI_INVALID, "",
                        "could not parse the JSON body of your request: %s "
                        "at offset %zu", deep ? "nested too deeply" : "invalid JSON",
                        i);
    cJSON *v = cJSON_ParseWithLengthOpts(body, len, NULL, 0);
    if (!v) /* the grammar is checked: only allocation fails here */
        return no_memory(err);
    if (!cJSON_IsObject(v)) {
        int rc = oai_fail(err, 400, OAI_INVALID, "",
                          "request body must be a JSON object, got %s",
                          json_type(v));
        cJSON_Delete(v);
        return rc;
    }
    *root = v;
    return 0;
}

int oai_parse(oai_kind kind, const char *body, size_t len, const oai_limits *lim,
              oai_request *out, oai_error *err)
{
    oai_limits dl = oai_limits_default();
    oai_request r;
    cJSON *root = NULL;
    int rc;

    request_init(&r, kind);
    if (!lim)
        lim = &dl;
    if (!out)
        return oai_fail(err, 500, "server_error", "", "no request to fill");
    memset(out, 0, sizeof *out);
    if ((rc = parse_body(body, len, &root, err)))
        goto fail;
    if ((rc = want_str(get(root, "model"), "model", &r.model, err)))
        goto fail;
    rc = kind == OAI_CHAT ? parse_messages(root, &r, err)
                          : parse_prompt(root, lim, &r, err);
    if (rc)
        goto fail;
    if (kind == OAI_COMPLETION && get(root, "suffix")) {
        rc = oai_fail(err, 400, OAI_INVALID, "suffix",
                      "suffix is not currently supported");
        goto fail;
    }
    if ((rc = parse_simple(root, kind, &r, err)) ||
        (kind == OAI_CHAT && (rc = parse_template_inputs(root, &r, err))) ||
        (rc = parse_stream_options(root, &r, err)) ||
        (rc = parse_counts(root, lim, &r, err)) ||
        (rc = parse_logprobs(root, kind, lim, &r, err)) ||
        (rc = parse_stop(root, lim, &r, err)) ||
        (rc = parse_stop_ids(root, &r, err)) ||
        (rc = parse_bias(root, &r, err)) ||
        (rc = want_str(get(root, "user"), "user", &r.user, err)) ||
        (rc = want_str(get(root, "cache_salt"), "cache_salt", &r.cache_salt, err)))
        goto fail;
    if (r.cache_salt && !r.cache_salt[0]) {
        rc = oai_fail(err, 400, OAI_INVALID, "cache_salt",
                      "cache_salt must be a non-empty string, got \"\"");
        goto fail;
    }
    cJSON_Delete(root);
    *out = r;
    return 0;
fail:
    cJSON_Delete(root);
    oai_request_free(&r);
    return rc;
}

void oai_request_free(oai_request *r)
{
    if (!r)
        return;
    free(r->model);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    for (int i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    free(r->messages_json);
    free(r->tools_json);
    free(r->documents_json);
    free(r->chat_template_kwargs_json);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->stop_token_ids);
    free(r->bias_ids);
    free(r->bias_values);
    free(r->user);
    free(r->cache_salt);
    memset(r, 0, sizeof *r);
}

/* ---- encoding: items ----------------------------------------------------- */

/* Puts item under key in an object (or appends it to an array when key is
 * NULL); takes item, frees it on failure; -1 when item is NULL or not added. */
static int attach(cJSON *parent, const char *key, cJSON *item)
{
    if (!item)
        return -1;
    if (key ? !cJSON_AddItemToObject(parent, key, item)
            : !cJSON_AddItemToArray(parent, item)) {
        cJSON_Delete(item);
        return -1;
    }
    return 0;
}

/* Any bytes as a JSON string (a raw item holding the escaped text). */
static cJSON *str_item(const char *s, size_t n)
{
    inf_buf b = {0};
    cJSON *item = NULL;

    sb_json_str(&b, s ? s : "", s ? n : 0);
    if (!b.oom)
        item = cJSON_CreateRaw(b.p);
    free(b.p);
    return item;
}

static cJSON *cstr_item(const char *s)
{
    return str_item(s, s ? strlen(s) : 0);
}

/* A logprob as the shortest text that reads back as the same float; NAN
 * (a first prompt token) is null, -inf is -9999.0 as vLLM writes it. */
static void fmt_lp(float lp, char *buf, size_t n)
{
    if (isinf(lp) && lp < 0)
        lp = -9999.0f;
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)lp);
        if (strtof(buf, NULL) == lp)
            return;
    }
}

static cJSON *lp_item(float lp)
{
    char buf[32];

    if (isnan(lp) || (isinf(lp) && lp > 0))
        return cJSON_CreateNull();
    fmt_lp(lp, buf, sizeof buf);
    return cJSON_CreateRaw(buf);
}

static cJSON *usage_item(const oai_usage *u)
{
    cJSON *o = cJSON_CreateObject(), *d = NULL;

    if (!o ||
        attach(o, "prompt_tokens", cJSON_CreateNumber(u->prompt_tokens)) ||
        attach(o, "completion_tokens", cJSON_CreateNumber(u->completion_tokens)) ||
        attach(o, "total_tokens",
               cJSON_CreateNumber((double)u->prompt_tokens + u->completion_tokens)) ||
        attach(o, "prompt_tokens_details", d = cJSON_CreateObject()) ||
        attach(d, "cached_tokens", cJSON_CreateNumber(u->cached_tokens))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* id, object, created, model: the head of every response and chunk. */
static cJSON *head_item(const oai_meta *m, const char *object)
{
    cJSON *o = cJSON_CreateObject();

    if (!o || attach(o, "id", cstr_item(m->id)) ||
        attach(o, "object", cJSON_CreateString(object)) ||
        attach(o, "created", cJSON_CreateNumber((double)m->created)) ||
        attach(o, "model", cstr_item(m->model))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* stop_reason as vLLM: the stop string, the stop token id, or null; only a
 * "stop" finish has one. */
static cJSON *stop_reason_item(const oai_choice *c)
{
    if (c->finish_reason && !strcmp(c->finish_reason, "stop")) {
        if (c->stop_reason_str)
            return cstr_item(c->stop_reason_str);
        if (c->stop_reason_id >= 0)
            return cJSON_CreateNumber(c->stop_reason_id);
    }
    return cJSON_CreateNull();
}

static cJSON *finish_item(const oai_choice *c)
{
    return c->finish_reason ? cstr_item(c->finish_reason) : cJSON_CreateNull();
}

/* Completions "top_logprobs" entry: {token: logprob, ...} written by hand
 * so keys get the same escaping as values; a token text that repeats (two
 * ids decoding alike) keeps its first, likelier, entry. */
static cJSON *cmpl_top_item(const oai_token_lp *t)
{
    inf_buf b = {0};
    size_t *key_at = NULL, *key_len = NULL;
    int n_keys = 0;
    cJSON *item = NULL;

    if (isnan(t->logprob) && t->n_top == 0)
        return cJSON_CreateNull(); /* vLLM: no alternatives for it */
    if (t->n_top > 0) {
        key_at = malloc((size_t)t->n_top * sizeof *key_at);
        key_len = malloc((size_t)t->n_top * sizeof *key_len);
        if (!key_at || !key_len)
            goto done;
    }
    inf_buf_put(&b, "{", 1);
    for (int j = 0; j < t->n_top; j++) {
        size_t at = b.len + (n_keys ? 1 : 0), len;
        int dup = 0;
        char num[32];
        if (n_keys)
            inf_buf_put(&b, ",", 1);
        sb_json_str(&b, t->top[j].token, t->top[j].token ? t->top[j].token_len : 0);
        if (b.oom)
            goto done;
        len = b.len - at;
        for (int k = 0; k < n_keys && !dup; k++)
            dup = key_len[k] == len && !memcmp(b.p + key_at[k], b.p + at, len);
        if (dup) {
            b.len = at - (n_keys ? 1 : 0);
            b.p[b.len] = '\0';
            continue;
        }
        key_at[n_keys] = at;
        key_len[n_keys++] = len;
        if (isnan(t->top[j].logprob) || (isinf(t->top[j].logprob) && t->top[j].logprob > 0))
            snprintf(num, sizeof num, "null");
        else
            fmt_lp(t->top[j].logprob, num, sizeof num);
        inf_buf_put(&b, ":", 1);
        inf_buf_put(&b, num, strlen(num));
    }
    inf_buf_put(&b, "}", 1);
    if (!b.oom)
        item = cJSON_CreateRaw(b.p);
done:
    free(key_at);
    free(key_len);
    free(b.p);
    return item;
}

/* Completions logprobs: {"tokens","token_logprobs","top_logprobs",
 * "text_offset"}, or null when not asked. */
static cJSON *cmpl_logprobs_item(const oai_choice *c)
{
    cJSON *o, *tok = NULL, *lps = NULL, *tops = NULL, *offs = NULL;

    if (!c->want_logprobs && c->n_lps == 0)
        return cJSON_CreateNull();
    o = cJSON_CreateObject();
    if (!o || attach(o, "tokens", tok = cJSON_CreateArray()) ||
        attach(o, "token_logprobs", lps = cJSON_CreateArray()) ||
        attach(o, "top_logprobs", tops = cJSON_CreateArray()) ||
        attach(o, "text_offset", offs = cJSON_CreateArray()))
        goto fail;
    for (int i = 0; i < c->n_lps; i++) {
        const oai_token_lp *t = &c->lps[i];
        if (attach(tok, NULL, str_item(t->token, t->token_len)) ||
            attach(lps, NULL, lp_item(t->logprob)) ||
            attach(tops, NULL, cmpl_top_item(t)) ||
            attach(offs, NULL, cJSON_CreateNumber(t->text_offset)))
            goto fail;
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* {"token","logprob","bytes"}: bytes are the piece's raw bytes, so partial
 * UTF-8 can be put back together by the client. */
static cJSON *chat_lp_entry(const char *token, size_t len, float lp)
{
    cJSON *o = cJSON_CreateObject(), *bytes = NULL;

    if (!token)
        len = 0;
    if (!o || attach(o, "token", str_item(token, len)) ||
        attach(o, "logprob", lp_item(lp)) ||
        attach(o, "bytes", bytes = cJSON_CreateArray()))
        goto fail;
    for (size_t i = 0; i < len; i++)
        if (attach(bytes, NULL, cJSON_CreateNumber((unsigned char)token[i])))
            goto fail;
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* Chat logprobs: {"content":[{token, logprob, bytes, top_logprobs}]}, or
 * null when not asked. */
static cJSON *chat_logprobs_item(const oai_choice *c)
{
    cJSON *o, *content = NULL;

    if (!c->want_logprobs && c->n_lps == 0)
        return cJSON_CreateNull();
    o = cJSON_CreateObject();
    if (!o || attach(o, "content", content = cJSON_CreateArray()))
        goto fail;
    for (int i = 0; i < c->n_lps; i++) {
        const oai_token_lp *t = &c->lps[i];
        cJSON *e = chat_lp_entry(t->token, t->token_len, t->logprob), *tops = NULL;
        if (attach(content, NULL, e) ||
            attach(e, "top_logprobs", tops = cJSON_CreateArray()))
            goto fail;
        for (int j = 0; j < t->n_top; j++)
            if (attach(tops, NULL, chat_lp_entry(t->top[j].token, t->top[j].token_len,
                                                 t->top[j].logprob)))
                goto fail;
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* Prints o (then frees it), optionally framed as one SSE event. */
static char *finish_print(cJSON *o, int sse)
{
    char *json = o ? cJSON_PrintUnformatted(o) : NULL, *out;

    cJSON_Delete(o);
    if (!json || !sse)
        return json;
    size_t n = strlen(json);
    out = malloc(n + 9);
    if (out) {
        memcpy(out, "data: ", 6);
        memcpy(out + 6, json, n);
        memcpy(out + 6 + n, "\n\n", 3);
    }
    free(json);
    return out;
}

/* ---- encoding: bodies ---------------------------------------------------- */

/* One choice: for chat, a `container` object ("message", or "delta" in a
 * chunk) with the role and content when asked; for completions, the text. */
static cJSON *choice_item(int chat, const oai_choice *c, const char *container, int role,
                          int content)
{
    cJSON *ch = cJSON_CreateObject(), *inner = NULL;

    if (!ch || attach(ch, "index", cJSON_CreateNumber(c->index)))
        goto fail;
    if (chat) {
        if (attach(ch, container, inner = cJSON_CreateObject()) ||
            (role && attach(inner, "role", cJSON_CreateString("assistant"))) ||
            (content && attach(inner, "content", str_item(c->text, c->text_len))) ||
            attach(ch, "logprobs", chat_logprobs_item(c)))
            goto fail;
    } else if (attach(ch, "text", str_item(c->text, c->text_len)) ||
               attach(ch, "logprobs", cmpl_logprobs_item(c))) {
        goto fail;
    }
    if (attach(ch, "finish_reason", finish_item(c)) ||
        attach(ch, "stop_reason", stop_reason_item(c)))
        goto fail;
    return ch;
fail:
    cJSON_Delete(ch);
    return NULL;
}

char *oai_response_json(const oai_meta *m, const oai_choice *choices, int n,
                        const oai_usage *usage)
{
    int chat;
    cJSON *o, *arr = NULL;

    if (!m || (n > 0 && !choices))
        return NULL;
    chat = m->kind == OAI_CHAT;
    o = head_item(m, chat ? "chat.completion" : "text_completion");
    if (!o || attach(o, "choices", arr = cJSON_CreateArray()))
        goto fail;
    for (int i = 0; i < n; i++)
        if (attach(arr, NULL, choice_item(chat, &choices[i], "message", 1, 1)))
            goto fail;
    if (attach(o, "usage", usage ? usage_item(usage) : cJSON_CreateNull()))
        goto fail;
    return finish_print(o, 0);
fail:
    cJSON_Delete(o);
    return NULL;
}

char *oai_chunk_sse(const oai_meta *m, const oai_choice *c, int role_first,
                    const oai_usage *usage)
{
    int chat;
    cJSON *o, *arr = NULL;

    if (!m || (!c && !usage))
        return NULL;
    chat = m->kind == OAI_CHAT;
    o = head_item(m, chat ? "chat.completion.chunk" : "text_completion");
    if (!o || attach(o, "choices", arr = cJSON_CreateArray()) ||
        /* chat deltas follow vLLM: the first carries the role (and content
         * "" when it has no text), later empty ones are {} */
        (c && attach(arr, NULL, choice_item(chat, c, "delta", role_first,
                                            role_first || c->text_len > 0))))
        goto fail;
    if (usage ? attach(o, "usage", usage_item(usage))
              : m->usage_null && attach(o, "usage", cJSON_CreateNull()))
        goto fail;
    return finish_print(o, 1);
fail:
    cJSON_Delete(o);
    return NULL;
}

const char *oai_sse_done(void)
{
    return "data: [DONE]\n\n";
}

/* code: null unless the caller set one (OpenAI's strings such as
 * "model_not_found"); vLLM writes the HTTP status there, OpenAI does not. */
char *oai_error_json(const oai_error *err)
{
    cJSON *o, *e = NULL;

    if (!err)
        return NULL;
    o = cJSON_CreateObject();
    if (!o || attach(o, "error", e = cJSON_CreateObject()) ||
        attach(e, "message", cstr_item(err->message)) ||
        attach(e, "type", cstr_item(err->type ? err->type : default_type(err->status))) ||
        attach(e, "param", err->param[0] ? cstr_item(err->param) : cJSON_CreateNull()) ||
        attach(e, "code", err->code ? cstr_item(err->code) : cJSON_CreateNull())) {
        cJSON_Delete(o);
        return NULL;
    }
    return finish_print(o, 0);
}

char *oai_models_json(const char *model_id, long created, int max_model_len)
{
    cJSON *o = cJSON_CreateObject(), *data = NULL, *card = NULL;

    if (!o || attach(o, "object", cJSON_CreateString("list")) ||
        attach(o, "data", data = cJSON_CreateArray()) ||
        attach(data, NULL, card = cJSON_CreateObject()) ||
        attach(card, "id", cstr_item(model_id)) ||
        attach(card, "object", cJSON_CreateString("model")) ||
        attach(card, "created", cJSON_CreateNumber((double)created)) ||
        attach(card, "owned_by", cJSON_CreateString("inferd")) ||
        attach(card, "root", cstr_item(model_id)) ||
        attach(card, "parent", cJSON_CreateNull()) ||
        attach(card, "max_model_len", cJSON_CreateNumber(max_model_len)) ||
        attach(card, "permission", cJSON_CreateArray())) {
        cJSON_Delete(o);
        return NULL;
    }
    return finish_print(o, 0);
}
