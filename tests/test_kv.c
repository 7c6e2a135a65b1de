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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_alloc_exhausts_then_nospace),
        cmocka_unit_test(test_kv_refcount_shared_block_freed_last),
        cmocka_unit_test(test_kv_seq_reserve_slots_truncate),
        cmocka_unit_test(test_kv_seq_reserve_all_or_nothing),
        cmocka_unit_test(test_kv_seq_random_no_leak),
        cmocka_unit_test(test_kv_create_rejects_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
