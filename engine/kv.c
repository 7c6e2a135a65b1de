#include "kv.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Free blocks form one doubly linked list in eviction order: the head is the
 * least recently freed. With prefix caching a free block may still hold a
 * cached prefix (it is "cached"): it stays findable until it is handed out
 * again, which evicts it. */
struct kv_pool {
    int num_blocks;   /* including the null block 0                        */
    int block_size;
    int caching;
    int32_t *refs;    /* [num_blocks]                                      */
    int32_t *prev, *next; /* free-list links, -1 terminated                */
    int32_t head, tail;
    int n_free;
    /* prefix cache: per block, what it holds when cached */
    uint8_t *cached;      /* [num_blocks]                                  */
    uint64_t *hash;       /* [num_blocks] chained hash of the block        */
    int32_t *parent;      /* [num_blocks] block before it, or 0            */
    uint32_t *gen;        /* [num_blocks] bumped each time it is indexed   */
    uint32_t *parent_gen; /* [num_blocks] the parent's gen when indexed: a
                             parent freed early (a window's front) and
                             indexed again with other tokens is not it    */
    uint64_t *salt;       /* [num_blocks] cache_salt of its sequence       */
    int32_t *toks;        /* [num_blocks][block_size]                      */
    int32_t *bucket;      /* [n_buckets] first block with that hash slot   */
    int32_t *chain;       /* [num_blocks] next block in the same slot      */
    uint32_t n_buckets;   /* power of two                                  */
};

/* ---- the free list ------------------------------------------------------- */

static void free_push_tail(kv_pool *p, int32_t b)
{
    p->prev[b] = p->tail;
    p->next[b] = -1;
    if (p->tail >= 0)
        p->next[p->tail] = b;
    else
        p->head = b;
    p->tail = b;
    p->n_free++;
}

static void free_unlink(kv_pool *p, int32_t b)
{
    if (p->prev[b] >= 0)
        p->next[p->prev[b]] = p->next[b];
    else
        p->head = p->next[b];
    if (p->next[b] >= 0)
        p->prev[p->next[b]] = p->prev[b];
    else
        p->tail = p->prev[b];
    p->prev[b] = p->next[b] = -1;
    p->n_free--;
}

/* ---- the prefix cache's index --------------------------------------------- */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* A block's identity: its tokens, chained to its parent's hash, and the
 * sequence's salt (requests with different salts never share). */
static uint64_t block_hash(uint64_t parent_hash, const int32_t *toks, int n, uint64_t salt)
{
    uint64_t h = mix(parent_hash, salt);
    for (int i = 0; i < n; i++)
        h = mix(h, (uint32_t)toks[i]);
    return h;
}

static void index_remove(kv_pool *p, int32_t b)
{
    int32_t *link = &p->bucket[p->hash[b] & (p->n_buckets - 1)];
    while (*link != b)
        link = &p->chain[*link];
    *link = p->chain[b];
    p->cached[b] = 0;
}

/* The cached block holding exactly these tokens after parent (as indexed
 * at generation pgen), or -1. */
static int32_t index_find(const kv_pool *p, uint64_t h, int32_t parent, uint32_t pgen,
                          const int32_t *toks, uint64_t salt)
{
    for (int32_t b = p->bucket[h & (p->n_buckets - 1)]; b >= 0; b = p->chain[b])
        if (p->hash[b] == h && p->parent[b] == parent && p->parent_gen[b] == pgen &&
            p->salt[b] == salt &&
            !memcmp(p->toks + (size_t)b * p->block_size, toks,
                    sizeof(int32_t) * (size_t)p->block_size))
            return b;
    return -1;
}

/* ---- lifecycle --------------------------------------------------------------- */

int kv_create(const kv_config *cfg, kv_pool **out, inf_err *err)
{
    *out = NULL;
    if (cfg->num_blocks < 2 || cfg->block_size < 1)
        return inf_fail(err, INF_ERR_INVALID,
                        "kv: need at least 2 blocks of at least 1 token "
                        "(got %d blocks of %d)",
                        cfg->num_blocks, cfg->block_size);
    kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        goto nomem;
    size_t n = (size_t)cfg->num_blocks;
    p->num_blocks = cfg->num_blocks;
    p->block_size = cfg->block_size;
    p->caching = cfg->enable_prefix_caching;
    p->refs = calloc(n, sizeof *p->refs);
    p->prev = malloc(n * sizeof *p->prev);
    p->next = malloc(n * sizeof *p->next);
    if (!p->refs || !p->prev || !p->next)
        goto nomem;
    if (p->caching) {
        p->n_buckets = 1;
        while (p->n_buckets < 2 * n)
            p->n_buckets <<= 1;
        p->cached = calloc(n, 1);
        p->hash = calloc(n, sizeof *p->hash);
        p->parent = calloc(n, sizeof *p->parent);
        p->gen = calloc(n, sizeof *p->gen);
        p->parent_gen = calloc(n, sizeof *p->parent_gen);
        p->salt = calloc(n, sizeof *p->salt);
        p->toks = malloc(n * (size_t)cfg->block_size * sizeof *p->toks);
        p->chain = malloc(n * sizeof *p->chain);
        p->bucket = malloc(p->n_buckets * sizeof *p->bucket);
        if (!p->cached || !p->hash || !p->parent || !p->salt || !p->toks || !p->chain ||
            !p->bucket || !p->gen || !p->parent_gen)
            goto nomem;
        memset(p->bucket, 0xff, p->n_buckets * sizeof *p->bucket); /* all -1 */
    }
    p->head = p->tail = -1;
    for (int32_t b = 1; b < p->num_blocks; b++) /* block 0: the null block */
        free_push_tail(p, b);
    p->refs[0] = 1;
    *out = p;
    return INF_OK;
nomem:
    kv_destroy(p);
    return inf_fail(err, INF_ERR_NOMEM, "kv: out of memory for %d blocks", cfg->num_blocks);
}

void kv_destroy(kv_pool *p)
{
    if (!p)
        return;
    free(p->refs), free(p->prev), free(p->next), free(p->cached), free(p->hash);
    free(p->parent), free(p->salt), free(p->toks), free(p->chain), free(p->bucket);
    free(p->gen), free(p->parent_gen);
    free(p);
}

int kv_block_size(const kv_pool *p) { return p->block_size; }
int kv_pool_blocks(size_t budget, size_t block_bytes, int block_size, int seqs, int max_len)
{
    size_t blocks = block_bytes ? budget / block_bytes : 0;
    size_t per_seq = ((size_t)max_len + (size_t)block_size - 1) / (size_t)block_size;
    size_t want = (size_t)seqs * per_seq;
    blocks = blocks < want ? blocks : want;
    return (int)(blocks < 1 ? 1 : blocks > 0x3fffffff ? 0x3fffffff : blocks) + 1;
}

int kv_num_blocks(const kv_pool *p) { return p->num_blocks - 1; }
int kv_num_free(const kv_pool *p) { return p->n_free; }

int kv_num_cached(const kv_pool *p)
{
    int n = 0;
    for (int b = 1; p->caching && b < p->num_blocks; b++)
        n += p->cached[b];
    return n;
}

int kv_alloc(kv_pool *p, int32_t *block)
{
    if (p->n_free == 0)
        return INF_ERR_NOSPACE;
    int32_t b = p->head; /* least recently freed: evicted if cached */
    free_unlink(p, b);
    if (p->caching && p->cached[b])
        index_remove(p, b);
    assert(p->refs[b] == 0);
    p->refs[b] = 1;
    *block = b;
    return INF_OK;
}

void kv_ref(kv_pool *p, int32_t block)
{
    assert(block > 0 && block < p->num_blocks);
    if (p->refs[block]++ == 0) /* a cached free block comes back into use */
        free_unlink(p, block);
}

void kv_unref(kv_pool *p, int32_t block)
{
    assert(block > 0 && block < p->num_blocks && p->refs[block] > 0);
    if (--p->refs[block] == 0)
        free_push_tail(p, block);
}

int kv_refcount(const kv_pool *p, int32_t block)
{
    if (block < 0 || block >= p->num_blocks)
        return 0;
    return p->refs[block];
}

/* ---- sequences ---------------------------------------------------------------- */

static int blocks_for(const kv_pool *p, int n_tokens)
{
    return (n_tokens + p->block_size - 1) / p->block_size;
}

static int seq_grow_table(kv_seq *s, int need)
{
    if (need <= s->cap)
        return 1;
    int cap = s->cap ? s->cap : 8;
    while (cap < need)
        cap *= 2;
    int32_t *nb = realloc(s->blocks, (size_t)cap * sizeof *nb);
    if (!nb)
        return 0;
    s->blocks = nb;
    s->cap = cap;
    return 1;
}

int kv_seq_reserve(kv_pool *p, kv_seq *s, int n_tokens)
{
    int need = blocks_for(p, n_tokens);
    if (need <= s->n_blocks)
        return INF_OK;
    if (need - s->n_blocks > p->n_free)
        return INF_ERR_NOSPACE; /* all or nothing: nothing taken */
    if (!seq_grow_table(s, need))
        return INF_ERR_NOMEM;
    while (s->n_blocks < need) {
        int rc = kv_alloc(p, &s->blocks[s->n_blocks]);
        assert(rc == INF_OK); /* checked n_free above */
        (void)rc;
        s->n_blocks++;
    }
    return INF_OK;
}

void kv_seq_truncate(kv_pool *p, kv_seq *s, int n_tokens)
{
    int keep = blocks_for(p, n_tokens);
    /* last block first: a shared prefix is freed last, so evicted last */
    while (s->n_blocks > keep) {
        int32_t b = s->blocks[--s->n_blocks];
        if (b > 0) /* 0: dropped from a window's front (kv_seq_drop_front) */
            kv_unref(p, b);
    }
    if (s->n_dropped > s->n_blocks)
        s->n_dropped = s->n_blocks;
    if (s->n_hashed * p->block_size > n_tokens) { /* a hashed block was cut: */
        s->n_hashed = 0;                          /* commit re-walks        */
        s->last_hash = 0;
        s->last_id = 0;
        s->last_gen = 0;
    }
}

void kv_seq_drop_front(kv_pool *p, kv_seq *s, int first_needed)
{
    int end = first_needed > 0 ? first_needed / p->block_size : 0;
    if (end > s->n_blocks)
        end = s->n_blocks;
    if (p->caching && end > s->n_hashed) /* only what the cache already has */
        end = s->n_hashed;
    for (; s->n_dropped < end; s->n_dropped++) {
        kv_unref(p, s->blocks[s->n_dropped]);
        s->blocks[s->n_dropped] = 0; /* the null block: never read again */
    }
}

void kv_seq_release(kv_pool *p, kv_seq *s)
{
    kv_seq_truncate(p, s, 0);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}

int32_t kv_seq_slot(const kv_pool *p, const kv_seq *s, int pos)
{
    int bi = pos / p->block_size;
    assert(pos >= 0 && bi < s->n_blocks);
    return s->blocks[bi] * p->block_size + pos % p->block_size;
}

/* ---- prefix caching --------------------------------------------------------------- */

int kv_seq_match_prefix(kv_pool *p, kv_seq *s, const int32_t *tokens, int n_tokens,
                        uint64_t salt)
{
    if (!p->caching || s->n_blocks != 0)
        return 0;
    int bs = p->block_size;
    int max_blocks = (n_tokens - 1) / bs; /* the last token is always computed */
    uint64_t h = 0;
    int32_t parent = 0;
    uint32_t pgen = 0;
    int hits = 0;
    while (hits < max_blocks) {
        const int32_t *t = tokens + (size_t)hits * bs;
        uint64_t bh = block_hash(h, t, bs, salt);
        int32_t b = index_find(p, bh, parent, pgen, t, salt);
        if (b < 0 || !seq_grow_table(s, hits + 1))
            break;
        kv_ref(p, b);
        s->blocks[s->n_blocks++] = b;
        h = bh;
        parent = b;
        pgen = p->gen[b];
        hits++;
    }
    s->n_hashed = hits;
    s->last_hash = h;
    s->last_id = parent;
    s->last_gen = pgen;
    return hits * bs;
}

void kv_seq_commit(kv_pool *p, kv_seq *s, const int32_t *tokens, int n_computed, uint64_t salt)
{
    if (!p->caching)
        return;
    int bs = p->block_size, full = n_computed / bs;
    if (full > s->n_blocks)
        full = s->n_blocks;
    while (s->n_hashed < full) {
        int i = s->n_hashed;
        int32_t b = s->blocks[i], parent = i ? s->last_id : 0;
        uint32_t pgen = i ? s->last_gen : 0;
        if (b == 0) /* dropped before it was indexed: the chain ends here */
            return;
        const int32_t *t = tokens + (size_t)i * bs;
        uint64_t bh = block_hash(s->last_hash, t, bs, salt);
        /* an identical block already cached (computed twice by requests
         * that ran together) keeps its place and stands for this one, which
         * stays uncached, as the parent of the blocks after it */
        int32_t found = p->cached[b] ? b : index_find(p, bh, parent, pgen, t, salt);
        if (found < 0) {
            found = b;
            p->cached[b] = 1;
            p->gen[b]++;
            p->hash[b] = bh;
            p->parent[b] = parent;
            p->parent_gen[b] = pgen;
            p->salt[b] = salt;
            memcpy(p->toks + (size_t)b * bs, t, sizeof(int32_t) * (size_t)bs);
            uint32_t slot = (uint32_t)(bh & (p->n_buckets - 1));
            p->chain[b] = p->bucket[slot];
            p->bucket[slot] = b;
        }
        s->last_id = found;
        s->last_gen = p->gen[found];
        s->last_hash = bh;
        s->n_hashed++;
    }
}
