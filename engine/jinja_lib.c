/* jinja filters: Jinja2 3.1's filters as their Python source defines them
 * (jinja2/filters.py), with Hugging Face's tojson. Filters that return
 * generators in Python
 * (reverse, unique, batch, map, select...) return lists here: templates
 * loop over them or pass them to |list, where the two agree. */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

int jx_strip(jctx *c, const jstr *s, const jstr *chars, int which, jv *out);
int jx_case(jctx *c, const jstr *s, int mode, jv *out);
int jx_replace(jctx *c, const jstr *s, const jstr *old, const jstr *new_, int64_t count, jv *out);

const jv *jx_arg(const jargs *a, int i, const char *name)
{
    if (i >= 0 && i < a->n)
        return &a->v[i];
    for (int k = 0; name && k < a->nk; k++)
        if (!strcmp(a->kname[k], name))
            return &a->kv[k];
    return NULL;
}

static jv arg_or(const jargs *a, int i, const char *name, jv dflt)
{
    const jv *v = jx_arg(a, i, name);
    return v ? *v : dflt;
}

static int as_str(jctx *c, jv v, jv *out)
{
    return jv_to_str(c, v, out);
}

static int list_of(jctx *c, jv v, jlist **out)
{
    return jx_iter(c, v, out);
}

static int tuple2(jctx *c, jv a, jv b, jv *out)
{
    if (jv_list_new(c, 2, out))
        return -1;
    out->tuple = 1;
    out->u.l->v[0] = a;
    out->u.l->v[1] = b;
    out->u.l->n = 2;
    return 0;
}

/* environment.getitem for each dotted part of attribute ("a.b", "0"). */
static int attr_get(jctx *c, jv item, const jstr *attr, jv *out)
{
    const char *s = attr->b, *end = s + attr->len;
    while (s <= end) {
        const char *dot = memchr(s, '.', (size_t)(end - s));
        size_t n = dot ? (size_t)(dot - s) : (size_t)(end - s);
        jv key;
        int digits = n > 0;
        for (size_t i = 0; i < n; i++)
            digits &= s[i] >= '0' && s[i] <= '9';
        if (digits)
            key = jv_int(strtoll(s, NULL, 10));
        else if (jv_str(c, s, n, &key))
            return -1;
        if (item.t == JV_UNDEF) {
            *out = item;
            return 0;
        }
        if (jx_getitem(c, item, key, &item))
            return -1;
        if (!dot)
            break;
        s = dot + 1;
    }
    *out = item;
    return 0;
}

static int attr_arg(jctx *c, const jargs *a, int i, const jstr **out)
{
    const jv *v = jx_arg(a, i, "attribute");
    *out = NULL;
    if (!v || v->t == JV_NONE)
        return 0;
    if (v->t == JV_INT) { /* attribute=0 */
        jv s;
        if (jv_to_str(c, *v, &s))
            return -1;
        *out = s.u.s;
        return 0;
    }
    if (v->t != JV_STR)
        return jx_fail(c, "attribute must be a string");
    *out = v->u.s;
    return 0;
}

/* ------------------------------------------------------------- sorting */

/* Stable merge sort of items by keys (Python's ordering); -1 when two
 * keys do not compare. */
static int sort_by(jctx *c, jv *items, jv *keys, int n, int reverse)
{
    if (n < 2)
        return 0;
    jv *ti = jx_alloc(&c->arena, (size_t)n * sizeof *ti), *tk = jx_alloc(&c->arena, (size_t)n * sizeof *tk);
    if (!ti || !tk)
        return jx_fail(c, "the template used more than %zu bytes of memory", c->o->max_memory);
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int r;
                if (jv_cmp(c, keys[j], keys[i], &r))
                    return -1;
                if (reverse)
                    r = -r;
                int take_right = r < 0;
                ti[k] = take_right ? items[j] : items[i];
                tk[k++] = take_right ? keys[j++] : keys[i++];
            }
            while (i < mid) { ti[k] = items[i]; tk[k++] = keys[i++]; }
            while (j < hi) { ti[k] = items[j]; tk[k++] = keys[j++]; }
        }
        memcpy(items, ti, (size_t)n * sizeof *ti);
        memcpy(keys, tk, (size_t)n * sizeof *tk);
    }
    return 0;
}

/* The sort key: lower-cased when not case-sensitive (Jinja's ignore_case). */
static int sort_key(jctx *c, jv v, int case_sensitive, jv *out)
{
    if (!case_sensitive && v.t == JV_STR)
        return jx_case(c, v.u.s, 0, out);
    *out = v;
    return 0;
}

/* -------------------------------------------------------------- filters */

static int f_tojson(jctx *c, jv in, const jargs *a, jv *out)
{
    jv ea = arg_or(a, 0, "ensure_ascii", jv_bool(0)), ind = arg_or(a, 1, "indent", jv_none());
    jv sep = arg_or(a, 2, "separators", jv_none()), sk = arg_or(a, 3, "sort_keys", jv_bool(0));
    char spaces[256];
    const char *indent = NULL, *item_sep = ", ", *key_sep = ": ";
    if (ind.t == JV_INT || ind.t == JV_BOOL) {
        int64_t n = ind.t == JV_INT ? ind.u.i : ind.u.b;
        if (n > 255)
            return jx_fail(c, "tojson indent too large");
        n = n < 0 ? 0 : n;
        memset(spaces, ' ', (size_t)n);
        spaces[n] = 0;
        indent = spaces;
    } else if (ind.t == JV_STR) {
        indent = ind.u.s->b;
    } else if (ind.t != JV_NONE) {
        return jx_fail(c, "tojson indent must be an int or a str");
    }
    if (indent)
        item_sep = ",";
    if (sep.t == JV_LIST && sep.u.l->n == 2 && sep.u.l->v[0].t == JV_STR &&
        sep.u.l->v[1].t == JV_STR) {
        item_sep = sep.u.l->v[0].u.s->b;
        key_sep = sep.u.l->v[1].u.s->b;
    } else if (sep.t != JV_NONE) {
        return jx_fail(c, "tojson separators must be a pair of strings");
    }
    jbuf b = {0};
    c->json_ascii = jv_truthy(ea);
    int rc = jb_put(c, &b, "", 0) ||
             jb_json(c, &b, in, indent, 0, jv_truthy(sk), item_sep, key_sep) ||
             jv_str(c, b.p, b.len, out);
    c->json_ascii = 0;
    free(b.p);
    return rc ? -1 : 0;
}

static int f_trim(jctx *c, jv in, const jargs *a, jv *out)
{
    const jv *ch = jx_arg(a, 0, "chars");
    if (ch && ch->t != JV_STR && ch->t != JV_NONE)
        return jx_fail(c, "trim chars must be a string");
    return as_str(c, in, &in) ||
           jx_strip(c, in.u.s, ch && ch->t == JV_STR ? ch->u.s : NULL, 3, out);
}

static int f_length(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)a;
    switch (in.t) {
    case JV_UNDEF: *out = jv_int(0); return 0;
    case JV_STR: *out = jv_int((int64_t)ju_count(in.u.s->b, in.u.s->len)); return 0;
    case JV_LIST: *out = jv_int(in.u.l->n); return 0;
    case JV_DICT: case JV_NS: *out = jv_int(in.u.d->n); return 0;
    case JV_LOOP: *out = jv_int(in.u.lp->items->n); return 0;
    default: return jx_fail(c, "object of type '%s' has no len()", jv_type_name(in));
    }
}

static int f_join(jctx *c, jv in, const jargs *a, jv *out)
{
    jv d = arg_or(a, 0, "d", jv_none());
    const jstr *attr;
    jlist *l;
    if (attr_arg(c, a, 1, &attr) || list_of(c, in, &l))
        return -1;
    if (d.t != JV_NONE && as_str(c, d, &d))
        return -1;
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0);
    for (int i = 0; i < l->n && !rc; i++) {
        jv v = l->v[i];
        if (i && d.t == JV_STR)
            rc = jb_put(c, &b, d.u.s->b, d.u.s->len);
        if (!rc && attr)
            rc = attr_get(c, v, attr, &v);
        rc = rc || jb_str(c, &b, v);
    }
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int f_default(jctx *c, jv in, const jargs *a, jv *out)
{
    jv d = arg_or(a, 0, "default_value", jv_none()), bo = arg_or(a, 1, "boolean", jv_bool(0));
    if (!jx_arg(a, 0, "default_value") && jv_cstr(c, "", &d))
        return -1;
    *out = in.t == JV_UNDEF || (jv_truthy(bo) && !jv_truthy(in)) ? d : in;
    return 0;
}

static int f_first_last(jctx *c, jv in, jv *out, int last)
{
    jlist *l;
    if (list_of(c, in, &l))
        return -1;
    if (l->n == 0)
        return jv_undef_hint(c, out, "No %s item, sequence was empty.", last ? "last" : "first");
    *out = l->v[last ? l->n - 1 : 0];
    return 0;
}
static int f_first(jctx *c, jv in, const jargs *a, jv *o) { (void)a; return f_first_last(c, in, o, 0); }
static int f_last(jctx *c, jv in, const jargs *a, jv *o) { (void)a; return f_first_last(c, in, o, 1); }

static int f_case(jctx *c, jv in, jv *out, int mode)
{
    return as_str(c, in, &in) || jx_case(c, in.u.s, mode, out);
}
static int f_upper(jctx *c, jv in, const jargs *a, jv *o) { (void)a; return f_case(c, in, o, 1); }
static int f_lower(jctx *c, jv in, const jargs *a, jv *o) { (void)a; return f_case(c, in, o, 0); }
static int f_capitalize(jctx *c, jv in, const jargs *a, jv *o)
{
    (void)a;
    return f_case(c, in, o, 2);
}

/* Jinja's title: first letter after -, whitespace, (, {, [ or < upper,
 * the rest lower (not str.title). */
static int f_title(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)a;
    if (as_str(c, in, &in))
        return -1;
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0), start = 1;
    const jstr *s = in.u.s;
    for (size_t i = 0; i < s->len && !rc;) {
        unsigned cp;
        size_t l = ju_decode((const unsigned char *)s->b + i, s->len - i, &cp);
        int sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || ju_is_space(cp);
        if (sep || cp == 0xFFFFFFFFu) {
            rc = jb_put(c, &b, s->b + i, l);
        } else {
            utf8proc_int32_t m = start ? utf8proc_toupper((utf8proc_int32_t)cp)
                                       : utf8proc_tolower((utf8proc_int32_t)cp);
            utf8proc_uint8_t enc[4];
            rc = jb_put(c, &b, (const char *)enc, (size_t)utf8proc_encode_char(m, enc));
        }
        start = sep;
        i += l;
    }
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int f_replace(jctx *c, jv in, const jargs *a, jv *out)
{
    jv old = arg_or(a, 0, "old", jv_none()), nw = arg_or(a, 1, "new", jv_none());
    jv cnt = arg_or(a, 2, "count", jv_none());
    if (as_str(c, in, &in) || as_str(c, old, &old) || as_str(c, nw, &nw))
        return -1;
    if (cnt.t != JV_NONE && cnt.t != JV_INT)
        return jx_fail(c, "replace count must be an integer");
    return jx_replace(c, in.u.s, old.u.s, nw.u.s, cnt.t == JV_INT ? cnt.u.i : -1, out);
}

/* select / reject / selectattr / rejectattr */
static int f_select_impl(jctx *c, jv in, const jargs *a, jv *out, int want, int by_attr)
{
    jlist *l;
    const jstr *attr = NULL;
    int first = 0;
    if (by_attr) {
        if (a->n < 1 || a->v[0].t != JV_STR)
            return jx_fail(c, "selectattr/rejectattr need an attribute name");
        attr = a->v[0].u.s;
        first = 1;
    }
    const char *test = a->n > first && a->v[first].t == JV_STR ? a->v[first].u.s->b : NULL;
    jargs targs = {.n = a->n > first + 1 ? a->n - first - 1 : 0, .v = a->n > first + 1 ? a->v + first + 1 : NULL,
                   .nk = a->nk, .kname = a->kname, .kv = a->kv};
    /* Jinja's select_or_reject: a falsy input selects nothing */
    if (jv_list_new(c, 0, out) || (jv_truthy(in) && list_of(c, in, &l)))
        return -1;
    for (int i = 0; jv_truthy(in) && i < l->n; i++) {
        jv v = l->v[i];
        int ok;
        if (jx_step(c) || (attr && attr_get(c, v, attr, &v)))
            return -1;
        if (test) {
            if (jx_test(c, test, v, &targs, &ok))
                return -1;
        } else {
            ok = jv_truthy(v);
        }
        if (!ok == !want && jv_list_push(c, *out, l->v[i]))
            return -1;
    }
    return 0;
}
static int f_select(jctx *c, jv in, const jargs *a, jv *o) { return f_select_impl(c, in, a, o, 1, 0); }
static int f_reject(jctx *c, jv in, const jargs *a, jv *o) { return f_select_impl(c, in, a, o, 0, 0); }
static int f_selectattr(jctx *c, jv in, const jargs *a, jv *o) { return f_select_impl(c, in, a, o, 1, 1); }
static int f_rejectattr(jctx *c, jv in, const jargs *a, jv *o) { return f_select_impl(c, in, a, o, 0, 1); }

static int f_map(jctx *c, jv in, const jargs *a, jv *out)
{
    jlist *l;
    const jstr *attr;
    if (!jv_truthy(in)) /* sync_do_map: a falsy input maps to nothing */
        return jv_list_new(c, 0, out);
    if (attr_arg(c, a, -1, &attr) || list_of(c, in, &l) || jv_list_new(c, l->n, out))
        return -1;
    const jv *dflt = jx_arg(a, -1, "default");
    if (!attr && (a->n < 1 || a->v[0].t != JV_STR))
        return jx_fail(c, "map needs a filter name or attribute=");
    jargs fargs = {.n = a->n ? a->n - 1 : 0, .v = a->n ? a->v + 1 : NULL, .nk = a->nk, .kname = a->kname,
                   .kv = a->kv};
    for (int i = 0; i < l->n; i++) {
        jv v = l->v[i];
        if (jx_step(c))
            return -1;
        if (attr) {
            if (attr_get(c, v, attr, &v))
                return -1;
            if (v.t == JV_UNDEF && dflt)
                v = *dflt;
        } else if (jx_filter(c, a->v[0].u.s->b, v, &fargs, &v)) {
            return -1;
        }
        out->u.l->v[out->u.l->n++] = v;
    }
    return 0;
}

static int f_list(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)a;
    jlist *l;
    if (list_of(c, in, &l) || jv_list_new(c, l->n, out))
        return -1;
    if (l->n)
        memcpy(out->u.l->v, l->v, (size_t)l->n * sizeof *l->v);
    out->u.l->n = l->n;
    return 0;
}

static int f_string(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)a;
    return as_str(c, in, out);
}

/* Python's float(str): strip, optional sign, digits/underscores, inf, nan. */
static int parse_float(const jstr *s, double *out)
{
    char buf[128];
    size_t k = 0, b = 0, e = s->len;
    while (b < e && ju_is_space((unsigned char)s->b[b]))
        b++;
    while (e > b && ju_is_space((unsigned char)s->b[e - 1]))
        e--;
    if (e == b || e - b >= sizeof buf)
        return -1;
    for (size_t i = b; i < e; i++) {
        char ch = s->b[i];
        if (ch == '_') {
            if (i == b || i + 1 == e || !(s->b[i - 1] >= '0' && s->b[i - 1] <= '9') ||
                !(s->b[i + 1] >= '0' && s->b[i + 1] <= '9'))
                return -1;
            continue;
        }
        if (!strchr("0123456789+-.eEinfatyINFATY", ch))
            return -1;
        buf[k++] = ch;
    }
    buf[k] = 0;
    char *end;
    *out = strtod(buf, &end);
    if (*end || (strchr(buf, 'x') || strchr(buf, 'X')))
        return -1;
    return 0;
}

/* Python's int(str, base) for base 10 (and 2..36 digits). */
static int parse_int(const jstr *s, int base, int64_t *out)
{
    size_t b = 0, e = s->len;
    while (b < e && ju_is_space((unsigned char)s->b[b]))
        b++;
    while (e > b && ju_is_space((unsigned char)s->b[e - 1]))
        e--;
    int neg = 0;
    if (b < e && (s->b[b] == '+' || s->b[b] == '-'))
        neg = s->b[b++] == '-';
    if (e - b > 2 && s->b[b] == '0') { /* int("0x1f", 16): the base's prefix is allowed */
        char p = (char)(s->b[b + 1] | 0x20);
        if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2))
            b += 2;
    }
    if (b == e)
        return -1;
    uint64_t v = 0;
    for (size_t i = b; i < e; i++) {
        char ch = s->b[i];
        if (ch == '_' && i > b && i + 1 < e && s->b[i - 1] != '_')
            continue;
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'z' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'Z' ? ch - 'A' + 10 : 99;
        if (d >= base || v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return -1;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (v > (uint64_t)INT64_MAX)
        return -1;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

static int f_int(jctx *c, jv in, const jargs *a, jv *out)
{
    jv d = arg_or(a, 0, "default", jv_int(0)), base = arg_or(a, 1, "base", jv_int(10));
    int64_t i = 0;
    double f = 0;
    int b = base.t == JV_INT && base.u.i >= 2 && base.u.i <= 36 ? (int)base.u.i : 10;
    if (in.t == JV_INT || in.t == JV_BOOL) {
        *out = jv_int(in.t == JV_INT ? in.u.i : in.u.b);
        return 0;
    }
    if (in.t == JV_STR && parse_int(in.u.s, b, &i) == 0) {
        *out = jv_int(i);
        return 0;
    }
    if (in.t == JV_FLOAT)
        f = in.u.f;
    else if (!(in.t == JV_STR && parse_float(in.u.s, &f) == 0)) {
        *out = d; /* "42.23"|int is 42; anything else not a number: the default */
        return 0;
    }
    if (!isfinite(f) || fabs(f) >= 9.2e18)
        return jx_fail(c, "cannot convert float %s to integer", isnan(f) ? "NaN" : "infinity");
    *out = jv_int((int64_t)f);
    return 0;
}

static int f_float(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)c;
    jv d = arg_or(a, 0, "default", jv_float(0));
    double f;
    if (jv_is_num(in))
        *out = jv_float(jv_num(in));
    else if (in.t == JV_STR && !parse_float(in.u.s, &f))
        *out = jv_float(f);
    else
        *out = d;
    return 0;
}

static int f_abs(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)a;
    if (in.t == JV_INT || in.t == JV_BOOL) {
        int64_t v = in.t == JV_INT ? in.u.i : in.u.b;
        if (v == INT64_MIN)
            return jx_fail(c, "integer overflow");
        *out = jv_int(v < 0 ? -v : v);
    } else if (in.t == JV_FLOAT) {
        *out = jv_float(fabs(in.u.f));
    } else {
        return jx_fail(c, "bad operand type for abs(): '%s'", jv_type_name(in));
    }
    return 0;
}

static int f_round(jctx *c, jv in, const jargs *a, jv *out)
{
    jv pr = arg_or(a, 0, "precision", jv_int(0)), me = arg_or(a, 1, "method", jv_none());
    const char *method = me.t == JV_STR ? me.u.s->b : "common";
    if (pr.t != JV_INT || !jv_is_num(in))
        return jx_fail(c, "round needs a number and an integer precision");
    int64_t p = pr.u.i;
    if (p > 300 || p < -300)
        return jx_fail(c, "round precision out of range");
    if (!strcmp(method, "common")) {
        if (in.t != JV_FLOAT) { /* round(int, n) stays an int */
            *out = jv_int(in.t == JV_INT ? in.u.i : in.u.b);
            return 0;
        }
        if (p >= 0) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)p, in.u.f); /* exact value, ties to even */
            *out = jv_float(strtod(buf, NULL));
        } else {
            double m = pow(10, (double)-p);
            *out = jv_float(nearbyint(in.u.f / m) * m);
        }
        return 0;
    }
    if (strcmp(method, "ceil") && strcmp(method, "floor"))
        return jx_fail(c, "method must be common, ceil or floor");
    double m = pow(10, (double)p), v = jv_num(in) * m;
    *out = jv_float((method[0] == 'c' ? ceil(v) : floor(v)) / m);
    return 0;
}

static int f_unique(jctx *c, jv in, const jargs *a, jv *out)
{
    int cs = jv_truthy(arg_or(a, 0, "case_sensitive", jv_bool(0)));
    const jstr *attr;
    jlist *l;
    jv seen;
    if (attr_arg(c, a, 1, &attr) || list_of(c, in, &l) || jv_list_new(c, 0, out) ||
        jv_list_new(c, 0, &seen))
        return -1;
    for (int i = 0; i < l->n; i++) {
        jv k = l->v[i];
        if (jx_step(c) || (attr && attr_get(c, k, attr, &k)) || sort_key(c, k, cs, &k))
            return -1;
        int dup = 0;
        for (int j = 0; j < seen.u.l->n && !dup; j++)
            dup = jv_eq(seen.u.l->v[j], k);
        if (!dup && (jv_list_push(c, seen, k) || jv_list_push(c, *out, l->v[i])))
            return -1;
    }
    return 0;
}

static int f_reverse(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)a;
    jlist *l;
    if (list_of(c, in, &l))
        return -1;
    if (in.t == JV_STR) {
        jbuf b = {0};
        int rc = jb_put(c, &b, "", 0);
        for (int i = l->n - 1; i >= 0 && !rc; i--)
            rc = jb_put(c, &b, l->v[i].u.s->b, l->v[i].u.s->len);
        rc = rc || jv_str(c, b.p, b.len, out);
        free(b.p);
        return rc ? -1 : 0;
    }
    if (jv_list_new(c, l->n, out))
        return -1;
    for (int i = l->n - 1; i >= 0; i--)
        out->u.l->v[out->u.l->n++] = l->v[i];
    return 0;
}

static int f_sort(jctx *c, jv in, const jargs *a, jv *out)
{
    int rev = jv_truthy(arg_or(a, 0, "reverse", jv_bool(0)));
    int cs = jv_truthy(arg_or(a, 1, "case_sensitive", jv_bool(0)));
    const jstr *attr;
    jlist *l;
    if (attr_arg(c, a, 2, &attr) || list_of(c, in, &l) || jv_list_new(c, l->n, out))
        return -1;
    jv *keys = jx_alloc(&c->arena, (size_t)(l->n + 1) * sizeof *keys);
    if (!keys)
        return jx_fail(c, "the template used more than %zu bytes of memory", c->o->max_memory);
    for (int i = 0; i < l->n; i++) {
        jv k = l->v[i];
        if ((attr && attr_get(c, k, attr, &k)) || sort_key(c, k, cs, &keys[i]))
            return -1;
        out->u.l->v[out->u.l->n++] = l->v[i];
    }
    return sort_by(c, out->u.l->v, keys, l->n, rev);
}

static int f_dictsort(jctx *c, jv in, const jargs *a, jv *out)
{
    int cs = jv_truthy(arg_or(a, 0, "case_sensitive", jv_bool(0)));
    jv by = arg_or(a, 1, "by", jv_none());
    int rev = jv_truthy(arg_or(a, 2, "reverse", jv_bool(0)));
    int by_value = by.t == JV_STR && !strcmp(by.u.s->b, "value");
    if (by.t == JV_STR && !by_value && strcmp(by.u.s->b, "key"))
        return jx_fail(c, "You can only sort by either \"key\" or \"value\"");
    if (in.t != JV_DICT)
        return jx_fail(c, "dictsort needs a mapping");
    int n = in.u.d->n;
    jv *keys = jx_alloc(&c->arena, (size_t)(n + 1) * sizeof *keys);
    if (!keys || jv_list_new(c, n, out))
        return -1;
    for (int i = 0; i < n; i++) {
        if (tuple2(c, in.u.d->k[i], in.u.d->v[i], &out->u.l->v[i]) ||
            sort_key(c, by_value ? in.u.d->v[i] : in.u.d->k[i], cs, &keys[i]))
            return -1;
        out->u.l->n++;
    }
    return sort_by(c, out->u.l->v, keys, n, rev);
}

static int f_items(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)a;
    if (in.t == JV_UNDEF)
        return jv_list_new(c, 0, out);
    if (in.t != JV_DICT)
        return jx_fail(c, "Can only get item pairs from a mapping.");
    if (jv_list_new(c, in.u.d->n, out))
        return -1;
    for (int i = 0; i < in.u.d->n; i++)
        if (tuple2(c, in.u.d->k[i], in.u.d->v[i], &out->u.l->v[out->u.l->n++]))
            return -1;
    return 0;
}

static int f_indent(jctx *c, jv in, const jargs *a, jv *out)
{
    jv w = arg_or(a, 0, "width", jv_int(4));
    int first = jv_truthy(arg_or(a, 1, "first", jv_bool(0)));
    int blank = jv_truthy(arg_or(a, 2, "blank", jv_bool(0)));
    jv ind, lines, nl;
    if (w.t == JV_INT) {
        if (w.u.i > 1000)
            return jx_fail(c, "indent width too large");
        char sp[1001];
        memset(sp, ' ', (size_t)(w.u.i > 0 ? w.u.i : 0));
        if (jv_str(c, sp, (size_t)(w.u.i > 0 ? w.u.i : 0), &ind))
            return -1;
    } else if (w.t == JV_STR) {
        ind = w;
    } else {
        return jx_fail(c, "indent width must be an int or a str");
    }
    /* s += "\n"; lines = s.splitlines() */
    jv fn;
    jargs none = {0};
    if (as_str(c, in, &in) || jv_cstr(c, "\n", &nl) || jx_binop(c, JO_ADD, in, nl, &in) ||
        jx_method(c, in, "splitlines", &fn) || jx_call(c, fn, &none, &lines))
        return -1;
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0);
    if (first)
        rc = rc || jb_put(c, &b, ind.u.s->b, ind.u.s->len);
    for (int i = 0; i < lines.u.l->n && !rc; i++) {
        const jstr *ln = lines.u.l->v[i].u.s;
        if (i)
            rc = jb_put(c, &b, "\n", 1);
        if (i && (blank || ln->len))
            rc = rc || jb_put(c, &b, ind.u.s->b, ind.u.s->len);
        rc = rc || jb_put(c, &b, ln->b, ln->len);
    }
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int f_safe(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)a;
    return as_str(c, in, out);
}

static int f_escape(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)a;
    if (as_str(c, in, &in))
        return -1;
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0);
    for (size_t i = 0; i < in.u.s->len && !rc; i++) {
        char ch = in.u.s->b[i];
        const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;"
                      : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
        rc = e ? jb_put(c, &b, e, strlen(e)) : jb_put(c, &b, &ch, 1);
    }
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int f_wordcount(jctx *c, jv in, const jargs *a, jv *out)
{
    (void)a;
    if (as_str(c, in, &in))
        return -1;
    int64_t n = 0;
    int in_word = 0;
    for (size_t i = 0; i < in.u.s->len;) {
        unsigned cp;
        i += ju_decode((const unsigned char *)in.u.s->b + i, in.u.s->len - i, &cp);
        utf8proc_category_t cat = cp == 0xFFFFFFFFu ? UTF8PROC_CATEGORY_CN
                                                    : utf8proc_category((utf8proc_int32_t)cp);
        int w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
        n += w && !in_word;
        in_word = w;
    }
    *out = jv_int(n);
    return 0;
}

static int f_batch(jctx *c, jv in, const jargs *a, jv *out)
{
    jv lc = arg_or(a, 0, "linecount", jv_none());
    const jv *fill = jx_arg(a, 1, "fill_with");
    jlist *l;
    if (lc.t != JV_INT || lc.u.i <= 0)
        return jx_fail(c, "batch needs a positive line count");
    if (list_of(c, in, &l) || jv_list_new(c, 0, out))
        return -1;
    jv cur = {0};
    for (int i = 0; i < l->n; i++) {
        if (i % lc.u.i == 0 && (jv_list_new(c, 0, &cur) || jv_list_push(c, *out, cur)))
            return -1;
        if (jv_list_push(c, cur, l->v[i]))
            return -1;
    }
    if (fill && fill->t != JV_NONE && out->u.l->n)
        while (cur.u.l->n < lc.u.i)
            if (jx_step(c) || jv_list_push(c, cur, *fill))
                return -1;
    return 0;
}

static int f_minmax(jctx *c, jv in, const jargs *a, jv *out, int want)
{
    int cs = jv_truthy(arg_or(a, 0, "case_sensitive", jv_bool(0)));
    const jstr *attr;
    jlist *l;
    if (attr_arg(c, a, 1, &attr) || list_of(c, in, &l))
        return -1;
    if (l->n == 0)
        return jv_undef_hint(c, out, "No aggregated item, sequence was empty.");
    jv best = l->v[0], bk;
    if ((attr && attr_get(c, best, attr, &bk)) || sort_key(c, attr ? bk : best, cs, &bk))
        return -1;
    for (int i = 1; i < l->n; i++) {
        jv k;
        int r;
        if ((attr && attr_get(c, l->v[i], attr, &k)) || sort_key(c, attr ? k : l->v[i], cs, &k) ||
            jv_cmp(c, k, bk, &r))
            return -1;
        if (r * want > 0) {
            best = l->v[i];
            bk = k;
        }
    }
    *out = best;
    return 0;
}
static int f_min(jctx *c, jv in, const jargs *a, jv *o) { return f_minmax(c, in, a, o, -1); }
static int f_max(jctx *c, jv in, const jargs *a, jv *o) { return f_minmax(c, in, a, o, 1); }

static int f_sum(jctx *c, jv in, const jargs *a, jv *out)
{
    const jstr *attr;
    jlist *l;
    *out = arg_or(a, 1, "start", jv_int(0));
    if (attr_arg(c, a, 0, &attr) || list_of(c, in, &l))
        return -1;
    for (int i = 0; i < l->n; i++) {
        jv v = l->v[i];
        if ((attr && attr_get(c, v, attr, &v)) || jx_binop(c, JO_ADD, *out, v, out))
            return -1;
    }
    return 0;
}

/* Jinja2's do_format: soft_str(value) % (kwargs or args). */
static int f_format(jctx *c, jv in, const jargs *a, jv *out)
{
    jv args;
    if (a->n && a->nk)
        return jx_fail(c, "can't handle positional and keyword arguments at the same time");
    if (as_str(c, in, &in))
        return -1;
    if (a->nk) {
        if (jv_dict_new(c, &args))
            return -1;
        for (int i = 0; i < a->nk; i++) {
            jv k;
            if (jv_cstr(c, a->kname[i], &k) || jv_dict_set(c, args, k, a->kv[i]))
                return -1;
        }
        return jx_percent(c, in, args, out);
    }
    if (jv_list_new(c, a->n, &args))
        return -1;
    args.tuple = 1;
    if (a->n)
        memcpy(args.u.l->v, a->v, (size_t)a->n * sizeof *a->v);
    args.u.l->n = a->n;
    return jx_percent(c, in, args, out);
}

static int f_center(jctx *c, jv in, const jargs *a, jv *out)
{
    jv w = arg_or(a, 0, "width", jv_int(80));
    if (as_str(c, in, &in) || w.t != JV_INT)
        return c->failed ? -1 : jx_fail(c, "center width must be an integer");
    int64_t n = (int64_t)ju_count(in.u.s->b, in.u.s->len), pad = w.u.i - n;
    if (pad <= 0 || w.u.i > 100000) {
        *out = in;
        return 0;
    }
    /* Python: left = pad / 2 + (pad & width & 1) */
    int64_t left = pad / 2 + (pad & w.u.i & 1), right = pad - left;
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0);
    for (int64_t i = 0; i < left && !rc; i++)
        rc = jb_put(c, &b, " ", 1);
    rc = rc || jb_put(c, &b, in.u.s->b, in.u.s->len);
    for (int64_t i = 0; i < right && !rc; i++)
        rc = jb_put(c, &b, " ", 1);
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int f_attr(jctx *c, jv in, const jargs *a, jv *out)
{
    if (a->n < 1 || a->v[0].t != JV_STR)
        return jx_fail(c, "attr needs a name");
    return jx_getattr(c, in, a->v[0].u.s->b, out);
}

typedef struct jfilter_def { const char *name; jfilter_fn fn; } jfilter_def;
static const jfilter_def FILTERS[] = {
    {"tojson", f_tojson}, {"trim", f_trim}, {"length", f_length}, {"count", f_length},
    {"join", f_join}, {"default", f_default}, {"d", f_default}, {"first", f_first},
    {"last", f_last}, {"upper", f_upper}, {"lower", f_lower}, {"title", f_title},
    {"capitalize", f_capitalize}, {"replace", f_replace}, {"select", f_select},
    {"reject", f_reject}, {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr},
    {"map", f_map}, {"list", f_list}, {"string", f_string}, {"int", f_int}, {"float", f_float},
    {"abs", f_abs}, {"round", f_round}, {"unique", f_unique}, {"reverse", f_reverse},
    {"sort", f_sort}, {"dictsort", f_dictsort}, {"items", f_items}, {"indent", f_indent},
    {"safe", f_safe}, {"escape", f_escape}, {"e", f_escape}, {"forceescape", f_escape},
    {"wordcount", f_wordcount}, {"batch", f_batch}, {"min", f_min}, {"max", f_max},
    {"sum", f_sum}, {"format", f_format}, {"center", f_center}, {"attr", f_attr},
    {NULL, NULL}};

jfilter_fn jx_find_filter(const char *name)
{
    for (const jfilter_def *f = FILTERS; f->name; f++)
        if (!strcmp(f->name, name))
            return f->fn;
    return NULL;
}

int jx_filter(jctx *c, const char *name, jv in, const jargs *a, jv *out)
{
    jfilter_fn f = jx_find_filter(name);
    if (!f)
        return jx_fail(c, "No filter named '%s'.", name);
    return jx_filter_fn(c, f, in, a, out);
}

int jx_filter_fn(jctx *c, jfilter_fn f, jv in, const jargs *a, jv *out)
{
    if (jx_step(c))
        return -1;
    /* Undefined reads as empty in most filters (Jinja's Undefined iterates
     * as nothing and prints as ""); these need a real value and raise. */
    if (in.t == JV_UNDEF && (f == f_int || f == f_float || f == f_indent || f == f_dictsort ||
                             f == f_abs || f == f_round))
        return jx_undef_error(c, in);
    return f(c, in, a, out);
}

