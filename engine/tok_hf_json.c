/* tok_hf_json: a JSON reader that builds no tree, for the large sections of
 * tokenizer.json (model.vocab and model.merges: 33 MB for Gemma 3, whose
 * cJSON tree costs a malloc per entry and most of the load time). It reads
 * strict RFC 8259 JSON from untrusted text; every function stops at the
 * first error with j->msg set and the cursor where it was found. */
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

#define HF_JS_DEPTH 512 /* nesting, as cJSON's limit guards its stack */

static int js_fail(hf_js *j, const char *msg)
{
    if (!j->msg)
        j->msg = msg;
    return INF_ERR_FORMAT;
}

void hf_js_ws(hf_js *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

int hf_js_peek(hf_js *j)
{
    hf_js_ws(j);
    return j->p < j->end ? (unsigned char)*j->p : -1;
}

int hf_js_expect(hf_js *j, char c)
{
    if (hf_js_peek(j) != (unsigned char)c)
        return js_fail(j, c == ':' ? "expected ':'" : c == '{' ? "expected an object"
                          : c == '[' ? "expected an array" : "unexpected character");
    j->p++;
    return INF_OK;
}

static int hex4(const char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* The string at the cursor: decoded into out (when not NULL, cleared first)
 * or only checked. Bytes are taken as they are (as cJSON does); escapes
 * must be valid, surrogates paired. */
int hf_js_str(hf_js *j, inf_buf *out)
{
    if (out)
        out->len = 0;
    if (hf_js_peek(j) != '"')
        return js_fail(j, "expected a string");
    const char *p = ++j->p, *end = j->end;
    for (;;) {
        const char *run = p;
        while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
            p++;
        if (out && p > run)
            inf_buf_put(out, run, (size_t)(p - run));
        if (p >= end) {
            j->p = p;
            return js_fail(j, "unterminated string");
        }
        if (*p == '"')
            break;
        if (*p != '\\') {
            j->p = p;
            return js_fail(j, "control character in a string");
        }
        if (p + 1 >= end) {
            j->p = p;
            return js_fail(j, "unterminated string");
        }
        char c = p[1], e = 0;
        switch (c) {
        case '"': case '\\': case '/': e = c; break;
        case 'b': e = '\b'; break;
        case 'f': e = '\f'; break;
        case 'n': e = '\n'; break;
        case 'r': e = '\r'; break;
        case 't': e = '\t'; break;
        case 'u': break;
        default:
            j->p = p;
            return js_fail(j, "invalid escape");
        }
        if (c != 'u') {
            if (out)
                inf_buf_put(out, &e, 1);
            p += 2;
            continue;
        }
        uint32_t cp, lo;
        if (end - p < 6 || hex4(p + 2, &cp)) {
            j->p = p;
            return js_fail(j, "invalid \\u escape");
        }
        p += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            j->p = p - 6;
            return js_fail(j, "unpaired surrogate in \\u escape");
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) || lo < 0xDC00 ||
                lo > 0xDFFF) {
                j->p = p - 6;
                return js_fail(j, "unpaired surrogate in \\u escape");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            p += 6;
        }
        if (out) {
            char u[4];
            inf_buf_put(out, u, hf_utf8_put((int32_t)cp, u));
        }
    }
    j->p = p + 1;
    if (out)
        inf_buf_put(out, "", 0); /* NUL-terminated, even when empty */
    if (out && out->oom)
        return js_fail(j, "out of memory");
    return INF_OK;
}

/* A number; *is_int says whether it is an integer within +-2^53 (its value
 * then in *v), as an id must be. Fractions and exponents are read as their
 * value, so 5.0 and 5e0 are the integer 5 (cJSON reads them so too). */
int hf_js_num(hf_js *j, long long *v, int *is_int)
{
    hf_js_ws(j);
    const char *p = j->p, *end = j->end, *s = p;
    if (p < end && *p == '-')
        p++;
    if (p >= end || !(*p >= '0' && *p <= '9'))
        return js_fail(j, "expected a value");
    long long acc = 0;
    int digits = 0, simple = 1;
    if (*p == '0') {
        p++;
        digits = 1;
    } else {
        for (; p < end && *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 16)
                acc = acc * 10 + (*p - '0');
    }
    if (p < end && *p == '.') {
        simple = 0;
        if (++p >= end || !(*p >= '0' && *p <= '9'))
            return js_fail(j, "invalid number");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        simple = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !(*p >= '0' && *p <= '9'))
            return js_fail(j, "invalid number");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    j->p = p;
    *is_int = 0;
    if (simple && digits <= 15) {
        *v = *s == '-' ? -acc : acc;
        *is_int = 1;
    } else if (p - s < 64) {
        char tmp[64];
        memcpy(tmp, s, (size_t)(p - s));
        tmp[p - s] = '\0';
        double d = strtod(tmp, NULL);
        if (d >= -9007199254740992.0 && d <= 9007199254740992.0 && d == (double)(long long)d) {
            *v = (long long)d;
            *is_int = 1;
        }
    }
    return INF_OK;
}

/* Members and elements: *state is 0 before the first. Returns 1 when one
 * follows (for an object, its key read into key and the ':' passed), 0 at
 * the closing bracket (passed), or a negative error. */
int hf_js_next(hf_js *j, int *state, char close, inf_buf *key)
{
    int c = hf_js_peek(j);
    if (c == (unsigned char)close) {
        j->p++;
        return 0;
    }
    if (*state) {
        if (c != ',') {
            js_fail(j, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
            return -1;
        }
        j->p++; /* a trailing comma fails on the element that must follow */
    }
    if (close == '}' && (hf_js_str(j, key) || hf_js_expect(j, ':')))
        return -1;
    *state = 1;
    return 1;
}

static int js_skip(hf_js *j, size_t *count, int depth)
{
    int c = hf_js_peek(j);
    if (count)
        *count = 0;
    if (c == '"')
        return hf_js_str(j, NULL);
    if (c == '{' || c == '[') {
        if (depth >= HF_JS_DEPTH)
            return js_fail(j, "nested too deeply");
        char close = c == '{' ? '}' : ']';
        int state = 0, r;
        j->p++;
        while ((r = hf_js_next(j, &state, close, NULL)) == 1) {
            if (js_skip(j, NULL, depth + 1))
                return INF_ERR_FORMAT;
            if (count)
                ++*count;
        }
        return r < 0 ? INF_ERR_FORMAT : INF_OK;
    }
    static const char *words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(j->end - j->p) >= n && memcmp(j->p, words[i], n) == 0) {
            j->p += n;
            return INF_OK;
        }
    }
    long long v;
    int is_int;
    return hf_js_num(j, &v, &is_int);
}

int hf_js_skip(hf_js *j, size_t *count)
{
    return js_skip(j, count, 0);
}
