/* Block manager: allocation, reference counts, sequence tables, no leaks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/kv.h"

static kv_pool *make_pool(int num_blocks, int block_size)
{
    kv_config c = {.num_blocks = num_blocks, .block_size = block_size};
    kv_pool *p = NULL;
    inf_err e = {0};
    assert_int_equal(kv_create(&c, &p, &e), INF_OK);
    return p;
}

/* A pool of N blocks offers N-1 (block 0 is the null block), hands out each
 * once, and reports NOSPACE when empty. */
static void test_kv_alloc_exhausts_then_nospace(void **state)
{
    (void)state;
    kv_pool *p = make_pool(5, 16);
    assert_int_equal(kv_num_blocks(p), 4);
    int seen[5] = {0};
    for (int i = 0; i < 4; i++) {
        int32_t b = -1;
        assert_int_equal(kv_alloc(p, &b), INF_OK);
        assert_true(b >= 1 && b <= 4);
        assert_int_equal(seen[b], 0);
        seen[b] = 1;
        assert_int_equal(kv_refcount(p, b), 1);
    }
    int32_t b;
    assert_int_equal(kv_alloc(p, &b), INF_ERR_NOSPACE);
    assert_int_equal(kv_num_free(p), 0);
    for (int i = 1; i <= 4; i++)
        kv_unref(p, i);
    assert_int_equal(kv_num_free(p), 4);
    kv_destroy(p);
}

/* A shared block returns to the free list only when its last reference goes. */
static void test_kv_refcount_shared_block_freed_last(void **state)
{
    (void)state;
    kv_pool *p = make_pool(3, 4);
    int32_t b;
    assert_int_equal(kv_alloc(p, &b), INF_OK);
    kv_ref(p, b);
    assert_int_equal(kv_refcount(p, b), 2);
    kv_unref(p, b);
    assert_int_equal(kv_num_free(p), 1);
    kv_unref(p, b);
    assert_int_equal(kv_num_free(p), 2);
    assert_int_equal(kv_refcount(p, b), 0);
    kv_destroy(p);
}

/* Reserving grows a table block by block, slots map position -> block*bs+off,
 * and truncation gives back exactly the blocks past the kept positions. */
static void test_kv_seq_reserve_slots_truncate(void **state)
{
    (void)state;
    kv_pool *p = make_pool(10, 4);
    kv_seq s = {0};
    assert_int_equal(kv_seq_reserve(p, &s, 1), INF_OK);
    assert_int_equal(s.n_blocks, 1);
    assert_int_equal(kv_seq_reserve(p, &s, 4), INF_OK);
    assert_int_equal(s.n_blocks, 1);
    assert_int_equal(kv_seq_reserve(p, &s, 9), INF_OK);
    assert_int_equal(s.n_blocks, 3);
    for (int pos = 0; pos < 9; pos++)
        assert_int_equal(kv_seq_slot(p, &s, pos),
                         s.blocks[pos / 4] * 4 + pos % 4);
    assert_int_equal(kv_num_free(p), 9 - 3);
    kv_seq_truncate(p, &s, 5); /* positions 0..4 need 2 blocks */
    assert_int_equal(s.n_blocks, 2);
    assert_int_equal(kv_num_free(p), 9 - 2);
    kv_seq_release(p, &s);
    assert_int_equal(kv_num_free(p), 9);
    assert_null(s.blocks);
    kv_destroy(p);
}

/* A reservation that does not fit takes nothing. */
static void test_kv_seq_reserve_all_or_nothing(void **state)
{
    (void)state;
    kv_pool *p = make_pool(4, 2); /* 3 usable blocks = 6 tokens */
    kv_seq a = {0}, b = {0};
    assert_int_equal(kv_seq_reserve(p, &a, 4), INF_OK);
    assert_int_equal(kv_seq_reserve(p, &b, 3), INF_ERR_NOSPACE);
    assert_int_equal(b.n_blocks, 0);
    assert_int_equal(kv_num_free(p), 1);
    assert_int_equal(kv_seq_reserve(p, &b, 2), INF_OK);
    assert_int_equal(kv_num_free(p), 0);
    kv_seq_release(p, &a);
    kv_seq_release(p, &b);
    assert_int_equal(kv_num_free(p), 3);
    kv_destroy(p);
}

/* Random reserve/truncate/release on many sequences never hands a block to
 * two owners and leaves every block free at the end (fixed seed). */
static void test_kv_seq_random_no_leak(void **state)
{
    (void)state;
    enum { NSEQ = 16, STEPS = 20000 };
    kv_pool *p = make_pool(64, 16);
    kv_seq seqs[NSEQ] = {{0}};
    int len[NSEQ] = {0};
    unsigned r = 12345;
    for (int step = 0; step < STEPS; step++) {
        r = r * 1103515245u + 12345u;
        int i = (int)((r >> 8) % NSEQ);
        int op = (int)((r >> 20) % 4);
        if (op <= 1) {
            int want = len[i] + 1 + (int)((r >> 4) % 40);
            if (kv_seq_reserve(p, &seqs[i], want) == INF_OK)
                len[i] = want;
        } else if (op == 2) {
            len[i] = len[i] / 2;
            kv_seq_truncate(p, &seqs[i], len[i]);
        } else {
            kv_seq_release(p, &seqs[i]);
            len[i] = 0;
        }
        /* invariant: blocks in tables + free blocks == all blocks, no
         * block owned twice */
        int owned = 0;
        int count[64] = {0};
        for (int k = 0; k < NSEQ; k++)
            for (int j = 0; j < seqs[k].n_blocks; j++) {
                count[seqs[k].blocks[j]]++;
                owned++;
            }
        for (int b = 1; b < 64; b++)
            assert_true(count[b] <= 1 && kv_refcount(p, b) == count[b]);
        assert_int_equal(owned + kv_num_free(p), kv_num_blocks(p));
    }
    for (int k = 0; k < NSEQ; k++)
        kv_seq_release(p, &seqs[k]);
    assert_int_equal(kv_num_free(p), kv_num_blocks(p));
    kv_destroy(p);
}

static kv_pool *make_cache_pool(int num_blocks, int block_size)
{
    kv_config c = {.num_blocks = num_blocks, .block_size = block_size,
                   .enable_prefix_caching = 1};
    kv_pool *p = NULL;
    inf_err e = {0};
    assert_int_equal(kv_create(&c, &p, &e), INF_OK);
    return p;
}

/* Fills a sequence for tokens[0..n) and registers its full blocks. */
static void fill(kv_pool *p, kv_seq *s, const int32_t *t, int n, uint64_t salt)
{
    assert_int_equal(kv_seq_reserve(p, s, n), INF_OK);
    kv_seq_commit(p, s, t, n, salt);
}

/* A second sequence with the same prefix reuses the first one's full blocks
 * (shared, ref counted), never the partial last block, and never more than
 * n-1 tokens; a different token or salt stops the match. */
static void test_kv_prefix_hits_share_blocks(void **state)
{
    (void)state;
    kv_pool *p = make_cache_pool(32, 4);
    int32_t t[20];
    for (int i = 0; i < 20; i++)
        t[i] = 100 + i;
    kv_seq a = {0}, b = {0}, c = {0}, d = {0};
    fill(p, &a, t, 10, 0); /* blocks 0-1 full, block 2 partial */
    assert_int_equal(kv_num_cached(p), 2);
    assert_int_equal(kv_seq_match_prefix(p, &b, t, 12, 0), 8);
    assert_int_equal(b.n_blocks, 2);
    assert_int_equal(b.blocks[0], a.blocks[0]);
    assert_int_equal(b.blocks[1], a.blocks[1]);
    assert_int_equal(kv_refcount(p, a.blocks[0]), 2);
    /* exactly 8 tokens: the last must be computed, so only one block */
    assert_int_equal(kv_seq_match_prefix(p, &c, t, 8, 0), 4);
    /* another salt shares nothing; a changed token ends the match */
    assert_int_equal(kv_seq_match_prefix(p, &d, t, 12, 7), 0);
    int32_t u[12];
    memcpy(u, t, sizeof u);
    u[5] = 1;
    kv_seq e = {0};
    assert_int_equal(kv_seq_match_prefix(p, &e, u, 12, 0), 4);
    kv_seq_release(p, &a), kv_seq_release(p, &b), kv_seq_release(p, &c);
    kv_seq_release(p, &d), kv_seq_release(p, &e);
    assert_int_equal(kv_num_free(p), 31);
    kv_destroy(p);
}

/* Two sequences with the same prompt computed in the same step: the second
 * one's blocks stay uncached, but its later blocks still chain onto the
 * cached twins, so a third request with its whole text finds them all. */
static void test_kv_prefix_twin_blocks_keep_the_chain(void **state)
{
    (void)state;
    kv_pool *p = make_cache_pool(32, 4);
    int32_t t[20];
    for (int i = 0; i < 20; i++)
        t[i] = 100 + i;
    kv_seq a = {0}, b = {0}, c = {0};
    assert_int_equal(kv_seq_reserve(p, &a, 12), INF_OK);
    assert_int_equal(kv_seq_reserve(p, &b, 12), INF_OK);
    kv_seq_commit(p, &a, t, 12, 0); /* 3 blocks cached */
    kv_seq_commit(p, &b, t, 12, 0); /* twins: none cached */
    assert_int_equal(kv_num_cached(p), 3);
    t[13] = 7; /* b goes on differently from a */
    assert_int_equal(kv_seq_reserve(p, &b, 17), INF_OK);
    kv_seq_commit(p, &b, t, 16, 0); /* its 4th block, after the twins */
    assert_int_equal(kv_num_cached(p), 4);
    assert_int_equal(kv_seq_match_prefix(p, &c, t, 17, 0), 16);
    assert_int_equal(c.blocks[2], a.blocks[2]);
    assert_int_equal(c.blocks[3], b.blocks[3]);
    kv_seq_release(p, &a), kv_seq_release(p, &b), kv_seq_release(p, &c);
    kv_destroy(p);
}

/* Freed cached blocks stay findable until allocation evicts them, least
 * recently freed first; a prefix is freed after its suffix (evicted last). */
static void test_kv_prefix_survives_free_until_evicted(void **state)
{
    (void)state;
    kv_pool *p = make_cache_pool(5, 2); /* 4 usable blocks */
    int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    kv_seq a = {0}, b = {0}, x = {0};
    fill(p, &a, t, 6, 0); /* 3 full blocks cached */
    kv_seq_release(p, &a);
    assert_int_equal(kv_num_free(p), 4);
    assert_int_equal(kv_num_cached(p), 3);
    assert_int_equal(kv_seq_match_prefix(p, &b, t, 8, 0), 6);
    kv_seq_release(p, &b);
    /* take two blocks: the never-used one, then the last block of the
     * prefix (freed first): the first two prefix blocks survive */
    assert_int_equal(kv_seq_reserve(p, &x, 4), INF_OK);
    assert_int_equal(kv_num_cached(p), 2);
    kv_seq y = {0};
    assert_int_equal(kv_seq_match_prefix(p, &y, t, 8, 0), 4);
    kv_seq_release(p, &x), kv_seq_release(p, &y);
    kv_destroy(p);
}

/* Random fills, matches and releases with caching on (fixed seed): ref
 * counts always equal the number of tables holding a block, every block is
 * free or held, and a matched prefix always carries the same tokens. */
static void test_kv_prefix_random_consistent(void **state)
{
    (void)state;
    enum { NSEQ = 12, STEPS = 6000, MAXT = 40 };
    kv_pool *p = make_cache_pool(48, 4);
    kv_seq seqs[NSEQ] = {{0}};
    int32_t toks[NSEQ][MAXT];
    int32_t shadow[48][4]; /* what each block was filled with */
    unsigned r = 99;
    for (int step = 0; step < STEPS; step++) {
        r = r * 1103515245u + 12345u;
        int i = (int)((r >> 8) % NSEQ);
        if (seqs[i].n_blocks == 0 && (r >> 20) % 2) {
            int n = 2 + (int)((r >> 4) % (MAXT - 2));
            for (int k = 0; k < n; k++) /* few distinct prefixes: many hits */
                toks[i][k] = k < 8 ? (int)((r >> 12) % 3) : (int)((r >> (k % 20)) % 5);
            int hit = kv_seq_match_prefix(p, &seqs[i], toks[i], n, 0);
            assert_true(hit % 4 == 0 && hit <= n - 1);
            for (int j = 0; j < hit / 4; j++) /* a hit holds exactly our tokens */
                assert_memory_equal(shadow[seqs[i].blocks[j]], toks[i] + j * 4, sizeof shadow[0]);
            if (kv_seq_reserve(p, &seqs[i], n) == INF_OK) {
                for (int j = hit / 4; j < n / 4; j++) /* "compute" the new blocks */
                    memcpy(shadow[seqs[i].blocks[j]], toks[i] + j * 4, sizeof shadow[0]);
                kv_seq_commit(p, &seqs[i], toks[i], n, 0);
            } else {
                kv_seq_release(p, &seqs[i]);
            }
        } else {
            kv_seq_release(p, &seqs[i]);
        }
        int count[48] = {0}, held = 0;
        for (int k = 0; k < NSEQ; k++)
            for (int j = 0; j < seqs[k].n_blocks; j++)
                count[seqs[k].blocks[j]]++;
        for (int b = 1; b < 48; b++) {
            assert_int_equal(kv_refcount(p, b), count[b]);
            held += count[b] > 0;
        }
        assert_int_equal(held + kv_num_free(p), kv_num_blocks(p));
    }
    for (int k = 0; k < NSEQ; k++)
        kv_seq_release(p, &seqs[k]);
    assert_int_equal(kv_num_free(p), kv_num_blocks(p));
    kv_destroy(p);
}

/* A window's front: blocks holding only positions below first_needed go
 * back to the pool and read as the null block; later truncation and
 * release do not free them twice; without caching any such block goes. */
static void test_kv_seq_drop_front(void **state)
{
    (void)state;
    kv_config c = {.num_blocks = 9, .block_size = 4};
    kv_pool *p = NULL;
    inf_err e = {0};
    assert_int_equal(kv_create(&c, &p, &e), INF_OK);
    kv_seq s = {0};
    assert_int_equal(kv_seq_reserve(p, &s, 20), INF_OK); /* 5 blocks */
    assert_int_equal(kv_num_free(p), 3);
    kv_seq_drop_front(p, &s, 7); /* block 0 (0-3) only: 4-7 holds 7 */
    assert_int_equal(kv_num_free(p), 4);
    assert_int_equal(s.blocks[0], 0);
    assert_true(s.blocks[1] > 0);
    kv_seq_drop_front(p, &s, 12); /* blocks 1 and 2 */
    kv_seq_drop_front(p, &s, 12); /* again: nothing more */
    assert_int_equal(kv_num_free(p), 6);
    assert_int_equal(kv_seq_slot(p, &s, 13) / 4, s.blocks[3]);
    kv_seq_truncate(p, &s, 14); /* keeps 4 entries, frees the 5th */
    assert_int_equal(kv_num_free(p), 7);
    kv_seq_release(p, &s);
    assert_int_equal(kv_num_free(p), 8);
    kv_destroy(p);
}

/* With prefix caching only registered blocks are dropped; a dropped parent
 * that is evicted and indexed again with other tokens is not taken for the
 * old one, so the blocks cached after it are no longer found. */
static void test_kv_prefix_drop_front_generation(void **state)
{
    (void)state;
    kv_pool *p = make_cache_pool(5, 4); /* 4 usable blocks */
    int32_t t[16], u[16];
    for (int i = 0; i < 16; i++)
        t[i] = 100 + i, u[i] = 200 + i;
    kv_seq a = {0}, b = {0}, c = {0};
    assert_int_equal(kv_seq_reserve(p, &a, 12), INF_OK);
    kv_seq_drop_front(p, &a, 9); /* nothing registered yet: nothing dropped */
    assert_int_equal(kv_num_free(p), 1);
    kv_seq_commit(p, &a, t, 12, 0);
    int32_t first = a.blocks[0];
    kv_seq_drop_front(p, &a, 5); /* block 0 back to the pool, still cached */
    assert_int_equal(kv_num_free(p), 2);
    /* still findable while it lasts: the whole chain matches */
    assert_int_equal(kv_seq_match_prefix(p, &c, t, 13, 0), 12);
    kv_seq_release(p, &c);
    /* evict it: b takes the two free blocks (the old block 0 first) with u */
    assert_int_equal(kv_seq_reserve(p, &b, 8), INF_OK);
    assert_true(b.blocks[0] == first || b.blocks[1] == first);
    kv_seq_commit(p, &b, u, 8, 0);
    /* t's chain now stops at its first block: a's later blocks are not found
     * through the reused id */
    assert_int_equal(kv_seq_match_prefix(p, &c, t, 13, 0), 0);
    kv_seq_release(p, &a), kv_seq_release(p, &b), kv_seq_release(p, &c);
    assert_int_equal(kv_num_free(p), 4);
    kv_destroy(p);
}

/* Bad sizes are refused with a message. */
static void test_kv_create_rejects_bad_config(void **state)
{
    (void)state;
    kv_config c = {.num_blocks = 1, .block_size = 16};
    kv_pool *p = NULL;
    inf_err e = {0};
    assert_int_equal(kv_create(&c, &p, &e), INF_ERR_INVALID);
    assert_null(p);
    assert_non_null(strstr(e.msg, "blocks"));
}

/* Pool sizing: the budget caps it, so does every sequence at full length in
 * whole blocks, and one usable block is the floor; the null block is added. */
static void test_kv_pool_blocks_sizing(void **state)
{
    (void)state;
    /* 2 sequences of 100 tokens in 16-token blocks need 7 blocks each: 14,
     * not ceil(200 / 16) = 13 */
    assert_int_equal(kv_pool_blocks(SIZE_MAX, 1, 16, 2, 100), 14 + 1);
    assert_int_equal(kv_pool_blocks(SIZE_MAX, 1, 16, 1, 96), 6 + 1);
    assert_int_equal(kv_pool_blocks(10 * 4096, 4096, 16, 8, 512), 10 + 1); /* budget */
    assert_int_equal(kv_pool_blocks(100, 4096, 16, 8, 512), 1 + 1);       /* floor */
    assert_int_equal(kv_pool_blocks(SIZE_MAX, 1, 16, 4, 0), 1 + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_alloc_exhausts_then_nospace),
        cmocka_unit_test(test_kv_refcount_shared_block_freed_last),
        cmocka_unit_test(test_kv_seq_reserve_slots_truncate),
        cmocka_unit_test(test_kv_seq_reserve_all_or_nothing),
        cmocka_unit_test(test_kv_seq_random_no_leak),
        cmocka_unit_test(test_kv_seq_drop_front),
        cmocka_unit_test(test_kv_prefix_drop_front_generation),
        cmocka_unit_test(test_kv_create_rejects_bad_config),
        cmocka_unit_test(test_kv_prefix_hits_share_blocks),
        cmocka_unit_test(test_kv_prefix_twin_blocks_keep_the_chain),
        cmocka_unit_test(test_kv_prefix_survives_free_until_evicted),
        cmocka_unit_test(test_kv_prefix_random_consistent),
        cmocka_unit_test(test_kv_pool_blocks_sizing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
