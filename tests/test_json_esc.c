/* Unit tests for json_esc_, the one JSON string escaper: quotes, the short
 * and \u escapes, invalid UTF-8 as U+FFFD (one per maximal subpart), and the
 * fixed-buffer writer the logs use never cutting an escape or overflowing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "engine/json_esc.h"

static void expect_put(const char *in, size_t n, const char *want)
{
    inf_buf b = {0};
    json_esc_put(&b, in, n);
    assert_false(b.oom);
    inf_buf_put(&b, "", 1);
    assert_string_equal(b.p, want);
    free(b.p);
}

/* Quotes, backslashes and control characters, NUL included. */
static void test_json_esc_put_escapes(void **state)
{
    (void)state;
    expect_put("plain", 5, "\"plain\"");
    expect_put("a\"b\\c", 5, "\"a\\\"b\\\\c\"");
    expect_put("\n\r\t\b\f", 5, "\"\\n\\r\\t\\b\\f\"");
    expect_put("\x01\x1f", 2, "\"\\u0001\\u001f\"");
    expect_put("x\0y", 3, "\"x\\u0000y\"");
    expect_put("", 0, "\"\"");
}

/* Valid UTF-8 passes; each maximal invalid subpart is one U+FFFD (Unicode
 * 3.2 "substitution of maximal subparts"). */
static void test_json_esc_put_utf8(void **state)
{
    (void)state;
    expect_put("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 9, "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"");
    expect_put("\xff", 1, "\"\xEF\xBF\xBD\"");
    expect_put("\xE2\x82", 2, "\"\xEF\xBF\xBD\"");          /* a cut 3-byte char */
    expect_put("\xE2\x82" "A", 3, "\"\xEF\xBF\xBD" "A\"");
    expect_put("\xED\xA0\x80", 3, "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\""); /* surrogate */
    expect_put("\xC0\xAF", 2, "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");                 /* overlong */
}

/* The log writer: contents only, appended at `at`, and when the buffer is
 * short it stops before an escape or character that would not fit. */
static void test_json_esc_into_bounds(void **state)
{
    (void)state;
    char buf[16];
    memcpy(buf, "ab", 2);
    size_t n = json_esc_into(buf, sizeof buf, 2, "x\"\n");
    assert_int_equal(n, 7);
    assert_string_equal(buf, "abx\\\"\\n");
    n = json_esc_into(buf, 8, 0, "abcde\x01");           /* \u0001 needs 6 */
    assert_int_equal(n, 5);
    assert_string_equal(buf, "abcde");
    n = json_esc_into(buf, 6, 0, "abc\xE2\x82\xAC");   /* the euro sign needs 3 */
    assert_int_equal(n, 3);
    assert_string_equal(buf, "abc");
    n = json_esc_into(buf, sizeof buf, 0, NULL);
    assert_int_equal(n, 0);
    assert_string_equal(buf, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_esc_put_escapes),
        cmocka_unit_test(test_json_esc_put_utf8),
        cmocka_unit_test(test_json_esc_into_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
