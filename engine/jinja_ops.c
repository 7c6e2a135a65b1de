/* jinja operators: Python's arithmetic (int and float rules, overflow
 * checked), str and list + and *, "%" formatting, "in", comparisons. */
#include "jinja_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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


static int binop(jctx *c, int op, jv a, jv b, jv *out)
{
    if (a.t == JV_UNDEF)
        return jx_undef_error(c, a);
    if (b.t == JV_UNDEF)
        return jx_undef_error(c, b);
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
        return jx_percent(c, a, b, out);
    return op_type_error(c, op, a, b);
overflow:
    return jx_fail(c, "integer overflow");
}

/* "fmt" % args for %s, %d, %i, %r, %f and %%: enough for templates. */
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

int jx_compare_int(jctx *c, int op, jv a, jv b, int *out)
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
        return jx_undef_error(c, a);
    if (b.t == JV_UNDEF)
        return jx_undef_error(c, b);
    if (jv_cmp(c, a, b, &r)) {
        static const char *sym[] = {[JO_LT] = "<", [JO_LE] = "<=", [JO_GT] = ">", [JO_GE] = ">="};
        c->failed = 0;
        return jx_fail(c, "'%s' not supported between instances of '%s' and '%s'", sym[op],
                       jv_type_name(a), jv_type_name(b));
    }
    *out = op == JO_LT ? r < 0 : op == JO_LE ? r <= 0 : op == JO_GT ? r > 0 : r >= 0;
    return 0;
}

int jx_binop(jctx *c, int op, jv a, jv b, jv *out)
{
    return binop(c, op, a, b, out);
}

int jx_compare(jctx *c, int op, jv a, jv b, jv *out)
{
    int r;
    if (jx_compare_int(c, op, a, b, &r))
        return -1;
    *out = jv_bool(r);
    return 0;
}
