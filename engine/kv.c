#include "kv.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct kv_pool {
    int num_blocks;   /* including the null block 0                      */
    int block_size;
    int32_t *refs;    /* [num_blocks] reference counts                   */
    int32_t *free;    /* [num_blocks] stack of free block ids            */
    int n_free;
};

kv_config kv_config_default(void)
{
    kv_config c = {.num_blocks = 1024, .block_size = 16};
    return c;
}

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
    p->num_blocks = cfg->num_blocks;
    p->block_size = cfg->block_size;
    p->refs = calloc((size_t)p->num_blocks, sizeof *p->refs);
    p->free = malloc((size_t)p->num_blocks * sizeof *p->free);
    if (!p->refs || !p->free)
        goto nomem;
    /* Stack order: the lowest ids come out first, which keeps block tables
     * easy to read in tests and logs. Block 0 is the null block. */
    for (int b = p->num_blocks - 1; b >= 1; b--)
        p->free[p->n_free++] = b;
    p->refs[0] = 1; /* never freed */
    *out = p;
    return INF_OK;
nomem:
    kv_destroy(p);
    return inf_fail(err, INF_ERR_NOMEM, "kv: out of memory for %d blocks",
                    cfg->num_blocks);
}

void kv_destroy(kv_pool *p)
{
    if (!p)
        return;
    free(p->refs);
    free(p->free);
    free(p);
}

int kv_block_size(const kv_pool *p) { return p->block_size; }
int kv_num_blocks(const kv_pool *p) { return p->num_blocks - 1; }
int kv_num_free(const kv_pool *p) { return p->n_free; }

int kv_alloc(kv_pool *p, int32_t *block)
{
    if (p->n_free == 0)
        return INF_ERR_NOSPACE;
    int32_t b = p->free[--p->n_free];
    assert(p->refs[b] == 0);
    p->refs[b] = 1;
    *block = b;
    return INF_OK;
}

void kv_ref(kv_pool *p, int32_t block)
{
    assert(block > 0 && block < p->num_blocks && p->refs[block] > 0);
    p->refs[block]++;
}

void kv_unref(kv_pool *p, int32_t block)
{
    assert(block > 0 && block < p->num_blocks && p->refs[block] > 0);
    if (--p->refs[block] == 0)
        p->free[p->n_free++] = block;
}

int kv_refcount(const kv_pool *p, int32_t block)
{
    if (block < 0 || block >= p->num_blocks)
        return 0;
    return p->refs[block];
}

static int blocks_for(const kv_pool *p, int n_tokens)
{
    return (n_tokens + p->block_size - 1) / p->block_size;
}

int kv_seq_reserve(kv_pool *p, kv_seq *s, int n_tokens)
{
    int need = blocks_for(p, n_tokens);
    if (need <= s->n_blocks)
        return INF_OK;
    if (need - s->n_blocks > p->n_free)
        return INF_ERR_NOSPACE; /* all or nothing: nothing taken */
    if (need > s->cap) {
        int cap = s->cap ? s->cap : 8;
        while (cap < need)
            cap *= 2;
        int32_t *nb = realloc(s->blocks, (size_t)cap * sizeof *nb);
        if (!nb)
            return INF_ERR_NOMEM;
        s->blocks = nb;
        s->cap = cap;
    }
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
    while (s->n_blocks > keep)
        kv_unref(p, s->blocks[--s->n_blocks]);
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
