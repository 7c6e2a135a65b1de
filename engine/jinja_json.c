/* jinja JSON reader: request JSON text -> interpreter values, as Python's
 * json.loads gives them to Jinja2 (vLLM and Hugging Face hand templates
 * what json.loads made of the request):
 *   - a number with a fraction or an exponent is a float ("1.0" renders
 *     "1.0"), one without is an int; an int past int64 becomes a float
 *     (Python keeps it exact: the one difference, see docs/chat-templates.md);
 *   - NaN, Infinity and -Infinity are accepted (json.loads accepts them);
 *   - a duplicate key keeps its first position and takes the last value;
 *   - \uXXXX escapes decode, surrogate pairs join; a lone surrogate, which
 *     UTF-8 cannot carry, becomes U+FFFD;
 *   - control characters inside strings are an error (strict mode).
 * Reading straight into values skips cJSON's tree and a second copy. */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jr {
    jctx *c;
    const char *s, *e;   /* the text left                                   */
    const char *start;
    int depth;
    long key_cmps;       /* duplicate-key checks: bounded (hostile objects)  */
} jr;

#define JR_MAX_DEPTH 512
#define JR_MAX_KEY_CMPS (64L << 20)

static int jr_fail(jr *r, const char *what)
{
    return jx_fail(r->c, "invalid JSON: %s at byte %zu", what, (size_t)(r->s - r->start));
}

static void ws(jr *r)
{
    while (r->s < r->e && (*r->s == ' ' || *r->s == '\t' || *r->s == '\n' || *r->s == '\r'))
        r->s++;
}

static int lit(jr *r, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->e - r->s) < n || memcmp(r->s, word, n) != 0)
        return 0;
    r->s += n;
    return 1;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9')
            v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            v |= (unsigned)(ch - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *w, unsigned cp)
{
    if (cp < 0x80) {
        w[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        w[0] = (char)(0xC0 | cp >> 6);
        w[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        w[0] = (char)(0xE0 | cp >> 12);
        w[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        w[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    w[0] = (char)(0xF0 | cp >> 18);
    w[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    w[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    w[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Bytes that end a run of plain string text: controls, '"', '\\'. */
static const unsigned char SPECIAL[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    ['"'] = 1, ['\\'] = 1,
};

/* A string; r->s is just past the opening quote. An escape never makes
 * the text longer (\uXXXX is 6 bytes for at most 3; a pair 12 for 4), so
 * the value is written in one pass into room the size of the source. */
static int string(jr *r, jv *out)
{
    const unsigned char *p = (const unsigned char *)r->s, *e = (const unsigned char *)r->e;
    int escapes = 0;
    for (;;) {
        while (p < e && !SPECIAL[*p]) /* the common bytes */
            p++;
        if (p >= e)
            return jr_fail(r, "unterminated string");
        if (*p == '"')
            break;
        if (*p < 0x20)
            return r->s = (const char *)p, jr_fail(r, "control character in a string");
        escapes = 1;
        p += p + 1 < e ? 2 : 1;
    }
    size_t room = (size_t)((const char *)p - r->s);
    if (!escapes) { /* the common case */
        int rc = jv_str(r->c, r->s, room, out);
        r->s = (const char *)p + 1;
        return rc;
    }
    if (jv_str(r->c, NULL, room, out))
        return -1;
    jstr *s = out->u.s;
    char *w = s->b;
    for (const char *q = r->s, *end = (const char *)p; q < end;) {
        if (*q != '\\') {
            *w++ = *q++;
            continue;
        }
        char esc = q[1];
        q += 2;
        switch (esc) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (end - q < 4 || hex4(q, &cp))
                return r->s = q, jr_fail(r, "invalid \\u escape");
            q += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && end - q >= 6 && q[0] == '\\' && q[1] == 'u' &&
                !hex4(q + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                q += 6;
            } else if (cp >= 0xD800 && cp < 0xE000) {
                cp = 0xFFFD;
            }
            w += put_utf8(w, cp);
            break;
        }
        default:
            return r->s = q - 1, jr_fail(r, "invalid escape");
        }
    }
    *w = 0;
    s->len = (size_t)(w - s->b);
    r->s = (const char *)p + 1;
    return 0;
}

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

/* A number, Python's way: int unless it has a fraction or an exponent. */
static int number(jr *r, jv *out)
{
    const char *b = r->s, *p = b;
    int is_float = 0;
    if (p < r->e && *p == '-')
        p++;
    if (p < r->e && *p == '0')
        p++;
    else if (p < r->e && is_digit(*p))
        while (p < r->e && is_digit(*p))
            p++;
    else
        return jr_fail(r, "invalid number");
    if (p + 1 < r->e && *p == '.' && is_digit(p[1])) {
        is_float = 1;
        for (p++; p < r->e && is_digit(*p); p++)
            ;
    }
    if (p < r->e && (*p == 'e' || *p == 'E')) {
        const char *q = p + 1;
        if (q < r->e && (*q == '+' || *q == '-'))
            q++;
        if (q < r->e && is_digit(*q)) {
            is_float = 1;
            for (p = q; p < r->e && is_digit(*p); p++)
                ;
        }
    }
    r->s = p;
    if (!is_float) {
        int neg = *b == '-';
        uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        int over = 0;
        for (const char *q = b + neg; q < p && !over; q++) {
            unsigned d = (unsigned)(*q - '0');
            if (v > (lim - d) / 10)
                over = 1;
            else
                v = v * 10 + d;
        }
        if (!over) {
            *out = jv_int(neg ? (int64_t)(0 - v) : (int64_t)v);
            return 0;
        }
    }
    /* strtod wants a NUL-terminated copy */
    size_t n = (size_t)(p - b);
    char small[64], *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf)
        return jx_fail(r->c, "out of memory");
    memcpy(buf, b, n);
    buf[n] = 0;
    *out = jv_float(strtod(buf, NULL));
    if (buf != small)
        free(buf);
    return 0;
}

static int value(jr *r, jv *out);

static int array(jr *r, jv *out)
{
    if (jv_list_new(r->c, 0, out))
        return -1;
    ws(r);
    if (r->s < r->e && *r->s == ']') {
        r->s++;
        return 0;
    }
    for (;;) {
        jv v;
        if (value(r, &v) || jv_list_push(r->c, *out, v))
            return -1;
        ws(r);
        if (r->s < r->e && *r->s == ',') {
            r->s++;
            continue;
        }
        if (r->s < r->e && *r->s == ']') {
            r->s++;
            return 0;
        }
        return jr_fail(r, "expected ',' or ']'");
    }
}

static int object(jr *r, jv *out)
{
    if (jv_dict_new(r->c, out))
        return -1;
    ws(r);
    if (r->s < r->e && *r->s == '}') {
        r->s++;
        return 0;
    }
    for (;;) {
        jv k, v;
        ws(r);
        if (r->s >= r->e || *r->s != '"')
            return jr_fail(r, "expected a key");
        r->s++;
        if (string(r, &k))
            return -1;
        ws(r);
        if (r->s >= r->e || *r->s != ':')
            return jr_fail(r, "expected ':'");
        r->s++;
        if (value(r, &v))
            return -1;
        r->key_cmps += out->u.d->n;
        if (r->key_cmps > JR_MAX_KEY_CMPS)
            return jr_fail(r, "objects with too many keys");
        jv *old = jv_dict_get(*out, k.u.s->b, k.u.s->len);
        if (old)
            *old = v; /* json.loads: the last value, the first position */
        else if (jv_dict_add(r->c, *out, k, v))
            return -1;
        ws(r);
        if (r->s < r->e && *r->s == ',') {
            r->s++;
            continue;
        }
        if (r->s < r->e && *r->s == '}') {
            r->s++;
            return 0;
        }
        return jr_fail(r, "expected ',' or '}'");
    }
}

static int value(jr *r, jv *out)
{
    ws(r);
    if (r->s >= r->e)
        return jr_fail(r, "unexpected end");
    char ch = *r->s;
    if (ch == '{' || ch == '[') {
        if (++r->depth > JR_MAX_DEPTH)
            return jr_fail(r, "nested too deeply");
        r->s++;
        int rc = ch == '{' ? object(r, out) : array(r, out);
        r->depth--;
        return rc;
    }
    if (ch == '"') {
        r->s++;
        return string(r, out);
    }
    if (lit(r, "true"))
        return *out = jv_bool(1), 0;
    if (lit(r, "false"))
        return *out = jv_bool(0), 0;
    if (lit(r, "null"))
        return *out = jv_none(), 0;
    if (lit(r, "NaN"))
        return *out = jv_float(NAN), 0;
    if (lit(r, "Infinity"))
        return *out = jv_float(INFINITY), 0;
    if (lit(r, "-Infinity"))
        return *out = jv_float(-INFINITY), 0;
    if (ch == '-' || is_digit(ch))
        return number(r, out);
    return jr_fail(r, "unexpected character");
}

int jx_json_read(jctx *c, const char *s, size_t n, jv *out)
{
    jr r = {.c = c, .s = s, .e = s + n, .start = s};
    if (value(&r, out))
        return -1;
    ws(&r);
    if (r.s != r.e)
        return jr_fail(&r, "extra data");
    return 0;
}
