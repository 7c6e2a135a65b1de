/* Unit tests for vargs_ (vLLM's command lines): the positional model, the
 * short aliases, the no-op flags dropped with a note, and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "app/vargs.h"

/* Normalizes the space-separated words of line and returns them joined
 * the same way (or "ERR: message"). */
static const char *norm(const char *line, vargs *v)
{
    static char buf[1024], out[1024];
    char *words[64];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *w = strtok(buf, " "); w && n < 64; w = strtok(NULL, " "))
        words[n++] = w;
    inf_err err = {0};
    if (vargs_normalize(n, words, v, &err)) {
        snprintf(out, sizeof out, "ERR: %s", err.msg);
        return out;
    }
    out[0] = '\0';
    for (int i = 0; i < v->argc; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "", v->argv[i]);
    return out;
}

/* `vllm serve ORG/NAME --port 8000`: the positional model is --model. */
static void test_vargs_positional_model(void **state)
{
    (void)state;
    vargs v;
    assert_string_equal(norm("Qwen/Qwen2.5-0.5B --port 8000", &v),
                        "--model Qwen/Qwen2.5-0.5B --port 8000");
    assert_int_equal(v.n_notes, 0);
    vargs_free(&v);
    assert_string_equal(norm("--model m --port 1", &v), "--model m --port 1");
    vargs_free(&v);
    assert_string_equal(norm("a/b --model c/d", &v),
                        "ERR: the model is given twice: as 'a/b' and as --model");
    assert_string_equal(norm("a/b --model=c/d", &v),
                        "ERR: the model is given twice: as 'a/b' and as --model");
}

/* The seeds' own example line, as vLLM's guides print it. */
static void test_vargs_guide_line(void **state)
{
    (void)state;
    vargs v;
    assert_string_equal(norm("--host 0.0.0.0 --port 8000 --model M --seed 42 -tp 1 "
                             "--speculative_model D --use-v2-block-manager "
                             "--num_speculative_tokens 5 --gpu_memory_utilization 0.8", &v),
                        "--host 0.0.0.0 --port 8000 --model M --seed 42 --tensor-parallel-size 1 "
                        "--speculative_model D --num_speculative_tokens 5 "
                        "--gpu_memory_utilization 0.8");
    assert_int_equal(v.n_notes, 1);
    assert_non_null(strstr(v.notes[0], "--use-v2-block-manager does nothing here"));
    vargs_free(&v);
}

/* Short aliases, spaced or with '='. */
static void test_vargs_aliases(void **state)
{
    (void)state;
    vargs v;
    assert_string_equal(norm("-q int8 -tp=2 -pp 1 -dp=1", &v),
                        "--quantization int8 --tensor-parallel-size=2");
    assert_int_equal(v.n_notes, 2); /* -pp 1 and -dp 1 change nothing */
    vargs_free(&v);
}

/* No-op flags: switches, optional booleans and values, dropped with a note;
 * values that would change something are refused. */
static void test_vargs_noops_and_refusals(void **state)
{
    (void)state;
    vargs v;
    assert_string_equal(norm("--enable-chunked-prefill --port 1 --enable_chunked_prefill False "
                             "--dtype auto --swap-space 4 --trust-remote-code --load-format=auto",
                             &v),
                        "--port 1");
    assert_int_equal(v.n_notes, 6);
    vargs_free(&v);
    assert_string_equal(norm("--dtype float32", &v),
                        "ERR: --dtype float32 is not supported: weights keep the checkpoint's "
                        "dtype");
    assert_string_equal(norm("-pp 2", &v),
                        "ERR: --pipeline-parallel-size 2 is not supported: one pipeline stage");
    assert_string_equal(norm("--swap-space", &v), "ERR: --swap-space needs a value");
    assert_string_equal(norm("--trust-remote-code=1", &v),
                        "ERR: --trust-remote-code takes no value");
    assert_string_equal(norm("--enable-chunked-prefill=maybe", &v),
                        "ERR: --enable-chunked-prefill expects true or false, got 'maybe'");
    /* unknown flags pass through for args_parse to refuse */
    assert_string_equal(norm("--no-such-flag 3", &v), "--no-such-flag 3");
    vargs_free(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vargs_positional_model),
        cmocka_unit_test(test_vargs_guide_line),
        cmocka_unit_test(test_vargs_aliases),
        cmocka_unit_test(test_vargs_noops_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
