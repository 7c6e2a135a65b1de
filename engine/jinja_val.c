/* jinja values: the arena they live in, constructors, Python's str(),
 * repr() and json.dumps() of them, == and ordering, UTF-8 helpers. */
#include "jinja_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */

struct jx_chunk {
    jx_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

#define JX_CHUNK (64 * 1024)

void *jx_alloc(jx_arena *a, size_t n)
{
    void *p = jx_alloc_raw(a, n);
    if (p)
        memset(p, 0, n);
    return p;
}

void *jx_alloc_raw(jx_arena *a, size_t n)
{
    if (n > SIZE_MAX / 4) /* rounding up must not wrap */
        return NULL;
    n = (n + 15) & ~(size_t)15;
    if (a->cap && a->used + n > a->cap) {
        a->full = 1;
        return NULL;
    }
    jx_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > JX_CHUNK / 2 ? n : JX_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        if (n > JX_CHUNK / 2 && a->head) { /* a big block: keep the current chunk first */
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    a->used += n;
    return p;
}

void jx_arena_free(jx_arena *a)
{
    jx_chunk *c = a->head;
    while (c) {
        jx_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
    a->used = 0;
}

static void *alloc_failed(jctx *c)
{
    if (c->arena.full)
        jx_fail(c, "the template used more than %zu bytes of memory", c->o->max_memory);
    else
        jx_fail(c, "out of memory");
    c->code = c->arena.full ? INF_ERR_INVALID : INF_ERR_NOMEM;
    return NULL;
}

static void *ctx_alloc(jctx *c, size_t n)
{
    void *p = jx_alloc(&c->arena, n);
    return p ? p : alloc_failed(c);
}

/* --------------------------------------------------------- constructors */

/* A string's room, not zeroed (strings are most of what a render
 * allocates): the bytes and the NUL are written by the caller. */
static jstr *str_alloc(jctx *c, size_t n)
{
    jstr *p = jx_alloc_raw(&c->arena, sizeof *p + n + 1);
    if (!p)
        return alloc_failed(c);
    p->len = n;
    p->b[n] = 0;
    return p;
}

int jv_str(jctx *c, const char *s, size_t n, jv *out)
{
    jstr *p = str_alloc(c, n);
    if (!p)
        return -1;
    if (n && s) /* s NULL: room for the caller to fill */
        memcpy(p->b, s, n);
    else if (n)
        memset(p->b, 0, n);
    *out = (jv){.t = JV_STR, .u.s = p};
    return 0;
}

int jv_str2(jctx *c, const jstr *a, const jstr *b, jv *out)
{
    jstr *p = str_alloc(c, a->len + b->len);
    if (!p)
        return -1;
    memcpy(p->b, a->b, a->len);
    memcpy(p->b + a->len, b->b, b->len);
    *out = (jv){.t = JV_STR, .u.s = p};
    return 0;
}

int jv_cstr(jctx *c, const char *s, jv *out)
{
    return jv_str(c, s, strlen(s), out);
}

int jv_list_new(jctx *c, int cap, jv *out)
{
    jlist *l = ctx_alloc(c, sizeof *l);
    if (!l)
        return -1;
    if (cap > 0 && !(l->v = ctx_alloc(c, (size_t)cap * sizeof *l->v)))
        return -1;
    l->cap = cap > 0 ? cap : 0;
    *out = (jv){.t = JV_LIST, .u.l = l};
    return 0;
}

int jv_list_push(jctx *c, jv list, jv item)
{
    jlist *l = list.u.l;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        jv *v = ctx_alloc(c, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        if (l->n)
            memcpy(v, l->v, (size_t)l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = item;
    return 0;
}

int jv_dict_new(jctx *c, jv *out)
{
    jdict *d = ctx_alloc(c, sizeof *d);
    if (!d)
        return -1;
    *out = (jv){.t = JV_DICT, .u.d = d};
    return 0;
}

jv *jv_dict_find(jctx *c, jv dict, jv key)
{
    (void)c;
    jdict *d = dict.u.d;
    for (int i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], key))
            return &d->v[i];
    return NULL;
}

jv *jv_dict_get(jv dict, const char *key, size_t klen)
{
    jdict *d = dict.u.d;
    for (int i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == klen &&
            memcmp(d->k[i].u.s->b, key, klen) == 0)
            return &d->v[i];
    return NULL;
}

int jv_dict_set(jctx *c, jv dict, jv key, jv val)
{
    jv *old = jv_dict_find(c, dict, key);
    if (old) {
        *old = val;
        return 0;
    }
    return jv_dict_add(c, dict, key, val);
}

int jv_dict_add(jctx *c, jv dict, jv key, jv val)
{
    jdict *d = dict.u.d;
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 4;
        jv *k = ctx_alloc(c, (size_t)cap * sizeof *k), *v = ctx_alloc(c, (size_t)cap * sizeof *v);
        if (!k || !v)
            return -1;
        if (d->n) {
            memcpy(k, d->k, (size_t)d->n * sizeof *k);
            memcpy(v, d->v, (size_t)d->n * sizeof *v);
        }
        d->k = k;
        d->v = v;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
    return 0;
}

int jv_undef_hint(jctx *c, jv *out, const char *fmt, ...)
{
    char m[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    jv s;
    if (jv_cstr(c, m, &s))
        return -1;
    *out = (jv){.t = JV_UNDEF, .u.s = s.u.s};
    return 0;
}

int jv_from_json(jctx *c, const cJSON *j, jv *out)
{
    if (c->depth > c->o->max_depth * 4)
        return jx_fail(c, "input nested too deeply");
    if (cJSON_IsNull(j) || !j) {
        *out = jv_none();
    } else if (cJSON_IsBool(j)) {
        *out = jv_bool(cJSON_IsTrue(j));
    } else if (cJSON_IsNumber(j)) {
        double f = j->valuedouble;
        /* cJSON keeps no trace of "1.0" vs "1": integral values are ints. */
        if (f == floor(f) && fabs(f) < 9.2e18)
            *out = jv_int((int64_t)f);
        else
            *out = jv_float(f);
    } else if (cJSON_IsString(j)) {
        return jv_cstr(c, j->valuestring, out);
    } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        int obj = cJSON_IsObject(j);
        if (obj ? jv_dict_new(c, out) : jv_list_new(c, cJSON_GetArraySize(j), out))
            return -1;
        c->depth++;
        for (const cJSON *it = j->child; it; it = it->next) {
            jv v, k;
            if (jv_from_json(c, it, &v))
                return -1;
            if (obj ? jv_cstr(c, it->string ? it->string : "", &k) || jv_dict_add(c, *out, k, v)
                    : jv_list_push(c, *out, v))
                return -1;
        }
        c->depth--;
    } else {
        *out = jv_none();
    }
    return 0;
}

/* --------------------------------------------------------------- basics */

int jv_truthy(jv v)
{
    switch (v.t) {
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    case JV_NS: case JV_FUNC: case JV_LOOP: return 1;
    default: return 0;
    }
}

int jv_is_num(jv v)
{
    return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

double jv_num(jv v)
{
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? v.u.b : 0;
}

const char *jv_type_name(jv v)
{
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "function";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

/* ----------------------------------------------------------------- UTF-8 */

size_t ju_decode(const unsigned char *s, size_t n, unsigned *cp)
{
    return inf_utf8_decode(s, n, cp);
}

int ju_is_space(unsigned cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
           cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t ju_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t ju_offset(const char *s, size_t n, size_t cp)
{
    size_t i = 0;
    while (i < n && cp > 0) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
        cp--;
    }
    return i;
}

/* ---------------------------------------------------------- text forms */

int jb_put(jctx *c, jbuf *b, const char *s, size_t n)
{
    if (b->len + n > c->o->max_output)
        return jx_fail(c, "the template's output exceeded %zu bytes", c->o->max_output);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            jx_fail(c, "out of memory");
            c->code = INF_ERR_NOMEM;
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

static int jb_cstr(jctx *c, jbuf *b, const char *s)
{
    return jb_put(c, b, s, strlen(s));
}

void jfmt_float(double f, char *buf, size_t cap)
{
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e: [-]d[.ddd]e[+-]XX -> digits and a decimal exponent */
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *p = e + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    size_t k = 0;
    if (neg)
        buf[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            k += (size_t)snprintf(buf + k, cap - k, "0.");
            for (int i = 0; i < -exp - 1; i++)
                buf[k++] = '0';
            snprintf(buf + k, cap - k, "%s", digits);
        } else {
            for (int i = 0; i <= exp; i++)
                buf[k++] = i < nd ? digits[i] : '0';
            buf[k++] = '.';
            if (nd > exp + 1)
                snprintf(buf + k, cap - k, "%s", digits + exp + 1);
            else
                snprintf(buf + k, cap - k, "0");
        }
    } else {
        buf[k++] = digits[0];
        if (nd > 1) {
            buf[k++] = '.';
            memcpy(buf + k, digits + 1, (size_t)nd - 1);
            k += (size_t)nd - 1;
        }
        snprintf(buf + k, cap - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

/* repr() of a str: Python's quoting and escapes. */
static int jb_repr_str(jctx *c, jbuf *b, const char *s, size_t n)
{
    int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    if (jb_put(c, b, &q, 1))
        return -1;
    for (size_t i = 0; i < n;) {
        unsigned cp;
        size_t l = ju_decode((const unsigned char *)s + i, n - i, &cp);
        char tmp[16];
        const char *o = NULL;
        if (cp == (unsigned char)q || cp == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)cp;
            tmp[2] = 0;
            o = tmp;
        } else if (cp == '\n') {
            o = "\\n";
        } else if (cp == '\r') {
            o = "\\r";
        } else if (cp == '\t') {
            o = "\\t";
        } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || cp == 0xFFFFFFFFu) {
            snprintf(tmp, sizeof tmp, "\\x%02x", cp == 0xFFFFFFFFu ? (unsigned char)s[i] : cp);
            o = tmp;
        } else if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
                   (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
                   cp == 0x1680 || (cp >= 0xD800 && cp < 0xE000)) {
            snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            o = tmp;
        }
        if (o ? jb_cstr(c, b, o) : jb_put(c, b, s + i, l))
            return -1;
        i += l;
    }
    return jb_put(c, b, &q, 1);
}

static int jb_seq(jctx *c, jbuf *b, jv v, int repr_items)
{
    if (++c->depth > c->o->max_depth)
        return jx_fail(c, "value nested too deeply to print");
    int rc = 0;
    if (v.t == JV_LIST) {
        rc = jb_cstr(c, b, v.tuple ? "(" : "[");
        for (int i = 0; i < v.u.l->n && !rc; i++)
            rc = (i && jb_cstr(c, b, ", ")) || jb_repr(c, b, v.u.l->v[i]);
        if (!rc && v.tuple && v.u.l->n == 1)
            rc = jb_cstr(c, b, ",");
        rc = rc || jb_cstr(c, b, v.tuple ? ")" : "]");
    } else if (v.t == JV_NS && v.tuple) {
        rc = jb_cstr(c, b, "<jinja2.utils.Cycler object>"); /* Python adds its address */
    } else {
        if (v.t == JV_NS)
            rc = jb_cstr(c, b, "<Namespace ");
        rc = rc || jb_cstr(c, b, "{");
        for (int i = 0; i < v.u.d->n && !rc; i++)
            rc = (i && jb_cstr(c, b, ", ")) || jb_repr(c, b, v.u.d->k[i]) ||
                 jb_cstr(c, b, ": ") || jb_repr(c, b, v.u.d->v[i]);
        rc = rc || jb_cstr(c, b, "}");
        if (v.t == JV_NS)
            rc = rc || jb_cstr(c, b, ">");
    }
    (void)repr_items;
    c->depth--;
    return rc ? -1 : 0;
}

int jb_str(jctx *c, jbuf *b, jv v)
{
    char tmp[64];
    switch (v.t) {
    case JV_UNDEF: return 0;
    case JV_NONE: return jb_cstr(c, b, "None");
    case JV_BOOL: return jb_cstr(c, b, v.u.b ? "True" : "False");
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); return jb_cstr(c, b, tmp);
    case JV_FLOAT: jfmt_float(v.u.f, tmp, sizeof tmp); return jb_cstr(c, b, tmp);
    case JV_STR: return jb_put(c, b, v.u.s->b, v.u.s->len);
    case JV_LIST: case JV_DICT: case JV_NS: return jb_seq(c, b, v, 1);
    case JV_FUNC:
        if (v.u.fn->kind == JF_MACRO)
            snprintf(tmp, sizeof tmp, "<Macro '%.40s'>", v.u.fn->name);
        else
            snprintf(tmp, sizeof tmp, "<function %.40s>", v.u.fn->name ? v.u.fn->name : "?");
        return jb_cstr(c, b, tmp);
    case JV_LOOP: return jb_cstr(c, b, "<LoopContext>");
    }
    return 0;
}

int jb_repr(jctx *c, jbuf *b, jv v)
{
    if (v.t == JV_STR)
        return jb_repr_str(c, b, v.u.s->b, v.u.s->len);
    if (v.t == JV_UNDEF)
        return jb_cstr(c, b, "Undefined");
    return jb_str(c, b, v);
}

int jv_to_str(jctx *c, jv v, jv *out)
{
    if (v.t == JV_STR) {
        *out = v;
        return 0;
    }
    if (v.t == JV_INT) {
        char tmp[24];
        int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        return jv_str(c, tmp, (size_t)n, out);
    }
    if (v.t == JV_UNDEF)
        return jv_str(c, "", 0, out);
    jbuf b = {0};
    int rc = jb_str(c, &b, v) || jv_str(c, b.p ? b.p : "", b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

/* json.dumps(ensure_ascii=False) of a string. */
static int jb_json_str(jctx *c, jbuf *b, const char *s, size_t n)
{
    if (jb_put(c, b, "\"", 1))
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *e = NULL;
        char tmp[8];
        switch (ch) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (ch < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", ch);
                e = tmp;
            } else if (ch >= 0x80 && c->json_ascii) {
                unsigned cp;
                size_t l = ju_decode((const unsigned char *)s + i, n - i, &cp);
                char u[16];
                if (cp == 0xFFFFFFFFu)
                    cp = 0xFFFD;
                if (cp >= 0x10000)
                    snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                             0xDC00 + ((cp - 0x10000) & 0x3FF));
                else
                    snprintf(u, sizeof u, "\\u%04x", cp);
                if (jb_put(c, b, s + run, i - run) || jb_cstr(c, b, u))
                    return -1;
                i += l - 1;
                run = i + 1;
                continue;
            }
        }
        if (!e)
            continue;
        if (jb_put(c, b, s + run, i - run) || jb_cstr(c, b, e))
            return -1;
        run = i + 1;
    }
    if (jb_put(c, b, s + run, n - run))
        return -1;
    return jb_put(c, b, "\"", 1);
}

static int jb_newline(jctx *c, jbuf *b, const char *indent, int level)
{
    if (jb_put(c, b, "\n", 1))
        return -1;
    for (int i = 0; i < level; i++)
        if (jb_cstr(c, b, indent))
            return -1;
    return 0;
}

/* A dict key as json.dumps writes it; -1 (with an error) for other types. */
static int jb_json_key(jctx *c, jbuf *b, jv k)
{
    if (k.t == JV_STR)
        return jb_json_str(c, b, k.u.s->b, k.u.s->len);
    if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
        jbuf t = {0};
        int rc = k.t == JV_NONE ? jb_cstr(c, &t, "null")
               : k.t == JV_BOOL ? jb_cstr(c, &t, k.u.b ? "true" : "false")
                                : jb_json(c, &t, k, NULL, 0, 0, ", ", ": ");
        rc = rc || jb_json_str(c, b, t.p, t.len);
        free(t.p);
        return rc ? -1 : 0;
    }
    return jx_fail(c, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
}

int jb_json(jctx *c, jbuf *b, jv v, const char *indent, int level, int sort_keys,
            const char *item_sep, const char *key_sep)
{
    char tmp[64];
    switch (v.t) {
    case JV_NONE: return jb_cstr(c, b, "null");
    case JV_BOOL: return jb_cstr(c, b, v.u.b ? "true" : "false");
    case JV_INT: return jb_str(c, b, v);
    case JV_FLOAT:
        if (isnan(v.u.f))
            return jb_cstr(c, b, "NaN");
        if (isinf(v.u.f))
            return jb_cstr(c, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        jfmt_float(v.u.f, tmp, sizeof tmp);
        return jb_cstr(c, b, tmp);
    case JV_STR: return jb_json_str(c, b, v.u.s->b, v.u.s->len);
    case JV_LIST: case JV_DICT: break;
    default:
        return jx_fail(c, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
    if (++c->depth > c->o->max_depth)
        return jx_fail(c, "value nested too deeply for tojson");
    int is_list = v.t == JV_LIST, n = is_list ? v.u.l->n : v.u.d->n, rc = 0;
    if (n == 0) {
        c->depth--;
        return jb_cstr(c, b, is_list ? "[]" : "{}");
    }
    int *order = NULL;
    if (!is_list) {
        order = ctx_alloc(c, (size_t)n * sizeof *order);
        if (!order)
            return -1;
        for (int i = 0; i < n; i++)
            order[i] = i;
        /* sort_keys: insertion sort by key (Python's ordering; mixed types fail) */
        for (int i = 1; i < n && sort_keys; i++)
            for (int j = i; j > 0; j--) {
                int r;
                if (jv_cmp(c, v.u.d->k[order[j - 1]], v.u.d->k[order[j]], &r))
                    return -1;
                if (r <= 0)
                    break;
                int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
    }
    rc = jb_cstr(c, b, is_list ? "[" : "{");
    for (int i = 0; i < n && !rc; i++) {
        if (i)
            rc = jb_cstr(c, b, item_sep);
        if (!rc && indent)
            rc = jb_newline(c, b, indent, level + 1);
        if (rc)
            break;
        if (is_list) {
            rc = jb_json(c, b, v.u.l->v[i], indent, level + 1, sort_keys, item_sep, key_sep);
        } else {
            int k = order[i];
            rc = jb_json_key(c, b, v.u.d->k[k]) || jb_cstr(c, b, key_sep) ||
                 jb_json(c, b, v.u.d->v[k], indent, level + 1, sort_keys, item_sep, key_sep);
        }
    }
    if (!rc && indent)
        rc = jb_newline(c, b, indent, level);
    rc = rc || jb_cstr(c, b, is_list ? "]" : "}");
    c->depth--;
    return rc ? -1 : 0;
}

/* ---------------------------------------------------------- comparisons */

int jv_eq(jv a, jv b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t)
        return 0;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR:
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->b, b.u.s->b, a.u.s->len) == 0;
    case JV_LIST:
        if (a.tuple != b.tuple || a.u.l->n != b.u.l->n)
            return 0;
        for (int i = 0; i < a.u.l->n; i++)
            if (!jv_eq(a.u.l->v[i], b.u.l->v[i]))
                return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n)
            return 0;
        for (int i = 0; i < a.u.d->n; i++) {
            const jv *o = jv_dict_find(NULL, b, a.u.d->k[i]);
            if (!o || !jv_eq(a.u.d->v[i], *o))
                return 0;
        }
        return 1;
    case JV_NS: return a.u.d == b.u.d;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_LOOP: return a.u.lp == b.u.lp;
    default: return 0;
    }
}

int jv_cmp(jctx *c, jv a, jv b, int *out)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_INT ? a.u.i : a.u.b, y = b.t == JV_INT ? b.u.i : b.u.b;
            *out = (x > y) - (x < y);
        } else {
            double x = jv_num(a), y = jv_num(b);
            *out = (x > y) - (x < y);
        }
        return 0;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->b, b.u.s->b, n);
        *out = r ? (r > 0) - (r < 0) : (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
        return 0;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && a.tuple == b.tuple) {
        for (int i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (jv_eq(a.u.l->v[i], b.u.l->v[i]))
                continue;
            return jv_cmp(c, a.u.l->v[i], b.u.l->v[i], out);
        }
        *out = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return jx_fail(c, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
                   jv_type_name(b));
}
