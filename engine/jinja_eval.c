/* jinja evaluator: walks the tree with Jinja2's semantics under the
 * sandbox: scopes (a for body is a fresh scope each iteration, if is not
 * a scope, macros close over where they were defined), Python's
 * operators, getattr before getitem for ".", getitem before getattr for
 * "[]", the default Undefined (printing or iterating it is empty, anything
 * else that needs its value raises). Every loop iteration, call and output
 * counts against max_steps. */
#include "jinja_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EX_OK = 0, EX_ERR = -1, EX_BREAK = 1, EX_CONTINUE = 2 };

int jx_fail(jctx *c, const char *fmt, ...)
{
    if (c->failed)
        return -1;
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(c->msg, sizeof c->msg, "line %d: %s", c->line, m);
    c->failed = 1;
    if (!c->code)
        c->code = INF_ERR_INVALID;
    return -1;
}

int jx_step(jctx *c)
{
    if (++c->steps > c->o->max_steps)
        return jx_fail(c, "the template ran more than %ld steps", c->o->max_steps);
    return 0;
}

/* --------------------------------------------------------------- scopes */

static jscope *scope_new(jctx *c, jscope *parent)
{
    jscope *s = jx_alloc(&c->arena, sizeof *s);
    if (!s) {
        jx_fail(c, "the template used more than %zu bytes of memory", c->o->max_memory);
        return NULL;
    }
    s->parent = parent;
    return s;
}

static int scope_set(jctx *c, jscope *s, const char *name, jv v)
{
    for (int i = 0; i < s->n; i++)
        if (s->names[i][0] == name[0] && strcmp(s->names[i], name) == 0) {
            s->vals[i] = v;
            return 0;
        }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        const char **n = jx_alloc(&c->arena, (size_t)cap * sizeof *n);
        jv *v2 = jx_alloc(&c->arena, (size_t)cap * sizeof *v2);
        if (!n || !v2)
            return jx_fail(c, "the template used more than %zu bytes of memory", c->o->max_memory);
        if (s->n) {
            memcpy(n, s->names, (size_t)s->n * sizeof *n);
            memcpy(v2, s->vals, (size_t)s->n * sizeof *v2);
        }
        s->names = n;
        s->vals = v2;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
    return 0;
}

static jv *scope_get(jscope *s, const char *name)
{
    for (; s; s = s->parent)
        for (int i = s->n - 1; i >= 0; i--)
            if (s->names[i][0] == name[0] && strcmp(s->names[i], name) == 0)
                return &s->vals[i];
    return NULL;
}

/* ------------------------------------------------------ attribute, item */

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
static int lazy_undef(jctx *c, int kind, const char *obj, const char *name, const jv *key, jv *out)
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
    case JV_NS: return "jinja2.utils.Namespace object";
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
    return lazy_undef(c, 2, obj_type(obj), name, NULL, out);
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
    return lazy_undef(c, 3, obj_type(obj), NULL, &key, out);
}

/* a[start:stop:step] on a list or str (Python's slice rules). */
static int do_slice(jctx *c, jv obj, jv *parts, jv *out)
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

/* ---------------------------------------------------------- operators */

static int both_int(jv a, jv b)
{
    return (a.t == JV_INT || a.t == JV_BOOL) && (b.t == JV_INT || b.t == JV_BOOL);
}

static int64_t as_int(jv v)
{
    return v.t == JV_INT ? v.u.i : v.u.b;
}

static const char *OP_SYM[] = {"+", "-", "*", "/", "//", "%", "**"};

static int op_type_error(jctx *c, int op, jv a, jv b)
{
    if (op == JO_ADD && a.t == JV_STR)
        return jx_fail(c, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    if (op == JO_ADD && a.t == JV_LIST)
        return jx_fail(c, "can only concatenate %s (not \"%s\") to %s", jv_type_name(a),
                       jv_type_name(b), jv_type_name(a));
    return jx_fail(c, "unsupported operand type(s) for %s: '%s' and '%s'", OP_SYM[op],
                   jv_type_name(a), jv_type_name(b));
}

static int repeat(jctx *c, jv seq, int64_t times, jv *out)
{
    if (seq.t == JV_STR) {
        jbuf b = {0};
        int rc = jb_put(c, &b, "", 0);
        for (int64_t i = 0; i < times && !rc; i++)
            rc = jb_put(c, &b, seq.u.s->b, seq.u.s->len);
        rc = rc || jv_str(c, b.p, b.len, out);
        free(b.p);
        return rc ? -1 : 0;
    }
    if (jv_list_new(c, 0, out))
        return -1;
    out->tuple = seq.tuple;
    for (int64_t i = 0; i < times; i++)
        for (int k = 0; k < seq.u.l->n; k++)
            if (jx_step(c) || jv_list_push(c, *out, seq.u.l->v[k]))
                return -1;
    return 0;
}

static int str_mod(jctx *c, jv fmt, jv args, jv *out);

static int binop(jctx *c, int op, jv a, jv b, jv *out)
{
    if (a.t == JV_UNDEF)
        return undef_error(c, a);
    if (b.t == JV_UNDEF)
        return undef_error(c, b);
    if (both_int(a, b)) {
        int64_t x = as_int(a), y = as_int(b), r;
        switch (op) {
        case JO_ADD: if (__builtin_add_overflow(x, y, &r)) goto overflow; *out = jv_int(r); return 0;
        case JO_SUB: if (__builtin_sub_overflow(x, y, &r)) goto overflow; *out = jv_int(r); return 0;
        case JO_MUL: if (__builtin_mul_overflow(x, y, &r)) goto overflow; *out = jv_int(r); return 0;
        case JO_DIV:
            if (y == 0)
                return jx_fail(c, "division by zero");
            *out = jv_float((double)x / (double)y);
            return 0;
        case JO_FLOORDIV: case JO_MOD:
            if (y == 0)
                return jx_fail(c, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1)
                goto overflow;
            r = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0)))
                r--;
            *out = jv_int(op == JO_FLOORDIV ? r : x - r * y);
            return 0;
        case JO_POW:
            if (y < 0) {
                *out = jv_float(pow((double)x, (double)y));
                return 0;
            }
            if (x == 0 || x == 1 || x == -1) { /* no overflow however large y is */
                *out = jv_int(x == 0 ? y == 0 : x == 1 ? 1 : (y % 2 ? -1 : 1));
                return 0;
            }
            r = 1;
            for (int64_t i = 0; i < y; i++)
                if (__builtin_mul_overflow(r, x, &r))
                    goto overflow;
            *out = jv_int(r);
            return 0;
        }
    }
    if (jv_is_num(a) && jv_is_num(b)) {
        double x = jv_num(a), y = jv_num(b);
        switch (op) {
        case JO_ADD: *out = jv_float(x + y); return 0;
        case JO_SUB: *out = jv_float(x - y); return 0;
        case JO_MUL: *out = jv_float(x * y); return 0;
        case JO_DIV:
            if (y == 0)
                return jx_fail(c, "float division by zero");
            *out = jv_float(x / y);
            return 0;
        case JO_FLOORDIV: case JO_MOD: {
            if (y == 0)
                return jx_fail(c, "float floor division by zero");
            double m = fmod(x, y);
            if (m != 0 && ((y < 0) != (m < 0)))
                m += y;
            *out = jv_float(op == JO_MOD ? m : floor(x / y));
            return 0;
        }
        case JO_POW: *out = jv_float(pow(x, y)); return 0;
        }
    }
    if (op == JO_ADD && a.t == JV_STR && b.t == JV_STR)
        return jv_str2(c, a.u.s, b.u.s, out);
    if (op == JO_ADD && a.t == JV_LIST && b.t == JV_LIST && a.tuple == b.tuple) {
        if (jv_list_new(c, a.u.l->n + b.u.l->n, out))
            return -1;
        out->tuple = a.tuple;
        for (int i = 0; i < a.u.l->n; i++)
            out->u.l->v[out->u.l->n++] = a.u.l->v[i];
        for (int i = 0; i < b.u.l->n; i++)
            out->u.l->v[out->u.l->n++] = b.u.l->v[i];
        return 0;
    }
    if (op == JO_MUL && (a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL))
        return repeat(c, a, as_int(b), out);
    if (op == JO_MUL && (b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL))
        return repeat(c, b, as_int(a), out);
    if (op == JO_MOD && a.t == JV_STR)
        return str_mod(c, a, b, out);
    return op_type_error(c, op, a, b);
overflow:
    return jx_fail(c, "integer overflow");
}

/* "fmt" % args for %s, %d, %i, %r, %f and %%: enough for templates. */
static int str_mod(jctx *c, jv fmt, jv args, jv *out)
{
    jbuf b = {0};
    int ai = 0, rc = jb_put(c, &b, "", 0);
    const char *s = fmt.u.s->b;
    size_t n = fmt.u.s->len;
    for (size_t i = 0; i < n && !rc; i++) {
        if (s[i] != '%') {
            rc = jb_put(c, &b, s + i, 1);
            continue;
        }
        char k = i + 1 < n ? s[++i] : 0;
        if (k == '%') {
            rc = jb_put(c, &b, "%", 1);
            continue;
        }
        jv v;
        if (args.t == JV_LIST && args.tuple) {
            if (ai >= args.u.l->n) {
                rc = jx_fail(c, "not enough arguments for format string");
                break;
            }
            v = args.u.l->v[ai++];
        } else {
            if (ai++ > 0) {
                rc = jx_fail(c, "not enough arguments for format string");
                break;
            }
            v = args;
        }
        if (k == 's') {
            rc = jb_str(c, &b, v);
        } else if (k == 'r') {
            rc = jb_repr(c, &b, v);
        } else if ((k == 'd' || k == 'i') && jv_is_num(v)) {
            jv iv = jv_int(v.t == JV_FLOAT ? (int64_t)v.u.f : as_int(v));
            rc = jb_str(c, &b, iv);
        } else if (k == 'f' && jv_is_num(v)) {
            char t[64];
            snprintf(t, sizeof t, "%f", jv_num(v));
            rc = jb_put(c, &b, t, strlen(t));
        } else {
            rc = jx_fail(c, "unsupported format character or argument in %% formatting");
        }
    }
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

static int contains(jctx *c, jv item, jv seq, int *out)
{
    if (seq.t == JV_UNDEF) {
        *out = 0;
        return 0;
    }
    if (seq.t == JV_STR) {
        if (item.t != JV_STR)
            return jx_fail(c, "'in <string>' requires string as left operand, not %s",
                           jv_type_name(item));
        *out = item.u.s->len == 0 ||
               memmem(seq.u.s->b, seq.u.s->len, item.u.s->b, item.u.s->len) != NULL;
        return 0;
    }
    if (seq.t == JV_LIST) {
        *out = 0;
        for (int i = 0; i < seq.u.l->n && !*out; i++)
            *out = jv_eq(seq.u.l->v[i], item);
        return 0;
    }
    if (seq.t == JV_DICT || seq.t == JV_NS) {
        *out = jv_dict_find(c, seq, item) != NULL;
        return 0;
    }
    return jx_fail(c, "argument of type '%s' is not iterable", jv_type_name(seq));
}

static int compare(jctx *c, int op, jv a, jv b, int *out)
{
    int r;
    switch (op) {
    case JO_EQ: *out = jv_eq(a, b); return 0;
    case JO_NE: *out = !jv_eq(a, b); return 0;
    case JO_IN: return contains(c, a, b, out);
    case JO_NOTIN:
        if (contains(c, a, b, out))
            return -1;
        *out = !*out;
        return 0;
    }
    if (a.t == JV_UNDEF)
        return undef_error(c, a);
    if (b.t == JV_UNDEF)
        return undef_error(c, b);
    if (jv_cmp(c, a, b, &r)) {
        static const char *sym[] = {[JO_LT] = "<", [JO_LE] = "<=", [JO_GT] = ">", [JO_GE] = ">="};
        c->failed = 0;
        return jx_fail(c, "'%s' not supported between instances of '%s' and '%s'", sym[op],
                       jv_type_name(a), jv_type_name(b));
    }
    *out = op == JO_LT ? r < 0 : op == JO_LE ? r <= 0 : op == JO_GT ? r > 0 : r >= 0;
    return 0;
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
static int bind(jctx *c, jscope *s, const char *const *names, int nn, jv v)
{
    if (nn == 1)
        return scope_set(c, s, names[0], v);
    jlist *l;
    if (v.t == JV_UNDEF || jx_iter(c, v, &l))
        return v.t == JV_UNDEF ? undef_error(c, v) : -1;
    if (l->n != nn)
        return jx_fail(c, l->n > nn ? "too many values to unpack (expected %d)"
                                    : "not enough values to unpack (expected %d)", nn);
    for (int i = 0; i < nn; i++)
        if (scope_set(c, s, names[i], l->v[i]))
            return -1;
    return 0;
}

/* ------------------------------------------------------------ evaluation */

static int ex_body(jctx *c, jnode **list, int n, jscope *s);
static int ev(jctx *c, const jnode *n, jscope *s, jv *out);

static int ev_args(jctx *c, const jnode *n, jscope *s, int extra_kw, jargs *a)
{
    memset(a, 0, sizeof *a);
    a->n = n->n;
    a->nk = n->nn;
    if ((a->n && !(a->v = jx_alloc(&c->arena, (size_t)a->n * sizeof *a->v))) ||
        !(a->kname = jx_alloc(&c->arena, (size_t)(a->nk + extra_kw) * sizeof *a->kname + 1)) ||
        !(a->kv = jx_alloc(&c->arena, (size_t)(a->nk + extra_kw) * sizeof *a->kv + 1)))
        return jx_fail(c, "the template used more than %zu bytes of memory", c->o->max_memory);
    for (int i = 0; i < a->n; i++)
        if (ev(c, n->list[i], s, &a->v[i]))
            return -1;
    for (int i = 0; i < a->nk; i++) {
        a->kname[i] = n->names[i];
        if (ev(c, n->list2[i], s, &a->kv[i]))
            return -1;
    }
    return 0;
}

/* Runs body with output captured into a string value. */
static int capture(jctx *c, jnode **list, int n, jscope *s, jv *out)
{
    jbuf b = {0}, *saved = c->out;
    c->out = &b;
    int rc = ex_body(c, list, n, s);
    c->out = saved;
    if (rc == EX_OK)
        rc = jv_str(c, b.p ? b.p : "", b.len, out);
    free(b.p);
    return rc == EX_ERR ? -1 : 0;
}

/* A filter chain (innermost input NULL) applied to v. */
static int apply_chain(jctx *c, const jnode *f, jscope *s, jv v, jv *out)
{
    if (!f) {
        *out = v;
        return 0;
    }
    jv in;
    if (apply_chain(c, f->a, s, v, &in))
        return -1;
    jargs a;
    if (ev_args(c, f, s, 0, &a))
        return -1;
    c->line = f->line;
    return jx_filter_fn(c, f->filter, in, &a, out);
}

static int call_macro(jctx *c, jfunc *fn, const jargs *a, jv *out)
{
    const jnode *m = fn->node;
    if (a->n > m->nn)
        return jx_fail(c, "macro '%s' takes not more than %d argument(s)",
                       fn->name ? fn->name : "caller", m->nn);
    if (++c->depth > c->o->max_depth)
        return jx_fail(c, "recursion deeper than %d", c->o->max_depth);
    jscope *s = scope_new(c, fn->scope);
    if (!s)
        return -1;
    int first_def = m->nn - m->n2;
    for (int i = 0; i < m->nn; i++) {
        jv v = jv_undef();
        int found = i < a->n;
        if (found)
            v = a->v[i];
        for (int k = 0; k < a->nk; k++)
            if (!strcmp(a->kname[k], m->names[i])) {
                if (found)
                    return jx_fail(c, "macro '%s' got multiple values for argument '%s'",
                                   fn->name, m->names[i]);
                v = a->kv[k];
                found = 1;
            }
        if (!found && i >= first_def && ev(c, m->list2[i - first_def], s, &v))
            return -1;
        if (!found && i < first_def && jv_undef_hint(c, &v, "parameter '%s' was not provided",
                                                    m->names[i]))
            return -1;
        if (scope_set(c, s, m->names[i], v))
            return -1;
    }
    for (int k = 0; k < a->nk; k++) {
        int known = !strcmp(a->kname[k], "caller");
        for (int i = 0; i < m->nn && !known; i++)
            known = !strcmp(a->kname[k], m->names[i]);
        if (!known)
            return jx_fail(c, "macro '%s' takes no keyword argument '%s'", fn->name, a->kname[k]);
        if (!strcmp(a->kname[k], "caller") && scope_set(c, s, "caller", a->kv[k]))
            return -1;
    }
    int rc = capture(c, m->list, m->n, s, out);
    c->depth--;
    return rc;
}

static int run_for(jctx *c, const jnode *n, jscope *s, jlist *items, int depth0);

int jx_call(jctx *c, jv fn, const jargs *a, jv *out)
{
    if (jx_step(c))
        return -1;
    if (fn.t == JV_UNDEF)
        return undef_error(c, fn);
    if (fn.t == JV_LOOP) { /* loop(children) in a recursive for */
        jloop *lp = fn.u.lp;
        jlist *items;
        if (!lp->node->recursive)
            return jx_fail(c, "the loop is not recursive; use 'for ... recursive'");
        if (a->n != 1 || jx_iter(c, a->v[0], &items))
            return c->failed ? -1 : jx_fail(c, "loop() takes one argument");
        if (++c->depth > c->o->max_depth)
            return jx_fail(c, "recursion deeper than %d", c->o->max_depth);
        jbuf b = {0}, *saved = c->out;
        c->out = &b;
        int rc = run_for(c, lp->node, lp->scope, items, lp->depth0 + 1);
        c->out = saved;
        c->depth--;
        rc = rc == EX_ERR || jv_str(c, b.p ? b.p : "", b.len, out);
        free(b.p);
        return rc ? -1 : 0;
    }
    if (fn.t != JV_FUNC)
        return jx_fail(c, "'%s' object is not callable", jv_type_name(fn));
    if (fn.u.fn->kind == JF_BUILTIN)
        return fn.u.fn->fn(c, fn.u.fn->self, a, out);
    return call_macro(c, fn.u.fn, a, out);
}

static int ev_name(jctx *c, const jnode *n, jscope *s, jv *out)
{
    jv *v = scope_get(s, n->name);
    if (v) {
        *out = *v;
        return 0;
    }
    return lazy_undef(c, 1, NULL, n->name, NULL, out);
}

static int ev_seq(jctx *c, const jnode *n, jscope *s, jv *out)
{
    if (n->kind == JN_DICT) {
        if (jv_dict_new(c, out))
            return -1;
        for (int i = 0; i < n->n; i++) {
            jv k, v;
            if (ev(c, n->list[i], s, &k) || ev(c, n->list2[i], s, &v))
                return -1;
            if (k.t == JV_LIST && !k.tuple)
                return jx_fail(c, "unhashable type: 'list'");
            if (k.t == JV_DICT)
                return jx_fail(c, "unhashable type: 'dict'");
            if (jv_dict_set(c, *out, k, v))
                return -1;
        }
        return 0;
    }
    if (jv_list_new(c, n->n, out))
        return -1;
    out->tuple = n->kind == JN_TUPLE;
    for (int i = 0; i < n->n; i++)
        if (ev(c, n->list[i], s, &out->u.l->v[out->u.l->n++]))
            return -1;
    return 0;
}

static int ev_compare(jctx *c, const jnode *n, jscope *s, jv *out)
{
    jv left;
    if (ev(c, n->a, s, &left))
        return -1;
    int r = 1;
    for (int i = 0; i < n->n && r; i++) {
        jv right;
        if (ev(c, n->list[i], s, &right) || compare(c, n->ops[i], left, right, &r))
            return -1;
        left = right;
    }
    *out = jv_bool(r);
    return 0;
}

static int ev_call(jctx *c, const jnode *n, jscope *s, jv *out)
{
    jv fn;
    jargs a;
    if (ev(c, n->a, s, &fn) || ev_args(c, n, s, 0, &a))
        return -1;
    c->line = n->line;
    return jx_call(c, fn, &a, out);
}

static int ev(jctx *c, const jnode *n, jscope *s, jv *out)
{
    if (++c->depth > c->o->max_depth + 200)
        return jx_fail(c, "expression nested too deeply");
    c->line = n->line;
    int rc = 0;
    jv a, b;
    switch (n->kind) {
    case JN_LIT: *out = n->lit; break;
    case JN_NAME: rc = ev_name(c, n, s, out); break;
    case JN_LIST: case JN_TUPLE: case JN_DICT: rc = ev_seq(c, n, s, out); break;
    case JN_ATTR: rc = ev(c, n->a, s, &a) || jx_getattr(c, a, n->name, out); break;
    case JN_ITEM: rc = ev(c, n->a, s, &a) || ev(c, n->b, s, &b) || jx_getitem(c, a, b, out); break;
    case JN_SLICE: {
        jv parts[3] = {jv_none(), jv_none(), jv_none()};
        rc = ev(c, n->a, s, &a);
        for (int k = 0; k < 3 && !rc; k++)
            if (n->list[k])
                rc = ev(c, n->list[k], s, &parts[k]);
        rc = rc || do_slice(c, a, parts, out);
        break;
    }
    case JN_CALL: rc = ev_call(c, n, s, out); break;
    case JN_FILTER: {
        jargs args;
        rc = ev(c, n->a, s, &a) || ev_args(c, n, s, 0, &args);
        if (!rc) {
            c->line = n->line;
            rc = jx_filter_fn(c, n->filter, a, &args, out);
        }
        break;
    }
    case JN_TEST: {
        jargs args;
        int t;
        rc = ev(c, n->a, s, &a) || ev_args(c, n, s, 0, &args);
        if (!rc) {
            c->line = n->line;
            rc = jx_test(c, n->name, a, &args, &t);
        }
        *out = jv_bool(!rc && t);
        break;
    }
    case JN_BIN:
        rc = ev(c, n->a, s, &a) || ev(c, n->b, s, &b);
        if (!rc) {
            c->line = n->line;
            rc = binop(c, n->op, a, b, out);
        }
        break;
    case JN_NEG: case JN_POS:
        rc = ev(c, n->a, s, &a);
        if (rc)
            break;
        if (a.t == JV_UNDEF)
            rc = undef_error(c, a);
        else if (a.t == JV_INT || a.t == JV_BOOL)
            *out = jv_int(n->kind == JN_NEG ? -as_int(a) : as_int(a));
        else if (a.t == JV_FLOAT)
            *out = jv_float(n->kind == JN_NEG ? -a.u.f : a.u.f);
        else
            rc = jx_fail(c, "bad operand type for unary %s: '%s'", n->kind == JN_NEG ? "-" : "+",
                         jv_type_name(a));
        break;
    case JN_NOT: rc = ev(c, n->a, s, &a); *out = jv_bool(!jv_truthy(a)); break;
    case JN_AND: case JN_OR:
        rc = ev(c, n->a, s, &a);
        if (!rc && jv_truthy(a) == (n->kind == JN_AND))
            rc = ev(c, n->b, s, &a);
        *out = a;
        break;
    case JN_COND:
        rc = ev(c, n->a, s, &a);
        if (!rc && jv_truthy(a))
            rc = ev(c, n->b, s, out);
        else if (!rc && n->c)
            rc = ev(c, n->c, s, out);
        else if (!rc)
            rc = jv_undef_hint(c, out, "the inline if-expression on line %d evaluated to false "
                               "and no else section was defined.", n->line);
        break;
    case JN_CONCAT: {
        jv acc;
        rc = ev(c, n->list[0], s, &a) || jv_to_str(c, a, &acc);
        for (int i = 1; i < n->n && !rc; i++)
            rc = ev(c, n->list[i], s, &a) || jv_to_str(c, a, &b) ||
                 jv_str2(c, acc.u.s, b.u.s, &acc);
        *out = acc;
        break;
    }
    case JN_COMPARE: rc = ev_compare(c, n, s, out); break;
    default: rc = jx_fail(c, "not an expression");
    }
    c->depth--;
    return rc ? -1 : 0;
}

int jx_eval_expr(jctx *c, const jnode *n, jv *out)
{
    return ev(c, n, c->globals, out);
}

/* ------------------------------------------------------------ statements */

static int run_for(jctx *c, const jnode *n, jscope *s, jlist *items, int depth0)
{
    /* the inline filter (for x in xs if cond) applies before loop.length */
    if (n->b) {
        jv kept;
        if (jv_list_new(c, 0, &kept))
            return EX_ERR;
        for (int i = 0; i < items->n; i++) {
            jscope *fs = scope_new(c, s);
            jv t;
            if (!fs || jx_step(c) || bind(c, fs, n->names, n->nn, items->v[i]) ||
                ev(c, n->b, fs, &t))
                return EX_ERR;
            if (jv_truthy(t) && jv_list_push(c, kept, items->v[i]))
                return EX_ERR;
        }
        items = kept.u.l;
    }
    jloop *lp = jx_alloc(&c->arena, sizeof *lp);
    if (!lp)
        return jx_fail(c, "the template used more than %zu bytes of memory", c->o->max_memory);
    lp->items = items;
    lp->depth0 = depth0;
    lp->node = n;
    lp->scope = s;
    /* one scope for the body, emptied each iteration (Jinja's body sees a
     * fresh scope per iteration: names set in one do not reach the next) */
    jscope *is = scope_new(c, s);
    if (!is)
        return EX_ERR;
    for (int i = 0; i < items->n; i++) {
        is->n = 0;
        lp->index0 = i;
        if (jx_step(c) || bind(c, is, n->names, n->nn, items->v[i]) ||
            scope_set(c, is, "loop", (jv){.t = JV_LOOP, .u.lp = lp}))
            return EX_ERR;
        int rc = ex_body(c, n->list, n->n, is);
        if (rc == EX_ERR)
            return EX_ERR;
        if (rc == EX_BREAK)
            break;
    }
    if (items->n == 0 && n->n2)
        return ex_body(c, n->list2, n->n2, s) == EX_ERR ? EX_ERR : EX_OK;
    return EX_OK;
}

static int ex_set(jctx *c, const jnode *n, jscope *s)
{
    jv v;
    if (ev(c, n->b, s, &v))
        return EX_ERR;
    if (n->a) { /* ns.attr = v */
        jv ns;
        if (ev_name(c, n->a->a, s, &ns))
            return EX_ERR;
        if (ns.t != JV_NS)
            return jx_fail(c, "cannot assign attribute on non-namespace object");
        jv k;
        return jv_cstr(c, n->a->name, &k) || jv_dict_set(c, ns, k, v) ? EX_ERR : EX_OK;
    }
    return bind(c, s, n->names, n->nn, v) ? EX_ERR : EX_OK;
}

static int ex_stmt(jctx *c, const jnode *n, jscope *s)
{
    c->line = n->line;
    jv v;
    switch (n->kind) {
    case JN_TEXT: return jb_put(c, c->out, n->lit.u.s->b, n->lit.u.s->len) ? EX_ERR : EX_OK;
    case JN_OUTPUT:
        if (jx_step(c) || ev(c, n->a, s, &v) || jb_str(c, c->out, v))
            return EX_ERR;
        return EX_OK;
    case JN_IF:
        if (ev(c, n->a, s, &v))
            return EX_ERR;
        return jv_truthy(v) ? ex_body(c, n->list, n->n, s) : ex_body(c, n->list2, n->n2, s);
    case JN_FOR: {
        jlist *items;
        if (ev(c, n->a, s, &v) || jx_iter(c, v, &items))
            return EX_ERR;
        return run_for(c, n, s, items, 0);
    }
    case JN_SET: return ex_set(c, n, s);
    case JN_SET_BLOCK:
        if (capture(c, n->list, n->n, s, &v) || apply_chain(c, n->c, s, v, &v))
            return EX_ERR;
        return scope_set(c, s, n->names[0], v) ? EX_ERR : EX_OK;
    case JN_MACRO: case JN_CALL_BLOCK: {
        jfunc *fn = jx_alloc(&c->arena, sizeof *fn);
        if (!fn)
            return jx_fail(c, "the template used more than %zu bytes of memory",
                           c->o->max_memory);
        fn->kind = n->kind == JN_MACRO ? JF_MACRO : JF_CALLER;
        fn->name = n->kind == JN_MACRO ? n->name : "caller";
        fn->node = n;
        fn->scope = s;
        jv f = {.t = JV_FUNC, .u.fn = fn};
        if (n->kind == JN_MACRO)
            return scope_set(c, s, n->name, f) ? EX_ERR : EX_OK;
        jv callee;
        jargs a;
        if (ev(c, n->a->a, s, &callee) || ev_args(c, n->a, s, 1, &a))
            return EX_ERR;
        a.kname[a.nk] = "caller";
        a.kv[a.nk++] = f;
        if (jx_call(c, callee, &a, &v) || jb_str(c, c->out, v))
            return EX_ERR;
        return EX_OK;
    }
    case JN_FILTER_BLOCK:
        if (capture(c, n->list, n->n, s, &v) || apply_chain(c, n->c, s, v, &v) ||
            jb_str(c, c->out, v))
            return EX_ERR;
        return EX_OK;
    case JN_WITH: {
        jscope *ws = scope_new(c, s);
        if (!ws)
            return EX_ERR;
        for (int i = 0; i < n->nn; i++)
            if (ev(c, n->list2[i], s, &v) || scope_set(c, ws, n->names[i], v))
                return EX_ERR;
        return ex_body(c, n->list, n->n, ws);
    }
    case JN_BODY: return ex_body(c, n->list, n->n, s);
    case JN_BREAK: return EX_BREAK;
    case JN_CONTINUE: return EX_CONTINUE;
    default: return jx_fail(c, "not a statement");
    }
}

static int ex_body(jctx *c, jnode **list, int n, jscope *s)
{
    if (++c->depth > c->o->max_depth + 200)
        return jx_fail(c, "blocks nested too deeply");
    int rc = EX_OK;
    for (int i = 0; i < n && rc == EX_OK; i++)
        rc = ex_stmt(c, list[i], s);
    c->depth--;
    return rc;
}

/* ----------------------------------------------------------------- API */

jinja_opts jinja_opts_default(void)
{
    return (jinja_opts){.max_depth = 64, .max_output = 4u << 20, .max_memory = 64u << 20,
                        .max_steps = 2000000, .now = 0};
}

int jinja_parse(const char *src, size_t len, jinja_tmpl **out, inf_err *err)
{
    if (!src || !out)
        return inf_fail(err, INF_ERR_INVALID, "jinja_parse: NULL argument");
    *out = NULL;
    jinja_tmpl *t = calloc(1, sizeof *t);
    jtoks toks = {0};
    inf_err e = {0};
    if (!t)
        return inf_fail(err, INF_ERR_NOMEM, "chat template: out of memory");
    int rc = jx_lex(src, len, &t->arena, &toks, &e);
    if (rc == INF_OK)
        rc = jx_parse(&toks, &t->arena, &t->root, &t->iterates_content, &e);
    free(toks.v);
    if (rc) {
        jinja_destroy(t);
        rc = e.code ? e.code : INF_ERR_FORMAT;
        return inf_fail(err, rc, "%s", e.msg);
    }
    *out = t;
    return INF_OK;
}

void jinja_destroy(jinja_tmpl *t)
{
    if (!t)
        return;
    jx_arena_free(&t->arena);
    free(t);
}

int jinja_iterates_content(const jinja_tmpl *t)
{
    return t && t->iterates_content;
}

int jinja_render(const jinja_tmpl *t, const cJSON *vars, const jinja_opts *opts, char **out,
                 size_t *len, inf_err *err)
{
    if (!t || !out)
        return inf_fail(err, INF_ERR_INVALID, "jinja_render: NULL argument");
    jinja_opts o = opts ? *opts : jinja_opts_default();
    jbuf b = {0};
    jctx c = {.o = &o, .out = &b};
    c.arena.cap = o.max_memory;
    *out = NULL;
    jscope *g = scope_new(&c, NULL), *vs = g ? scope_new(&c, g) : NULL;
    int rc = !vs || jx_add_globals(&c, g) || jb_put(&c, &b, "", 0) ? EX_ERR : EX_OK;
    c.globals = vs;
    for (const cJSON *it = vars && cJSON_IsObject(vars) ? vars->child : NULL; it && rc == EX_OK;
         it = it->next) {
        jv v;
        if (jv_from_json(&c, it, &v) || scope_set(&c, vs, it->string, v))
            rc = EX_ERR;
    }
    if (rc == EX_OK)
        rc = ex_body(&c, t->root->list, t->root->n, vs);
    if (rc == EX_ERR || c.failed) {
        int code = c.code ? c.code : INF_ERR_INVALID;
        inf_fail(err, code, "%s", c.failed ? c.msg : "chat template: out of memory");
        free(b.p);
        jx_arena_free(&c.arena);
        return code;
    }
    jx_arena_free(&c.arena);
    *out = b.p;
    if (len)
        *len = b.len;
    return INF_OK;
}

int jx_scope_set(jctx *c, jscope *s, const char *name, jv v)
{
    return scope_set(c, s, name, v);
}

int jx_binop(jctx *c, int op, jv a, jv b, jv *out)
{
    return binop(c, op, a, b, out);
}

int jx_compare(jctx *c, int op, jv a, jv b, jv *out)
{
    int r;
    if (compare(c, op, a, b, &r))
        return -1;
    *out = jv_bool(r);
    return 0;
}
