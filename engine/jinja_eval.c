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

static int bind(jctx *c, jscope *s, const char *const *names, int nn, jv v)
{
    if (nn == 1)
        return scope_set(c, s, names[0], v);
    jlist *l;
    if (v.t == JV_UNDEF || jx_iter(c, v, &l))
        return v.t == JV_UNDEF ? jx_undef_error(c, v) : -1;
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

/* A call's arguments: positional, then *xs's items; keywords, then
 * **kw's items; room for extra_kw more keywords. */
static int ev_args(jctx *c, const jnode *n, jscope *s, int extra_kw, jargs *a)
{
    jv star = jv_undef(), dstar = jv_undef();
    jlist *items = NULL;
    memset(a, 0, sizeof *a);
    if (n->b && (ev(c, n->b, s, &star) || jx_iter(c, star, &items)))
        return -1;
    if (n->c && ev(c, n->c, s, &dstar))
        return -1;
    if (n->c && dstar.t != JV_DICT)
        return jx_fail(c, "argument after ** must be a mapping, not %s", jv_type_name(dstar));
    int n_star = items ? items->n : 0, n_dstar = n->c ? dstar.u.d->n : 0;
    a->n = n->n + n_star;
    a->nk = n->nn + n_dstar;
    if ((a->n && !(a->v = jx_alloc(&c->arena, (size_t)a->n * sizeof *a->v))) ||
        !(a->kname = jx_alloc(&c->arena, (size_t)(a->nk + extra_kw) * sizeof *a->kname + 1)) ||
        !(a->kv = jx_alloc(&c->arena, (size_t)(a->nk + extra_kw) * sizeof *a->kv + 1)))
        return jx_fail(c, "the template used more than %zu bytes of memory", c->o->max_memory);
    for (int i = 0; i < n->n; i++)
        if (ev(c, n->list[i], s, &a->v[i]))
            return -1;
    for (int i = 0; i < n_star; i++)
        a->v[n->n + i] = items->v[i];
    for (int i = 0; i < n->nn; i++) {
        a->kname[i] = n->names[i];
        if (ev(c, n->list2[i], s, &a->kv[i]))
            return -1;
    }
    for (int i = 0; i < n_dstar; i++) {
        jv k = dstar.u.d->k[i];
        if (k.t != JV_STR)
            return jx_fail(c, "keywords must be strings");
        for (int j = 0; j < n->nn + i; j++)
            if (!strcmp(a->kname[j], k.u.s->b))
                return jx_fail(c, "got multiple values for keyword argument '%s'", k.u.s->b);
        a->kname[n->nn + i] = k.u.s->b;
        a->kv[n->nn + i] = dstar.u.d->v[i];
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
    if (a->n > m->nn && !(m->op & JM_VARARGS))
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
    jv varargs, kwargs;
    if (m->op & JM_VARARGS) { /* the positional arguments past the parameters, a tuple */
        int extra = a->n > m->nn ? a->n - m->nn : 0;
        if (jv_list_new(c, extra, &varargs))
            return -1;
        varargs.tuple = 1;
        for (int i = 0; i < extra; i++)
            varargs.u.l->v[varargs.u.l->n++] = a->v[m->nn + i];
        if (scope_set(c, s, "varargs", varargs))
            return -1;
    }
    if ((m->op & JM_KWARGS) && (jv_dict_new(c, &kwargs) || scope_set(c, s, "kwargs", kwargs)))
        return -1;
    for (int k = 0; k < a->nk; k++) {
        int known = !strcmp(a->kname[k], "caller");
        for (int i = 0; i < m->nn && !known; i++)
            known = !strcmp(a->kname[k], m->names[i]);
        if (!known && (m->op & JM_KWARGS)) {
            jv key;
            if (jv_cstr(c, a->kname[k], &key) || jv_dict_add(c, kwargs, key, a->kv[k]))
                return -1;
            continue;
        }
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
        return jx_undef_error(c, fn);
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
    return jx_lazy_undef(c, 1, NULL, n->name, NULL, out);
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
        if (ev(c, n->list[i], s, &right) || jx_compare_int(c, n->ops[i], left, right, &r))
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
        rc = rc || jx_slice(c, a, parts, out);
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
            rc = jx_binop(c, n->op, a, b, out);
        }
        break;
    case JN_NEG: case JN_POS:
        rc = ev(c, n->a, s, &a);
        if (rc)
            break;
        if (a.t == JV_UNDEF)
            rc = jx_undef_error(c, a);
        else if (a.t == JV_INT || a.t == JV_BOOL)
            *out = jv_int((n->kind == JN_NEG ? -1 : 1) * (a.t == JV_INT ? a.u.i : a.u.b));
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
        if (ns.t != JV_NS || ns.tuple) /* tuple: a cycler */
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
    case JN_LOAD: {
        /* Hugging Face's environment has no loader: Jinja2 raises when the
         * tag runs (not at parse time, and ignore missing does not help). */
        static const char *const tag[] = {"include", "import", "from", "extends"};
        if (ev(c, n->a, s, &v))
            return EX_ERR;
        c->line = n->line;
        jbuf nb = {0};
        int rc = jb_repr(c, &nb, v);
        rc = rc ? -1 : jx_fail(c, "no loader for this environment specified (%s %.*s: a chat "
                                  "template cannot load other templates)", tag[n->op],
                               (int)(nb.len > 200 ? 200 : nb.len), nb.p ? nb.p : "");
        free(nb.p);
        return EX_ERR;
    }
    case JN_BLOCK: {
        /* No extends can run, so a block renders in place; unless scoped
         * it sees the template's top-level names, not the enclosing
         * loop's (Jinja2 renders blocks from the context). */
        jscope *bs = scope_new(c, n->recursive ? s : c->globals);
        if (!bs)
            return EX_ERR;
        return ex_body(c, n->list, n->n, bs);
    }
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

/* Renders t with variables from a cJSON object or a jinja_vars (one of
 * them, or neither). */
static int render(const jinja_tmpl *t, const cJSON *json, const jinja_vars *vars,
                  const jinja_opts *opts, char **out, size_t *len, inf_err *err)
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
    for (const cJSON *it = json && cJSON_IsObject(json) ? json->child : NULL; it && rc == EX_OK;
         it = it->next) {
        jv v;
        if (jv_from_json(&c, it, &v) || scope_set(&c, vs, it->string, v))
            rc = EX_ERR;
    }
    for (int i = 0; vars && i < vars->s.n && rc == EX_OK; i++)
        if (scope_set(&c, vs, vars->s.names[i], vars->s.vals[i]))
            rc = EX_ERR;
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

int jinja_render(const jinja_tmpl *t, const cJSON *vars, const jinja_opts *opts, char **out,
                 size_t *len, inf_err *err)
{
    return render(t, vars, NULL, opts, out, len, err);
}

int jinja_render_vars(const jinja_tmpl *t, const jinja_vars *vars, const jinja_opts *opts,
                      char **out, size_t *len, inf_err *err)
{
    return render(t, NULL, vars, opts, out, len, err);
}

int jx_scope_set(jctx *c, jscope *s, const char *name, jv v)
{
    return scope_set(c, s, name, v);
}

