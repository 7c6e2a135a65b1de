/* jinja parser: tokens -> tree, following jinja2/parser.py's grammar and
 * operator precedence (lowest first): x if c else y, or, and, not,
 * comparisons (chained, in, not in), + -, ~, * / // %, **, unary - +,
 * then primaries with .attr, [item], [a:b:c], (call), |filter, is test.
 *
 * Node fields by kind:
 *   TEXT lit; OUTPUT a; BODY list; IF a, list (then), list2 (else);
 *   FOR names (targets), a (iterable), b (filter or NULL), list, list2 (else);
 *   SET names (targets) or a = NSREF, b value; SET_BLOCK names, list, c
 *   (filter chain or NULL); MACRO name, names (params), list2 (defaults,
 *   n2 <= nn, aligned to the end), list (body), op (JM_VARARGS,
 *   JM_KWARGS: the body reads varargs / kwargs, so extra arguments land
 *   there, as Jinja2's compiler decides); CALL_BLOCK a (the call),
 *   names/list2 (caller's params/defaults), list; FILTER_BLOCK c (filter
 *   chain whose innermost input is NULL), list; WITH names, list2 (values),
 *   list; LOAD op (JL_*: include, import, from, extends), a (the template
 *   name); BLOCK name, list, recursive (scoped). LIT lit; NAME name; LIST/TUPLE list; DICT list (keys), list2;
 *   ATTR a, name; ITEM a, b; SLICE a, list[3] (NULL for absent); CALL a,
 *   list, names/list2 (keywords), b (*args or NULL), c (**kwargs or NULL);
 *   FILTER a (input, NULL in a filter block), name, list, names/list2, b,
 *   c; TEST likewise; BIN op a b; NEG/POS/NOT a;
 *   AND/OR a b; COND a (cond) b (then) c (else or NULL); CONCAT list;
 *   COMPARE a, list (operands), ops; NSREF a (NAME), name. */
#include "jinja_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ps {
    const jtoks *t;
    int i;
    int depth;
    jx_arena *a;
    inf_err *err;
    int failed;
    int iterates_content;
} ps;

/* A growable list of nodes or names, copied into the arena when done. */
typedef struct vec { void **v; int n, cap; } vec;

#define PS_MAX_DEPTH 200

static const jtok *cur(ps *p) { return &p->t->v[p->i]; }
static const jtok *peek(ps *p, int k)
{
    int j = p->i + k;
    return &p->t->v[j < p->t->n ? j : p->t->n - 1];
}

static void *fail(ps *p, const char *fmt, const char *arg)
{
    if (!p->failed) {
        char m[200];
        snprintf(m, sizeof m, fmt, arg ? arg : "");
        inf_fail(p->err, INF_ERR_FORMAT, "line %d: %s", cur(p)->line, m);
    }
    p->failed = 1;
    return NULL;
}

static void *nomem(ps *p)
{
    if (!p->failed)
        inf_fail(p->err, INF_ERR_NOMEM, "chat template: out of memory");
    p->failed = 1;
    return NULL;
}

static int is_op(const jtok *t, const char *op)
{
    return t->t == JT_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}

static int is_name(const jtok *t, const char *name)
{
    return t->t == JT_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}

static int accept_op(ps *p, const char *op)
{
    if (is_op(cur(p), op)) {
        p->i++;
        return 1;
    }
    return 0;
}

static int accept_name(ps *p, const char *name)
{
    if (is_name(cur(p), name)) {
        p->i++;
        return 1;
    }
    return 0;
}

static int expect_op(ps *p, const char *op)
{
    if (accept_op(p, op))
        return 1;
    fail(p, "expected '%s'", op);
    return 0;
}

static jnode *node(ps *p, jnode_kind k)
{
    jnode *n = jx_alloc(p->a, sizeof *n);
    if (!n)
        return nomem(p);
    n->kind = k;
    n->line = cur(p)->line;
    return n;
}

static const char *tok_name(ps *p, const jtok *t)
{
    char *s = jx_alloc(p->a, t->n + 1);
    if (!s)
        return nomem(p);
    memcpy(s, t->s, t->n);
    return s;
}

static const char *expect_name(ps *p)
{
    if (cur(p)->t != JT_NAME)
        return fail(p, "expected a name", NULL);
    return tok_name(p, &p->t->v[p->i++]);
}

static int vpush(ps *p, vec *v, void *x)
{
    if (!x)
        return 0;
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 8;
        void **nv = realloc(v->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            nomem(p);
            return 0;
        }
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 1;
}

/* Moves v into the arena; frees v's storage. */
static void *vdone(ps *p, vec *v, int *n)
{
    void **o = NULL;
    *n = v->n;
    if (v->n && !p->failed && (o = jx_alloc(p->a, (size_t)v->n * sizeof *o)))
        memcpy(o, v->v, (size_t)v->n * sizeof *o);
    else if (v->n && !p->failed)
        nomem(p);
    free(v->v);
    *v = (vec){0};
    return o;
}

static jnode *expr(ps *p, int with_cond);
static jnode *tuple_expr(ps *p, int with_cond, const char *end_name, int parens);
static jnode *unary(ps *p, int with_filter);
static jnode *primary(ps *p);
static jnode *postfix(ps *p, jnode *n);

/* ( args ) of a call, filter or test into n->list and n->names/list2. */
static void call_args(ps *p, jnode *n)
{
    vec args = {0}, kn = {0}, kv = {0};
    expect_op(p, "(");
    while (!p->failed && !is_op(cur(p), ")")) {
        if ((args.n || kn.n) && !expect_op(p, ","))
            break;
        if (is_op(cur(p), ")"))
            break;
        if (is_op(cur(p), "*") || is_op(cur(p), "**")) { /* f(*xs), f(**kw) */
            int star = is_op(cur(p), "*");
            if (n->c || (star && n->b)) {
                fail(p, "invalid syntax for function call expression", NULL);
                break;
            }
            p->i++;
            if (!(*(star ? &n->b : &n->c) = expr(p, 1)))
                break;
            continue;
        }
        int is_kw = cur(p)->t == JT_NAME && is_op(peek(p, 1), "=");
        if (n->c || (!is_kw && n->b)) { /* Jinja2: keywords may follow *xs only */
            fail(p, "invalid syntax for function call expression", NULL);
            break;
        }
        if (is_kw) {
            const char *k = expect_name(p);
            p->i++;
            vpush(p, &kn, (void *)k);
            vpush(p, &kv, expr(p, 1));
        } else {
            if (kn.n) {
                fail(p, "positional argument after keyword argument", NULL);
                break;
            }
            vpush(p, &args, expr(p, 1));
        }
    }
    expect_op(p, ")");
    n->list = (jnode **)vdone(p, &args, &n->n);
    n->names = (const char **)vdone(p, &kn, &n->nn);
    n->list2 = (jnode **)vdone(p, &kv, &n->n2);
}

static jnode *filter(ps *p, jnode *in, int start_inline)
{
    while (!p->failed && (start_inline || accept_op(p, "|"))) {
        start_inline = 0;
        jnode *f = node(p, JN_FILTER);
        if (!f)
            return NULL;
        f->a = in;
        f->name = expect_name(p);
        if (f->name && !(f->filter = jx_find_filter(f->name)))
            return fail(p, "No filter named '%s'.", f->name);
        while (!p->failed && is_op(cur(p), ".") && peek(p, 1)->t == JT_NAME) {
            p->i++;
            fail(p, "dotted filter names are not supported", NULL);
        }
        if (is_op(cur(p), "("))
            call_args(p, f);
        in = f;
    }
    return p->failed ? NULL : in;
}

static jnode *test(ps *p, jnode *in)
{
    jnode *t = node(p, JN_TEST);
    if (!t)
        return NULL;
    p->i++; /* is */
    int neg = accept_name(p, "not");
    t->a = in;
    t->name = expect_name(p);
    if (t->name && !jx_find_test(t->name))
        return fail(p, "No test named '%s'.", t->name);
    const jtok *c = cur(p);
    if (is_op(c, "(")) {
        call_args(p, t);
    } else if ((c->t == JT_NAME || c->t == JT_STRING || c->t == JT_INT || c->t == JT_FLOAT ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            return fail(p, "You cannot chain multiple tests with is", NULL);
        jnode *arg = postfix(p, primary(p));
        t->list = jx_alloc(p->a, sizeof *t->list);
        if (!t->list)
            return nomem(p);
        t->list[0] = arg;
        t->n = 1;
    }
    if (!neg)
        return t;
    jnode *n = node(p, JN_NOT);
    if (n)
        n->a = t;
    return n;
}

static jnode *filter_expr(ps *p, jnode *n)
{
    while (n && !p->failed) {
        if (is_op(cur(p), "|")) {
            n = filter(p, n, 0);
        } else if (is_name(cur(p), "is")) {
            n = test(p, n);
        } else if (is_op(cur(p), "(")) {
            jnode *c = node(p, JN_CALL);
            if (!c)
                return NULL;
            c->a = n;
            call_args(p, c);
            n = c;
        } else {
            break;
        }
    }
    return p->failed ? NULL : n;
}

/* One part of a subscript: an expression or a slice. */
static jnode *subscribed(ps *p)
{
    jnode *parts[3] = {0};
    if (!is_op(cur(p), ":")) {
        parts[0] = expr(p, 1);
        if (!accept_op(p, ":"))
            return parts[0];
    } else {
        p->i++;
    }
    if (!is_op(cur(p), "]") && !is_op(cur(p), ",") && !is_op(cur(p), ":"))
        parts[1] = expr(p, 1);
    if (accept_op(p, ":") && !is_op(cur(p), "]") && !is_op(cur(p), ","))
        parts[2] = expr(p, 1);
    jnode *s = node(p, JN_SLICE);
    if (!s || !(s->list = jx_alloc(p->a, 3 * sizeof *s->list)))
        return nomem(p);
    memcpy(s->list, parts, sizeof parts);
    s->n = 3;
    return s;
}

static jnode *postfix(ps *p, jnode *n)
{
    while (n && !p->failed) {
        if (is_op(cur(p), ".")) {
            p->i++;
            jnode *g;
            if (cur(p)->t == JT_NAME) {
                if (!(g = node(p, JN_ATTR)))
                    return NULL;
                g->name = expect_name(p);
            } else if (cur(p)->t == JT_INT) {
                if (!(g = node(p, JN_ITEM)) || !(g->b = node(p, JN_LIT)))
                    return NULL;
                g->b->lit = jv_int(cur(p)->i);
                p->i++;
            } else {
                return fail(p, "expected name or number", NULL);
            }
            g->a = n;
            n = g;
        } else if (is_op(cur(p), "[")) {
            p->i++;
            jnode *g = node(p, JN_ITEM);
            if (!g)
                return NULL;
            g->a = n;
            jnode *k = subscribed(p);
            if (k && k->kind == JN_SLICE) {
                k->a = n;
                g = k;
            } else {
                g->b = k;
            }
            if (is_op(cur(p), ","))
                return fail(p, "tuple subscripts are not supported", NULL);
            expect_op(p, "]");
            n = g;
        } else if (is_op(cur(p), "(")) {
            jnode *c = node(p, JN_CALL);
            if (!c)
                return NULL;
            c->a = n;
            call_args(p, c);
            n = c;
        } else {
            break;
        }
    }
    return p->failed ? NULL : n;
}

static jnode *lit(ps *p, jv v)
{
    jnode *n = node(p, JN_LIT);
    if (n)
        n->lit = v;
    return n;
}

static jnode *primary(ps *p)
{
    const jtok *t = cur(p);
    if (t->t == JT_NAME) {
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") ||
            is_name(t, "False")) {
            p->i++;
            return lit(p, jv_bool(t->s[0] == 't' || t->s[0] == 'T'));
        }
        if (is_name(t, "none") || is_name(t, "None")) {
            p->i++;
            return lit(p, jv_none());
        }
        jnode *n = node(p, JN_NAME);
        if (n)
            n->name = expect_name(p);
        return n;
    }
    if (t->t == JT_STRING) {
        size_t len = 0;
        int j = p->i;
        for (; p->t->v[j].t == JT_STRING; j++)
            len += p->t->v[j].n;
        jstr *s = jx_alloc(p->a, sizeof *s + len + 1);
        if (!s)
            return nomem(p);
        for (; p->i < j; p->i++) {
            memcpy(s->b + s->len, cur(p)->s, cur(p)->n);
            s->len += cur(p)->n;
        }
        jnode *n = lit(p, jv_none());
        if (n) {
            n->lit.t = JV_STR;
            n->lit.u.s = s;
        }
        return n;
    }
    if (t->t == JT_INT || t->t == JT_FLOAT) {
        p->i++;
        return lit(p, t->t == JT_INT ? jv_int(t->i) : jv_float(t->f));
    }
    if (is_op(t, "(")) {
        p->i++;
        jnode *n = tuple_expr(p, 1, NULL, 1);
        expect_op(p, ")");
        return p->failed ? NULL : n;
    }
    if (is_op(t, "[") || is_op(t, "{")) {
        int dict = is_op(t, "{");
        const char *close = dict ? "}" : "]";
        jnode *n = node(p, dict ? JN_DICT : JN_LIST);
        vec keys = {0}, vals = {0};
        p->i++;
        while (n && !p->failed && !is_op(cur(p), close)) {
            if (keys.n && !expect_op(p, ","))
                break;
            if (is_op(cur(p), close))
                break;
            vpush(p, &keys, expr(p, 1));
            if (dict && expect_op(p, ":"))
                vpush(p, &vals, expr(p, 1));
        }
        expect_op(p, close);
        if (n) {
            n->list = (jnode **)vdone(p, &keys, &n->n);
            n->list2 = (jnode **)vdone(p, &vals, &n->n2);
        }
        return p->failed ? NULL : n;
    }
    if (t->t == JT_EOF || t->t == JT_VAR_END || t->t == JT_BLOCK_END)
        return fail(p, "unexpected end of expression", NULL);
    return fail(p, "unexpected token in expression", NULL);
}

static jnode *unary(ps *p, int with_filter)
{
    jnode *n;
    if (++p->depth > PS_MAX_DEPTH)
        return fail(p, "expression nested too deeply", NULL);
    if (is_op(cur(p), "-") || is_op(cur(p), "+")) {
        n = node(p, is_op(cur(p), "-") ? JN_NEG : JN_POS);
        p->i++;
        if (n && !(n->a = unary(p, 0)))
            n = NULL;
    } else {
        n = primary(p);
    }
    n = postfix(p, n);
    if (with_filter)
        n = filter_expr(p, n);
    p->depth--;
    return n;
}

static jnode *bin(ps *p, int op, jnode *l, jnode *r)
{
    jnode *n = l && r ? node(p, JN_BIN) : NULL;
    if (n) {
        n->op = op;
        n->a = l;
        n->b = r;
    }
    return n;
}

static jnode *pow_expr(ps *p)
{
    jnode *l = unary(p, 1);
    while (l && accept_op(p, "**"))
        l = bin(p, JO_POW, l, unary(p, 1));
    return l;
}

static jnode *math2(ps *p)
{
    jnode *l = pow_expr(p);
    for (;;) {
        int op = is_op(cur(p), "*") ? JO_MUL : is_op(cur(p), "/") ? JO_DIV
               : is_op(cur(p), "//") ? JO_FLOORDIV : is_op(cur(p), "%") ? JO_MOD : -1;
        if (!l || op < 0)
            return l;
        p->i++;
        l = bin(p, op, l, pow_expr(p));
    }
}

static jnode *concat(ps *p)
{
    jnode *first = math2(p);
    if (!first || !is_op(cur(p), "~"))
        return first;
    vec v = {0};
    vpush(p, &v, first);
    while (!p->failed && accept_op(p, "~"))
        vpush(p, &v, math2(p));
    jnode *n = node(p, JN_CONCAT);
    if (n)
        n->list = (jnode **)vdone(p, &v, &n->n);
    else
        free(v.v);
    return p->failed ? NULL : n;
}

static jnode *math1(ps *p)
{
    jnode *l = concat(p);
    for (;;) {
        int op = is_op(cur(p), "+") ? JO_ADD : is_op(cur(p), "-") ? JO_SUB : -1;
        if (!l || op < 0)
            return l;
        p->i++;
        l = bin(p, op, l, concat(p));
    }
}

static jnode *compare(ps *p)
{
    jnode *first = math1(p);
    vec v = {0};
    int ops[64], nops = 0;
    while (first && !p->failed) {
        const jtok *t = cur(p);
        int op = is_op(t, "==") ? JO_EQ : is_op(t, "!=") ? JO_NE : is_op(t, "<") ? JO_LT
               : is_op(t, "<=") ? JO_LE : is_op(t, ">") ? JO_GT : is_op(t, ">=") ? JO_GE
               : is_name(t, "in") ? JO_IN
               : is_name(t, "not") && is_name(peek(p, 1), "in") ? JO_NOTIN : -1;
        if (op < 0)
            break;
        if (nops == 64) {
            fail(p, "too many chained comparisons", NULL);
            break;
        }
        p->i += op == JO_NOTIN ? 2 : 1;
        ops[nops++] = op;
        vpush(p, &v, math1(p));
    }
    if (!nops || p->failed) {
        free(v.v);
        return p->failed ? NULL : first;
    }
    jnode *n = node(p, JN_COMPARE);
    if (!n || !(n->ops = jx_alloc(p->a, (size_t)nops * sizeof *n->ops))) {
        free(v.v);
        return nomem(p);
    }
    memcpy(n->ops, ops, (size_t)nops * sizeof *ops);
    n->a = first;
    n->list = (jnode **)vdone(p, &v, &n->n);
    return p->failed ? NULL : n;
}

static jnode *not_expr(ps *p)
{
    if (is_name(cur(p), "not")) {
        jnode *n = node(p, JN_NOT);
        p->i++;
        if (++p->depth > PS_MAX_DEPTH)
            return fail(p, "expression nested too deeply", NULL);
        if (n && !(n->a = not_expr(p)))
            n = NULL;
        p->depth--;
        return n;
    }
    return compare(p);
}

static jnode *logic(ps *p, int is_or)
{
    jnode *l = is_or ? logic(p, 0) : not_expr(p);
    while (l && accept_name(p, is_or ? "or" : "and")) {
        jnode *n = node(p, is_or ? JN_OR : JN_AND);
        if (!n)
            return NULL;
        n->a = l;
        if (!(n->b = is_or ? logic(p, 0) : not_expr(p)))
            return NULL;
        l = n;
    }
    return l;
}

static jnode *cond_expr(ps *p)
{
    jnode *e1 = logic(p, 1);
    while (e1 && accept_name(p, "if")) {
        jnode *n = node(p, JN_COND);
        if (!n)
            return NULL;
        n->b = e1;
        if (!(n->a = logic(p, 1)))
            return NULL;
        if (accept_name(p, "else") && !(n->c = cond_expr(p)))
            return NULL;
        e1 = n;
    }
    return e1;
}

static jnode *expr(ps *p, int with_cond)
{
    if (++p->depth > PS_MAX_DEPTH)
        return fail(p, "expression nested too deeply", NULL);
    jnode *n = with_cond ? cond_expr(p) : logic(p, 1);
    p->depth--;
    return n;
}

static int tuple_end(ps *p, const char *end_name)
{
    const jtok *t = cur(p);
    return t->t == JT_VAR_END || t->t == JT_BLOCK_END || t->t == JT_EOF || is_op(t, ")") ||
           (end_name && is_name(t, end_name));
}

static jnode *tuple_expr(ps *p, int with_cond, const char *end_name, int parens)
{
    vec v = {0};
    int is_tuple = 0;
    while (!p->failed) {
        if (v.n && !expect_op(p, ","))
            break;
        if (tuple_end(p, end_name))
            break;
        vpush(p, &v, expr(p, with_cond));
        if (is_op(cur(p), ","))
            is_tuple = 1;
        else
            break;
    }
    if (p->failed) {
        free(v.v);
        return NULL;
    }
    if (!is_tuple && v.n) {
        jnode *n = v.v[0];
        free(v.v);
        return n;
    }
    if (!is_tuple && !parens)
        return fail(p, "Expected an expression", NULL);
    jnode *n = node(p, JN_TUPLE);
    if (n)
        n->list = (jnode **)vdone(p, &v, &n->n);
    else
        free(v.v);
    return n;
}

/* ------------------------------------------------------------ statements */

static jnode **statements(ps *p, const char *const *ends, int *n);

static int block_end(ps *p)
{
    if (cur(p)->t == JT_BLOCK_END) {
        p->i++;
        return 1;
    }
    fail(p, "expected end of statement block", NULL);
    return 0;
}

/* Targets of for/set: names, "a, b", or (set only) ns.attr. */
static void targets(ps *p, jnode *n, const char *end_name, int allow_ns)
{
    vec v = {0};
    if (allow_ns && cur(p)->t == JT_NAME && is_op(peek(p, 1), ".")) {
        jnode *r = node(p, JN_NSREF), *nm = node(p, JN_NAME);
        if (!r || !nm)
            return;
        nm->name = expect_name(p);
        p->i++;
        r->a = nm;
        r->name = expect_name(p);
        n->a = r;
        return;
    }
    int paren = accept_op(p, "(");
    while (!p->failed) {
        if (v.n && !accept_op(p, ","))
            break;
        if (v.n && (tuple_end(p, end_name) || is_op(cur(p), "=")))
            break;
        vpush(p, &v, (void *)expect_name(p));
    }
    if (paren)
        expect_op(p, ")");
    n->names = (const char **)vdone(p, &v, &n->nn);
}

/* (a, b=1) of a macro or call block: names and defaults (aligned to the
 * end, as Python requires). */
static void signature(ps *p, jnode *n)
{
    vec names = {0}, defs = {0};
    expect_op(p, "(");
    while (!p->failed && !is_op(cur(p), ")")) {
        if (names.n && !expect_op(p, ","))
            break;
        if (is_op(cur(p), ")"))
            break;
        vpush(p, &names, (void *)expect_name(p));
        if (accept_op(p, "="))
            vpush(p, &defs, expr(p, 1));
        else if (defs.n)
            fail(p, "non-default argument follows default argument", NULL);
    }
    expect_op(p, ")");
    n->names = (const char **)vdone(p, &names, &n->nn);
    n->list2 = (jnode **)vdone(p, &defs, &n->n2);
}

/* Whether the tree below n reads the variable name (Jinja2's
 * find_undeclared, without the finer point of a name assigned first). */
static int reads_name(const jnode *n, const char *name, int depth)
{
    if (!n || depth > PS_MAX_DEPTH * 4)
        return 0;
    if (n->kind == JN_NAME && !strcmp(n->name, name))
        return 1;
    if (reads_name(n->a, name, depth + 1) || reads_name(n->b, name, depth + 1) ||
        reads_name(n->c, name, depth + 1))
        return 1;
    for (int i = 0; i < n->n; i++)
        if (reads_name(n->list[i], name, depth + 1))
            return 1;
    for (int i = 0; i < n->n2; i++)
        if (reads_name(n->list2[i], name, depth + 1))
            return 1;
    return 0;
}

static int macro_flags(const jnode *m)
{
    int f = 0;
    for (int i = 0; i < m->n; i++) {
        f |= reads_name(m->list[i], "varargs", 0) ? JM_VARARGS : 0;
        f |= reads_name(m->list[i], "kwargs", 0) ? JM_KWARGS : 0;
    }
    return f;
}

static jnode *stmt_if(ps *p)
{
    jnode *n = node(p, JN_IF);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const end_if[] = {"endif", NULL};
    if (!n || !(n->a = tuple_expr(p, 0, NULL, 0)) || !block_end(p))
        return NULL;
    n->list = statements(p, ends, &n->n);
    if (p->failed)
        return NULL;
    if (accept_name(p, "elif")) {
        jnode *e = stmt_if(p);
        if (!e || !(n->list2 = jx_alloc(p->a, sizeof *n->list2)))
            return p->failed ? NULL : nomem(p);
        n->list2[0] = e;
        n->n2 = 1;
        return n; /* the nested if consumed endif */
    }
    if (accept_name(p, "else")) {
        if (!block_end(p))
            return NULL;
        n->list2 = statements(p, end_if, &n->n2);
    }
    if (!p->failed && accept_name(p, "endif") && block_end(p))
        return n;
    return p->failed ? NULL : fail(p, "expected 'endif'", NULL);
}

static int iter_is_content(const jnode *it)
{
    while (it && it->kind == JN_FILTER)
        it = it->a;
    if (!it)
        return 0;
    if (it->kind == JN_ATTR)
        return strcmp(it->name, "content") == 0;
    return it->kind == JN_ITEM && it->b && it->b->kind == JN_LIT && it->b->lit.t == JV_STR &&
           strcmp(it->b->lit.u.s->b, "content") == 0;
}

static jnode *stmt_for(ps *p)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const end_for[] = {"endfor", NULL};
    jnode *n = node(p, JN_FOR);
    if (!n)
        return NULL;
    targets(p, n, "in", 0);
    if (p->failed || !accept_name(p, "in"))
        return p->failed ? NULL : fail(p, "expected 'in'", NULL);
    if (!(n->a = tuple_expr(p, 0, "recursive", 0)))
        return NULL;
    p->iterates_content |= iter_is_content(n->a);
    if (accept_name(p, "if") && !(n->b = expr(p, 1)))
        return NULL;
    n->recursive = accept_name(p, "recursive");
    if (!block_end(p))
        return NULL;
    n->list = statements(p, ends, &n->n);
    if (!p->failed && accept_name(p, "else")) {
        if (!block_end(p))
            return NULL;
        n->list2 = statements(p, end_for, &n->n2);
    }
    if (!p->failed && accept_name(p, "endfor") && block_end(p))
        return n;
    return p->failed ? NULL : fail(p, "expected 'endfor'", NULL);
}

/* Statements up to {% NAME %} where NAME is the one end. */
static jnode **body_until(ps *p, const char *end, int *n)
{
    const char *ends[] = {end, NULL};
    jnode **b = statements(p, ends, n);
    if (!p->failed && !(accept_name(p, end) && block_end(p)))
        fail(p, "expected '%s'", end);
    return p->failed ? NULL : b;
}

static jnode *stmt_set(ps *p)
{
    jnode *n = node(p, JN_SET);
    if (!n)
        return NULL;
    targets(p, n, NULL, 1);
    if (p->failed)
        return NULL;
    if (accept_op(p, "=")) {
        if (!(n->b = tuple_expr(p, 1, NULL, 0)) || !block_end(p))
            return NULL;
        return n;
    }
    if (n->a || n->nn != 1)
        return fail(p, "expected '='", NULL);
    n->kind = JN_SET_BLOCK;
    if (is_op(cur(p), "|") && !(n->c = filter(p, NULL, 0)))
        return NULL;
    if (!block_end(p))
        return NULL;
    n->list = body_until(p, "endset", &n->n);
    return p->failed ? NULL : n;
}

/* include / import / from / extends: parsed as Jinja2 parses them (the
 * rest of the tag is checked, then dropped); running one is an error. */
static jnode *stmt_load(ps *p, const char *tag)
{
    jnode *n = node(p, JN_LOAD);
    if (!n || !(n->a = expr(p, 1)))
        return NULL;
    n->op = !strcmp(tag, "include") ? JL_INCLUDE : !strcmp(tag, "import") ? JL_IMPORT
          : !strcmp(tag, "from") ? JL_FROM : JL_EXTENDS;
    if (n->op == JL_INCLUDE && accept_name(p, "ignore") && !accept_name(p, "missing"))
        return fail(p, "expected 'missing'", NULL);
    if (n->op == JL_IMPORT) {
        if (!accept_name(p, "as"))
            return fail(p, "expected 'as'", NULL);
        if (!expect_name(p))
            return NULL;
    }
    if (n->op == JL_FROM) {
        if (!accept_name(p, "import"))
            return fail(p, "expected 'import'", NULL);
        do {
            if (cur(p)->t != JT_NAME || is_name(cur(p), "with") || is_name(cur(p), "without"))
                break;
            if (!expect_name(p) || (accept_name(p, "as") && !expect_name(p)))
                return NULL;
        } while (accept_op(p, ","));
    }
    if (n->op != JL_EXTENDS && (accept_name(p, "with") || accept_name(p, "without")) &&
        !accept_name(p, "context"))
        return fail(p, "expected 'context'", NULL);
    return block_end(p) ? n : NULL;
}

static jnode *stmt(ps *p)
{
    const jtok *t = cur(p);
    if (t->t != JT_NAME)
        return fail(p, "tag name expected", NULL);
    const char *name = tok_name(p, t);
    if (!name)
        return NULL;
    p->i++;
    if (!strcmp(name, "if"))
        return stmt_if(p);
    if (!strcmp(name, "for"))
        return stmt_for(p);
    if (!strcmp(name, "set"))
        return stmt_set(p);
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        jnode *n = node(p, name[0] == 'b' ? JN_BREAK : JN_CONTINUE);
        return n && block_end(p) ? n : NULL;
    }
    if (!strcmp(name, "macro")) {
        jnode *n = node(p, JN_MACRO);
        if (!n || !(n->name = expect_name(p)))
            return NULL;
        signature(p, n);
        if (p->failed || !block_end(p))
            return NULL;
        n->list = body_until(p, "endmacro", &n->n);
        if (p->failed)
            return NULL;
        n->op = macro_flags(n);
        return n;
    }
    if (!strcmp(name, "call")) {
        jnode *n = node(p, JN_CALL_BLOCK);
        if (!n)
            return NULL;
        if (is_op(cur(p), "("))
            signature(p, n);
        if (p->failed || !(n->a = expr(p, 1)))
            return NULL;
        if (n->a->kind != JN_CALL)
            return fail(p, "expected call", NULL);
        if (!block_end(p))
            return NULL;
        n->list = body_until(p, "endcall", &n->n);
        if (p->failed)
            return NULL;
        n->op = macro_flags(n);
        return n;
    }
    if (!strcmp(name, "filter")) {
        jnode *n = node(p, JN_FILTER_BLOCK);
        if (!n || !(n->c = filter(p, NULL, 1)) || !block_end(p))
            return NULL;
        n->list = body_until(p, "endfilter", &n->n);
        return p->failed ? NULL : n;
    }
    if (!strcmp(name, "generation")) {
        jnode *n = node(p, JN_BODY);
        if (!n || !block_end(p))
            return NULL;
        n->list = body_until(p, "endgeneration", &n->n);
        return p->failed ? NULL : n;
    }
    if (!strcmp(name, "with")) {
        jnode *n = node(p, JN_WITH);
        vec names = {0}, vals = {0};
        while (n && !p->failed && cur(p)->t != JT_BLOCK_END) {
            if (names.n && !expect_op(p, ","))
                break;
            vpush(p, &names, (void *)expect_name(p));
            if (expect_op(p, "="))
                vpush(p, &vals, expr(p, 1));
        }
        if (!n)
            return NULL;
        n->names = (const char **)vdone(p, &names, &n->nn);
        n->list2 = (jnode **)vdone(p, &vals, &n->n2);
        if (p->failed || !block_end(p))
            return NULL;
        n->list = body_until(p, "endwith", &n->n);
        return p->failed ? NULL : n;
    }
    if (!strcmp(name, "include") || !strcmp(name, "import") || !strcmp(name, "from") ||
        !strcmp(name, "extends"))
        return stmt_load(p, name);
    if (!strcmp(name, "block")) {
        jnode *n = node(p, JN_BLOCK);
        if (!n || !(n->name = expect_name(p)))
            return NULL;
        n->recursive = accept_name(p, "scoped");
        accept_name(p, "required");
        if (!block_end(p))
            return NULL;
        static const char *const ends[] = {"endblock", NULL};
        n->list = statements(p, ends, &n->n);
        if (p->failed || !accept_name(p, "endblock"))
            return p->failed ? NULL : fail(p, "expected 'endblock'", NULL);
        if (cur(p)->t == JT_NAME) {
            const char *e = expect_name(p);
            if (e && strcmp(e, n->name))
                return fail(p, "mismatching name of endblock tag", NULL);
        }
        return block_end(p) ? n : NULL;
    }
    return fail(p, "Encountered unknown tag '%s'", name);
}

static int is_end(ps *p, const char *const *ends)
{
    for (int k = 0; ends && ends[k]; k++)
        if (is_name(cur(p), ends[k]))
            return 1;
    return 0;
}

static jnode **statements(ps *p, const char *const *ends, int *n)
{
    vec v = {0};
    if (++p->depth > PS_MAX_DEPTH) {
        fail(p, "blocks nested too deeply", NULL);
        return NULL;
    }
    while (!p->failed) {
        const jtok *t = cur(p);
        if (t->t == JT_EOF) {
            if (ends && ends[0])
                fail(p, "Unexpected end of template. Jinja was looking for the following tags: "
                     "'%s'", ends[0]);
            break;
        }
        if (t->t == JT_DATA) {
            jnode *d = node(p, JN_TEXT);
            jstr *s = jx_alloc(p->a, sizeof *s + t->n + 1);
            if (!d || !s) {
                nomem(p);
                break;
            }
            memcpy(s->b, t->s, t->n);
            s->len = t->n;
            d->lit.t = JV_STR;
            d->lit.u.s = s;
            vpush(p, &v, d);
            p->i++;
        } else if (t->t == JT_VAR_BEGIN) {
            p->i++;
            jnode *o = node(p, JN_OUTPUT);
            if (!o || !(o->a = tuple_expr(p, 1, NULL, 0)))
                break;
            if (cur(p)->t != JT_VAR_END) {
                fail(p, "expected end of print statement", NULL);
                break;
            }
            p->i++;
            vpush(p, &v, o);
        } else if (t->t == JT_BLOCK_BEGIN) {
            p->i++;
            if (is_end(p, ends))
                break;
            jnode *s = stmt(p);
            if (!s)
                break;
            vpush(p, &v, s);
        } else {
            fail(p, "unexpected token", NULL);
        }
    }
    p->depth--;
    if (!p->failed && !ends && cur(p)->t != JT_EOF)
        fail(p, "unexpected tag", NULL);
    jnode **b = (jnode **)vdone(p, &v, n);
    return p->failed ? NULL : b;
}

int jx_parse(const jtoks *toks, jx_arena *a, jnode **root, int *iterates_content, inf_err *err)
{
    ps p = {.t = toks, .a = a, .err = err};
    jnode *r = node(&p, JN_BODY);
    if (r)
        r->list = statements(&p, NULL, &r->n);
    if (p.failed || !r) {
        if (!p.failed)
            inf_fail(err, INF_ERR_NOMEM, "chat template: out of memory");
        return err && err->code ? err->code : INF_ERR_FORMAT;
    }
    *root = r;
    *iterates_content = p.iterates_content;
    return INF_OK;
}
