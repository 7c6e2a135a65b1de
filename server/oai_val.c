/* oai_: limits, errors and the typed readers of request fields. Messages
 * follow one pattern: "<param> must be <expected>, got <what came>", one
 * line, naming the parameter as OpenAI does. */
#include "server/oai_int.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_esc.h"

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
const char *oai__default_type(int status)
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
        err->type = type ? type : oai__default_type(status);
        snprintf(err->param, sizeof err->param, "%s", param ? param : "");
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->code = NULL;
    }
    return status;
}

/* ---- parsing: helpers ---------------------------------------------------- */

/* A client's string quoted for a message: JSON-escaped (so the message
 * stays one line) and cut after 40 bytes. */
void oai__echo_str(const char *s, char *buf, size_t n)
{
    size_t len = strlen(s);
    inf_buf b = {0};

    json_esc_put(&b, s, len > 40 ? 40 : len);
    if (len > 40)
        inf_buf_put(&b, "...", 3);
    snprintf(buf, n, "%s", b.oom ? "\"\"" : b.p);
    free(b.p);
}

const char *oai__json_type(const cJSON *v)
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
void oai__fmt_double(double v, char *buf, size_t n)
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
const cJSON *oai__get(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(v) ? NULL : v;
}

int oai__bad_type(oai_error *err, const char *param, const char *want,
                    const cJSON *v)
{
    return oai_fail(err, 400, OAI_INVALID, param, "%s must be %s, got %s",
                    param, want, oai__json_type(v));
}

int oai__no_memory(oai_error *err)
{
    return oai_fail(err, 500, "server_error", "", "out of memory");
}

int oai__in_span(double v, const char *param, oai__span s, oai_error *err)
{
    char got[40], lo[40], hi[40];

    int low = !(s.lo_open ? v > s.lo : v >= s.lo);
    int high = !(s.hi_open ? v < s.hi : v <= s.hi);
    if (!low && !high)
        return 0;
    oai__fmt_double(v, got, sizeof got);
    oai__fmt_double(s.lo, lo, sizeof lo);
    oai__fmt_double(s.hi, hi, sizeof hi);
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
int oai__want_num(const cJSON *v, const char *param, oai__span s, double *out,
                    oai_error *err)
{
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v))
        return oai__bad_type(err, param, "a number", v);
    if (oai__in_span(v->valuedouble, param, s, err))
        return 400;
    *out = v->valuedouble;
    return 0;
}

/* Optional integer in s (s within int64); 16.0 counts as 16, 16.5 does
 * not (JSON has one number type). Doubles at 2^63 saturate: cJSON reads
 * numbers as doubles, so INT64_MAX itself arrives as 2^63. */
int oai__want_int(const cJSON *v, const char *param, oai__span s, int64_t *out,
                    oai_error *err)
{
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v))
        return oai__bad_type(err, param, "an integer", v);
    double d = v->valuedouble;
    if (isfinite(d) && d != floor(d)) {
        char got[40];
        oai__fmt_double(d, got, sizeof got);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "%s must be an integer, got %s", param, got);
    }
    if (oai__in_span(d, param, s, err))
        return 400;
    *out = d >= 0x1p63 ? INT64_MAX : (int64_t)d;
    return 0;
}

int oai__want_int32(const cJSON *v, const char *param, oai__span s, int *out,
                      oai_error *err)
{
    int64_t x = *out;
    int rc = oai__want_int(v, param, s, &x, err);
    if (rc == 0)
        *out = (int)x;
    return rc;
}

int oai__want_bool(const cJSON *v, const char *param, int *out, oai_error *err)
{
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return oai__bad_type(err, param, "a boolean", v);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 0;
}

int oai__want_str(const cJSON *v, const char *param, char **out,
                    oai_error *err)
{
    if (!v)
        return 0;
    if (!cJSON_IsString(v))
        return oai__bad_type(err, param, "a string", v);
    free(*out);
    *out = strdup(v->valuestring);
    return *out ? 0 : oai__no_memory(err);
}

/* A token id: a non-negative integer that fits int32 (the vocabulary range
 * is the caller's). */
int oai__want_id(const cJSON *v, const char *param, const char *what,
                   int32_t *out, oai_error *err)
{
    if (!cJSON_IsNumber(v))
        return oai_fail(err, 400, OAI_INVALID, param,
                        "%s must be non-negative integers, got %s", what,
                        oai__json_type(v));
    double d = v->valuedouble;
    if (!(d >= 0 && d <= INT32_MAX && d == floor(d))) {
        char got[40];
        oai__fmt_double(d, got, sizeof got);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "%s must be non-negative integers, got %s", what, got);
    }
    *out = (int32_t)d;
    return 0;
}
