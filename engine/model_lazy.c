/* Lazy layers (model_load_opts.lazy_layers): a loader that would convert a
 * layer matrix at load (a GGUF file's blocks, an FP8 checkpoint's codes)
 * defers it here instead, and a backend that packs or uploads each layer
 * has it converted just before (model_layer_need) and freed just after
 * (model_layer_packed), so one layer's conversion is held at a time. One
 * list for every format: the loaders only say how to convert
 * (model_convert_bytes / _into say where it goes). */
#include <stdlib.h>

#include "model_int.h"

struct model_lazy {
    model_tensor *out;
    int layer;
    model_convert_fn fn;
    const void *src, *aux;
    int arg;
    void *buf;   /* its conversion while a backend needs it; after, kept as
                    a spare for the next layer's matrix of its size (fresh
                    memory costs a page fault per 4 KB, a third of a lazy
                    load's time), until the last layer is let go */
    size_t cap;  /* buf's bytes */
    int in_use;  /* buf holds this matrix's conversion */
};

/* A spare buffer of at least bytes, taken from an entry that no longer
 * needs it, or a new one; NULL when out of memory. */
static void *take(model *m, size_t bytes, size_t *cap)
{
    struct model_lazy *best = NULL;
    for (int i = 0; i < m->n_lazy; i++) {
        struct model_lazy *z = &m->lazy[i];
        if (z->buf && !z->in_use && z->cap >= bytes && (!best || z->cap < best->cap))
            best = z;
    }
    if (!best) {
        *cap = bytes;
        return inf_alloc_big(bytes);
    }
    void *b = best->buf;
    *cap = best->cap;
    best->buf = NULL;
    best->cap = 0;
    return b;
}

size_t model_convert_bytes(const model_tensor *t)
{
    if (t->q4_lazy)
        return model_q4_bytes(t);
    return (size_t)t->rows * (size_t)t->cols * (t->q8_scale ? 1 : inf_dtype_size(t->dtype));
}

size_t model_q4_bytes(const model_tensor *t)
{
    size_t B = ((size_t)t->cols + 31) / 32, codes = (size_t)t->rows * ((size_t)t->cols / 2);
    return (codes + 1) / 2 * 2 + 3 * (size_t)t->rows * B; /* model_q4_parts */
}

void model_q4_parts(const model_tensor *t, void *dst, uint8_t **u, uint16_t **d, uint8_t **z)
{
    size_t B = ((size_t)t->cols + 31) / 32, codes = (size_t)t->rows * ((size_t)t->cols / 2);
    *u = dst;
    *d = (uint16_t *)((char *)dst + (codes + 1) / 2 * 2); /* aligned for the f16s */
    *z = (uint8_t *)(*d + (size_t)t->rows * B);
}

void model_convert_into(model_tensor *t, void *dst)
{
    if (t->q4_lazy) {
        uint8_t *u, *z;
        uint16_t *d;
        model_q4_parts(t, dst, &u, &d, &z);
        t->q4 = u, t->q4_scale = d, t->q4_zero = z;
    } else if (t->q8_scale)
        t->q8 = dst;
    else
        t->data = dst;
}

/* t's conversion let go, or not made yet. */
static void unbound(model_tensor *t)
{
    t->data = NULL;
    t->q8 = NULL;
    if (t->q4_lazy) {
        t->q4 = t->q4_zero = NULL;
        t->q4_scale = NULL;
    }
}

int model_defer(void *mv, model_tensor *out, int layer, model_convert_fn fn, const void *src,
                const void *aux, int arg, inf_err *err)
{
    model *m = mv;
    if (m->n_lazy == m->cap_lazy) {
        int cap = m->cap_lazy ? 2 * m->cap_lazy : 64;
        struct model_lazy *v = realloc(m->lazy, sizeof *v * (size_t)cap);
        if (!v)
            return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", m->dir);
        m->lazy = v;
        m->cap_lazy = cap;
    }
    m->lazy[m->n_lazy++] = (struct model_lazy){.out = out, .layer = layer, .fn = fn, .src = src,
                                               .aux = aux, .arg = arg};
    unbound(out);
    return INF_OK;
}

int model_has_lazy(const model *m)
{
    return m && m->n_lazy > 0;
}

size_t model_lazy_held(const model *m)
{
    size_t n = 0;
    for (int i = 0; m && i < m->n_lazy; i++)
        n += m->lazy[i].buf ? m->lazy[i].cap : 0;
    return n;
}

int model_layer_need(void *mv, int layer, inf_err *err)
{
    model *m = mv;
    for (int i = 0; m && i < m->n_lazy; i++) {
        struct model_lazy *z = &m->lazy[i];
        if (z->layer != layer || z->in_use)
            continue;
        model_tensor *o = z->out;
        size_t bytes = model_convert_bytes(o);
        if (!z->buf || z->cap < bytes) {
            free(z->buf);
            z->buf = take(m, bytes, &z->cap);
        }
        if (!z->buf)
            return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory converting '%s'", m->dir,
                            o->name ? o->name : "?");
        z->in_use = 1;
        z->fn(z->src, z->aux, z->arg, o, z->buf);
        model_convert_into(o, z->buf);
    }
    return INF_OK;
}

void model__lazy_release(model *m, int layer)
{
    int last = 1; /* no later layer waits: the spares go too */
    for (int i = 0; i < m->n_lazy; i++) {
        struct model_lazy *z = &m->lazy[i];
        last &= z->layer <= layer;
        if (z->layer == layer) {
            z->in_use = 0;
            unbound(z->out);
        }
    }
    for (int i = 0; last && i < m->n_lazy; i++)
        if (!m->lazy[i].in_use) {
            free(m->lazy[i].buf);
            m->lazy[i].buf = NULL;
            m->lazy[i].cap = 0;
        }
}

void model__lazy_free(model *m)
{
    for (int i = 0; i < m->n_lazy; i++)
        free(m->lazy[i].buf);
    free(m->lazy);
}
