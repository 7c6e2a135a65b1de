/* jinja utilities: the globals cycler, joiner and lipsum (jinja2/utils.py's
 * Cycler, Joiner and generate_lorem_ipsum).
 *
 * A cycler is a read-only namespace value (jv.tuple set: not assignable,
 * printed as Jinja2 prints one, less the address) holding items, pos and
 * current, with bound next() and reset(). A joiner is a builtin bound to a
 * state of its own. lipsum follows Jinja2's algorithm with the same word
 * list, but Python draws from the random module: its text differs on
 * every render, so ours comes from a fixed generator instead (the same
 * shape: paragraphs of min..max-1 words, commas, full stops, <p> in HTML). */
#include "jinja_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const WORDS[] = {
    "a", "ac", "accumsan", "ad", "adipiscing", "aenean", "aliquam", "aliquet", "amet", "ante",
    "aptent", "arcu", "at", "auctor", "augue", "bibendum", "blandit", "class", "commodo",
    "condimentum", "congue", "consectetuer", "consequat", "conubia", "convallis", "cras",
    "cubilia", "cum", "curabitur", "curae", "cursus", "dapibus", "diam", "dictum", "dictumst",
    "dignissim", "dis", "dolor", "donec", "dui", "duis", "egestas", "eget", "eleifend",
    "elementum", "elit", "enim", "erat", "eros", "est", "et", "etiam", "eu", "euismod",
    "facilisi", "facilisis", "fames", "faucibus", "felis", "fermentum", "feugiat", "fringilla",
    "fusce", "gravida", "habitant", "habitasse", "hac", "hendrerit", "hymenaeos", "iaculis", "id",
    "imperdiet", "in", "inceptos", "integer", "interdum", "ipsum", "justo", "lacinia", "lacus",
    "laoreet", "lectus", "leo", "libero", "ligula", "litora", "lobortis", "lorem", "luctus",
    "maecenas", "magna", "magnis", "malesuada", "massa", "mattis", "mauris", "metus", "mi",
    "molestie", "mollis", "montes", "morbi", "mus", "nam", "nascetur", "natoque", "nec", "neque",
    "netus", "nibh", "nisi", "nisl", "non", "nonummy", "nostra", "nulla", "nullam", "nunc",
    "odio", "orci", "ornare", "parturient", "pede", "pellentesque", "penatibus", "per",
    "pharetra", "phasellus", "placerat", "platea", "porta", "porttitor", "posuere", "potenti",
    "praesent", "pretium", "primis", "proin", "pulvinar", "purus", "quam", "quis", "quisque",
    "rhoncus", "ridiculus", "risus", "rutrum", "sagittis", "sapien", "scelerisque", "sed", "sem",
    "semper", "senectus", "sit", "sociis", "sociosqu", "sodales", "sollicitudin", "suscipit",
    "suspendisse", "taciti", "tellus", "tempor", "tempus", "tincidunt", "torquent", "tortor",
    "tristique", "turpis", "ullamcorper", "ultrices", "ultricies", "urna", "ut", "varius",
    "vehicula", "vel", "velit", "venenatis", "vestibulum", "vitae", "vivamus", "viverra",
    "volutpat", "vulputate",
};
#define N_WORDS ((int)(sizeof WORDS / sizeof *WORDS))

static int bound(jctx *c, const char *name, jbuiltin fn, jv self, jv *out)
{
    jfunc *f = jx_alloc(&c->arena, sizeof *f);
    if (!f)
        return jx_fail(c, "out of memory");
    f->kind = JF_BUILTIN;
    f->name = name;
    f->fn = fn;
    f->self = self;
    *out = (jv){.t = JV_FUNC, .u.fn = f};
    return 0;
}

static int set(jctx *c, jv d, const char *key, jv v)
{
    jv k;
    return jv_cstr(c, key, &k) || jv_dict_set(c, d, k, v);
}

/* --------------------------------------------------------------- cycler */

static int cycler_at(jctx *c, jv self, int64_t pos)
{
    const jv *items = jv_dict_get(self, "items", 5);
    return set(c, self, "pos", jv_int(pos)) ||
           set(c, self, "current", items->u.l->v[pos]);
}

static int m_next(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)a;
    const jv *items = jv_dict_get(self, "items", 5), *pos = jv_dict_get(self, "pos", 3);
    *out = items->u.l->v[pos->u.i];
    return cycler_at(c, self, (pos->u.i + 1) % items->u.l->n);
}

static int m_reset(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)a;
    *out = jv_none();
    return cycler_at(c, self, 0);
}

static int g_cycler(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)self;
    jv items, f;
    if (a->nk)
        return jx_fail(c, "cycler() got an unexpected keyword argument '%s'", a->kname[0]);
    if (a->n == 0)
        return jx_fail(c, "at least one item has to be provided");
    if (jv_dict_new(c, out) || jv_list_new(c, a->n, &items))
        return -1;
    out->t = JV_NS;
    out->tuple = 1;
    items.tuple = 1;
    for (int i = 0; i < a->n; i++)
        items.u.l->v[items.u.l->n++] = a->v[i];
    return set(c, *out, "items", items) || cycler_at(c, *out, 0) ||
           bound(c, "next", m_next, *out, &f) || set(c, *out, "next", f) ||
           bound(c, "reset", m_reset, *out, &f) || set(c, *out, "reset", f);
}

/* --------------------------------------------------------------- joiner */

static int joiner_call(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)c;
    (void)a;
    jv *used = jv_dict_get(self, "used", 4);
    *out = used->u.b ? *jv_dict_get(self, "sep", 3) : self.u.d->k[0]; /* k[0]: "" */
    used->u.b = 1;
    return 0;
}

static int g_joiner(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)self;
    jv state, sep, empty;
    const jv *s = jx_arg(a, 0, "sep");
    if (a->n > 1)
        return jx_fail(c, "joiner() takes at most 1 argument");
    if (jv_dict_new(c, &state) || jv_str(c, "", 0, &empty) || jv_dict_add(c, state, empty, empty))
        return -1;
    if (s)
        sep = *s;
    else if (jv_cstr(c, ", ", &sep))
        return -1;
    return set(c, state, "sep", sep) || set(c, state, "used", jv_bool(0)) ||
           bound(c, "joiner", joiner_call, state, out);
}

/* --------------------------------------------------------------- lipsum */

static uint32_t rnd(uint64_t *s, uint32_t lo, uint32_t hi) /* [lo, hi) */
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return lo + (uint32_t)(*s % (hi - lo));
}

static int g_lipsum(jctx *c, jv self, const jargs *a, jv *out)
{
    (void)self;
    const jv *vn = jx_arg(a, 0, "n"), *vh = jx_arg(a, 1, "html"), *vmin = jx_arg(a, 2, "min"),
             *vmax = jx_arg(a, 3, "max");
    int64_t n = vn && vn->t == JV_INT ? vn->u.i : 5, lo = vmin && vmin->t == JV_INT ? vmin->u.i : 20,
            hi = vmax && vmax->t == JV_INT ? vmax->u.i : 100;
    int html = vh ? jv_truthy(*vh) : 1;
    if (lo >= hi)
        return jx_fail(c, "empty range for randrange() (%lld, %lld, %lld)", (long long)lo,
                       (long long)hi, (long long)(hi - lo));
    if (n < 0 || n > 1000 || lo < 0 || hi > 100000)
        return jx_fail(c, "lipsum: arguments out of range");
    uint64_t s = 0x9E3779B97F4A7C15u;
    jbuf b = {0};
    int rc = jb_put(c, &b, "", 0);
    for (int64_t p = 0; p < n && !rc; p++) {
        if (p)
            rc = jb_put(c, &b, html ? "\n" : "\n\n", html ? 1 : 2);
        if (html && !rc)
            rc = jb_put(c, &b, "<p>", 3);
        int64_t words = rnd(&s, (uint32_t)lo, (uint32_t)hi), last_comma = 0, last_stop = 0;
        int cap = 1, last = -1;
        char end = 0;
        for (int64_t i = 0; i < words && !rc; i++) {
            int w;
            do
                w = (int)rnd(&s, 0, N_WORDS);
            while (w == last);
            last = w;
            char word[32];
            snprintf(word, sizeof word, "%s", WORDS[w]);
            if (cap)
                word[0] = (char)(word[0] - 'a' + 'A');
            cap = 0;
            end = 0;
            if (i - rnd(&s, 3, 8) > last_comma) {
                last_comma = i;
                last_stop += 2;
                end = ',';
            }
            if (i - rnd(&s, 10, 20) > last_stop) {
                last_comma = last_stop = i;
                end = '.';
                cap = 1;
            }
            rc = (i && jb_put(c, &b, " ", 1)) || jb_put(c, &b, word, strlen(word)) ||
                 (end == ',' && jb_put(c, &b, ",", 1)) || (end == '.' && jb_put(c, &b, ".", 1));
        }
        if (!rc && end == ',')
            b.p[b.len - 1] = '.';
        else if (!rc && end != '.')
            rc = jb_put(c, &b, ".", 1);
        if (html && !rc)
            rc = jb_put(c, &b, "</p>", 4);
    }
    rc = rc || jv_str(c, b.p, b.len, out);
    free(b.p);
    return rc ? -1 : 0;
}

int jx_add_util_globals(jctx *c, jscope *g)
{
    static const struct { const char *name; jbuiltin fn; } G[] = {
        {"cycler", g_cycler}, {"joiner", g_joiner}, {"lipsum", g_lipsum}};
    for (size_t i = 0; i < sizeof G / sizeof *G; i++) {
        jv f;
        if (bound(c, G[i].name, G[i].fn, jv_none(), &f) || jx_scope_set(c, g, G[i].name, f))
            return -1;
    }
    return 0;
}
