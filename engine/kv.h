/* kv_: the paged KV cache's block manager.
 *
 * The KV cache is num_blocks fixed-size blocks of block_size token slots; the
 * backend stores K and V only at slot numbers (block * block_size + offset)
 * that come from here. Blocks are reference counted so that later features
 * (prefix caching, forked sequences) can share them. Block 0 is reserved as
 * the null block (pads block tables; never handed out).
 *
 * Prefix caching: a full block is identified by a hash chained over its
 * tokens and its predecessor (and the sequence's cache salt); a lookup also
 * compares the stored tokens and predecessor, so a hash collision can never
 * hand out the wrong KV. Freed blocks keep their contents: they go to the
 * tail of an LRU free list and stay findable until allocation evicts them
 * from its head. */
#ifndef INFERD_KV_H
#define INFERD_KV_H

#include "common.h"

typedef struct kv_config {
    int num_blocks;            /* including the null block; >= 2     */
    int block_size;            /* tokens per block; default 16       */
    int enable_prefix_caching; /* default 0 here; the server's is on */
} kv_config;

typedef struct kv_pool kv_pool;

/* kv_config.num_blocks for a pool (null block included): what budget bytes
 * hold at block_bytes a block, but no more than seqs sequences of max_len
 * tokens each need (a whole number of blocks per sequence), and at least
 * one usable block. */
int kv_pool_blocks(size_t budget, size_t block_bytes, int block_size, int seqs, int max_len);

int kv_create(const kv_config *cfg, kv_pool **out, inf_err *err);
void kv_destroy(kv_pool *p); /* NULL-safe */

int kv_block_size(const kv_pool *p);
int kv_num_blocks(const kv_pool *p); /* usable blocks: num_blocks - 1 */
int kv_num_free(const kv_pool *p);

/* Blocks holding a cached prefix (in use or free). */
int kv_num_cached(const kv_pool *p);

/* Takes the least recently freed block (evicting its cached contents) with
 * ref count 1; INF_ERR_NOSPACE when none is free. */
int kv_alloc(kv_pool *p, int32_t *block);
/* Adds a reference to an allocated block. */
void kv_ref(kv_pool *p, int32_t block);
/* Drops a reference; the block is free again at zero. */
void kv_unref(kv_pool *p, int32_t block);
int kv_refcount(const kv_pool *p, int32_t block);

/* One sequence's block table: blocks[i] holds positions
 * [i*block_size, (i+1)*block_size). */
typedef struct kv_seq {
    int32_t *blocks;
    int n_blocks;
    int cap;
    int n_hashed;        /* leading blocks registered in the prefix cache  */
    uint64_t last_hash;  /* hash of block n_hashed - 1                     */
    int32_t last_id;     /* the indexed block standing for block n_hashed-1
                            (itself, or an identical one cached first): the
                            parent of the next block                       */
    uint32_t last_gen;   /* last_id's generation in the index then         */
    int n_dropped;       /* leading blocks given back (kv_seq_drop_front)  */
} kv_seq;

/* Makes the table cover positions [0, n_tokens): all or nothing, so on
 * INF_ERR_NOSPACE the sequence is as before. INF_ERR_NOMEM if the table
 * itself cannot grow. */
int kv_seq_reserve(kv_pool *p, kv_seq *s, int n_tokens);
/* Keeps only the blocks needed for n_tokens positions (rollback, eviction);
 * frees from the last block backwards. */
void kv_seq_truncate(kv_pool *p, kv_seq *s, int n_tokens);
/* Sliding-window attention: gives back the leading blocks that hold only
 * positions below first_needed (no later token attends to them), their
 * table entries becoming the null block, so a long sequence's KV stays
 * bounded. With prefix caching, only blocks already registered (commit
 * first), so the cache keeps them while they last. */
void kv_seq_drop_front(kv_pool *p, kv_seq *s, int first_needed);

/* Drops every block and frees the table; the struct is zeroed. */
void kv_seq_release(kv_pool *p, kv_seq *s);
/* Slot of position pos (which the table must cover). */
int32_t kv_seq_slot(const kv_pool *p, const kv_seq *s, int pos);

/* For an empty sequence about to hold tokens[0..n_tokens): takes the cached
 * blocks of its longest cached prefix (whole blocks, at most n_tokens - 1
 * tokens so the last one is computed) and returns how many tokens they
 * cover (0 without caching). */
int kv_seq_match_prefix(kv_pool *p, kv_seq *s, const int32_t *tokens, int n_tokens,
                        uint64_t salt);

/* Registers the sequence's blocks that are full of computed tokens
 * (positions < n_computed) in the prefix cache. Cheap to call every step. */
void kv_seq_commit(kv_pool *p, kv_seq *s, const int32_t *tokens, int n_computed,
                   uint64_t salt);

#endif
