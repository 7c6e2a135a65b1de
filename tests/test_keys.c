/* keys_: several API keys from flags and a file, "Bearer" parsing, reloads
 * that keep the old keys when the new file is bad, and the constant-time
 * comparison's answers (its timing is not asserted). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "server/keys.h"

static char *tmp_path(const char *name)
{
    const char *dir = getenv("INFERD_TEST_TMP");
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", dir ? dir : "/tmp", name);
    return buf;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* no key anywhere: authentication is off */
static void test_keys_none_is_off(void **state)
{
    (void)state;
    keys *k = (keys *)1;
    inf_err e = {0};
    const char *empty[] = {""};
    assert_int_equal(keys_create(empty, 1, NULL, &k, &e), INF_OK);
    assert_null(k);
    assert_true(keys_check(NULL, NULL));
}

/* any flag key or file key passes; only "Bearer KEY" exactly */
static void test_keys_flags_and_file(void **state)
{
    (void)state;
    char *path = strdup(tmp_path("test_keys.txt"));
    write_file(path, "# comment\n\n  spaced-key \t\r\nplain\n");
    const char *flags[] = {"alpha", "beta"};
    keys *k = NULL;
    inf_err e = {0};
    assert_int_equal(keys_create(flags, 2, path, &k, &e), INF_OK);
    assert_non_null(k);
    assert_true(keys_check(k, "Bearer alpha"));
    assert_true(keys_check(k, "Bearer beta"));
    assert_true(keys_check(k, "Bearer spaced-key"));
    assert_true(keys_check(k, "Bearer plain"));
    assert_false(keys_check(k, NULL));
    assert_false(keys_check(k, "alpha"));
    assert_false(keys_check(k, "Basic alpha"));
    assert_false(keys_check(k, "Bearer alph"));
    assert_false(keys_check(k, "Bearer alphaa"));
    assert_false(keys_check(k, "Bearer # comment"));
    assert_false(keys_check(k, "Bearer "));
    assert_false(keys_check(k, "bearer alpha"));
    int n = 0;
    write_file(path, "new-key\n");
    assert_int_equal(keys_reload(k, &n, &e), INF_OK);
    assert_int_equal(n, 3);
    assert_true(keys_check(k, "Bearer new-key"));
    assert_false(keys_check(k, "Bearer plain"));
    assert_true(keys_check(k, "Bearer alpha"));
    /* a file emptied or removed: the keys in force stay */
    write_file(path, "\n# nothing\n");
    assert_int_equal(keys_reload(k, &n, &e), INF_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "no key"));
    remove(path);
    assert_int_equal(keys_reload(k, &n, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "test_keys.txt"));
    assert_true(keys_check(k, "Bearer new-key"));
    keys_destroy(k);
    free(path);
}

/* a file that is missing or keyless at start-up is an error naming it */
static void test_keys_bad_file_at_create(void **state)
{
    (void)state;
    keys *k = NULL;
    inf_err e = {0};
    assert_int_equal(keys_create(NULL, 0, "/nonexistent/keys", &k, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "/nonexistent/keys"));
    assert_null(k);
    char *path = strdup(tmp_path("test_keys_empty.txt"));
    write_file(path, "");
    assert_int_equal(keys_create(NULL, 0, path, &k, &e), INF_ERR_FORMAT);
    remove(path);
    free(path);
}

static void test_keys_equal_answers(void **state)
{
    (void)state;
    assert_true(keys_equal("abc", 3, "abc", 3));
    assert_false(keys_equal("abc", 3, "abd", 3));
    assert_false(keys_equal("abc", 3, "abcabc", 6)); /* cyclic reading must not fool it */
    assert_false(keys_equal("abcabc", 6, "abc", 3));
    assert_false(keys_equal("", 0, "a", 1));
    assert_false(keys_equal("a", 1, "", 0));
    assert_true(keys_equal("", 0, "", 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_none_is_off),
        cmocka_unit_test(test_keys_flags_and_file),
        cmocka_unit_test(test_keys_bad_file_at_create),
        cmocka_unit_test(test_keys_equal_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
