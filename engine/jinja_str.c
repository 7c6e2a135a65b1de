/* jinja methods: what the sandbox lets a template call on values: str's
 * (strip, split, startswith, replace, format, ...), dict's (items, keys,
 * values, get) and list's (index, count); loop.cycle. Methods that would
 * modify a value (list.append, dict.update, ...) are what
 * ImmutableSandboxedEnvironment refuses: they come back as an undefined
 * that names the refusal, as there. Case mapping follows Unicode
 * (utf8proc), one code point to one. */
#include "jinja_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ----------------------------------------------------------- helpers */

static int str_arg(jctx *c, const jargs *a, int i, const char *name, const jstr **out,
                   int optional)
{
    const jv *v = jx_arg(a, i, name);
    if (!v || (optional && v->t == JV_NONE)) {
        *out = NULL;
        return optional ? 0 : jx_fail(c, "missing argument '%s'", name);
    }
    if (v->t != JV_STR)
        return jx_fail(c, "argument '%s' must be str, not %s", name, jv_type_name(*v));
    *out = v->u.s;
    return 0;
}

static int int_arg(jctx *c, const jargs *a, int i, const char *name, int64_t dflt, int64_t *out)
{
    const jv *v = jx_arg(a, i, name);
    *out = dflt;
    if (!v || v->t == JV_NONE)
        return 0;
    if (v->t != JV_INT && v->t != JV_BOOL)
        return jx_fail(c, "argument '%s' must be an integer, not %s", name, jv_type_name(*v));
    *out = v->t == JV_INT ? v->u.i : v->u.b;
    return 0;
}

/* Is code point cp among the code points of set (UTF-8)? */
static int in_set(unsigned cp, const jstr *set)
{
    for (size_t i = 0; i < set->len;) {
        unsigned x;
        i += ju_decode((const unsigned char *)set->b + i, set->len - i, &x);
        if (x == cp)
            return 1;
    }
    return 0;
}

/* str.strip family: which = 1 left, 2 right, 3 both; chars NULL is
 * whitespace. */
int jx_strip(jctx *c, const jstr *s, const jstr *chars, int which, jv *out)
{
    const unsigned char *p = (const unsigned char *)s->b;
    size_t b = 0, e = s->len;
    while ((which & 1) && b < e) {
        unsigned cp;
        size_t l = ju_decode(p + b, e - b, &cp);
        if (chars ? !in_set(cp, chars) : !ju_is_space(cp))
            break;
        b += l;
    }
    while ((which & 2) && e > b) {
        size_t st = e - 1;
        while (st > b && (p[st] & 0xC0) == 0x80 && e - st < 4)
            st--;
        unsigned cp;
        if (ju_decode(p + st, e - st, &cp) != e - st || (chars ? !in_set(cp, chars)
                                                              : !ju_is_space(cp)))
            break;
        e = st;
    }
    return jv_str(c, s->b + b, e - b, out);
}

/* Case mapping: mode 0 lower, 1 upper, 2 capitalize, 3 Python's title. */
int jx_case(jctx *c, const jstr *s, int mode, jv *out)
{
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0), prev_cased = 0, first = 1;
    for (size_t i = 0; i < s->len && !rc;) {
        unsigned cp;
        size_t l = ju_decode((const unsigned char *)s->b + i, s->len - i, &cp);
        if (cp == 0xFFFFFFFFu) {
            rc = jb_put(c, &b, s->b + i, l);
            i += l;
            continue;
        }
        int up = mode == 1 || (mode == 2 && first) || (mode == 3 && !prev_cased);
        if (cp == 0xDF && up && mode == 1) { /* Python: "ß".upper() is "SS" */
            rc = jb_put(c, &b, "SS", 2);
            prev_cased = 1;
            first = 0;
            i += l;
            continue;
        }
        utf8proc_int32_t m = up ? utf8proc_toupper((utf8proc_int32_t)cp)
                                : utf8proc_tolower((utf8proc_int32_t)cp);
        if ((mode == 3 || mode == 2) && up)
            m = utf8proc_totitle((utf8proc_int32_t)cp);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
                     cat == UTF8PROC_CATEGORY_LT;
        first = 0;
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t n = utf8proc_encode_char(m, enc);
        rc = jb_put(c, &b, (const char *)enc, (size_t)n);
        i += l;
    }
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

static const char *find(const jstr *hay, const jstr *needle, size_t from)
{
    if (from > hay->len)
        return NULL;
    if (needle->len == 0)
        return hay->b + from;
    return memmem(hay->b + from, hay->len - from, needle->b, needle->len);
}

/* ------------------------------------------------------- str methods */

static int m_strip(jctx *c, jv self, const jargs *a, jv *out, int which)
{
    const jstr *chars = NULL;
    return str_arg(c, a, 0, "chars", &chars, 1) || jx_strip(c, self.u.s, chars, which, out);
}
static int m_strip3(jctx *c, jv s, const jargs *a, jv *o) { return m_strip(c, s, a, o, 3); }
static int m_lstrip(jctx *c, jv s, const jargs *a, jv *o) { return m_strip(c, s, a, o, 1); }
static int m_rstrip(jctx *c, jv s, const jargs *a, jv *o) { return m_strip(c, s, a, o, 2); }
static int m_upper(jctx *c, jv s, const jargs *a, jv *o) { (void)a; return jx_case(c, s.u.s, 1, o); }
static int m_lower(jctx *c, jv s, const jargs *a, jv *o) { (void)a; return jx_case(c, s.u.s, 0, o); }
static int m_title(jctx *c, jv s, const jargs *a, jv *o) { (void)a; return jx_case(c, s.u.s, 3, o); }
static int m_capitalize(jctx *c, jv s, const jargs *a, jv *o)
{
    (void)a;
    return jx_case(c, s.u.s, 2, o);
}

/* str.split(sep=None, maxsplit=-1); rsplit when right. */
static int m_split_impl(jctx *c, jv self, const jargs *a, jv *out, int right)
{
    const jstr *sep, *s = self.u.s;
    int64_t max;
    if (str_arg(c, a, 0, "sep", &sep, 1) || int_arg(c, a, 1, "maxsplit", -1, &max) ||
        jv_list_new(c, 0, out))
        return -1;
    if (sep && sep->len == 0)
        return jx_fail(c, "empty separator");
    jv piece;
    if (sep) {
        /* pieces found left to right; rsplit with a limit keeps the left rest */
        size_t pos = 0;
        int64_t total = 0;
        for (const char *f; (f = find(s, sep, pos)); pos = (size_t)(f - s->b) + sep->len)
            total++;
        int64_t skip = right && max >= 0 && total > max ? total - max : 0, k = 0;
        pos = 0;
        size_t start = 0;
        for (const char *f; (f = find(s, sep, pos)); pos = (size_t)(f - s->b) + sep->len) {
            k++;
            if (k <= skip || (!right && max >= 0 && k > max))
                continue;
            if (jv_str(c, s->b + start, (size_t)(f - s->b) - start, &piece) ||
                jv_list_push(c, *out, piece))
                return -1;
            start = (size_t)(f - s->b) + sep->len;
        }
        return jv_str(c, s->b + start, s->len - start, &piece) || jv_list_push(c, *out, piece);
    }
    /* whitespace runs; empty pieces dropped */
    size_t i = 0, n = s->len;
    int64_t k = 0;
    if (right && max >= 0)
        return jx_fail(c, "rsplit() on whitespace with maxsplit is not supported");
    for (;;) {
        size_t l;
        unsigned cp;
        while (i < n && (l = ju_decode((const unsigned char *)s->b + i, n - i, &cp)) &&
               ju_is_space(cp))
            i += l;
        if (i >= n)
            break;
        if (max >= 0 && k == max) {
            size_t e = n;
            jv rest;
            while (e > i) { /* the rest, right-stripped */
                size_t st = e - 1;
                while (st > i && ((unsigned char)s->b[st] & 0xC0) == 0x80)
                    st--;
                ju_decode((const unsigned char *)s->b + st, e - st, &cp);
                if (!ju_is_space(cp))
                    break;
                e = st;
            }
            return jv_str(c, s->b + i, e - i, &rest) || jv_list_push(c, *out, rest);
        }
        size_t st = i;
        while (i < n && (l = ju_decode((const unsigned char *)s->b + i, n - i, &cp)) &&
               !ju_is_space(cp))
            i += l;
        if (jv_str(c, s->b + st, i - st, &piece) || jv_list_push(c, *out, piece))
            return -1;
        k++;
    }
    return 0;
}
static int m_split(jctx *c, jv s, const jargs *a, jv *o) { return m_split_impl(c, s, a, o, 0); }
static int m_rsplit(jctx *c, jv s, const jargs *a, jv *o) { return m_split_impl(c, s, a, o, 1); }

static int m_splitlines(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)a;
    const jstr *s = self.u.s;
    if (jv_list_new(c, 0, out))
        return -1;
    size_t st = 0, i = 0;
    while (i < s->len) {
        unsigned cp;
        size_t l = ju_decode((const unsigned char *)s->b + i, s->len - i, &cp);
        int br = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                 cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!br) {
            i += l;
            continue;
        }
        jv piece;
        if (jv_str(c, s->b + st, i - st, &piece) || jv_list_push(c, *out, piece))
            return -1;
        i += l;
        if (cp == '\r' && i < s->len && s->b[i] == '\n')
            i++;
        st = i;
    }
    if (st < s->len) {
        jv piece;
        return jv_str(c, s->b + st, s->len - st, &piece) || jv_list_push(c, *out, piece);
    }
    return 0;
}

/* startswith / endswith: a str or a tuple of them. */
static int m_affix(jctx *c, jv self, const jargs *a, jv *out, int end)
{
    const jv *p = jx_arg(a, 0, "prefix");
    if (!p)
        p = jx_arg(a, 0, "suffix");
    if (!p)
        return jx_fail(c, "%s() takes at least 1 argument", end ? "endswith" : "startswith");
    int n = p->t == JV_LIST && p->tuple ? p->u.l->n : 1, hit = 0;
    for (int i = 0; i < n && !hit; i++) {
        jv x = p->t == JV_LIST ? p->u.l->v[i] : *p;
        if (x.t != JV_STR)
            return jx_fail(c, "%s first arg must be str or a tuple of str, not %s",
                           end ? "endswith" : "startswith", jv_type_name(x));
        size_t sl = self.u.s->len, xl = x.u.s->len;
        hit = xl <= sl && memcmp(self.u.s->b + (end ? sl - xl : 0), x.u.s->b, xl) == 0;
    }
    *out = jv_bool(hit);
    return 0;
}
static int m_startswith(jctx *c, jv s, const jargs *a, jv *o) { return m_affix(c, s, a, o, 0); }
static int m_endswith(jctx *c, jv s, const jargs *a, jv *o) { return m_affix(c, s, a, o, 1); }

int jx_replace(jctx *c, const jstr *s, const jstr *old, const jstr *new_, int64_t count, jv *out)
{
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0);
    size_t pos = 0;
    int64_t k = 0;
    if (old->len == 0) { /* Python inserts new between every character */
        for (size_t i = 0; !rc && i <= s->len; k++) {
            if (count < 0 || k < count)
                rc = jb_put(c, &b, new_->b, new_->len);
            if (i == s->len)
                break;
            size_t l = ju_offset(s->b + i, s->len - i, 1);
            rc = rc || jb_put(c, &b, s->b + i, l);
            i += l;
        }
    } else {
        for (const char *f; !rc && (count < 0 || k < count) && (f = find(s, old, pos)); k++) {
            rc = jb_put(c, &b, s->b + pos, (size_t)(f - s->b) - pos) ||
                 jb_put(c, &b, new_->b, new_->len);
            pos = (size_t)(f - s->b) + old->len;
        }
        rc = rc || jb_put(c, &b, s->b + pos, s->len - pos);
    }
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int m_replace(jctx *c, jv self, const jargs *a, jv *out)
{
    const jstr *old, *new_;
    int64_t count;
    return str_arg(c, a, 0, "old", &old, 0) || str_arg(c, a, 1, "new", &new_, 0) ||
           int_arg(c, a, 2, "count", -1, &count) ||
           jx_replace(c, self.u.s, old, new_, count, out);
}

/* find / rfind / count / index: code point positions. */
static int m_search(jctx *c, jv self, const jargs *a, jv *out, int kind)
{
    const jstr *sub, *s = self.u.s;
    if (str_arg(c, a, 0, "sub", &sub, 0))
        return -1;
    int64_t hit = -1, count = 0;
    for (size_t pos = 0;;) {
        const char *f = find(s, sub, pos);
        if (!f)
            break;
        int64_t at = (int64_t)ju_count(s->b, (size_t)(f - s->b));
        if (hit < 0 || kind == 1)
            hit = at;
        count++;
        if (kind == 0 || kind == 3)
            break;
        pos = (size_t)(f - s->b) + (sub->len ? sub->len : 1);
        if (pos > s->len)
            break;
    }
    if (kind == 3 && hit < 0)
        return jx_fail(c, "substring not found");
    *out = jv_int(kind == 2 ? count : hit);
    return 0;
}
static int m_find(jctx *c, jv s, const jargs *a, jv *o) { return m_search(c, s, a, o, 0); }
static int m_rfind(jctx *c, jv s, const jargs *a, jv *o) { return m_search(c, s, a, o, 1); }
static int m_scount(jctx *c, jv s, const jargs *a, jv *o) { return m_search(c, s, a, o, 2); }
static int m_sindex(jctx *c, jv s, const jargs *a, jv *o) { return m_search(c, s, a, o, 3); }

static int m_join(jctx *c, jv self, const jargs *a, jv *out)
{
    jlist *l;
    if (a->n < 1 || jx_iter(c, a->v[0], &l))
        return c->failed ? -1 : jx_fail(c, "join() takes exactly one argument");
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0);
    for (int i = 0; i < l->n && !rc; i++) {
        if (l->v[i].t != JV_STR) {
            rc = jx_fail(c, "sequence item %d: expected str instance, %s found", i,
                         jv_type_name(l->v[i]));
            break;
        }
        rc = (i && jb_put(c, &b, self.u.s->b, self.u.s->len)) ||
             jb_put(c, &b, l->v[i].u.s->b, l->v[i].u.s->len);
    }
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

/* isdigit, isalpha, isalnum, isspace, islower, isupper */
static int m_is(jctx *c, jv self, jv *out, int kind)
{
    (void)c;
    const jstr *s = self.u.s;
    int ok = s->len > 0, cased = 0;
    for (size_t i = 0; i < s->len && ok;) {
        unsigned cp;
        i += ju_decode((const unsigned char *)s->b + i, s->len - i, &cp);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        int alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        int digit = cat == UTF8PROC_CATEGORY_ND;
        int lower = cat == UTF8PROC_CATEGORY_LL, upper = cat == UTF8PROC_CATEGORY_LU;
        switch (kind) {
        case 0: ok = digit; break;
        case 1: ok = alpha; break;
        case 2: ok = alpha || digit || (cat >= UTF8PROC_CATEGORY_NL && cat <= UTF8PROC_CATEGORY_NO); break;
        case 3: ok = ju_is_space(cp); break;
        case 4: ok = !upper && !(cat == UTF8PROC_CATEGORY_LT); cased |= lower; break;
        case 5: ok = !lower && !(cat == UTF8PROC_CATEGORY_LT); cased |= upper; break;
        }
    }
    *out = jv_bool(ok && (kind < 4 || cased));
    return 0;
}
static int m_isdigit(jctx *c, jv s, const jargs *a, jv *o) { (void)a; return m_is(c, s, o, 0); }
static int m_isalpha(jctx *c, jv s, const jargs *a, jv *o) { (void)a; return m_is(c, s, o, 1); }
static int m_isalnum(jctx *c, jv s, const jargs *a, jv *o) { (void)a; return m_is(c, s, o, 2); }
static int m_isspace(jctx *c, jv s, const jargs *a, jv *o) { (void)a; return m_is(c, s, o, 3); }
static int m_islower(jctx *c, jv s, const jargs *a, jv *o) { (void)a; return m_is(c, s, o, 4); }
static int m_isupper(jctx *c, jv s, const jargs *a, jv *o) { (void)a; return m_is(c, s, o, 5); }

/* ------------------------------------------------- dict, list, loop */

static int m_items(jctx *c, jv self, const jargs *a, jv *out, int which)
{
    (void)a;
    jdict *d = self.u.d;
    if (jv_list_new(c, d->n, out))
        return -1;
    for (int i = 0; i < d->n; i++) {
        jv v = which == 0 ? d->k[i] : which == 1 ? d->v[i] : jv_none();
        if (which == 2) {
            if (jv_list_new(c, 2, &v))
                return -1;
            v.tuple = 1;
            v.u.l->v[0] = d->k[i];
            v.u.l->v[1] = d->v[i];
            v.u.l->n = 2;
        }
        out->u.l->v[out->u.l->n++] = v;
    }
    return 0;
}
static int m_keys(jctx *c, jv s, const jargs *a, jv *o) { return m_items(c, s, a, o, 0); }
static int m_values(jctx *c, jv s, const jargs *a, jv *o) { return m_items(c, s, a, o, 1); }
static int m_items2(jctx *c, jv s, const jargs *a, jv *o) { return m_items(c, s, a, o, 2); }

static int m_get(jctx *c, jv self, const jargs *a, jv *out)
{
    if (a->n < 1)
        return jx_fail(c, "get expected at least 1 argument, got 0");
    jv *v = jv_dict_find(c, self, a->v[0]);
    *out = v ? *v : a->n > 1 ? a->v[1] : jv_none();
    return 0;
}

static int m_copy(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)a;
    if (jv_dict_new(c, out))
        return -1;
    for (int i = 0; i < self.u.d->n; i++)
        if (jv_dict_set(c, *out, self.u.d->k[i], self.u.d->v[i]))
            return -1;
    return 0;
}

static int m_lindex(jctx *c, jv self, const jargs *a, jv *out)
{
    if (a->n < 1)
        return jx_fail(c, "index expected at least 1 argument");
    for (int i = 0; i < self.u.l->n; i++)
        if (jv_eq(self.u.l->v[i], a->v[0])) {
            *out = jv_int(i);
            return 0;
        }
    return jx_fail(c, "value is not in list");
}

static int m_lcount(jctx *c, jv self, const jargs *a, jv *out)
{
    if (a->n < 1)
        return jx_fail(c, "count() takes exactly one argument");
    int64_t k = 0;
    for (int i = 0; i < self.u.l->n; i++)
        k += jv_eq(self.u.l->v[i], a->v[0]);
    *out = jv_int(k);
    return 0;
}

static int m_cycle(jctx *c, jv self, const jargs *a, jv *out)
{
    if (a->n < 1)
        return jx_fail(c, "no items for cycling given");
    *out = a->v[self.u.lp->index0 % a->n];
    return 0;
}

typedef struct jmethod { const char *name; jbuiltin fn; } jmethod;

static const jmethod STR_M[] = {
    {"strip", m_strip3}, {"lstrip", m_lstrip}, {"rstrip", m_rstrip}, {"split", m_split},
    {"rsplit", m_rsplit}, {"splitlines", m_splitlines}, {"startswith", m_startswith},
    {"endswith", m_endswith}, {"upper", m_upper}, {"lower", m_lower}, {"title", m_title},
    {"capitalize", m_capitalize}, {"replace", m_replace}, {"find", m_find}, {"rfind", m_rfind},
    {"count", m_scount}, {"index", m_sindex}, {"join", m_join}, {"format", jx_str_format},
    {"isdigit", m_isdigit}, {"isalpha", m_isalpha}, {"isalnum", m_isalnum},
    {"isspace", m_isspace}, {"islower", m_islower}, {"isupper", m_isupper}, {NULL, NULL}};
static const jmethod DICT_M[] = {
    {"items", m_items2}, {"keys", m_keys}, {"values", m_values}, {"get", m_get},
    {"copy", m_copy}, {NULL, NULL}};
static const jmethod LIST_M[] = {{"index", m_lindex}, {"count", m_lcount}, {NULL, NULL}};
static const jmethod LOOP_M[] = {{"cycle", m_cycle}, {NULL, NULL}};
static const char *const DICT_UNSAFE[] = {"clear", "pop", "popitem", "setdefault", "update",
                                          "fromkeys", NULL};
static const char *const LIST_UNSAFE[] = {"append", "clear", "extend", "insert", "pop",
                                          "remove", "reverse", "sort", "copy", NULL};

static int listed(const char *const *l, const char *name)
{
    for (; *l; l++)
        if ((*l)[0] == name[0] && !strcmp(*l, name))
            return 1;
    return 0;
}

int jx_method(jctx *c, jv self, const char *name, jv *out)
{
    const jmethod *m = self.t == JV_STR ? STR_M : self.t == JV_DICT ? DICT_M
                     : self.t == JV_LIST ? LIST_M : self.t == JV_LOOP ? LOOP_M : NULL;
    *out = jv_undef();
    if (name[0] == '_' || (self.t == JV_DICT && listed(DICT_UNSAFE, name)) ||
        (self.t == JV_LIST && listed(LIST_UNSAFE, name)))
        return jv_undef_hint(c, out, "access to attribute '%s' of '%s' object is unsafe.", name,
                             jv_type_name(self));
    for (; m && m->name; m++)
        if (m->name[0] == name[0] && !strcmp(m->name, name)) {
            jfunc *f = jx_alloc(&c->arena, sizeof *f);
            if (!f)
                return jx_fail(c, "the template used more than %zu bytes of memory",
                               c->o->max_memory);
            f->kind = JF_BUILTIN;
            f->name = m->name;
            f->fn = m->fn;
            f->self = self;
            *out = (jv){.t = JV_FUNC, .u.fn = f};
            return 0;
        }
    return 0;
}
