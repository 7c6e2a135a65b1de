/* oai_: a request body's JSON, checked strictly before cJSON reads it. */
#include "server/oai_int.h"

#include <stddef.h>
#include <string.h>

#include "engine/json_esc.h"

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
int oai__parse_body(const char *body, size_t len, cJSON **root, oai_error *err)
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
        size_t k = json_esc_utf8_next(u + i, len - i, &ok);
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
        return oai__no_memory(err);
    if (!cJSON_IsObject(v)) {
        int rc = oai_fail(err, 400, OAI_INVALID, "",
                          "request body must be a JSON object, got %s",
                          oai__json_type(v));
        cJSON_Delete(v);
        return rc;
    }
    *root = v;
    return 0;
}
