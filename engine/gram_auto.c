/* The grammar's pushdown automaton, built lazily.
 *
 * A rule stack is a chain of nodes (pos, parent): pos is the next element
 * to match in some rule, parent the stack below (where to continue when that
 * rule's alternative ends). Nodes are hash-consed, so a stack is one int and
 * stacks share their tails; a continuation at the end of an alternative is
 * replaced by its parent at once (tail calls), which keeps `x ::= y x |`
 * loops from growing the stack. A parser state is the sorted set of stacks
 * whose top is a character class, plus whether the empty stack (the end of
 * root) is reachable; states are interned too, and transitions (state,
 * code point) -> state memoized, so after warm-up a step is a hash lookup. */
#include <stdlib.h>
#include <string.h>

#include "gram_int.h"

#define MAX_NODES (1 << 22) /* an automaton past this refuses to grow */
/* Parse positions one state may hold: a nullable item repeated n times
 * ("x?{100000}") puts all n in every state, and each new state would cost
 * that much; real grammars hold a few hundred. */
#define MAX_WIDTH (1 << 16)

/* u64 -> i32 open-addressed map; keys are stored + 1 so 0 marks empty. */
typedef struct imap {
    uint64_t *k;
    int32_t *v;
    size_t cap, n;
} imap;

static size_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x;
}

static int imap_get(const imap *m, uint64_t key, int32_t *v)
{
    if (!m->cap)
        return 0;
    for (size_t i = mix(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->k[i])
            return 0;
        if (m->k[i] == key + 1) {
            *v = m->v[i];
            return 1;
        }
    }
}

static int imap_put(imap *m, uint64_t key, int32_t v)
{
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        uint64_t *k = calloc(cap, sizeof *k);
        int32_t *vv = malloc(cap * sizeof *vv);
        if (!k || !vv) {
            free(k);
            free(vv);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->k[i])
                continue;
            size_t j = mix(m->k[i] - 1) & (cap - 1);
            while (k[j])
                j = (j + 1) & (cap - 1);
            k[j] = m->k[i];
            vv[j] = m->v[i];
        }
        free(m->k);
        free(m->v);
        m->k = k;
        m->v = vv;
        m->cap = cap;
    }
    size_t i = mix(key) & (m->cap - 1);
    while (m->k[i] && m->k[i] != key + 1)
        i = (i + 1) & (m->cap - 1);
    if (!m->k[i])
        m->n++;
    m->k[i] = key + 1;
    m->v[i] = v;
    return 0;
}

typedef struct ivec {
    int32_t *p;
    size_t n, cap;
} ivec;

static int ivec_push(ivec *v, int32_t x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        int32_t *q = realloc(v->p, cap * sizeof *q);
        if (!q)
            return -1;
        v->p = q;
        v->cap = cap;
    }
    v->p[v->n++] = x;
    return 0;
}

struct gram_auto {
    const gram *g;
    const gram_vocab *v;
    int32_t *eos;
    int n_eos;
    /* nodes */
    ivec npos, npar;
    imap nodes;       /* (pos, parent + 1) -> node id                        */
    uint32_t *seen;   /* [cap] generation stamp per node, for one expansion */
    size_t seen_cap;
    uint32_t gen;
    /* states: nodes of state s are pool[off[s] .. off[s + 1]) */
    ivec pool, off;
    uint8_t *accept;  /* [n_states]                                          */
    size_t accept_cap;
    int32_t *stab;    /* open-addressed state ids by content, -1 empty       */
    size_t stab_cap;
    imap trans;       /* (state, code point or partial) -> state / viable   */
    uint32_t **masks; /* [n_states] cached masks                             */
    size_t masks_cap;
    gram_auto_stats stats;
    ivec work, out;   /* scratch for one expansion                           */
    int32_t start;
    int overflow;
    int too_wide;     /* the overflow was a state over MAX_WIDTH positions   */
};

static int32_t n_states(const gram_auto *a)
{
    return (int32_t)a->off.n - 1;
}

/* The node (pos, parent), made when new; -1 when the automaton is full. */
static int32_t node(gram_auto *a, int32_t pos, int32_t parent)
{
    uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)(parent + 1);
    int32_t id;
    if (imap_get(&a->nodes, key, &id))
        return id;
    if (a->npos.n >= MAX_NODES) {
        a->overflow = 1;
        return -1;
    }
    id = (int32_t)a->npos.n;
    if (ivec_push(&a->npos, pos) || ivec_push(&a->npar, parent) ||
        imap_put(&a->nodes, key, id)) {
        a->overflow = 1;
        return -1;
    }
    return id;
}

/* Pushes node (pos, parent) for expansion, or the parent itself when pos
 * ends an alternative (-1: the empty stack). */
static int push_cont(gram_auto *a, int32_t pos, int32_t parent)
{
    if (gram__is_end(a->g->e + pos))
        return ivec_push(&a->work, parent < 0 ? -1 : parent);
    int32_t n = node(a, pos, parent);
    return n < 0 ? -1 : ivec_push(&a->work, n);
}

/* Pushes every alternative of rule r, continuing at cont. */
static int push_rule(gram_auto *a, uint32_t r, int32_t cont)
{
    const gram_elem *e = a->g->e;
    int32_t i = a->g->rule_start[r];
    for (;;) {
        if (gram__is_end(e + i)) {
            if (ivec_push(&a->work, cont))
                return -1;
        } else {
            int32_t n = node(a, i, cont);
            if (n < 0 || ivec_push(&a->work, n))
                return -1;
            while (!gram__is_end(e + i))
                i++;
        }
        if (e[i].type == GE_END)
            return 0;
        i++;
    }
}

static int cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return a < b ? -1 : a > b;
}

static size_t state_hash(const int32_t *p, size_t n, int acc)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)acc;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)p[i]) * 0x100000001b3ull;
    return mix(h);
}

static int state_eq(const gram_auto *a, int32_t s, const int32_t *p, size_t n, int acc)
{
    size_t o = (size_t)a->off.p[s], m = (size_t)a->off.p[s + 1] - o;
    return m == n && a->accept[s] == acc && !memcmp(a->pool.p + o, p, n * sizeof *p);
}

static int stab_grow(gram_auto *a)
{
    size_t cap = a->stab_cap ? a->stab_cap * 2 : 1024;
    int32_t *t = malloc(cap * sizeof *t);
    if (!t)
        return -1;
    for (size_t i = 0; i < cap; i++)
        t[i] = -1;
    for (int32_t s = 0; s < n_states(a); s++) {
        size_t o = (size_t)a->off.p[s];
        size_t j = state_hash(a->pool.p + o, (size_t)a->off.p[s + 1] - o, a->accept[s]) & (cap - 1);
        while (t[j] >= 0)
            j = (j + 1) & (cap - 1);
        t[j] = s;
    }
    free(a->stab);
    a->stab = t;
    a->stab_cap = cap;
    return 0;
}

/* The state of the set in a->out (sorted here) with acc; made when new. */
static int32_t intern_state(gram_auto *a, int acc)
{
    int32_t *p = a->out.p;
    size_t n = a->out.n;
    if (!n && !acc)
        return GRAM__DEAD;
    if (n) /* an accept-only state has no stacks (and out.p may be NULL) */
        qsort(p, n, sizeof *p, cmp_i32);
    if (2 * ((size_t)n_states(a) + 1) > a->stab_cap && stab_grow(a))
        return GRAM__DEAD;
    size_t j = state_hash(p, n, acc) & (a->stab_cap - 1);
    for (; a->stab[j] >= 0; j = (j + 1) & (a->stab_cap - 1))
        if (state_eq(a, a->stab[j], p, n, acc))
            return a->stab[j];
    int32_t s = n_states(a);
    if ((size_t)s + 1 > a->accept_cap) {
        size_t cap = a->accept_cap ? a->accept_cap * 2 : 256;
        uint8_t *q = realloc(a->accept, cap);
        uint32_t **m = realloc(a->masks, cap * sizeof *m);
        if (q)
            a->accept = q;
        if (m)
            a->masks = m;
        if (!q || !m)
            return GRAM__DEAD;
        memset(a->masks + a->accept_cap, 0, (cap - a->accept_cap) * sizeof *m);
        a->accept_cap = cap;
    }
    for (size_t i = 0; i < n; i++)
        if (ivec_push(&a->pool, p[i]))
            return GRAM__DEAD;
    if (ivec_push(&a->off, (int32_t)a->pool.n))
        return GRAM__DEAD;
    a->accept[s] = (uint8_t)acc;
    a->stab[j] = s;
    a->stats.states++;
    return s;
}

/* Expands a->work until every stack's top is a class; interns the result. */
static int32_t expand(gram_auto *a)
{
    const gram_elem *e = a->g->e;
    int acc = 0, width = 0;
    a->out.n = 0;
    if (++a->gen == 0) {
        memset(a->seen, 0, a->seen_cap * sizeof *a->seen);
        a->gen = 1;
    }
    while (a->work.n && !a->overflow) {
        int32_t n = a->work.p[--a->work.n];
        if (n < 0) {
            acc = 1;
            continue;
        }
        if ((size_t)n >= a->seen_cap) {
            size_t cap = a->seen_cap ? a->seen_cap : 1024;
            while (cap <= (size_t)n)
                cap *= 2;
            uint32_t *q = realloc(a->seen, cap * sizeof *q);
            if (!q) {
                a->overflow = 1;
                break;
            }
            memset(q + a->seen_cap, 0, (cap - a->seen_cap) * sizeof *q);
            a->seen = q;
            a->seen_cap = cap;
        }
        if (a->seen[n] == a->gen)
            continue;
        a->seen[n] = a->gen;
        if (++width > MAX_WIDTH) {
            a->overflow = a->too_wide = 1;
            break;
        }
        int32_t pos = a->npos.p[n], par = a->npar.p[n];
        if (gram__is_char(e + pos)) {
            if (ivec_push(&a->out, n))
                a->overflow = 1;
            continue;
        }
        /* a rule reference: its alternatives, continuing after it */
        int32_t cont = par;
        if (!gram__is_end(e + pos + 1) && (cont = node(a, pos + 1, par)) < 0)
            break;
        if (push_rule(a, e[pos].value, cont))
            a->overflow = 1;
    }
    a->work.n = 0;
    if (a->overflow)
        return GRAM__DEAD;
    return intern_state(a, acc);
}

static int32_t advance(gram_auto *a, int32_t sid, uint32_t cp)
{
    uint64_t key = (uint64_t)(uint32_t)sid << 32 | cp;
    int32_t to;
    if (imap_get(&a->trans, key, &to))
        return to;
    const gram_elem *e = a->g->e;
    a->work.n = 0;
    for (int32_t i = a->off.p[sid]; i < a->off.p[sid + 1]; i++) {
        int32_t n = a->pool.p[i], pos = a->npos.p[n];
        if (!gram__class_hits(e + pos, cp, cp))
            continue;
        if (push_cont(a, pos + gram__class_len(e + pos), a->npar.p[n]))
            a->overflow = 1;
    }
    to = expand(a);
    if (!a->overflow && imap_put(&a->trans, key, to))
        a->overflow = 1;
    return to;
}

/* Whether some stack of sid takes a code point in [lo, hi] (memoized under
 * the partial character's key). */
static int viable(gram_auto *a, int32_t sid, uint32_t pkey, uint32_t lo, uint32_t hi)
{
    uint64_t key = (uint64_t)(uint32_t)sid << 32 | pkey;
    int32_t v;
    if (imap_get(&a->trans, key, &v))
        return v;
    v = 0;
    /* surrogates are never characters: test the range around them */
    uint32_t lo2 = lo < 0xE000 ? 0xE000 : lo, hi1 = hi > 0xD7FF ? 0xD7FF : hi;
    for (int32_t i = a->off.p[sid]; i < a->off.p[sid + 1] && !v; i++) {
        const gram_elem *e = a->g->e + a->npos.p[a->pool.p[i]];
        v = (lo <= hi1 && gram__class_hits(e, lo, hi1)) || (lo2 <= hi && gram__class_hits(e, lo2, hi));
    }
    if (imap_put(&a->trans, key, v))
        a->overflow = 1;
    return v;
}

gram__pos gram__step_byte(gram_auto *a, gram__pos p, uint8_t b)
{
    gram__pos dead = {GRAM__DEAD, 0, 0, 0};
    if (p.sid < 0)
        return dead;
    uint32_t cp;
    if (!p.need) {
        if (b < 0x80) {
            cp = b;
        } else {
            int need = b >= 0xC2 && b <= 0xDF ? 1 : b >= 0xE0 && b <= 0xEF ? 2 : b >= 0xF0 && b <= 0xF4 ? 3 : 0;
            if (!need)
                return dead;
            p.need = (uint8_t)need;
            p.nb = 1;
            p.acc = b & (0x3F >> need);
            goto partial;
        }
    } else {
        if ((b & 0xC0) != 0x80)
            return dead;
        p.acc = p.acc << 6 | (b & 0x3F);
        p.nb++;
        if (--p.need)
            goto partial;
        cp = p.acc;
        static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_of[p.nb] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return dead;
        p.nb = 0;
        p.acc = 0;
    }
    p.sid = advance(a, p.sid, cp);
    return p;
partial:;
    static const uint32_t min_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    int total = p.nb + p.need;
    uint32_t lo = p.acc << (6 * p.need), hi = lo | ((1u << (6 * p.need)) - 1);
    if (lo < min_len[total])
        lo = min_len[total];
    if (hi > 0x10FFFF)
        hi = 0x10FFFF;
    if (lo > hi)
        return dead;
    uint32_t pkey = 0x80000000u | (uint32_t)p.need << 24 | (uint32_t)p.nb << 22 | p.acc;
    if (!viable(a, p.sid, pkey, lo, hi))
        return dead;
    return p;
}

gram__pos gram__start(gram_auto *a)
{
    return (gram__pos){a->start, 0, 0, 0};
}

int gram__state_accepts(const gram_auto *a, int32_t sid)
{
    return sid >= 0 && a->accept[sid];
}

int gram__state_open(const gram_auto *a, int32_t sid)
{
    return sid >= 0 && a->off.p[sid + 1] > a->off.p[sid];
}

const gram_vocab *gram__vocab(const gram_auto *a)
{
    return a->v;
}

const int32_t *gram__eos(const gram_auto *a, int *n)
{
    *n = a->n_eos;
    return a->eos;
}

const uint32_t *gram__mask_get(gram_auto *a, int32_t sid)
{
    if (sid < 0 || !a->masks[sid])
        return NULL;
    a->stats.mask_hits++;
    return a->masks[sid];
}

void gram__mask_put(gram_auto *a, int32_t sid, uint32_t *words)
{
    a->stats.mask_walks++;
    if (sid < 0 || a->masks[sid]) {
        free(words);
        return;
    }
    a->masks[sid] = words;
}

int gram_auto_create(const gram *g, const gram_vocab *v, const int32_t *eos, int n_eos,
                     gram_auto **out, inf_err *err)
{
    *out = NULL;
    if (!g || n_eos < 0 || (n_eos && !eos))
        return inf_fail(err, INF_ERR_INVALID, "gram_auto_create: bad arguments");
    gram_auto *a = calloc(1, sizeof *a);
    if (!a)
        return inf_fail(err, INF_ERR_NOMEM, "grammar: out of memory");
    a->g = g;
    a->v = v;
    if (n_eos) {
        a->eos = malloc(sizeof(int32_t) * (size_t)n_eos);
        if (!a->eos)
            goto nomem;
        memcpy(a->eos, eos, sizeof(int32_t) * (size_t)n_eos);
        a->n_eos = n_eos;
    }
    if (ivec_push(&a->off, 0) || push_rule(a, (uint32_t)g->root, -1))
        goto nomem;
    a->start = expand(a);
    if (a->too_wide) {
        gram_auto_destroy(a);
        return inf_fail(err, INF_ERR_INVALID, "grammar: over %d parse positions at once (an "
                        "optional item repeated that often?)", MAX_WIDTH);
    }
    if (a->overflow)
        goto nomem;
    *out = a;
    return INF_OK;
nomem:
    gram_auto_destroy(a);
    return inf_fail(err, INF_ERR_NOMEM, "grammar: out of memory building the automaton");
}

void gram_auto_destroy(gram_auto *a)
{
    if (!a)
        return;
    for (int32_t s = 0; s < n_states(a); s++)
        free(a->masks[s]);
    free(a->masks);
    free(a->eos);
    free(a->npos.p);
    free(a->npar.p);
    free(a->nodes.k);
    free(a->nodes.v);
    free(a->seen);
    free(a->pool.p);
    free(a->off.p);
    free(a->accept);
    free(a->stab);
    free(a->trans.k);
    free(a->trans.v);
    free(a->work.p);
    free(a->out.p);
    free(a);
}

gram_auto_stats gram_auto_stats_get(const gram_auto *a)
{
    return a->stats;
}

int gram_accepts(const gram *g, const char *text, size_t len)
{
    gram_auto *a = NULL;
    if (gram_auto_create(g, NULL, NULL, 0, &a, NULL))
        return 0;
    gram__pos p = gram__start(a);
    for (size_t i = 0; i < len && p.sid >= 0; i++)
        p = gram__step_byte(a, p, (uint8_t)text[i]);
    int ok = p.sid >= 0 && !p.need && a->accept[p.sid];
    gram_auto_destroy(a);
    return ok;
}
