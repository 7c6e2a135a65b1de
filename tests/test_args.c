/* args_: long options from argv, the environment and key=value settings
 * (the config file): spellings, errors that name the option, and flags,
 * including an "--no-x" flag that clears the same int as "--x", so the
 * last source to speak wins. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "app/args.h"

typedef struct opts {
    const char *model;
    int n;
    float f;
    int on; /* default 1 */
    int verbose;
} opts;

static void specs_of(opts *o, arg_spec s[5])
{
    s[0] = (arg_spec){"model", ARG_STR, &o->model, "DIR", ""};
    s[1] = (arg_spec){"max-num-seqs", ARG_INT, &o->n, "N", ""};
    s[2] = (arg_spec){"gpu-memory-utilization", ARG_FLOAT, &o->f, "F", ""};
    s[3] = (arg_spec){"enable-thing", ARG_FLAG, &o->on, NULL, ""};
    s[4] = (arg_spec){"no-enable-thing", ARG_FLAG_OFF, &o->on, NULL, ""};
}

static void test_args_spellings_and_values(void **state)
{
    (void)state;
    opts o = {.on = 1};
    arg_spec s[5];
    specs_of(&o, s);
    char *argv[] = {"--model", "m", "--max_num_seqs=7", "--gpu-memory-utilization", "0.5"};
    int help = 1;
    inf_err e = {0};
    assert_int_equal(args_parse(s, 5, 5, argv, &help, &e), INF_OK);
    assert_string_equal(o.model, "m");
    assert_int_equal(o.n, 7);
    assert_true(o.f == 0.5f);
    assert_int_equal(help, 0);
}

static void test_args_errors_name_the_option(void **state)
{
    (void)state;
    opts o = {.on = 1};
    arg_spec s[5];
    specs_of(&o, s);
    int help;
    inf_err e = {0};
    char *bad_int[] = {"--max-num-seqs", "lots"};
    assert_int_equal(args_parse(s, 5, 2, bad_int, &help, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "max-num-seqs"));
    char *unknown[] = {"--prot", "1"};
    assert_int_equal(args_parse(s, 5, 2, unknown, &help, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "prot"));
    char *missing[] = {"--model"};
    assert_int_equal(args_parse(s, 5, 1, missing, &help, &e), INF_ERR_INVALID);
    char *flag_value[] = {"--enable-thing=1"};
    assert_int_equal(args_parse(s, 5, 1, flag_value, &help, &e), INF_ERR_INVALID);
    assert_int_equal(args_set(s, 5, "enable_thing", "maybe", &e), INF_ERR_INVALID);
}

/* env < config (args_set) < argv, for a flag and its "no-" twin */
static void test_args_flag_and_its_off_twin(void **state)
{
    (void)state;
    opts o = {.on = 1};
    arg_spec s[5];
    specs_of(&o, s);
    inf_err e = {0};
    int help;
    setenv("TESTARGS_NO_ENABLE_THING", "true", 1);
    setenv("TESTARGS_MAX_NUM_SEQS", "3", 1);
    assert_int_equal(args_from_env(s, 5, "TESTARGS_", &e), INF_OK);
    assert_int_equal(o.on, 0);
    assert_int_equal(o.n, 3);
    assert_int_equal(args_set(s, 5, "no-enable-thing", "false", &e), INF_OK);
    assert_int_equal(o.on, 1);
    assert_int_equal(args_set(s, 5, "enable_thing", "off", &e), INF_OK);
    assert_int_equal(o.on, 0);
    char *argv[] = {"--enable-thing", "--max-num-seqs", "9"};
    assert_int_equal(args_parse(s, 5, 3, argv, &help, &e), INF_OK);
    assert_int_equal(o.on, 1);
    assert_int_equal(o.n, 9);
    char *off[] = {"--no-enable-thing"};
    assert_int_equal(args_parse(s, 5, 1, off, &help, &e), INF_OK);
    assert_int_equal(o.on, 0);
    setenv("TESTARGS_ENABLE_THING", "sometimes", 1);
    assert_int_equal(args_from_env(s, 5, "TESTARGS_", &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "TESTARGS_ENABLE_THING"));
    unsetenv("TESTARGS_NO_ENABLE_THING");
    unsetenv("TESTARGS_MAX_NUM_SEQS");
    unsetenv("TESTARGS_ENABLE_THING");
}

/* a repeatable option collects every value; each source replaces what the
 * sources before it gave (env < config < argv), and the limit is an error */
static void test_args_repeatable_list(void **state)
{
    (void)state;
    arg_strs keys = {0};
    arg_spec s[1] = {{"api-key", ARG_STRS, &keys, "KEY", ""}};
    inf_err e = {0};
    int help;
    setenv("TESTARGS_API_KEY", "from-env", 1);
    assert_int_equal(args_from_env(s, 1, "TESTARGS_", &e), INF_OK);
    assert_int_equal(keys.n, 1);
    assert_string_equal(keys.v[0], "from-env");
    assert_int_equal(args_set(s, 1, "api_key", "from-config", &e), INF_OK);
    assert_int_equal(keys.n, 1);
    assert_string_equal(keys.v[0], "from-config");
    char *argv[] = {"--api-key", "a", "--api_key=b"};
    assert_int_equal(args_parse(s, 1, 3, argv, &help, &e), INF_OK);
    assert_int_equal(keys.n, 2);
    assert_string_equal(keys.v[0], "a");
    assert_string_equal(keys.v[1], "b");
    char *none[] = {"--help"}; /* a command line without it keeps the earlier values */
    assert_int_equal(args_parse(s, 1, 1, none, &help, &e), INF_OK);
    assert_int_equal(keys.n, 2);
    char *many[2 * (ARG_STRS_MAX + 1)];
    for (int i = 0; i <= ARG_STRS_MAX; i++)
        many[2 * i] = "--api-key", many[2 * i + 1] = "k";
    assert_int_equal(args_parse(s, 1, 2 * (ARG_STRS_MAX + 1), many, &help, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "api-key"));
    unsetenv("TESTARGS_API_KEY");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args_spellings_and_values),
        cmocka_unit_test(test_args_errors_name_the_option),
        cmocka_unit_test(test_args_flag_and_its_off_twin),
        cmocka_unit_test(test_args_repeatable_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
