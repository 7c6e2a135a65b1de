/* tok_hf: encoding and decoding through a loaded tokenizer.json, in the
 * order the tokenizers library runs its stages (see tok_hf.h); loading is
 * tok_hf_load.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"
#include "tok_int.h"

/* ---- the added-token trie ---------------------------------------------------- */

typedef struct hf_edge {
    uint32_t from; /* node + 1; 0 marks an empty slot */
    uint32_t to;
    unsigned char b;
} hf_edge;

struct hf_trie {
    hf_edge *e;
    size_t cap, n_edges;
    int32_t *value; /* [n_nodes], -1 where no key ends */
    size_t n_nodes, cap_nodes;
    uint8_t first[256];
};

int hf_trie_create(hf_trie **out)
{
    hf_trie *t = calloc(1, sizeof *t);
    if (!t)
        return INF_ERR_NOMEM;
    t->cap = 256;
    t->e = calloc(t->cap, sizeof *t->e);
    t->cap_nodes = 64;
    t->value = malloc(t->cap_nodes * sizeof *t->value);
    if (!t->e || !t->value) {
        hf_trie_destroy(t);
        return INF_ERR_NOMEM;
    }
    t->value[0] = -1;
    t->n_nodes = 1;
    *out = t;
    return INF_OK;
}

void hf_trie_destroy(hf_trie *t)
{
    if (!t)
        return;
    free(t->e);
    free(t->value);
    free(t);
}

static size_t trie_slot(const hf_trie *t, uint32_t from, unsigned char b)
{
    size_t m = t->cap - 1, i = (size_t)((from * 0x9E3779B1u) ^ (b * 0x85EBCA6Bu)) & m;
    while (t->e[i].from && !(t->e[i].from == from && t->e[i].b == b))
        i = (i + 1) & m;
    return i;
}

static int trie_grow(hf_trie *t)
{
    hf_trie old = *t;
    t->cap *= 2;
    t->e = calloc(t->cap, sizeof *t->e);
    if (!t->e) {
        *t = old;
        return INF_ERR_NOMEM;
    }
    for (size_t i = 0; i < old.cap; i++)
        if (old.e[i].from)
            t->e[trie_slot(t, old.e[i].from, old.e[i].b)] = old.e[i];
    free(old.e);
    return INF_OK;
}

int hf_trie_add(hf_trie *t, const char *s, size_t n, int32_t value)
{
    if (n == 0)
        return INF_OK; /* an empty added token never matches */
    uint32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        size_t k = trie_slot(t, node + 1, b);
        if (t->e[k].from) {
            node = t->e[k].to;
            continue;
        }
        if (2 * (t->n_edges + 1) > t->cap) {
            if (trie_grow(t))
                return INF_ERR_NOMEM;
            k = trie_slot(t, node + 1, b);
        }
        if (t->n_nodes == t->cap_nodes) {
            int32_t *v = realloc(t->value, 2 * t->cap_nodes * sizeof *v);
            if (!v)
                return INF_ERR_NOMEM;
            t->value = v;
            t->cap_nodes *= 2;
        }
        t->value[t->n_nodes] = -1;
        t->e[k] = (hf_edge){node + 1, (uint32_t)t->n_nodes, b};
        t->n_edges++;
        node = (uint32_t)t->n_nodes++;
    }
    t->first[(unsigned char)s[0]] = 1;
    if (t->value[node] < 0) /* the first of equal contents wins */
        t->value[node] = value;
    return INF_OK;
}

int hf_trie_first(const hf_trie *t, unsigned char b)
{
    return t->first[b];
}

int32_t hf_trie_longest(const hf_trie *t, const char *s, size_t n, size_t *len)
{
    uint32_t node = 0;
    int32_t best = -1;
    for (size_t i = 0; i < n; i++) {
        const hf_edge *e = &t->e[trie_slot(t, node + 1, (unsigned char)s[i])];
        if (!e->from)
            break;
        node = e->to;
        if (t->value[node] >= 0) {
            best = t->value[node];
            *len = i + 1;
        }
    }
    return best;
}

/* ---- splitting on added tokens ------------------------------------------------- */

/* One piece of the input: text (id < 0) or an added token. */
typedef struct hf_piece {
    size_t off, len;
    int32_t id;
} hf_piece;

typedef struct hf_pieces {
    hf_piece *v;
    size_t n, cap;
} hf_pieces;

static int pieces_add(hf_pieces *p, size_t off, size_t len, int32_t id)
{
    if (len == 0 && id < 0)
        return INF_OK;
    if (p->n == p->cap) {
        size_t c = p->cap ? 2 * p->cap : 16;
        hf_piece *v = realloc(p->v, c * sizeof *v);
        if (!v)
            return INF_ERR_NOMEM;
        p->v = v;
        p->cap = c;
    }
    p->v[p->n++] = (hf_piece){off, len, id};
    return INF_OK;
}

static int32_t last_char(const char *s, size_t n)
{
    if (n == 0)
        return -1;
    size_t j = n - 1;
    while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80)
        j--;
    int32_t cp;
    hf_utf8_next(s + j, n - j, &cp);
    return cp;
}

static int is_word_char(int32_t c)
{
    return c >= 0 && (hf_is_alnum(c) || c == '_');
}

/* Splits s[0:n] on the trie's added tokens as tokenizers'
 * AddedVocabulary::split_with_indices does (single_word, lstrip, rstrip). */
static int split_added(const hf_impl *h, const hf_trie *tr, const char *s, size_t n,
                       hf_pieces *out)
{
    size_t start_off = 0, i = 0;
    if (!tr) /* a file without added_tokens */
        return pieces_add(out, 0, n, -1);
    while (i < n) {
        size_t len = 0;
        int32_t a = hf_trie_first(tr, (unsigned char)s[i]) ? hf_trie_longest(tr, s + i, n - i, &len)
                                                            : -1;
        if (a < 0) {
            i++;
            continue;
        }
        const hf_added *ad = &h->added[a];
        size_t st = i, en = i + len;
        if (ad->single_word) {
            int pre_ok = st == 0 || !is_word_char(last_char(s, st));
            int32_t nc = -1;
            if (en < n)
                hf_utf8_next(s + en, n - en, &nc);
            if (!pre_ok || (en < n && is_word_char(nc))) {
                i++;
                continue;
            }
        }
        if (ad->lstrip) {
            while (st > start_off) {
                size_t j = st - 1;
                while (j > start_off && ((unsigned char)s[j] & 0xC0) == 0x80)
                    j--;
                int32_t cp;
                hf_utf8_next(s + j, st - j, &cp);
                if (!hf_is_white(cp))
                    break;
                st = j;
            }
        }
        if (ad->rstrip) {
            while (en < n) {
                int32_t cp;
                size_t k = hf_utf8_next(s + en, n - en, &cp);
                if (!hf_is_white(cp))
                    break;
                en += k;
            }
        }
        if (pieces_add(out, start_off, st - start_off, -1) || pieces_add(out, st, en - st, a))
            return INF_ERR_NOMEM;
        start_off = i = en;
    }
    return pieces_add(out, start_off, n - start_off, -1);
}

/* ---- encode -------------------------------------------------------------------------- */

/* A cache of one encode call's words (as the tokenizers library keeps one
 * per model; per call here, so a shared tok stays read-only): a word seen
 * again copies its ids instead of running BPE. */
#define HF_CACHE_WORD 64      /* longer words are not cached        */
#define HF_CACHE_MAX (1 << 15) /* entries, at most half the slots    */

typedef struct hf_cache_ent {
    uint64_t hash;
    uint32_t key, key_len, ids, n_ids; /* offsets into keys / pool; key_len 0: empty */
} hf_cache_ent;

typedef struct hf_enc {
    const hf_impl *h;
    hf_splits words, tmp;
    inf_buf norm;
    hf_bpe_work *work;
    int32_t *ids;
    size_t n_ids, cap;
    hf_cache_ent *cache;    /* [cap_cache] slots, grown to 2 * HF_CACHE_MAX */
    size_t n_cache, cap_cache;
    inf_buf keys;
    int32_t *pool;
    size_t n_pool, cap_pool;
} hf_enc;

static uint64_t word_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int enc_push(hf_enc *e, int32_t id)
{
    if (e->n_ids == e->cap) {
        size_t c = e->cap ? 2 * e->cap : 64;
        int32_t *p = realloc(e->ids, c * sizeof *p);
        if (!p)
            return INF_ERR_NOMEM;
        e->ids = p;
        e->cap = c;
    }
    e->ids[e->n_ids++] = id;
    return INF_OK;
}

/* Doubles the cache's slots (from 256), placing the entries again. */
static int cache_grow(hf_enc *e)
{
    size_t cap = e->cap_cache ? 2 * e->cap_cache : 256;
    hf_cache_ent *c = calloc(cap, sizeof *c);
    if (!c)
        return INF_ERR_NOMEM;
    for (size_t i = 0; i < e->cap_cache; i++) {
        if (!e->cache[i].key_len)
            continue;
        size_t j = (size_t)e->cache[i].hash & (cap - 1);
        while (c[j].key_len)
            j = (j + 1) & (cap - 1);
        c[j] = e->cache[i];
    }
    free(e->cache);
    e->cache = c;
    e->cap_cache = cap;
    return INF_OK;
}

/* Appends the ids of one word piece, from the cache or through BPE. */
static int enc_piece(hf_enc *e, const char *w, size_t n)
{
    if (n == 0 || n > HF_CACHE_WORD)
        return hf_bpe_word(e->h->bpe, e->work, w, n, &e->ids, &e->n_ids, &e->cap);
    if (2 * (e->n_cache + 1) > e->cap_cache && e->cap_cache < 2 * HF_CACHE_MAX &&
        cache_grow(e))
        return INF_ERR_NOMEM;
    uint64_t h = word_hash(w, n);
    size_t m = e->cap_cache - 1, i = (size_t)h & m;
    for (; e->cache[i].key_len; i = (i + 1) & m) {
        hf_cache_ent *c = &e->cache[i];
        if (c->hash == h && c->key_len == n && memcmp(e->keys.p + c->key, w, n) == 0) {
            for (uint32_t k = 0; k < c->n_ids; k++)
                if (enc_push(e, e->pool[c->ids + k]))
                    return INF_ERR_NOMEM;
            return INF_OK;
        }
    }
    size_t before = e->n_ids;
    int rc = hf_bpe_word(e->h->bpe, e->work, w, n, &e->ids, &e->n_ids, &e->cap);
    size_t k = e->n_ids - before;
    if (rc || 2 * (e->n_cache + 1) > e->cap_cache || e->keys.len + n > UINT32_MAX ||
        e->n_pool + k > UINT32_MAX)
        return rc;
    if (e->n_pool + k > e->cap_pool) {
        size_t c = e->cap_pool ? 2 * e->cap_pool : 1024;
        while (c < e->n_pool + k)
            c *= 2;
        int32_t *p = realloc(e->pool, c * sizeof *p);
        if (!p)
            return INF_OK; /* the cache is an optimisation: skip it */
        e->pool = p;
        e->cap_pool = c;
    }
    size_t key = e->keys.len;
    inf_buf_put(&e->keys, w, n);
    if (e->keys.oom)
        return INF_ERR_NOMEM;
    if (k) /* a word may encode to nothing; pool is NULL until it holds ids */
        memcpy(e->pool + e->n_pool, e->ids + before, k * sizeof *e->pool);
    e->cache[i] = (hf_cache_ent){h, (uint32_t)key, (uint32_t)n, (uint32_t)e->n_pool, (uint32_t)k};
    e->n_pool += k;
    e->n_cache++;
    return INF_OK;
}

/* Appends the ids of one word, piece by piece where BPE allows cutting it
 * (a Metaspace text is one word: its pieces are the words of the text). */
static int enc_word(hf_enc *e, const char *w, size_t n)
{
    int rc = INF_OK;
    do {
        size_t k = hf_bpe_cut(e->h->bpe, w, n);
        rc = enc_piece(e, w, k);
        w += k;
        n -= k;
    } while (n && !rc);
    return rc;
}

/* Normalized text with no added tokens left in it: pre-tokenize, then BPE. */
static int enc_words(hf_enc *e, const char *s, size_t n, int first)
{
    hf_splits_clear(&e->words);
    hf_splits_add(&e->words, s, n, first);
    if (e->words.oom)
        return INF_ERR_NOMEM;
    int rc = e->h->pre ? hf_pre_apply(e->h->pre, &e->words, &e->tmp) : INF_OK;
    for (size_t i = 0; i < e->words.n && !rc; i++)
        rc = enc_word(e, e->words.buf.p + e->words.v[i].off, e->words.v[i].len);
    return rc;
}

/* One text piece between raw-matched added tokens: normalize, split on the
 * normalized added tokens, encode the rest. */
static int enc_text(hf_enc *e, const char *s, size_t n, int first)
{
    const hf_impl *h = e->h;
    if (h->norm) {
        int rc = hf_norm_apply(h->norm, s, n, &e->norm);
        if (rc)
            return rc;
        s = e->norm.p ? e->norm.p : "";
        n = e->norm.len;
    }
    if (!h->norm_trie)
        return enc_words(e, s, n, first);
    hf_pieces ps = {0};
    int rc = split_added(h, h->norm_trie, s, n, &ps);
    for (size_t i = 0; i < ps.n && !rc; i++)
        rc = ps.v[i].id >= 0 ? enc_push(e, h->added[ps.v[i].id].id)
                             : enc_words(e, s + ps.v[i].off, ps.v[i].len, first && ps.v[i].off == 0);
    free(ps.v);
    return rc;
}

static int hf_encode(const tok *t, const char *text, size_t len, int flags, int32_t **ids,
                     size_t *n, inf_err *err)
{
    const hf_impl *h = t->impl;
    char *clean = NULL;
    size_t clean_len = 0;
    /* Invalid UTF-8 becomes U+FFFD first, as a client decoding the bytes
     * (Python's errors="replace", JavaScript's TextDecoder) would. */
    if (hf_utf8_sanitize(text, len, &clean, &clean_len))
        return inf_fail(err, INF_ERR_NOMEM, "tok_encode: out of memory");
    if (clean) {
        text = clean;
        len = clean_len;
    }
    hf_enc e = {.h = h, .work = hf_bpe_work_create()};
    hf_pieces ps = {0};
    int rc = e.work ? split_added(h, h->raw_trie, text, len, &ps) : INF_ERR_NOMEM;
    int first = !(flags & TOK_AFTER_SPECIAL);
    for (size_t i = 0; i < ps.n && !rc; i++)
        rc = ps.v[i].id >= 0 ? enc_push(&e, h->added[ps.v[i].id].id)
                             : enc_text(&e, text + ps.v[i].off, ps.v[i].len,
                                        first && ps.v[i].off == 0);
    free(ps.v);
    free(clean);
    hf_splits_free(&e.words);
    hf_splits_free(&e.tmp);
    free(e.norm.p);
    free(e.cache);
    free(e.keys.p);
    free(e.pool);
    hf_bpe_work_destroy(e.work);
    if (rc) {
        free(e.ids);
        return rc == INF_ERR_NOMEM ? inf_fail(err, rc, "tok_encode: out of memory")
                                   : inf_fail(err, rc, "tok_encode: regex or normalizer failed");
    }
    *ids = e.ids;
    *n = e.n_ids;
    return INF_OK;
}

/* The post-processor's ids around the sequence. */
static int hf_post(const tok *t, int32_t **ids, size_t *n, inf_err *err)
{
    const hf_impl *h = t->impl;
    if (!h->n_pre_ids && !h->n_post_ids)
        return INF_OK;
    size_t total = *n + (size_t)h->n_pre_ids + (size_t)h->n_post_ids;
    int32_t *o = malloc(total * sizeof *o);
    if (!o)
        return inf_fail(err, INF_ERR_NOMEM, "tok_encode: out of memory");
    if (h->n_pre_ids)
        memcpy(o, h->pre_ids, (size_t)h->n_pre_ids * sizeof *o);
    if (*n)
        memcpy(o + h->n_pre_ids, *ids, *n * sizeof *o);
    if (h->n_post_ids)
        memcpy(o + h->n_pre_ids + *n, h->post_ids, (size_t)h->n_post_ids * sizeof *o);
    free(*ids);
    *ids = o;
    *n = total;
    return INF_OK;
}

/* ---- decode ---------------------------------------------------------------------------- */

/* Token strings (special ones left out unless keep_special, as
 * skip_special_tokens says) through the decoder chain, joined. */
static int hf_decode(const tok *t, const int32_t *ids, size_t n, int keep_special, char **text,
                     size_t *len, inf_err *err)
{
    const hf_impl *h = t->impl;
    hf_splits s = {0}, tmp = {0};
    for (size_t i = 0; i < n; i++) {
        if ((t->flags[ids[i]] & TOK_F_SPECIAL) && !keep_special)
            continue;
        const char *p = t->blob + t->piece[ids[i]];
        if (!h->dec && s.n)
            hf_splits_add(&s, " ", 1, 0);
        hf_splits_add(&s, p, strlen(p), 0);
    }
    int rc = s.oom ? INF_ERR_NOMEM : INF_OK;
    if (!rc && h->dec && s.n) {
        rc = hf_dec_apply(h->dec, &s, &tmp);
    }
    char *o = NULL;
    size_t total = 0;
    if (!rc) {
        for (size_t i = 0; i < s.n; i++)
            total += s.v[i].len;
        o = malloc(total + 1);
        if (!o)
            rc = INF_ERR_NOMEM;
    }
    if (!rc) {
        size_t k = 0;
        for (size_t i = 0; i < s.n; i++) {
            memcpy(o + k, s.buf.p + s.v[i].off, s.v[i].len);
            k += s.v[i].len;
        }
        o[k] = '\0';
    }
    hf_splits_free(&s);
    hf_splits_free(&tmp);
    if (rc)
        return inf_fail(err, rc, "tok_decode: %s",
                        rc == INF_ERR_NOMEM ? "out of memory" : "a decoder failed");
    *text = o;
    *len = total;
    return INF_OK;
}

void hf_impl_destroy(void *impl)
{
    hf_impl *h = impl;
    if (!h)
        return;
    hf_norm_free(h->norm);
    free(h->norm);
    hf_pre_free(h->pre);
    free(h->pre);
    hf_dec_free(h->dec);
    free(h->dec);
    hf_bpe_destroy(h->bpe);
    hf_vocab_destroy(h->vocab);
    for (int i = 0; i < h->n_added; i++)
        free(h->added[i].content);
    free(h->added);
    hf_trie_destroy(h->raw_trie);
    hf_trie_destroy(h->norm_trie);
    free(h->pre_ids);
    free(h->post_ids);
    free(h);
}

const tok_ops hf_ops = {hf_encode, hf_decode, hf_post, hf_impl_destroy};

void hf_tok_attach(tok *t, hf_impl *h)
{
    t->ops = &hf_ops;
    t->impl = h;
    t->kind = "tokenizer.json";
    t->special_splits_bytes = 0;
}
