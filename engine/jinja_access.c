/* jinja access: what "." and "[]" mean (Jinja's getattr tries the
 * attribute, then the item; getitem the other way round; the sandbox's
 * methods come from jinja_str.c), slices, iteration, and Undefined values
 * that say why only when an error needs it. */
#include "jinja_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *hint_repr(jctx *c, jv k, char *buf, size_t cap);

static int undef_error(jctx *c, jv u)
{
    char r[200];
    if (!u.tuple)
        return jx_fail(c, "%s", u.u.s ? u.u.s->b : "undefined value");
    const jundef *d = u.u.ud;
    if (d->kind == 1)
        return jx_fail(c, "'%s' is undefined", d->name);
    if (d->kind == 2) {
        jv k;
        if (jv_cstr(c, d->name, &k))
            return -1;
        return jx_fail(c, "'%s' has no attribute %s", d->obj, hint_repr(c, k, r, sizeof r));
    }
    return jx_fail(c, "'%s' has no element %s", d->obj, hint_repr(c, *d->key, r, sizeof r));
}

int jx_undef_error(jctx *c, jv u)
{
    return undef_error(c, u);
}

/* An undefined value that says why only when asked. */
int jx_lazy_undef(jctx *c, int kind, const char *obj, const char *name, const jv *key, jv *out)
{
    jundef *d = jx_alloc(&c->arena, sizeof *d + (key ? sizeof *key : 0));
    if (!d)
        return jx_fail(c, "the template used more than %zu bytes of memory", c->o->max_memory);
    d->kind = kind;
    d->obj = obj;
    d->name = name;
    if (key) {
        d->key = (jv *)(d + 1);
        *d->key = *key;
    }
    *out = (jv){.t = JV_UNDEF, .tuple = 1, .u.ud = d};
    return 0;
}

/* Python's repr of a name or key, for hints. */
static const char *hint_repr(jctx *c, jv k, char *buf, size_t cap)
{
    jbuf b = {0};
    int failed = c->failed;
    if (jb_repr(c, &b, k) == 0)
        snprintf(buf, cap, "%s", b.p ? b.p : "");
    else
        snprintf(buf, cap, "?");
    c->failed = failed;
    free(b.p);
    return buf;
}

static const char *obj_type(jv v)
{
    switch (v.t) {
    case JV_NONE: return "None";
    case JV_DICT: return "dict object";
    case JV_LIST: return v.tuple ? "tuple object" : "list object";
    case JV_STR: return "str object";
    case JV_INT: return "int object";
    case JV_FLOAT: return "float object";
    case JV_BOOL: return "bool object";
    case JV_NS: return v.tuple ? "jinja2.utils.Cycler object" : "jinja2.utils.Namespace object";
    default: return "object";
    }
}

static int loop_attr(jctx *c, jloop *lp, const char *name, jv *out)
{
    int n = lp->items->n, i = lp->index0;
    if (!strcmp(name, "index")) *out = jv_int(i + 1);
    else if (!strcmp(name, "index0")) *out = jv_int(i);
    else if (!strcmp(name, "revindex")) *out = jv_int(n - i);
    else if (!strcmp(name, "revindex0")) *out = jv_int(n - i - 1);
    else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = jv_bool(i == n - 1);
    else if (!strcmp(name, "length")) *out = jv_int(n);
    else if (!strcmp(name, "depth")) *out = jv_int(lp->depth0 + 1);
    else if (!strcmp(name, "depth0")) *out = jv_int(lp->depth0);
    else if (!strcmp(name, "previtem"))
        return i > 0 ? (*out = lp->items->v[i - 1], 0)
                     : jv_undef_hint(c, out, "there is no previous item");
    else if (!strcmp(name, "nextitem"))
        return i + 1 < n ? (*out = lp->items->v[i + 1], 0)
                         : jv_undef_hint(c, out, "there is no next item");
    else {
        jv self = {.t = JV_LOOP, .u.lp = lp};
        return jx_method(c, self, name, out);
    }
    return 0;
}

int jx_getattr(jctx *c, jv obj, const char *name, jv *out)
{
    if (obj.t == JV_UNDEF)
        return undef_error(c, obj);
    if (obj.t == JV_LOOP)
        return loop_attr(c, obj.u.lp, name, out);
    if (obj.t == JV_NS) {
        jv *v = jv_dict_get(obj, name, strlen(name));
        if (v) {
            *out = *v;
            return 0;
        }
    } else {
        if (jx_method(c, obj, name, out))
            return -1;
        if (out->t != JV_UNDEF || out->u.s)
            return 0; /* a method, or an unsafe one (an undefined with a hint) */
        if (obj.t == JV_DICT) {
            jv *v = jv_dict_get(obj, name, strlen(name));
            if (v) {
                *out = *v;
                return 0;
            }
        }
    }
    return jx_lazy_undef(c, 2, obj_type(obj), name, NULL, out);
}

static int norm_index(int64_t i, int64_t n, int64_t *out)
{
    if (i < 0)
        i += n;
    *out = i;
    return i >= 0 && i < n;
}

int jx_getitem(jctx *c, jv obj, jv key, jv *out)
{
    if (obj.t == JV_UNDEF)
        return undef_error(c, obj);
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        jv *v = jv_dict_find(c, obj, key);
        if (v) {
            *out = *v;
            return 0;
        }
    } else if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
        int64_t i, n = obj.t == JV_LIST ? obj.u.l->n : (int64_t)ju_count(obj.u.s->b, obj.u.s->len);
        if (norm_index(key.t == JV_INT ? key.u.i : key.u.b, n, &i)) {
            if (obj.t == JV_LIST) {
                *out = obj.u.l->v[i];
                return 0;
            }
            size_t b = ju_offset(obj.u.s->b, obj.u.s->len, (size_t)i);
            size_t e = ju_offset(obj.u.s->b, obj.u.s->len, (size_t)i + 1);
            return jv_str(c, obj.u.s->b + b, e - b, out);
        }
    } else if (obj.t == JV_LOOP && key.t == JV_STR) {
        return loop_attr(c, obj.u.lp, key.u.s->b, out);
    }
    if (key.t == JV_STR && obj.t != JV_DICT) {
        if (jx_method(c, obj, key.u.s->b, out))
            return -1;
        if (out->t != JV_UNDEF)
            return 0;
    }
    return jx_lazy_undef(c, 3, obj_type(obj), NULL, &key, out);
}

/* a[start:stop:step] on a list or str (Python's slice rules). */
int jx_slice(jctx *c, jv obj, jv *parts, jv *out)
{
    if (obj.t == JV_UNDEF)
        return undef_error(c, obj);
    if (obj.t != JV_LIST && obj.t != JV_STR)
        return jx_fail(c, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t v[3];
    for (int k = 0; k < 3; k++) {
        if (parts[k].t == JV_NONE)
            continue;
        if (parts[k].t != JV_INT && parts[k].t != JV_BOOL)
            return jx_fail(c, "slice indices must be integers or None");
        v[k] = parts[k].t == JV_INT ? parts[k].u.i : parts[k].u.b;
    }
    int64_t step = parts[2].t == JV_NONE ? 1 : v[2];
    if (step == 0)
        return jx_fail(c, "slice step cannot be zero");
    int64_t n = obj.t == JV_LIST ? obj.u.l->n : (int64_t)ju_count(obj.u.s->b, obj.u.s->len);
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n, se[2];
    for (int k = 0; k < 2; k++) {
        if (parts[k].t == JV_NONE) {
            se[k] = step > 0 ? (k == 0 ? 0 : n) : (k == 0 ? n - 1 : -1);
            continue;
        }
        int64_t x = v[k];
        if (x < 0) {
            x += n;
            if (x < lo)
                x = lo;
        } else if (x > hi) {
            x = hi;
        }
        se[k] = x;
    }
    if (obj.t == JV_LIST) {
        if (jv_list_new(c, 0, out))
            return -1;
        out->tuple = obj.tuple;
        for (int64_t i = se[0]; step > 0 ? i < se[1] : i > se[1]; i += step)
            if (jv_list_push(c, *out, obj.u.l->v[i]))
                return -1;
        return 0;
    }
    /* strings: collect code point offsets once */
    const char *s = obj.u.s->b;
    size_t len = obj.u.s->len;
    if (n == (int64_t)len && step == 1)
        return jv_str(c, s + se[0], se[1] > se[0] ? (size_t)(se[1] - se[0]) : 0, out);
    size_t *off = jx_alloc(&c->arena, (size_t)(n + 1) * sizeof *off);
    if (!off)
        return jx_fail(c, "the template used more than %zu bytes of memory", c->o->max_memory);
    for (int64_t i = 0, b = 0; i <= n; i++) {
        off[i] = (size_t)b;
        if (i < n)
            b = (int64_t)ju_offset(s + b, len - (size_t)b, 1) + b;
    }
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0);
    for (int64_t i = se[0]; !rc && (step > 0 ? i < se[1] : i > se[1]); i += step)
        rc = jb_put(c, &b, s + off[i], off[i + 1] - off[i]);
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------ iteration */

/* The items a for loop (or a filter) walks: a list's items, a dict's
 * keys, a string's characters; undefined is empty. */
int jx_iter(jctx *c, jv v, jlist **out)
{
    jv l;
    switch (v.t) {
    case JV_UNDEF: return jv_list_new(c, 0, &l) ? -1 : (*out = l.u.l, 0);
    case JV_LIST: *out = v.u.l; return 0;
    case JV_DICT:
        if (jv_list_new(c, v.u.d->n, &l))
            return -1;
        for (int i = 0; i < v.u.d->n; i++)
            l.u.l->v[l.u.l->n++] = v.u.d->k[i];
        *out = l.u.l;
        return 0;
    case JV_STR: {
        size_t n = ju_count(v.u.s->b, v.u.s->len);
        if (jv_list_new(c, (int)n, &l))
            return -1;
        for (size_t i = 0, b = 0; i < n; i++) {
            size_t e = b + ju_offset(v.u.s->b + b, v.u.s->len - b, 1);
            if (jv_str(c, v.u.s->b + b, e - b, &l.u.l->v[l.u.l->n++]))
                return -1;
            b = e;
        }
        *out = l.u.l;
        return 0;
    }
    default:
        return jx_fail(c, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* Binds names to v (one name: v itself; several: unpacked). */
