/* jinja lexer: Jinja2 3.1's lexer rules (jinja2/lexer.py) with Hugging
 * Face's settings: trim_blocks (the newline after %} or #} goes),
 * lstrip_blocks (spaces and tabs before {% or {# on their own line go),
 * "-" strips all whitespace on its side, "+" keeps it; newlines normalised
 * to "\n" and one trailing newline of the source dropped
 * (keep_trailing_newline false). Comments vanish; raw blocks become data. */
#include "jinja_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct lx {
    const char *s;      /* normalised source */
    size_t n, pos;
    int line;
    int line_starting;  /* the last match ended with "\n" (lexer.py)      */
    jx_arena *a;
    jtoks *out;
    inf_err *err;
} lx;

static int lx_fail(lx *l, const char *msg)
{
    return inf_fail(l->err, INF_ERR_FORMAT, "line %d: %s", l->line, msg);
}

static int lx_emit(lx *l, jtok t)
{
    if (l->out->n == l->out->cap) {
        int cap = l->out->cap ? 2 * l->out->cap : 64;
        jtok *v = realloc(l->out->v, (size_t)cap * sizeof *v);
        if (!v)
            return inf_fail(l->err, INF_ERR_NOMEM, "chat template: out of memory");
        l->out->v = v;
        l->out->cap = cap;
    }
    l->out->v[l->out->n++] = t;
    return 0;
}

static int lx_count_nl(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

/* Python's str.isspace on the character at s[i]; its length in *len. */
static int lx_space_at(const char *s, size_t n, size_t i, size_t *len)
{
    unsigned cp;
    *len = ju_decode((const unsigned char *)s + i, n - i, &cp);
    return ju_is_space(cp);
}

/* Length of text[0:n] without trailing whitespace (str.rstrip()). */
static size_t lx_rstrip(const char *s, size_t n)
{
    while (n > 0) {
        size_t st = n - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80 && n - st < 4)
            st--;
        unsigned cp;
        if (ju_decode((const unsigned char *)s + st, n - st, &cp) != n - st || !ju_is_space(cp))
            break;
        n = st;
    }
    return n;
}

static size_t lx_skip_space(const char *s, size_t n, size_t i)
{
    size_t len;
    while (i < n && lx_space_at(s, n, i, &len))
        i += len;
    return i;
}

/* Emits text before a tag, applying "-" or lstrip_blocks (not for {{). */
static int lx_text(lx *l, const char *t, size_t n, char sign, int is_var)
{
    if (sign == '-') {
        n = lx_rstrip(t, n);
    } else if (sign != '+' && !is_var) {
        size_t lp = n;
        while (lp > 0 && t[lp - 1] != '\n')
            lp--;
        if ((lp > 0 || l->line_starting) && lp < n) {
            size_t i = lp, len;
            while (i < n && lx_space_at(t, n, i, &len))
                i += len;
            if (i == n)
                n = lp;
        }
    }
    if (n && lx_emit(l, (jtok){.t = JT_DATA, .line = l->line, .s = t, .n = n}))
        return -1;
    return 0;
}

/* After a block end "%}" at p (p points past it): "+%}" keeps, "-%}"
 * eats whitespace, else trim_blocks eats one newline. sign is the char
 * before "%}" ('-', '+' or other). Returns the new position. */
static size_t lx_after_end(lx *l, size_t p, char sign, int trim)
{
    if (sign == '-')
        p = lx_skip_space(l->s, l->n, p);
    else if (sign != '+' && trim && p < l->n && l->s[p] == '\n')
        p++;
    return p;
}

/* A Python string literal's escapes (unicode-escape). */
static int lx_put_cp(char *o, size_t *k, unsigned cp)
{
    if (cp < 0x80) {
        o[(*k)++] = (char)cp;
    } else if (cp < 0x800) {
        o[(*k)++] = (char)(0xC0 | cp >> 6);
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | cp >> 12);
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x110000) {
        o[(*k)++] = (char)(0xF0 | cp >> 18);
        o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        return -1;
    }
    return 0;
}

static int lx_hex(const char *s, size_t n, int digits, unsigned *cp)
{
    unsigned v = 0;
    if ((size_t)digits > n)
        return -1;
    for (int i = 0; i < digits; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + (unsigned)d;
    }
    *cp = v;
    return 0;
}

static int lx_string(lx *l, size_t *p)
{
    char q = l->s[*p];
    size_t i = *p + 1, start = i;
    while (i < l->n && l->s[i] != q) {
        if (l->s[i] == '\\')
            i++;
        i++;
    }
    if (i >= l->n)
        return lx_fail(l, "unexpected end of string");
    size_t n = i - start;
    char *o = jx_alloc(l->a, n + 1);
    if (!o)
        return inf_fail(l->err, INF_ERR_NOMEM, "chat template: out of memory");
    const char *s = l->s + start;
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
        if (s[j] != '\\') {
            o[k++] = s[j];
            continue;
        }
        char e = s[++j];
        unsigned cp;
        switch (e) {
        case '\n': break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'v': o[k++] = '\v'; break;
        case 'x': case 'u': case 'U': {
            int d = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (lx_hex(s + j + 1, n - j - 1, d, &cp) || (d > 2 && cp >= 0xD800 && cp < 0xE000) ||
                lx_put_cp(o, &k, cp))
                return lx_fail(l, "truncated or invalid \\x, \\u or \\U escape in a string");
            j += (size_t)d;
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                cp = 0;
                int d = 0;
                while (d < 3 && j < n && s[j] >= '0' && s[j] <= '7')
                    cp = cp * 8 + (unsigned)(s[j++] - '0'), d++;
                j--;
                lx_put_cp(o, &k, cp);
            } else {
                o[k++] = '\\';
                o[k++] = e;
            }
        }
    }
    o[k] = 0;
    *p = i + 1;
    return lx_emit(l, (jtok){.t = JT_STRING, .line = l->line, .s = o, .n = k});
}

static int lx_digit(char ch) { return ch >= '0' && ch <= '9'; }
static int lx_alpha(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

/* Digits with single underscores between them: (\d+_)*\d+. */
static size_t lx_digits(const char *s, size_t n, size_t i)
{
    size_t st = i;
    while (i < n && lx_digit(s[i])) {
        i++;
        if (i + 1 < n && s[i] == '_' && lx_digit(s[i + 1]))
            i++;
    }
    return i > st ? i : st;
}

/* A number: float_re then integer_re (decimal only, and 0x/0o/0b). */
static int lx_number(lx *l, size_t *p)
{
    const char *s = l->s;
    size_t i = *p, e = lx_digits(s, l->n, i), f = e;
    int is_float = 0;
    int after_dot = i > 0 && s[i - 1] == '.';
    if (!after_dot) {
        if (f + 1 < l->n && s[f] == '.' && lx_digit(s[f + 1])) {
            f = lx_digits(s, l->n, f + 1);
            is_float = 1;
        }
        if (f < l->n && (s[f] == 'e' || s[f] == 'E')) {
            size_t g = f + 1;
            if (g < l->n && (s[g] == '+' || s[g] == '-'))
                g++;
            if (g < l->n && lx_digit(s[g])) {
                f = lx_digits(s, l->n, g);
                is_float = 1;
            }
        }
    }
    char buf[128];
    size_t end = is_float ? f : e, k = 0;
    if (!is_float && s[i] == '0' && i + 1 < l->n && strchr("xXoObB", s[i + 1])) {
        int base = strchr("xX", s[i + 1]) ? 16 : strchr("oO", s[i + 1]) ? 8 : 2;
        end = i + 2;
        uint64_t v = 0;
        while (end < l->n) {
            char ch = s[end];
            int d = lx_digit(ch) ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                  : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
            if (ch == '_') { end++; continue; }
            if (d < 0 || d >= base)
                break;
            if (v > (UINT64_MAX >> 4))
                return lx_fail(l, "integer literal too large");
            v = v * (uint64_t)base + (uint64_t)d;
            end++;
        }
        if (v > INT64_MAX)
            return lx_fail(l, "integer literal too large");
        *p = end;
        return lx_emit(l, (jtok){.t = JT_INT, .line = l->line, .i = (int64_t)v});
    }
    for (size_t j = i; j < end && k + 1 < sizeof buf; j++)
        if (s[j] != '_')
            buf[k++] = s[j];
    buf[k] = 0;
    *p = end;
    if (is_float)
        return lx_emit(l, (jtok){.t = JT_FLOAT, .line = l->line, .f = strtod(buf, NULL)});
    if (k > 18 && strcmp(buf, "9223372036854775807") > 0 && k >= 19)
        return lx_fail(l, "integer literal too large");
    return lx_emit(l, (jtok){.t = JT_INT, .line = l->line, .i = strtoll(buf, NULL, 10)});
}

static const char *const LX_OPS2[] = {"//", "**", "==", "!=", ">=", "<="};
static const char LX_OPS1[] = "+-/*%~[](){}><=.:|,;";

/* Tokens inside {{ }} or {% %} up to the end tag; *var tells which. */
static int lx_tag(lx *l, int is_var)
{
    const char *s = l->s;
    char stack[64];
    int depth = 0;
    for (;;) {
        size_t p = l->pos, len;
        while (p < l->n && lx_space_at(s, l->n, p, &len)) {
            l->line += s[p] == '\n';
            p += len;
        }
        l->pos = p;
        if (p >= l->n)
            return lx_fail(l, is_var ? "unexpected end of template, expected '}}'"
                                     : "unexpected end of template, expected '%}'");
        if (depth == 0) {
            char e = is_var ? '}' : '%';
            char sign = s[p] == '-' || (s[p] == '+' && !is_var) ? s[p] : 0;
            size_t q = p + (sign ? 1 : 0);
            if (q + 1 < l->n && s[q] == e && s[q + 1] == '}') {
                if (lx_emit(l, (jtok){.t = is_var ? JT_VAR_END : JT_BLOCK_END, .line = l->line}))
                    return -1;
                size_t np = lx_after_end(l, q + 2, sign, !is_var);
                l->line += lx_count_nl(s + q + 2, np - (q + 2));
                l->line_starting = np > 0 && s[np - 1] == '\n' && np > q + 2;
                l->pos = np;
                return 0;
            }
        }
        char ch = s[p];
        if (ch == '\'' || ch == '"') {
            if (lx_string(l, &l->pos))
                return -1;
            l->line += lx_count_nl(s + p, l->pos - p);
            continue;
        }
        if (lx_digit(ch)) {
            if (lx_number(l, &l->pos))
                return -1;
            continue;
        }
        if (lx_alpha(ch)) {
            size_t q = p;
            while (q < l->n && (lx_alpha(s[q]) || lx_digit(s[q])))
                q++;
            l->pos = q;
            if (lx_emit(l, (jtok){.t = JT_NAME, .line = l->line, .s = s + p, .n = q - p}))
                return -1;
            continue;
        }
        size_t on = 0;
        for (size_t k = 0; k < sizeof LX_OPS2 / sizeof *LX_OPS2; k++)
            if (p + 1 < l->n && s[p] == LX_OPS2[k][0] && s[p + 1] == LX_OPS2[k][1])
                on = 2;
        if (!on && strchr(LX_OPS1, ch) && ch)
            on = 1;
        if (!on)
            return lx_fail(l, "unexpected char in tag");
        if (on == 1 && strchr("([{", ch)) {
            if (depth == (int)sizeof stack)
                return lx_fail(l, "brackets nested too deeply");
            stack[depth++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
        } else if (on == 1 && strchr(")]}", ch)) {
            if (depth == 0 || stack[depth - 1] != ch)
                return lx_fail(l, depth ? "unexpected closing bracket" : "unexpected closing bracket");
            depth--;
        }
        l->pos = p + on;
        if (lx_emit(l, (jtok){.t = JT_OP, .line = l->line, .s = s + p, .n = on}))
            return -1;
    }
}

/* {% raw %} ... {% endraw %}: the body is data. p is past the raw tag. */
static int lx_raw(lx *l)
{
    const char *s = l->s;
    for (size_t i = l->pos; i + 1 < l->n; i++) {
        if (s[i] != '{' || s[i + 1] != '%')
            continue;
        size_t q = i + 2;
        char sign = q < l->n && (s[q] == '-' || s[q] == '+') ? s[q++] : 0;
        q = lx_skip_space(s, l->n, q);
        if (l->n - q < 6 || memcmp(s + q, "endraw", 6) != 0)
            continue;
        q = lx_skip_space(s, l->n, q + 6);
        char esign = q < l->n && (s[q] == '-' || s[q] == '+') ? s[q] : 0;
        size_t r = q + (esign ? 1 : 0);
        if (r + 1 >= l->n || s[r] != '%' || s[r + 1] != '}')
            continue;
        if (lx_text(l, s + l->pos, i - l->pos, sign, 0))
            return -1;
        l->line += lx_count_nl(s + l->pos, r + 2 - l->pos);
        size_t np = lx_after_end(l, r + 2, esign, 1);
        l->line += lx_count_nl(s + r + 2, np - (r + 2));
        l->line_starting = np > r + 2 && s[np - 1] == '\n';
        l->pos = np;
        return 0;
    }
    return lx_fail(l, "Missing end of raw directive");
}

/* "{% raw %}" at p (sign after "{%" already known)? Returns the position
 * past it, or 0. */
static size_t lx_raw_begin(const lx *l, size_t p)
{
    size_t q = lx_skip_space(l->s, l->n, p);
    if (l->n - q < 3 || memcmp(l->s + q, "raw", 3) != 0)
        return 0;
    q = lx_skip_space(l->s, l->n, q + 3);
    if (q + 2 < l->n && l->s[q] == '-' && l->s[q + 1] == '%' && l->s[q + 2] == '}')
        return lx_skip_space(l->s, l->n, q + 3);
    if (q + 1 < l->n && l->s[q] == '%' && l->s[q + 1] == '}')
        return q + 2;
    return 0;
}

static int lx_comment(lx *l)
{
    const char *s = l->s;
    for (size_t i = l->pos; i + 1 < l->n; i++) {
        if (s[i] != '#' || s[i + 1] != '}')
            continue;
        char sign = i > l->pos && (s[i - 1] == '-' || s[i - 1] == '+') ? s[i - 1] : 0;
        size_t np = lx_after_end(l, i + 2, sign, 1);
        l->line += lx_count_nl(s + l->pos, np - l->pos);
        l->line_starting = np > i + 2 && s[np - 1] == '\n';
        l->pos = np;
        return 0;
    }
    return lx_fail(l, "Missing end of comment tag");
}

/* Newlines normalised, the trailing one dropped; malloc'd copy. */
static char *lx_normalise(const char *src, size_t len, size_t *n)
{
    char *d = malloc(len + 1);
    if (!d)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            d[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            d[k++] = src[i];
        }
    }
    if (k > 0 && d[k - 1] == '\n')
        k--;
    d[k] = 0;
    *n = k;
    return d;
}

int jx_lex(const char *src, size_t len, jx_arena *a, jtoks *out, inf_err *err)
{
    size_t n;
    char *norm = lx_normalise(src, len, &n);
    if (!norm)
        return inf_fail(err, INF_ERR_NOMEM, "chat template: out of memory");
    /* The tokens point into the source: keep it in the arena. */
    char *s = jx_alloc(a, n + 1);
    if (!s) {
        free(norm);
        return inf_fail(err, INF_ERR_NOMEM, "chat template: out of memory");
    }
    memcpy(s, norm, n + 1);
    free(norm);
    lx l = {.s = s, .n = n, .line = 1, .line_starting = 1, .a = a, .out = out, .err = err};
    while (l.pos < n) {
        size_t i = l.pos;
        while (i + 1 < n && !(s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')))
            i++;
        if (i + 1 >= n) {
            if (lx_emit(&l, (jtok){.t = JT_DATA, .line = l.line, .s = s + l.pos, .n = n - l.pos}))
                return -1;
            break;
        }
        char kind = s[i + 1];
        size_t q = i + 2;
        char sign = q < n && (s[q] == '-' || s[q] == '+') ? s[q] : 0;
        if (sign)
            q++;
        size_t raw_end = kind == '%' ? lx_raw_begin(&l, q) : 0;
        if (lx_text(&l, s + l.pos, i - l.pos, sign, kind == '{'))
            return -1;
        l.line += lx_count_nl(s + l.pos, i - l.pos);
        l.line_starting = 0;
        if (raw_end) {
            l.line += lx_count_nl(s + i, raw_end - i);
            l.line_starting = s[raw_end - 1] == '\n';
            l.pos = raw_end;
            if (lx_raw(&l))
                return -1;
            continue;
        }
        l.pos = q;
        if (kind == '#') {
            if (lx_comment(&l))
                return -1;
            continue;
        }
        if (lx_emit(&l, (jtok){.t = kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, .line = l.line}) ||
            lx_tag(&l, kind == '{'))
            return -1;
    }
    return lx_emit(&l, (jtok){.t = JT_EOF, .line = l.line});
}
