/* jinja tests and globals: the "is" tests of jinja2/tests.py and the
 * globals a chat template sees under Hugging Face (range as the sandbox
 * bounds it, dict, namespace, raise_exception, strftime_now). */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- tests */

static int t_num_mod(jctx *c, jv in, int64_t m, int *out)
{
    jv r;
    if (jx_binop(c, JO_MOD, in, jv_int(m), &r))
        return -1;
    *out = jv_num(r) == 0;
    return 0;
}

static int run_test(jctx *c, const char *n, jv in, const jargs *a, int *out)
{
    const jv *x = jx_arg(a, 0, NULL);
    jv_type t = in.t;
    if (!strcmp(n, "defined")) *out = t != JV_UNDEF;
    else if (!strcmp(n, "undefined")) *out = t == JV_UNDEF;
    else if (!strcmp(n, "none")) *out = t == JV_NONE;
    else if (!strcmp(n, "boolean")) *out = t == JV_BOOL;
    else if (!strcmp(n, "true")) *out = t == JV_BOOL && in.u.b;
    else if (!strcmp(n, "false")) *out = t == JV_BOOL && !in.u.b;
    else if (!strcmp(n, "integer")) *out = t == JV_INT;
    else if (!strcmp(n, "float")) *out = t == JV_FLOAT;
    else if (!strcmp(n, "number")) *out = jv_is_num(in);
    else if (!strcmp(n, "string")) *out = t == JV_STR;
    else if (!strcmp(n, "mapping")) *out = t == JV_DICT;
    else if (!strcmp(n, "sequence")) *out = t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF;
    else if (!strcmp(n, "iterable")) *out = t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF || t == JV_LOOP;
    else if (!strcmp(n, "callable")) *out = t == JV_FUNC || t == JV_LOOP || t == JV_UNDEF;
    else if (!strcmp(n, "escaped")) *out = 0;
    else if (!strcmp(n, "odd") || !strcmp(n, "even")) {
        if (t != JV_INT && t != JV_BOOL && t != JV_FLOAT)
            return jx_fail(c, "test '%s' needs a number", n);
        if (t_num_mod(c, in, 2, out))
            return -1;
        *out = n[0] == 'e' ? *out : !*out;
    } else if (!strcmp(n, "divisibleby")) {
        if (!x || x->t != JV_INT || !jv_is_num(in))
            return jx_fail(c, "divisibleby needs numbers");
        return t_num_mod(c, in, x->u.i, out);
    } else if (!strcmp(n, "lower") || !strcmp(n, "upper")) {
        jv s, fn, r;
        jargs none = {0};
        if (jv_to_str(c, in, &s) || jx_method(c, s, n[0] == 'l' ? "islower" : "isupper", &fn) ||
            jx_call(c, fn, &none, &r))
            return -1;
        *out = r.u.b;
    } else if (!strcmp(n, "filter")) *out = t == JV_STR && jx_find_filter(in.u.s->b);
    else if (!strcmp(n, "test")) *out = t == JV_STR && jx_find_test(in.u.s->b);
    else {
        if (!x)
            return jx_fail(c, "test '%s' needs an argument", n);
        int op = !strcmp(n, "eq") || !strcmp(n, "equalto") || !strcmp(n, "==") ? JO_EQ
               : !strcmp(n, "ne") || !strcmp(n, "!=") ? JO_NE
               : !strcmp(n, "lt") || !strcmp(n, "lessthan") || !strcmp(n, "<") ? JO_LT
               : !strcmp(n, "le") || !strcmp(n, "<=") ? JO_LE
               : !strcmp(n, "gt") || !strcmp(n, "greaterthan") || !strcmp(n, ">") ? JO_GT
               : !strcmp(n, "ge") || !strcmp(n, ">=") ? JO_GE
               : !strcmp(n, "in") ? JO_IN : -1;
        if (!strcmp(n, "sameas")) {
            *out = in.t == x->t && (t == JV_NONE || t == JV_UNDEF ||
                                    (t == JV_BOOL && in.u.b == x->u.b) ||
                                    (t == JV_INT && in.u.i == x->u.i) ||
                                    ((t == JV_LIST || t == JV_DICT || t == JV_STR || t == JV_NS) &&
                                     in.u.l == x->u.l));
            return 0;
        }
        if (op < 0)
            return jx_fail(c, "No test named '%s'.", n);
        jv r;
        if (jx_compare(c, op, in, *x, &r))
            return -1;
        *out = r.u.b;
    }
    return 0;
}

static const char *const TESTS[] = {
    "defined", "undefined", "none", "boolean", "true", "false", "integer", "float", "number",
    "string", "mapping", "sequence", "iterable", "callable", "escaped", "odd", "even",
    "divisibleby", "lower", "upper", "filter", "test", "eq", "equalto", "==", "ne", "!=", "lt",
    "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "sameas", NULL};

int jx_find_test(const char *name)
{
    for (int i = 0; TESTS[i]; i++)
        if (!strcmp(TESTS[i], name))
            return 1;
    return 0;
}

int jx_test(jctx *c, const char *name, jv in, const jargs *a, int *out)
{
    if (!jx_find_test(name))
        return jx_fail(c, "No test named '%s'.", name);
    return run_test(c, name, in, a, out);
}

/* -------------------------------------------------------------- globals */

static int g_range(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)self;
    int64_t v[3] = {0, 0, 1};
    if (a->n < 1 || a->n > 3)
        return jx_fail(c, "range expected 1 to 3 arguments, got %d", a->n);
    for (int i = 0; i < a->n; i++) {
        if (a->v[i].t != JV_INT && a->v[i].t != JV_BOOL)
            return jx_fail(c, "'%s' object cannot be interpreted as an integer",
                           jv_type_name(a->v[i]));
        v[a->n == 1 ? 1 : i] = a->v[i].t == JV_INT ? a->v[i].u.i : a->v[i].u.b;
    }
    if (v[2] == 0)
        return jx_fail(c, "range() arg 3 must not be zero");
    double len = ceil(((double)v[1] - (double)v[0]) / (double)v[2]);
    if (len > 100000)
        return jx_fail(c, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    if (jv_list_new(c, len > 0 ? (int)len : 0, out))
        return -1;
    for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2])
        out->u.l->v[out->u.l->n++] = jv_int(i);
    return 0;
}

static int g_dict(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)self;
    if (jv_dict_new(c, out))
        return -1;
    if (a->n > 1 || (a->n == 1 && a->v[0].t != JV_DICT))
        return jx_fail(c, "dict() takes a mapping and keyword arguments");
    for (int i = 0; a->n && i < a->v[0].u.d->n; i++)
        if (jv_dict_set(c, *out, a->v[0].u.d->k[i], a->v[0].u.d->v[i]))
            return -1;
    for (int i = 0; i < a->nk; i++) {
        jv k;
        if (jv_cstr(c, a->kname[i], &k) || jv_dict_set(c, *out, k, a->kv[i]))
            return -1;
    }
    return 0;
}

static int g_namespace(jctx *c, jv self, const jargs *a, jv *out)
{
    if (g_dict(c, self, a, out))
        return -1;
    out->t = JV_NS;
    return 0;
}

static int g_raise(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)self;
    (void)out;
    jv m = a->n ? a->v[0] : jv_none();
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0) || jb_str(c, &b, m);
    if (!rc && !c->failed) {
        snprintf(c->msg, sizeof c->msg, "%s", b.p);
        c->failed = 1;
        c->raw_msg = 1;
        c->code = INF_ERR_INVALID;
    }
    free(b.p);
    return -1;
}

static int g_strftime(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)self;
    if (a->n != 1 || a->v[0].t != JV_STR)
        return jx_fail(c, "strftime_now takes one format string");
    time_t now = c->o->now ? c->o->now : time(NULL);
    struct tm tm;
    char buf[512];
    localtime_r(&now, &tm);
    size_t n = strftime(buf, sizeof buf, a->v[0].u.s->b, &tm);
    if (n == 0 && a->v[0].u.s->len)
        return jx_fail(c, "strftime_now: format too long");
    return jv_str(c, buf, n, out);
}

int jx_add_globals(jctx *c, jscope *g)
{
    static const struct { const char *name; jbuiltin fn; } G[] = {
        {"range", g_range}, {"dict", g_dict}, {"namespace", g_namespace},
        {"raise_exception", g_raise}, {"strftime_now", g_strftime}};
    for (size_t i = 0; i < sizeof G / sizeof *G; i++) {
        jfunc *f = jx_alloc(&c->arena, sizeof *f);
        if (!f)
            return jx_fail(c, "out of memory");
        f->kind = JF_BUILTIN;
        f->name = G[i].name;
        f->fn = G[i].fn;
        if (jx_scope_set(c, g, G[i].name, (jv){.t = JV_FUNC, .u.fn = f}))
            return -1;
    }
    return jx_add_util_globals(c, g);
}
