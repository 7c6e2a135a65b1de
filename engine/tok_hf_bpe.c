/* tok_hf_bpe: the BPE model of tokenizer.json (tokenizers' models/bpe):
 * a word starts as one symbol per character (or per byte through
 * byte_fallback's <0xNN> pieces, or unk), then the pair of lowest merge rank
 * (leftmost among equals) merges until none is left, through a binary heap
 * of candidate merges whose stale entries are skipped when popped: O(n log n)
 * in the word's length, never a rescan. */
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

/* ---- string -> id -------------------------------------------------------------- */

/* A slot carries its key's hash, place and id, so that a lookup touches
 * the slot and the key's bytes only (two cache misses on a large table). */
typedef struct hf_vslot {
    uint32_t hash, off, len; /* off: key offset in keys */
    int32_t id;              /* -1: empty */
} hf_vslot;

struct hf_vocab {
    hf_vslot *slot;   /* [cap] */
    size_t cap;
    uint32_t *order;  /* [n] slot of each string, in the order put */
    size_t n, max;
    inf_buf keys;
};

static uint32_t hf_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

int hf_vocab_create(size_t n, size_t key_bytes, hf_vocab **out)
{
    hf_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return INF_ERR_NOMEM;
    v->cap = 16;
    while (v->cap < n + n / 2 + 16) /* load at most 2/3 */
        v->cap *= 2;
    v->max = n + 16;
    v->slot = malloc(v->cap * sizeof *v->slot);
    v->order = malloc(v->max * sizeof *v->order);
    /* Sized once: a vocabulary's strings never move while it fills. */
    v->keys.cap = key_bytes + v->max;
    v->keys.p = malloc(v->keys.cap);
    if (!v->slot || !v->order || !v->keys.p) {
        hf_vocab_destroy(v);
        return INF_ERR_NOMEM;
    }
    for (size_t i = 0; i < v->cap; i++)
        v->slot[i].id = -1;
    *out = v;
    return INF_OK;
}

void hf_vocab_destroy(hf_vocab *v)
{
    if (!v)
        return;
    free(v->slot);
    free(v->order);
    free(v->keys.p);
    free(v);
}

/* The slot holding s, or the empty one where it would go. */
static size_t hf_vocab_find(const hf_vocab *v, const char *s, size_t n, uint32_t h)
{
    size_t m = v->cap - 1, i = (size_t)(h * 0x9E3779B1u) & m;
    for (;;) {
        const hf_vslot *e = &v->slot[i];
        if (e->id < 0 ||
            (e->hash == h && e->len == n && memcmp(v->keys.p + e->off, s, n) == 0))
            return i;
        i = (i + 1) & m;
    }
}

int hf_vocab_put(hf_vocab *v, const char *s, size_t n, int32_t id)
{
    uint32_t h = hf_hash(s, n);
    size_t i = hf_vocab_find(v, s, n, h);
    if (v->slot[i].id >= 0)
        return 1;
    if (id < 0 || v->n == v->max || 3 * (v->n + 1) > 2 * v->cap ||
        v->keys.len + n + 1 > UINT32_MAX)
        return INF_ERR_NOMEM; /* sized at create for the whole vocabulary */
    size_t off = v->keys.len;
    inf_buf_put(&v->keys, s, n);
    inf_buf_put(&v->keys, "", 1);
    if (v->keys.oom)
        return INF_ERR_NOMEM;
    v->slot[i] = (hf_vslot){h, (uint32_t)off, (uint32_t)n, id};
    v->order[v->n++] = (uint32_t)i;
    return INF_OK;
}

int32_t hf_vocab_get(const hf_vocab *v, const char *s, size_t n)
{
    return v->slot[hf_vocab_find(v, s, n, hf_hash(s, n))].id;
}

uint32_t hf_vocab_hash(const char *s, size_t n)
{
    return hf_hash(s, n);
}

void hf_vocab_prefetch(const hf_vocab *v, uint32_t h)
{
    __builtin_prefetch(&v->slot[(size_t)(h * 0x9E3779B1u) & (v->cap - 1)]);
}

int32_t hf_vocab_get_hashed(const hf_vocab *v, const char *s, size_t n, uint32_t h)
{
    return v->slot[hf_vocab_find(v, s, n, h)].id;
}

size_t hf_vocab_count(const hf_vocab *v)
{
    return v->n;
}

int32_t hf_vocab_at(const hf_vocab *v, size_t i, const char **s, size_t *len)
{
    const hf_vslot *e = &v->slot[v->order[i]];
    *s = v->keys.p + e->off;
    *len = e->len;
    return e->id;
}

/* ---- merges ------------------------------------------------------------------------ */

typedef struct hf_merge {
    uint64_t key;     /* a << 32 | b, plus one so that 0 marks an empty slot */
    uint32_t rank;
    int32_t merged;
} hf_merge;

/* Cutting long words: a word of a Metaspace vocabulary (Gemma, Llama 2)
 * is often the whole text. A symbol that spans the boundary between two
 * characters x and y has a vocabulary string containing "xy", so where no
 * string in the vocabulary contains x followed by the marker U+2581, no
 * merge ever crosses the boundary before that marker, and the two sides
 * merge independently: BPE on the pieces gives the word's ids exactly, and
 * the pieces (ordinary words) hit the encode cache. */
#define HF_CUT_MARK "\xE2\x96\x81"
#define HF_CUT_MAX_BEFORE 64 /* more characters than this before a marker: no cutting */

struct hf_bpe {
    hf_bpe_config c;
    hf_merge *m;
    size_t cap, n;
    int cut;                            /* cutting is exact for this vocabulary */
    int32_t before[HF_CUT_MAX_BEFORE];  /* code points seen right before a marker */
    int n_before;
};

/* The next marker in [q, end), or NULL. memchr, not memmem: a sanitizer's
 * memmem counts the whole rest of the range as read on every call, which
 * makes the scan of a 256k-piece vocabulary quadratic under TSan. */
static const char *cut_find_mark(const char *q, const char *end)
{
    while (end - q >= 3 && (q = memchr(q, HF_CUT_MARK[0], (size_t)(end - q - 2)))) {
        if (q[1] == HF_CUT_MARK[1] && q[2] == HF_CUT_MARK[2])
            return q;
        q++;
    }
    return NULL;
}

static int cut_before_add(hf_bpe *b, int32_t cp)
{
    for (int i = 0; i < b->n_before; i++)
        if (b->before[i] == cp)
            return 1;
    if (b->n_before == HF_CUT_MAX_BEFORE)
        return 0;
    b->before[b->n_before++] = cp;
    return 1;
}

/* Collects what precedes the marker inside vocabulary strings: a scan of
 * the strings back to back (a NUL before the marker, a string's start or a
 * NUL inside one, is counted too: never cutting after U+0000 is safe). */
static void cut_setup(hf_bpe *b)
{
    const hf_vocab *v = b->c.vocab;
    const char *s = v->keys.p, *end = s + v->keys.len;
    b->cut = !b->c.ignore_merges && hf_vocab_get(v, HF_CUT_MARK, 3) >= 0;
    for (const char *q = s; b->cut && (q = cut_find_mark(q, end));
         q += 3) {
        if (q == s)
            continue;
        const char *c = q - 1;
        while (c > s && ((unsigned char)*c & 0xC0) == 0x80)
            c--;
        int32_t cp;
        hf_utf8_next(c, (size_t)(q - c), &cp);
        b->cut = cut_before_add(b, cp);
    }
}

size_t hf_bpe_cut(const hf_bpe *b, const char *s, size_t n)
{
    if (!b->cut)
        return n;
    for (const char *q = s + 1; (q = cut_find_mark(q, s + n));
         q += 3) {
        const char *c = q - 1;
        while (c > s && ((unsigned char)*c & 0xC0) == 0x80)
            c--;
        int32_t cp;
        if (hf_utf8_next(c, (size_t)(q - c), &cp) != (size_t)(q - c))
            continue;
        int seen = 0;
        for (int i = 0; i < b->n_before && !seen; i++)
            seen = b->before[i] == cp;
        /* The character must be its own initial symbol (not bytes, not unk). */
        if (!seen && hf_vocab_get(b->c.vocab, c, (size_t)(q - c)) >= 0)
            return (size_t)(q - s);
    }
    return n;
}

int hf_bpe_create(const hf_bpe_config *c, size_t n_merges, hf_bpe **out)
{
    hf_bpe *b = calloc(1, sizeof *b);
    if (!b)
        return INF_ERR_NOMEM;
    b->c = *c;
    b->cap = 16;
    while (b->cap < n_merges + n_merges / 2 + 16) /* load at most 2/3 */
        b->cap *= 2;
    b->m = calloc(b->cap, sizeof *b->m);
    if (!b->m) {
        free(b);
        return INF_ERR_NOMEM;
    }
    cut_setup(b);
    *out = b;
    return INF_OK;
}

void hf_bpe_destroy(hf_bpe *b)
{
    if (!b)
        return;
    free(b->m);
    free(b);
}

static size_t hf_merge_home(const hf_bpe *b, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (b->cap - 1);
}

void hf_bpe_prefetch_merge(const hf_bpe *b, int32_t a, int32_t bb)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)bb) + 1;
    __builtin_prefetch(&b->m[hf_merge_home(b, key)], 1);
}

static size_t hf_merge_slot(const hf_bpe *b, uint64_t key)
{
    size_t m = b->cap - 1, i = hf_merge_home(b, key);
    while (b->m[i].key && b->m[i].key != key)
        i = (i + 1) & m;
    return i;
}

int hf_bpe_add_merge(hf_bpe *b, int32_t a, int32_t bb, int32_t merged, uint32_t rank)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)bb) + 1;
    size_t i = hf_merge_slot(b, key);
    if (!b->m[i].key) {
        if (3 * (b->n + 1) > 2 * b->cap)
            return INF_ERR_NOMEM;
        b->n++;
    }
    b->m[i] = (hf_merge){key, rank, merged};
    return INF_OK;
}

static const hf_merge *hf_merge_get(const hf_bpe *b, int32_t a, int32_t bb)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)bb) + 1;
    const hf_merge *m = &b->m[hf_merge_slot(b, key)];
    return m->key ? m : NULL;
}

/* ---- one word ------------------------------------------------------------------------- */

typedef struct hf_sym {
    int32_t c;
    int prev, next;
    size_t len;
} hf_sym;

typedef struct hf_cand {
    uint32_t rank;
    int pos;
    int32_t merged;
} hf_cand;

struct hf_bpe_work {
    hf_sym *sym;
    size_t n_sym, cap_sym;
    hf_cand *heap;
    size_t n_heap, cap_heap;
};

hf_bpe_work *hf_bpe_work_create(void)
{
    return calloc(1, sizeof(hf_bpe_work));
}

void hf_bpe_work_destroy(hf_bpe_work *w)
{
    if (!w)
        return;
    free(w->sym);
    free(w->heap);
    free(w);
}

static int sym_add(hf_bpe_work *w, int32_t c, size_t len)
{
    if (w->n_sym == w->cap_sym) {
        size_t cap = w->cap_sym ? 2 * w->cap_sym : 64;
        hf_sym *p = realloc(w->sym, cap * sizeof *p);
        if (!p)
            return INF_ERR_NOMEM;
        w->sym = p;
        w->cap_sym = cap;
    }
    int i = (int)w->n_sym++;
    w->sym[i] = (hf_sym){c, i - 1, i + 1, len};
    return INF_OK;
}

/* Min-heap on (rank, pos), the order of tokenizers' Merge. */
static int cand_less(const hf_cand *x, const hf_cand *y)
{
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static int heap_push(hf_bpe_work *w, hf_cand c)
{
    if (w->n_heap == w->cap_heap) {
        size_t cap = w->cap_heap ? 2 * w->cap_heap : 64;
        hf_cand *p = realloc(w->heap, cap * sizeof *p);
        if (!p)
            return INF_ERR_NOMEM;
        w->heap = p;
        w->cap_heap = cap;
    }
    size_t i = w->n_heap++;
    while (i > 0 && cand_less(&c, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = c;
    return INF_OK;
}

static hf_cand heap_pop(hf_bpe_work *w)
{
    hf_cand top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const hf_cand *best = &last;
        if (l < n && cand_less(&w->heap[l], best)) {
            m = l;
            best = &w->heap[l];
        }
        if (r < n && cand_less(&w->heap[r], best))
            m = r;
        if (m == i)
            break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n)
        w->heap[i] = last;
    return top;
}

static int push_pair(const hf_bpe *b, hf_bpe_work *w, int pos)
{
    int nx = w->sym[pos].next;
    if (nx >= (int)w->n_sym)
        return INF_OK;
    const hf_merge *m = hf_merge_get(b, w->sym[pos].c, w->sym[nx].c);
    return m ? heap_push(w, (hf_cand){m->rank, pos, m->merged}) : INF_OK;
}

static int merge_all(const hf_bpe *b, hf_bpe_work *w)
{
    w->n_heap = 0;
    for (int i = 0; i + 1 < (int)w->n_sym; i++)
        if (push_pair(b, w, i))
            return INF_ERR_NOMEM;
    while (w->n_heap) {
        hf_cand top = heap_pop(w);
        hf_sym *s = &w->sym[top.pos];
        if (s->len == 0 || s->next >= (int)w->n_sym)
            continue;
        int nx = s->next;
        hf_sym right = w->sym[nx];
        const hf_merge *m = hf_merge_get(b, s->c, right.c);
        if (!m || m->merged != top.merged)
            continue; /* stale */
        s->c = top.merged;
        s->len += right.len;
        s->next = right.next;
        w->sym[nx].len = 0;
        if (right.next < (int)w->n_sym)
            w->sym[right.next].prev = top.pos;
        if ((s->prev >= 0 && push_pair(b, w, s->prev)) || push_pair(b, w, top.pos))
            return INF_ERR_NOMEM;
    }
    return INF_OK;
}

static int ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        int32_t *p = realloc(*ids, c * sizeof *p);
        if (!p)
            return INF_ERR_NOMEM;
        *ids = p;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return INF_OK;
}

int hf_bpe_word(const hf_bpe *b, hf_bpe_work *w, const char *s, size_t n, int32_t **ids,
                size_t *n_ids, size_t *cap)
{
    const hf_bpe_config *c = &b->c;
    if (c->ignore_merges) {
        int32_t id = hf_vocab_get(c->vocab, s, n);
        if (id >= 0)
            return ids_push(ids, n_ids, cap, id);
    }
    w->n_sym = 0;
    int32_t unk = -1;
    size_t unk_len = 0;
    int rc = INF_OK;
    for (size_t i = 0; i < n && !rc;) {
        int32_t cp;
        size_t k = hf_utf8_next(s + i, n - i, &cp);
        int32_t id = hf_vocab_get(c->vocab, s + i, k);
        if (id >= 0) {
            if (unk >= 0 && (rc = sym_add(w, unk, unk_len)))
                break;
            unk = -1;
            rc = sym_add(w, id, k);
            i += k;
            continue;
        }
        if (c->byte_fallback) {
            size_t j = 0;
            while (j < k && c->byte_ids[(unsigned char)s[i + j]] >= 0)
                j++;
            if (j == k) { /* as tokenizers does, a pending unk waits */
                for (j = 0; j < k && !rc; j++)
                    rc = sym_add(w, c->byte_ids[(unsigned char)s[i + j]], 1);
                i += k;
                continue;
            }
        }
        if (c->unk >= 0) {
            if (unk >= 0 && c->fuse_unk) {
                unk_len += k;
            } else {
                if (unk >= 0)
                    rc = sym_add(w, unk, unk_len);
                unk = c->unk;
                unk_len = k;
            }
        }
        i += k;
    }
    if (!rc && unk >= 0)
        rc = sym_add(w, unk, unk_len);
    if (!rc)
        rc = merge_all(b, w);
    for (size_t i = 0; i < w->n_sym && !rc; i++)
        if (w->sym[i].len)
            rc = ids_push(ids, n_ids, cap, w->sym[i].c);
    return rc;
}
