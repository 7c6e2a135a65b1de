/* jinja formatting: Python's printf-style str % args (the format filter
 * and the % operator) and str.format with format specs, as Python 3.11
 * renders them (Objects/unicodeobject.c's PyUnicode_Format, Python's
 * format-spec mini-language; the sandbox's str.format reaches attributes
 * and items through the same checks as the template does). */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One conversion's layout: [[fill]align][sign][#][0][width][,|_][.prec]type */
typedef struct fspec {
    unsigned fill;       /* code point                                      */
    char align;          /* '<' '>' '^' '=' or 0                            */
    char sign;           /* '+' '-' ' ' or 0                                */
    int alt, zero;       /* '#', '0'                                        */
    long width, prec;    /* -1: not given                                   */
    char group;          /* ',' '_' or 0                                    */
    char type;           /* 0 when absent                                   */
} fspec;

#define FMT_MAX_WIDTH 100000L

static int put_cp(jctx *c, jbuf *b, unsigned cp, long times)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    for (long i = 0; i < times; i++)
        if (jb_put(c, b, u, n))
            return -1;
    return 0;
}

/* sign + prefix + body laid out in width (code points) with fill/align;
 * '=' puts the padding between the prefix and the body. */
static int lay_out(jctx *c, jbuf *b, const char *pre, const char *body, size_t blen,
                   const fspec *f, char def_align)
{
    size_t plen = strlen(pre);
    long n = (long)(ju_count(pre, plen) + ju_count(body, blen));
    long pad = f->width > n ? f->width - n : 0;
    char al = f->align ? f->align : def_align;
    long left = al == '>' ? pad : al == '^' ? pad / 2 : 0;
    long mid = al == '=' ? pad : 0;
    long right = pad - left - mid;
    return put_cp(c, b, f->fill, left) || jb_put(c, b, pre, plen) ||
           put_cp(c, b, f->fill, mid) || jb_put(c, b, body, blen) ||
           put_cp(c, b, f->fill, right);
}

/* digits with a separator every three (every four for b, o, x). */
static void group_digits(char *out, size_t cap, const char *d, size_t n, char sep, int every)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 2 < cap; i++) {
        if (i && (n - i) % (size_t)every == 0)
            out[k++] = sep;
        out[k++] = d[i];
    }
    out[k] = 0;
}

static const char *sign_of(int neg, char sign)
{
    return neg ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
}

/* An integer in base 2, 8, 10 or 16 (type b o d x X), Python's way. */
static int fmt_int(jctx *c, jbuf *b, int64_t v, const fspec *f, char type, int pct)
{
    uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    int base = type == 'b' ? 2 : type == 'o' ? 8 : type == 'x' || type == 'X' ? 16 : 10;
    const char *dig = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    char d[72], g[100], body[200], pre[8];
    size_t n = 0;
    do {
        d[sizeof d - 1 - n++] = dig[m % (uint64_t)base];
        m /= (uint64_t)base;
    } while (m);
    const char *ds = d + sizeof d - n;
    if (f->group) {
        group_digits(g, sizeof g, ds, n, f->group, base == 10 ? 3 : 4);
        ds = g;
        n = strlen(g);
    }
    size_t k = 0;
    if (pct && f->prec > (long)n) /* %.3d: at least prec digits */
        for (long i = (long)n; i < f->prec && k < 100; i++)
            body[k++] = '0';
    memcpy(body + k, ds, n);
    k += n;
    snprintf(pre, sizeof pre, "%s%s", sign_of(v < 0, f->sign),
             !f->alt ? "" : type == 'b' ? "0b" : type == 'o' ? "0o"
                          : type == 'x' ? "0x" : type == 'X' ? "0X" : "");
    fspec l = *f;
    if (l.zero && !l.align) {
        l.fill = '0';
        l.align = '=';
    }
    return lay_out(c, b, pre, body, k, &l, '>');
}

/* A float for type e E f F g G % or 0 (str.format's "no type"). */
static int fmt_float(jctx *c, jbuf *b, double v, const fspec *f, char type)
{
    /* room for the longest: 'f' of 1.8e308 with precision 300, grouped */
    enum { ROOM = 1024 };
    int neg = signbit(v) && !isnan(v);
    double a = fabs(v);
    char body[ROOM], conv = type;
    long prec = f->prec;
    if (type == '%')
        a *= 100, conv = 'f';
    if (type == 0 && prec < 0) {
        jfmt_float(a, body, sizeof body); /* repr */
    } else if (isnan(a) || isinf(a)) {
        snprintf(body, sizeof body, "%s", isnan(a) ? "nan" : "inf");
        if (type == 'E' || type == 'F' || type == 'G')
            for (char *p = body; *p; p++)
                *p = (char)(*p - 'a' + 'A');
    } else {
        if (prec < 0)
            prec = 6;
        if (prec > 300)
            return jx_fail(c, "precision too big");
        char cf[16];
        if (type == 0) /* like g, with at least one digit after the point */
            conv = 'g';
        if (type == 0 && prec == 0)
            prec = 1;
        snprintf(cf, sizeof cf, "%%%s.*%c", f->alt ? "#" : "", conv);
        snprintf(body, sizeof body, cf, (int)prec, a);
        if (type == 0 && !strchr(body, 'e')) {
            /* no type: exponent notation from an exponent of prec - 1 on
             * (one sooner than g), and a ".0" on a fixed integer */
            char e[ROOM];
            snprintf(e, sizeof e, "%.*e", (int)prec - 1, a);
            char *m = strchr(e, 'e');
            if (m && atoi(m + 1) >= prec - 1) {
                char *z = m;
                while (z > e && z[-1] == '0')
                    z--;
                if (z > e && z[-1] == '.')
                    z--;
                memmove(z, m, strlen(m) + 1);
                snprintf(body, sizeof body, "%s", e);
            } else if (!strchr(body, '.')) {
                strcat(body, ".0");
            }
        }
    }
    if (type == '%')
        strcat(body, "%");
    if (f->group) { /* separators in the integer part */
        size_t ip = strspn(body, "0123456789");
        char g[ROOM + ROOM / 2];
        group_digits(g, sizeof g, body, ip, f->group, 3);
        strncat(g, body + ip, sizeof g - strlen(g) - 1);
        /* fits: a float has at most 309 integer digits and 300 decimals,
         * so the separators leave it far below ROOM; cut, never overrun */
        size_t n = strlen(g);
        if (n >= sizeof body)
            n = sizeof body - 1;
        memcpy(body, g, n);
        body[n] = '\0';
    }
    fspec l = *f;
    if (l.zero && !l.align) {
        l.fill = '0';
        l.align = '=';
    }
    return lay_out(c, b, sign_of(neg, f->sign), body, strlen(body), &l, '>');
}

static int fmt_text(jctx *c, jbuf *b, const char *s, size_t n, const fspec *f)
{
    if (f->prec >= 0)
        n = ju_offset(s, n, (size_t)f->prec);
    fspec l = *f;
    if (l.zero && !l.align) /* '0' before the width pads strings on the right */
        l.fill = '0';
    return lay_out(c, b, "", s, n, &l, '<');
}

/* ------------------------------------------------------------ format() */

/* Parses a str.format spec. */
static int parse_spec(jctx *c, const char *s, size_t n, fspec *f)
{
    size_t i = 0;
    *f = (fspec){.fill = ' ', .width = -1, .prec = -1};
    unsigned cp;
    size_t cl = n ? ju_decode((const unsigned char *)s, n, &cp) : 0;
    if (cl && cl < n && strchr("<>=^", s[cl])) {
        f->fill = cp;
        f->align = s[cl];
        i = cl + 1;
    } else if (n && strchr("<>=^", s[0])) {
        f->align = s[0];
        i = 1;
    }
    if (i < n && strchr("+- ", s[i]))
        f->sign = s[i++];
    if (i < n && s[i] == 'z')
        i++;
    if (i < n && s[i] == '#')
        f->alt = 1, i++;
    if (i < n && s[i] == '0')
        f->zero = 1, i++;
    if (i < n && s[i] >= '0' && s[i] <= '9') {
        f->width = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            f->width = f->width > FMT_MAX_WIDTH ? f->width : f->width * 10 + (s[i] - '0');
    }
    if (i < n && (s[i] == ',' || s[i] == '_'))
        f->group = s[i++];
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || s[i] < '0' || s[i] > '9')
            return jx_fail(c, "Format specifier missing precision");
        f->prec = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            f->prec = f->prec > FMT_MAX_WIDTH ? f->prec : f->prec * 10 + (s[i] - '0');
    }
    if (i < n)
        f->type = s[i++];
    if (i < n)
        return jx_fail(c, "Invalid format specifier '%.*s'", (int)(n > 60 ? 60 : n), s);
    if (f->width > FMT_MAX_WIDTH || f->prec > FMT_MAX_WIDTH)
        return jx_fail(c, "format width or precision too big");
    return 0;
}

/* format(v, spec) into b. */
static int format_value(jctx *c, jbuf *b, jv v, const char *spec, size_t n)
{
    fspec f;
    if (n == 0)
        return jb_str(c, b, v);
    if (parse_spec(c, spec, n, &f))
        return -1;
    const char *tn = jv_type_name(v);
    if (v.t == JV_INT || v.t == JV_BOOL) {
        int64_t i = v.t == JV_INT ? v.u.i : v.u.b;
        if (f.type && strchr("eEfFgG%", f.type))
            return fmt_float(c, b, (double)i, &f, f.type);
        if (f.prec >= 0)
            return jx_fail(c, "Precision not allowed in integer format specifier");
        if (f.type == 'c') {
            if (i < 0 || i > 0x10FFFF)
                return jx_fail(c, "%%c arg not in range(0x110000)");
            fspec l = f;
            l.prec = -1;
            jbuf t = {0};
            int rc = put_cp(c, &t, (unsigned)i, 1) || lay_out(c, b, "", t.p, t.len, &l, '<');
            free(t.p);
            return rc;
        }
        if (f.type && !strchr("bdoxXn", f.type))
            return jx_fail(c, "Unknown format code '%c' for object of type '%s'", f.type, tn);
        return fmt_int(c, b, i, &f, f.type == 'n' ? 'd' : f.type ? f.type : 'd', 0);
    }
    if (v.t == JV_FLOAT) {
        if (f.type && !strchr("eEfFgGn%", f.type))
            return jx_fail(c, "Unknown format code '%c' for object of type '%s'", f.type, tn);
        return fmt_float(c, b, v.u.f, &f, f.type == 'n' ? 'g' : f.type);
    }
    if (v.t == JV_STR) {
        if (f.type && f.type != 's')
            return jx_fail(c, "Unknown format code '%c' for object of type '%s'", f.type, tn);
        if (f.sign)
            return jx_fail(c, "Sign not allowed in string format specifier");
        if (f.align == '=')
            return jx_fail(c, "'=' alignment not allowed in string format specifier");
        return fmt_text(c, b, v.u.s->b, v.u.s->len, &f);
    }
    return jx_fail(c, "unsupported format string passed to %s.__format__", tn);
}

/* ---------------------------------------------------------- str.format */

/* A field name: "", an index or a keyword, then .attr / [key] parts. */
static int field_value(jctx *c, const char *f, size_t n, const jargs *a, int *auto_i, jv *out)
{
    size_t i = 0;
    while (i < n && f[i] != '.' && f[i] != '[')
        i++;
    if (i == 0) {
        if (*auto_i < 0)
            return jx_fail(c, "cannot switch from manual field specification to automatic "
                              "field numbering");
        if (*auto_i >= a->n)
            return jx_fail(c, "Replacement index %d out of range for positional args tuple",
                           *auto_i);
        *out = a->v[(*auto_i)++];
    } else if (f[0] >= '0' && f[0] <= '9') {
        if (*auto_i > 0)
            return jx_fail(c, "cannot switch from automatic field numbering to manual field "
                              "specification");
        *auto_i = -1;
        long idx = strtol(f, NULL, 10);
        if (idx >= a->n)
            return jx_fail(c, "Replacement index %ld out of range for positional args tuple",
                           idx);
        *out = a->v[idx];
    } else {
        const jv *v = NULL;
        for (int k = 0; k < a->nk && !v; k++)
            if (strlen(a->kname[k]) == i && !memcmp(a->kname[k], f, i))
                v = &a->kv[k];
        if (!v)
            return jx_fail(c, "'%.*s'", (int)(i > 60 ? 60 : i), f);
        *out = *v;
    }
    while (i < n) {
        char k = f[i++];
        size_t st = i;
        if (k == '.') {
            while (i < n && f[i] != '.' && f[i] != '[')
                i++;
            jv name;
            if (i == st)
                return jx_fail(c, "Empty attribute in format string");
            if (jv_str(c, f + st, i - st, &name) || jx_getattr(c, *out, name.u.s->b, out))
                return -1;
        } else {
            while (i < n && f[i] != ']')
                i++;
            if (i >= n)
                return jx_fail(c, "Missing ']' in format string");
            jv key;
            size_t kl = i - st;
            int digits = kl > 0 && strspn(f + st, "0123456789") >= kl;
            if (digits ? (key = jv_int(strtoll(f + st, NULL, 10)), 0) : jv_str(c, f + st, kl, &key))
                return -1;
            if (jx_getitem(c, *out, key, out))
                return -1;
            i++;
            if (i < n && f[i] != '.' && f[i] != '[')
                return jx_fail(c, "Only '.' or '[' may follow ']' in format field specifier");
        }
    }
    return 0; /* an undefined result formats as "" (the sandbox's unsafe attributes too) */
}

static int format_str(jctx *c, const char *s, size_t n, const jargs *a, int *auto_i, jbuf *b,
                      int depth);

/* One replacement field {name!conv:spec}; f[0:n] is inside the braces. */
static int field(jctx *c, const char *f, size_t n, const jargs *a, int *auto_i, jbuf *b,
                 int depth)
{
    size_t i = 0;
    int br = 0;
    while (i < n && (br || (f[i] != '!' && f[i] != ':'))) {
        br += f[i] == '[' ? 1 : f[i] == ']' ? -1 : 0;
        i++;
    }
    jv v = jv_undef();
    if (field_value(c, f, i, a, auto_i, &v))
        return -1;
    char conv = 0;
    if (i < n && f[i] == '!') {
        if (i + 1 >= n || (i + 2 < n && f[i + 2] != ':'))
            return jx_fail(c, "expected ':' after conversion specifier");
        conv = f[i + 1];
        i += 2;
        if (conv != 'r' && conv != 's' && conv != 'a')
            return jx_fail(c, "Unknown conversion specifier %c", conv);
    }
    const char *spec = i < n ? f + i + 1 : "";
    size_t sn = i < n ? n - i - 1 : 0;
    jbuf sb = {0};
    if (memchr(spec, '{', sn)) { /* nested fields in the spec: {:{width}} */
        if (depth >= 2)
            return jx_fail(c, "Max string recursion exceeded");
        if (format_str(c, spec, sn, a, auto_i, &sb, depth + 1))
            return free(sb.p), -1;
        spec = sb.p ? sb.p : "";
        sn = sb.len;
    }
    int rc;
    if (conv) {
        jbuf t = {0};
        rc = (conv == 's' ? jb_str(c, &t, v) : jb_repr(c, &t, v)) ||
             jv_str(c, t.p ? t.p : "", t.len, &v);
        free(t.p);
        rc = rc || format_value(c, b, v, spec, sn);
    } else {
        rc = format_value(c, b, v, spec, sn);
    }
    free(sb.p);
    return rc ? -1 : 0;
}

static int format_str(jctx *c, const char *s, size_t n, const jargs *a, int *auto_i, jbuf *b,
                      int depth)
{
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if ((ch == '{' || ch == '}') && i + 1 < n && s[i + 1] == ch) {
            if (jb_put(c, b, &ch, 1))
                return -1;
            i++;
            continue;
        }
        if (ch == '}')
            return jx_fail(c, "Single '}' encountered in format string");
        if (ch != '{') {
            if (jb_put(c, b, &ch, 1))
                return -1;
            continue;
        }
        size_t e = i + 1;
        int nest = 1;
        while (e < n && nest) { /* the matching brace: specs may nest {} */
            nest += s[e] == '{' ? 1 : s[e] == '}' ? -1 : 0;
            e += nest ? 1 : 0;
        }
        if (nest)
            return jx_fail(c, depth ? "unmatched '{' in format spec"
                                    : "Single '{' encountered in format string");
        if (field(c, s + i + 1, e - i - 1, a, auto_i, b, depth))
            return -1;
        i = e;
    }
    return 0;
}

int jx_str_format(jctx *c, jv self, const jargs *a, jv *out)
{
    jbuf b = {0};
    int auto_i = 0;
    int rc = jb_put(c, &b, "", 0) ||
             format_str(c, self.u.s->b, self.u.s->len, a, &auto_i, &b, 0) ||
             jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

/* ---------------------------------------------------------- str % args */

/* The next argument of a % format (PyUnicode_Format's getnextarg). */
static int next_arg(jctx *c, jv args, int *idx, int arglen, jv *out)
{
    if (*idx >= arglen)
        return jx_fail(c, "not enough arguments for format string");
    *out = arglen < 0 ? args : args.u.l->v[*idx];
    (*idx)++;
    return 0;
}

static int star_arg(jctx *c, jv args, int *idx, int arglen, long *out)
{
    jv v = jv_undef();
    if (next_arg(c, args, idx, arglen, &v))
        return -1;
    if (v.t != JV_INT && v.t != JV_BOOL)
        return jx_fail(c, "* wants int");
    *out = v.t == JV_INT ? (long)v.u.i : v.u.b;
    if (*out > FMT_MAX_WIDTH || *out < -FMT_MAX_WIDTH)
        return jx_fail(c, "format width or precision too big");
    return 0;
}

/* One conversion after '%': [(key)][flags][width][.prec][lh L]type. */
static int percent_one(jctx *c, const char *s, size_t n, size_t *i, jv args, jv dict, int *idx,
                       int *arglen, jbuf *b)
{
    fspec f = {.fill = ' ', .width = -1, .prec = -1};
    jv v = jv_undef();
    int have = 0;
    if (*i < n && s[*i] == '(') {
        if (dict.t != JV_DICT)
            return jx_fail(c, "format requires a mapping");
        size_t st = ++*i;
        int depth = 1;
        while (*i < n && depth) {
            depth += s[*i] == '(' ? 1 : s[*i] == ')' ? -1 : 0;
            ++*i;
        }
        if (depth)
            return jx_fail(c, "incomplete format key");
        jv *hit = jv_dict_get(dict, s + st, *i - st - 1);
        if (!hit)
            return jx_fail(c, "'%.*s'", (int)(*i - st - 1 > 60 ? 60 : *i - st - 1), s + st);
        v = *hit;
        have = 1;
        *arglen = -1; /* later positional conversions have nothing left */
        *idx = 0;
    }
    for (; *i < n && strchr("-+ #0", s[*i]); ++*i) {
        char fl = s[*i];
        if (fl == '-')
            f.align = '<';
        else if (fl == '+')
            f.sign = '+';
        else if (fl == ' ' && f.sign != '+')
            f.sign = ' ';
        else if (fl == '#')
            f.alt = 1;
        else
            f.zero = 1;
    }
    if (*i < n && s[*i] == '*') {
        ++*i;
        if (star_arg(c, args, idx, *arglen, &f.width))
            return -1;
        if (f.width < 0)
            f.align = '<', f.width = -f.width;
    } else if (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        f.width = 0;
        for (; *i < n && s[*i] >= '0' && s[*i] <= '9'; ++*i)
            f.width = f.width > FMT_MAX_WIDTH ? f.width : f.width * 10 + (s[*i] - '0');
    }
    if (*i < n && s[*i] == '.') {
        ++*i;
        f.prec = 0;
        if (*i < n && s[*i] == '*') {
            ++*i;
            if (star_arg(c, args, idx, *arglen, &f.prec))
                return -1;
            if (f.prec < 0)
                f.prec = 0;
        } else {
            for (; *i < n && s[*i] >= '0' && s[*i] <= '9'; ++*i)
                f.prec = f.prec > FMT_MAX_WIDTH ? f.prec : f.prec * 10 + (s[*i] - '0');
        }
    }
    if (f.width > FMT_MAX_WIDTH || f.prec > FMT_MAX_WIDTH)
        return jx_fail(c, "format width or precision too big");
    while (*i < n && strchr("hlL", s[*i]))
        ++*i;
    if (*i >= n)
        return jx_fail(c, "incomplete format");
    char t = s[(*i)++];
    if (t == '%')
        return jb_put(c, b, "%", 1);
    if (!have && next_arg(c, args, idx, *arglen, &v))
        return -1;
    if (f.align == '<')
        f.zero = 0; /* '-' wins over '0' */
    const char *tn = jv_type_name(v);
    switch (t) {
    case 's': case 'r': case 'a': {
        jbuf tb = {0};
        int rc = t == 's' ? jb_str(c, &tb, v) : jb_repr(c, &tb, v);
        f.zero = 0;
        f.align = f.align ? f.align : '>'; /* %5s pads on the left */
        rc = rc || fmt_text(c, b, tb.p ? tb.p : "", tb.len, &f);
        free(tb.p);
        return rc ? -1 : 0;
    }
    case 'd': case 'i': case 'u':
        if (!jv_is_num(v))
            return jx_fail(c, "%%%c format: a real number is required, not %s", t, tn);
        if (v.t == JV_FLOAT && (isnan(v.u.f) || isinf(v.u.f) || fabs(v.u.f) >= 9.2e18))
            return jx_fail(c, "cannot convert float %s to integer",
                           isnan(v.u.f) ? "NaN" : "infinity or a very large value");
        return fmt_int(c, b, v.t == JV_FLOAT ? (int64_t)v.u.f : v.t == JV_INT ? v.u.i : v.u.b,
                       &f, 'd', 1);
    case 'o': case 'x': case 'X':
        if (v.t != JV_INT && v.t != JV_BOOL)
            return jx_fail(c, "%%%c format: an integer is required, not %s", t, tn);
        return fmt_int(c, b, v.t == JV_INT ? v.u.i : v.u.b, &f, t, 1);
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G':
        if (!jv_is_num(v))
            return jx_fail(c, "must be real number, not %s", tn);
        if (f.prec < 0)
            f.prec = 6;
        if (t == 'g' || t == 'G')
            f.prec = f.prec ? f.prec : 1;
        return fmt_float(c, b, jv_num(v), &f, t);
    case 'c': {
        unsigned cp;
        if (v.t == JV_INT) {
            if (v.u.i < 0 || v.u.i > 0x10FFFF)
                return jx_fail(c, "%%c arg not in range(0x110000)");
            cp = (unsigned)v.u.i;
        } else if (v.t == JV_STR && ju_count(v.u.s->b, v.u.s->len) == 1) {
            ju_decode((const unsigned char *)v.u.s->b, v.u.s->len, &cp);
        } else {
            return jx_fail(c, "%%c requires int or char");
        }
        jbuf tb = {0};
        f.prec = -1;
        f.zero = 0;
        f.align = f.align ? f.align : '>';
        int rc = put_cp(c, &tb, cp, 1) || fmt_text(c, b, tb.p, tb.len, &f);
        free(tb.p);
        return rc ? -1 : 0;
    }
    default:
        return jx_fail(c, "unsupported format character '%c' (0x%x) at index %zu", t,
                       (unsigned char)t, *i - 1);
    }
}

int jx_percent(jctx *c, jv fmt, jv args, jv *out)
{
    const char *s = fmt.u.s->b;
    size_t n = fmt.u.s->len;
    int tuple = args.t == JV_LIST && args.tuple;
    jv dict = args.t == JV_DICT ? args : jv_undef();
    int idx = 0, arglen = tuple ? args.u.l->n : -1;
    if (!tuple)
        idx = -2; /* one argument, the object itself */
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0);
    for (size_t i = 0; i < n && !rc;) {
        const char *pc = memchr(s + i, '%', n - i);
        size_t run = pc ? (size_t)(pc - (s + i)) : n - i;
        rc = jb_put(c, &b, s + i, run);
        i += run;
        if (!pc || rc)
            break;
        i++;
        rc = percent_one(c, s, n, &i, args, dict, &idx, &arglen, &b);
    }
    if (!rc && idx < arglen && dict.t != JV_DICT)
        rc = jx_fail(c, "not all arguments converted during string formatting");
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}
