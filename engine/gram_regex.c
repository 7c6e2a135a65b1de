/* Regex -> GBNF (see gram_src.h for the subset), plus the GBNF literal
 * writers the converters share and guided_choice. PCRE2 compiles the
 * pattern first so syntax errors read as PCRE2 reports them; what PCRE2
 * takes but a grammar cannot express (backreferences, lookaround) is
 * refused here by name. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram_src.h"

#define MAX_DEPTH 100

void gram_src__cp(inf_buf *b, uint32_t cp)
{
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
        (cp >= 0x80 && cp < 0xD800) || (cp >= 0xE000 && cp <= 0x10FFFF && cp != 0xFEFF)) {
        char u[4];
        int n;
        if (cp < 0x80) {
            u[0] = (char)cp;
            n = 1;
        } else if (cp < 0x800) {
            u[0] = (char)(0xC0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 0x3F));
            n = 2;
        } else if (cp < 0x10000) {
            u[0] = (char)(0xE0 | cp >> 12);
            u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
            u[2] = (char)(0x80 | (cp & 0x3F));
            n = 3;
        } else {
            u[0] = (char)(0xF0 | cp >> 18);
            u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
            u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
            u[3] = (char)(0x80 | (cp & 0x3F));
            n = 4;
        }
        inf_buf_put(b, u, (size_t)n);
    } else if (cp < 0x100) {
        inf_buf_printf(b, "\\x%02X", cp);
    } else if (cp < 0x10000) {
        inf_buf_printf(b, "\\u%04X", cp);
    } else {
        inf_buf_printf(b, "\\U%08X", cp);
    }
}

int gram_src__utf8_ok(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        int k = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2
              : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
        if (k < 0 || i + (size_t)k >= n)
            return 0;
        uint32_t v = k ? c & (0x3F >> k) : c;
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
            v = v << 6 | (s[i + j] & 0x3F);
        }
        static const uint32_t min_of[4] = {0, 0x80, 0x800, 0x10000};
        if (v < min_of[k] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

void gram_src__lit(inf_buf *b, const char *s, size_t n)
{
    inf_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\' || c < 0x20 || c == 0x7F)
            inf_buf_printf(b, "\\x%02X", c);
        else
            inf_buf_put(b, (const char *)&c, 1);
    }
    inf_buf_put(b, "\"", 1);
}

/* ------------------------------------------------------------ the parser */

typedef struct rx {
    const unsigned char *s;
    size_t n, i;
    int json;  /* JSON string contents mode */
    int depth;
    inf_err *err;
} rx;

typedef struct iv {
    uint32_t lo, hi;
} iv;

typedef struct cls {
    iv *v;
    int n, cap;
    int neg;
} cls;

static int rx_fail(rx *r, const char *what)
{
    return inf_fail(r->err, INF_ERR_INVALID, "regex at offset %zu: %s", r->i, what);
}

static int cls_add(cls *c, uint32_t lo, uint32_t hi)
{
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        iv *v = realloc(c->v, sizeof *v * (size_t)cap);
        if (!v)
            return -1;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = (iv){lo, hi};
    return 0;
}

/* The JSON escape of a character that cannot appear raw in a JSON string. */
static void json_escape(inf_buf *b, uint32_t c)
{
    char e[8];
    const char *m = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                  : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
    if (!m) {
        snprintf(e, sizeof e, "\\u%04x", c);
        m = e;
    }
    gram_src__lit(b, m, strlen(m));
}

static int needs_escape(uint32_t c)
{
    return c < 0x20 || c == '"' || c == '\\';
}

/* Writes a class as a GBNF term. In JSON mode a positive class's characters
 * that need escaping become escaped alternatives; a negated one excludes
 * them. */
static void cls_emit(rx *r, inf_buf *b, cls *c)
{
    inf_buf out = {0}, alts = {0};
    int n_out = 0, n_alts = 0;
    if (r->json && c->neg) {
        /* the characters a JSON string escapes, as escapes, where the
         * negated class does not exclude them */
        static const uint32_t esc[] = {'"', '\\', '\n', '\t', '\r', '\b', '\f'};
        for (size_t k = 0; k < sizeof esc / sizeof esc[0]; k++) {
            int excluded = 0;
            for (int i = 0; i < c->n; i++)
                excluded |= c->v[i].lo <= esc[k] && esc[k] <= c->v[i].hi;
            if (!excluded) {
                inf_buf_put(&alts, " | ", 3);
                json_escape(&alts, esc[k]);
                n_alts++;
            }
        }
        cls_add(c, 0, 0x1F);
        cls_add(c, '"', '"');
        cls_add(c, '\\', '\\');
    }
    for (int i = 0; i < c->n; i++) {
        uint32_t lo = c->v[i].lo, hi = c->v[i].hi;
        if (r->json && !c->neg) {
            /* split off [0, 0x1F], '"', '\\' */
            for (uint32_t x = lo; x <= hi && x < 0x80; x++) {
                if (!needs_escape(x))
                    continue;
                inf_buf_put(&alts, " | ", 3);
                json_escape(&alts, x);
                n_alts++;
            }
            while (lo <= hi && needs_escape(lo))
                lo++;
            /* a range that spans '"' or '\\' is cut around them */
            uint32_t cuts[2] = {'"', '\\'};
            for (int k = 0; k < 2 && lo <= hi; k++) {
                if (cuts[k] > lo && cuts[k] <= hi) {
                    if (cuts[k] - 1 >= lo) {
                        gram_src__cp(&out, lo);
                        if (cuts[k] - 1 > lo) {
                            inf_buf_put(&out, "-", 1);
                            gram_src__cp(&out, cuts[k] - 1);
                        }
                        n_out++;
                    }
                    lo = cuts[k] + 1;
                }
            }
            if (lo > hi)
                continue;
        }
        gram_src__cp(&out, lo);
        if (hi > lo) {
            inf_buf_put(&out, "-", 1);
            gram_src__cp(&out, hi);
        }
        n_out++;
    }
    if (!n_alts) {
        if (!n_out) /* a class of nothing: [^\x00-\U0010FFFF] */
            inf_buf_printf(b, "[^\\x00-\\U0010FFFF]");
        else
            inf_buf_printf(b, "[%s%s]", c->neg ? "^" : "", out.p);
    } else {
        inf_buf_put(b, "(", 1);
        if (n_out)
            inf_buf_printf(b, "[%s%s]", c->neg ? "^" : "", out.p);
        inf_buf_put(b, n_out ? alts.p : alts.p + 3, strlen(n_out ? alts.p : alts.p + 3));
        inf_buf_put(b, ")", 1);
    }
    if (out.oom || alts.oom)
        b->oom = 1;
    free(out.p);
    free(alts.p);
}

static int hexv(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int64_t utf8_at(rx *r)
{
    const unsigned char *s = r->s + r->i;
    size_t left = r->n - r->i;
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || (size_t)n > left)
        return rx_fail(r, "invalid UTF-8");
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++)
        v = v << 6 | (s[i] & 0x3F);
    r->i += (size_t)n;
    return v;
}

/* \xHH, \x{H..}, \uHHHH, \u{H..} after the letter; -1 on error. */
static int64_t hex_escape(rx *r, int digits)
{
    uint32_t v = 0;
    int braced = r->i < r->n && r->s[r->i] == '{', k = 0;
    if (braced)
        r->i++;
    while (r->i < r->n && hexv(r->s[r->i]) >= 0 && (braced || k < digits)) {
        v = v << 4 | (uint32_t)hexv(r->s[r->i++]);
        if (++k > 8)
            return rx_fail(r, "hex escape too long");
    }
    if (braced) {
        if (r->i >= r->n || r->s[r->i] != '}')
            return rx_fail(r, "unterminated \\x{...}");
        r->i++;
    } else if (k != digits) {
        return rx_fail(r, "bad hex escape");
    }
    if (v > 0x10FFFF)
        return rx_fail(r, "code point out of range");
    return v;
}

/* Adds the class an escape stands for (\d \w \s and negations) to c, or
 * returns its single code point (>= 0). -2: a class was added. */
static int64_t escape(rx *r, cls *c, int in_class)
{
    if (r->i >= r->n)
        return rx_fail(r, "trailing backslash");
    int e = r->s[r->i++];
    static const iv digit[] = {{'0', '9'}};
    static const iv word[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const iv spc[] = {{'\t', '\r'}, {' ', ' '}};
    const iv *set = NULL;
    int n = 0, neg = 0;
    switch (e) {
    case 'd': case 'D': set = digit; n = 1; neg = e == 'D'; break;
    case 'w': case 'W': set = word; n = 4; neg = e == 'W'; break;
    case 's': case 'S': set = spc; n = 2; neg = e == 'S'; break;
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case 'a': return 7;
    case 'e': return 27;
    case '0': return 0;
    case 'x': return hex_escape(r, 2);
    case 'u': return hex_escape(r, 4);
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9')) {
            r->i--;
            return rx_fail(r, e == 'b' || e == 'B' ? "word boundaries (\\b, \\B) are not supported"
                              : e >= '1' && e <= '9' ? "backreferences are not supported"
                              : "this escape is not supported");
        }
        return e; /* escaped punctuation is itself */
    }
    if (!c)
        return -3;
    if (neg) {
        if (in_class)
            return rx_fail(r, "negated escapes (\\D \\W \\S) inside a class are not supported");
        c->neg = 1;
    }
    for (int i = 0; i < n; i++)
        if (cls_add(c, set[i].lo, set[i].hi))
            return rx_fail(r, "out of memory");
    return -2;
}

static int parse_class(rx *r, inf_buf *b)
{
    r->i++; /* [ */
    cls c = {0};
    int rc = 0, first = 1;
    if (r->i < r->n && r->s[r->i] == '^') {
        c.neg = 1;
        r->i++;
    }
    int negated = c.neg;
    while (r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = 0;
        if (r->s[r->i] == '[' && r->i + 1 < r->n && r->s[r->i + 1] == ':') {
            rc = rx_fail(r, "POSIX classes are not supported");
            goto out;
        }
        int64_t lo;
        if (r->s[r->i] == '\\') {
            r->i++;
            lo = escape(r, &c, 1);
            if (lo == -2)
                continue;
        } else {
            lo = utf8_at(r);
        }
        if (lo < 0) {
            rc = INF_ERR_INVALID;
            goto out;
        }
        int64_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                hi = escape(r, NULL, 1);
                if (hi == -3) {
                    rc = rx_fail(r, "a class escape cannot end a range");
                    goto out;
                }
            } else {
                hi = utf8_at(r);
            }
            if (hi < 0) {
                rc = INF_ERR_INVALID;
                goto out;
            }
            if (hi < lo) {
                rc = rx_fail(r, "range out of order");
                goto out;
            }
        }
        if (cls_add(&c, (uint32_t)lo, (uint32_t)hi)) {
            rc = rx_fail(r, "out of memory");
            goto out;
        }
    }
    if (r->i >= r->n) {
        rc = rx_fail(r, "unterminated class");
        goto out;
    }
    r->i++;
    c.neg = negated;
    cls_emit(r, b, &c);
out:
    free(c.v);
    return rc;
}

/* Writes a literal code point (JSON-escaped in JSON mode). */
static void lit_cp(rx *r, inf_buf *b, uint32_t cp)
{
    if (r->json && needs_escape(cp)) {
        json_escape(b, cp);
        return;
    }
    inf_buf_put(b, "\"", 1);
    gram_src__cp(b, cp);
    inf_buf_put(b, "\"", 1);
}

static int parse_alt(rx *r, inf_buf *b, int top);

/* {m}, {m,}, {m,n} at r->i (just after '{'); 0 when it is not a quantifier
 * (then it is a literal '{', as PCRE2 reads it). */
static int quant_braces(rx *r, inf_buf *b)
{
    size_t j = r->i + 1;
    long m = 0, n = -1;
    int dm = 0, dn = 0, comma = 0;
    while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && m < 100000)
        m = m * 10 + (r->s[j++] - '0'), dm++;
    if (j < r->n && r->s[j] == ',') {
        comma = 1;
        j++;
        n = 0;
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && n < 100000)
            n = n * 10 + (r->s[j++] - '0'), dn++;
    }
    if (!dm || j >= r->n || r->s[j] != '}')
        return 0;
    if (m >= 100000 || n >= 100000)
        return rx_fail(r, "repetition count too large");
    if (comma && dn && n < m)
        return rx_fail(r, "repetition {m,n} with n < m");
    if (!b)
        ;
    else if (!comma)
        inf_buf_printf(b, "{%ld}", m);
    else if (!dn)
        inf_buf_printf(b, "{%ld,}", m);
    else
        inf_buf_printf(b, "{%ld,%ld}", m, n);
    r->i = j + 1;
    return 1;
}

/* A sequence until '|', ')' or the end. *anch gets bit 1 for a leading '^'
 * and bit 2 for a trailing '$' (top level only). */
static int parse_seq(rx *r, inf_buf *b, int top, int *anch)
{
    if (top && r->i < r->n && r->s[r->i] == '^') {
        r->i++;
        *anch |= 1;
    }
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        unsigned char c = r->s[r->i];
        inf_buf_put(b, " ", 1);
        if (c == '$') {
            r->i++;
            if (top && (r->i == r->n || r->s[r->i] == '|')) {
                *anch |= 2;
                continue;
            }
            r->i--;
            return rx_fail(r, "'$' is supported only at the end");
        } else if (c == '^') {
            return rx_fail(r, "'^' is supported only at the start");
        } else if (c == '(') {
            r->i++;
            if (r->i < r->n && r->s[r->i] == '?') {
                r->i++;
                if (r->i < r->n && r->s[r->i] == ':') {
                    r->i++;
                } else if (r->i < r->n && (r->s[r->i] == '<' || r->s[r->i] == 'P' || r->s[r->i] == '\'')) {
                    if (r->s[r->i] == 'P')
                        r->i++;
                    if (r->i + 1 < r->n && (r->s[r->i + 1] == '=' || r->s[r->i + 1] == '!'))
                        return rx_fail(r, "lookbehind is not supported");
                    while (r->i < r->n && r->s[r->i] != '>' && r->s[r->i] != '\'')
                        r->i++;
                    r->i++;
                } else {
                    return rx_fail(r, r->i < r->n && (r->s[r->i] == '=' || r->s[r->i] == '!')
                                          ? "lookahead is not supported"
                                          : "this group kind (inline flags, atomic, ...) is not supported");
                }
            }
            if (++r->depth > MAX_DEPTH)
                return rx_fail(r, "groups nested too deep");
            inf_buf_put(b, "(", 1);
            int rc = parse_alt(r, b, 0);
            if (rc)
                return rc;
            if (r->i >= r->n || r->s[r->i] != ')')
                return rx_fail(r, "missing ')'");
            r->i++;
            r->depth--;
            inf_buf_put(b, ")", 1);
        } else if (c == '[') {
            int rc = parse_class(r, b);
            if (rc)
                return rc;
        } else if (c == '.') {
            r->i++;
            cls d = {0};
            d.neg = 1;
            if (cls_add(&d, '\n', '\n'))
                return rx_fail(r, "out of memory");
            cls_emit(r, b, &d);
            free(d.v);
        } else if (c == '\\') {
            r->i++;
            cls e = {0};
            int64_t cp = escape(r, &e, 0);
            if (cp == -2)
                cls_emit(r, b, &e);
            free(e.v);
            if (cp < 0 && cp != -2)
                return INF_ERR_INVALID;
            if (cp >= 0)
                lit_cp(r, b, (uint32_t)cp);
        } else if (c == '*' || c == '+' || c == '?') {
            return rx_fail(r, "quantifier without a preceding item");
        } else if (c == '{') {
            int q = quant_braces(r, b);
            if (q < 0)
                return q;
            if (q)
                return rx_fail(r, "quantifier without a preceding item");
            r->i++;
            lit_cp(r, b, '{');
        } else {
            int64_t cp = utf8_at(r);
            if (cp < 0)
                return INF_ERR_INVALID;
            lit_cp(r, b, (uint32_t)cp);
        }
        /* quantifiers */
        if (r->i < r->n) {
            unsigned char q = r->s[r->i];
            int had = 0;
            if (q == '*' || q == '+' || q == '?') {
                r->i++;
                inf_buf_put(b, (const char *)&q, 1);
                had = 1;
            } else if (q == '{') {
                int k = quant_braces(r, b);
                if (k < 0)
                    return k;
                had = k;
            }
            if (had && r->i < r->n && (r->s[r->i] == '?' || r->s[r->i] == '+'))
                r->i++; /* lazy or possessive: the same language */
            if (had && r->i < r->n && (r->s[r->i] == '*' || r->s[r->i] == '+' ||
                                       r->s[r->i] == '?' || r->s[r->i] == '{')) {
                if (r->s[r->i] != '{' || quant_braces(r, NULL) != 0)
                    return rx_fail(r, "nested quantifier");
            }
        }
    }
    return 0;
}

/* The any-JSON-safe-character run that an unanchored pattern allows. */
#define JSON_ANY "([^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt])*"

static int parse_alt(rx *r, inf_buf *b, int top)
{
    for (int first = 1;; first = 0) {
        if (!first)
            inf_buf_put(b, " |", 2);
        int anch = 0;
        inf_buf seq = {0};
        int rc = parse_seq(r, &seq, top, &anch);
        if (!rc && seq.oom)
            rc = inf_fail(r->err, INF_ERR_NOMEM, "regex: out of memory");
        if (rc) {
            free(seq.p);
            return rc;
        }
        if (top && r->json && !(anch & 1))
            inf_buf_printf(b, " " JSON_ANY);
        if (seq.p)
            inf_buf_put(b, seq.p, seq.len);
        if (top && r->json && !(anch & 2))
            inf_buf_printf(b, " " JSON_ANY);
        free(seq.p);
        if (r->i >= r->n || r->s[r->i] != '|')
            return 0;
        r->i++;
    }
}

static int pcre2_check(const char *re, size_t len, inf_err *err)
{
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    if (!cc)
        return inf_fail(err, INF_ERR_NOMEM, "regex: out of memory");
    pcre2_set_compile_extra_options(cc, PCRE2_EXTRA_ALT_BSUX);
    int code;
    PCRE2_SIZE off;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, len, PCRE2_UTF | PCRE2_ALT_BSUX, &code, &off, cc);
    pcre2_compile_context_free(cc);
    if (!c) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return inf_fail(err, INF_ERR_INVALID, "regex at offset %zu: %s", (size_t)off, (char *)msg);
    }
    pcre2_code_free(c);
    return 0;
}

int gram_src__regex_rules(inf_buf *b, const char *name, const char *re, size_t len,
                          int json_string, inf_err *err)
{
    int rc = pcre2_check(re, len, err);
    if (rc)
        return rc;
    rx r = {(const unsigned char *)re, len, 0, json_string, 0, err};
    inf_buf_printf(b, "%s ::= (", name);
    rc = parse_alt(&r, b, 1);
    if (!rc && r.i < r.n)
        rc = rx_fail(&r, "unmatched ')'");
    inf_buf_put(b, ")\n", 2);
    return rc;
}

int gram_src_regex(const char *re, size_t len, char **gbnf, inf_err *err)
{
    *gbnf = NULL;
    inf_buf b = {0};
    int rc = gram_src__regex_rules(&b, "root", re, len, 0, err);
    if (!rc && b.oom)
        rc = inf_fail(err, INF_ERR_NOMEM, "regex: out of memory");
    if (rc) {
        free(b.p);
        return rc;
    }
    *gbnf = b.p;
    return INF_OK;
}

int gram_src_choice(const char *const *choices, int n, char **gbnf, inf_err *err)
{
    *gbnf = NULL;
    if (n < 1)
        return inf_fail(err, INF_ERR_INVALID, "choice: at least one choice is needed");
    for (int i = 0; i < n; i++)
        if (!gram_src__utf8_ok(choices[i], strlen(choices[i])))
            return inf_fail(err, INF_ERR_INVALID, "choice %d: not valid UTF-8", i);
    inf_buf b = {0};
    inf_buf_printf(&b, "root ::=");
    for (int i = 0; i < n; i++) {
        inf_buf_printf(&b, "%s ", i ? " |" : "");
        gram_src__lit(&b, choices[i], strlen(choices[i]));
    }
    inf_buf_put(&b, "\n", 1);
    if (b.oom) {
        free(b.p);
        return inf_fail(err, INF_ERR_NOMEM, "choice: out of memory");
    }
    *gbnf = b.p;
    return INF_OK;
}
