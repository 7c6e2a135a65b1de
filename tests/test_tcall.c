/* Tool-call and reasoning parsers: outputs written in each family's format,
 * fed all at once, one byte at a time and in 3-byte pieces; every way must
 * give the expected content, reasoning, names and arguments, and streamed
 * events must come in OpenAI's order (a call's name before its
 * arguments, indices counting up). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "server/reason.h"
#include "server/tcall.h"

typedef struct got {
    char content[1024], reasoning[512];
    char name[4][64], args[4][256];
    int n_calls, events;
} got;

static void app(char *dst, size_t cap, const char *s, size_t n)
{
    size_t l = strlen(dst);
    assert_true(l + n < cap);
    memcpy(dst + l, s, n);
    dst[l + n] = 0;
}

static void on_ev(void *ctx, const tcall_event *e)
{
    got *g = ctx;
    g->events++;
    switch (e->type) {
    case TCALL_EV_CONTENT:
        assert_true(e->len > 0);
        app(g->content, sizeof g->content, e->text, e->len);
        break;
    case TCALL_EV_REASONING:
        app(g->reasoning, sizeof g->reasoning, e->text, e->len);
        break;
    case TCALL_EV_CALL:
        assert_int_equal(e->index, g->n_calls); /* indices count up */
        assert_true(g->n_calls < 4);
        app(g->name[g->n_calls], 64, e->text, e->len);
        g->n_calls++;
        break;
    case TCALL_EV_ARGS:
        assert_true(e->index == g->n_calls - 1); /* after its name */
        app(g->args[e->index], 256, e->text, e->len);
        break;
    }
}

static void run(tcall_kind k, const char *text, size_t piece, got *g)
{
    memset(g, 0, sizeof *g);
    tcall *p = NULL;
    assert_int_equal(tcall_create(k, &p, NULL), INF_OK);
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += piece)
        assert_int_equal(tcall_feed(p, text + i, n - i < piece ? n - i : piece, on_ev, g), INF_OK);
    tcall_finish(p, on_ev, g);
    assert_int_equal(tcall_count(p), g->n_calls);
    tcall_destroy(p);
}

typedef struct want {
    const char *content, *reasoning;
    int n;
    const char *name[3], *args[3];
} want;

static void check(tcall_kind k, const char *text, const want *w)
{
    size_t pieces[] = {strlen(text) + 1, 1, 3};
    for (int i = 0; i < 3; i++) {
        got g;
        run(k, text, pieces[i], &g);
        if (strcmp(g.content, w->content))
            fail_msg("%s piece %zu: content \"%s\", want \"%s\"", tcall_kind_name(k), pieces[i], g.content, w->content);
        assert_string_equal(g.reasoning, w->reasoning ? w->reasoning : "");
        assert_int_equal(g.n_calls, w->n);
        for (int c = 0; c < w->n; c++) {
            assert_string_equal(g.name[c], w->name[c]);
            if (strcmp(g.args[c], w->args[c]))
                fail_msg("%s piece %zu call %d: args \"%s\", want \"%s\"", tcall_kind_name(k), pieces[i], c,
                         g.args[c], w->args[c]);
        }
    }
    /* the all-at-once API agrees */
    tcall_result r;
    assert_int_equal(tcall_parse_all(k, text, strlen(text), &r, NULL), INF_OK);
    assert_string_equal(r.content, w->content);
    assert_int_equal(r.n_calls, w->n);
    for (int c = 0; c < w->n; c++)
        assert_string_equal(r.calls[c].arguments, w->args[c]);
    tcall_result_free(&r);
}

static void test_tcall_hermes(void **state)
{
    (void)state;
    check(TCALL_HERMES,
          "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n"
          "<tool_call>{\"arguments\": {\"q\": [1, {\"x\": \"}\"}]}, \"name\": \"search\"}</tool_call>",
          &(want){"Let me check.\n", NULL, 2, {"get_weather", "search"},
                  {"{\"city\": \"Paris\", \"unit\": \"c\"}", "{\"q\": [1, {\"x\": \"}\"}]}"}});
    /* no arguments key: {}; string arguments are decoded */
    check(TCALL_QWEN3, "<tool_call>{\"name\": \"now\"}</tool_call><tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
          &(want){"", NULL, 2, {"now", "f"}, {"{}", "{\"a\": 1}"}});
    /* plain text, a lone '<', and a marker not followed by an object */
    check(TCALL_HERMES, "a < b <tool_call> not json", &(want){"a < b <tool_call> not json", NULL, 0, {0}, {0}});
    /* an object without a name is given back as content */
    check(TCALL_HERMES, "<tool_call>{\"x\": 1}</tool_call>", &(want){"<tool_call>{\"x\": 1}</tool_call>", NULL, 0, {0}, {0}});
}

static void test_tcall_llama3_json(void **state)
{
    (void)state;
    check(TCALL_LLAMA3_JSON, "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}",
          &(want){"", NULL, 1, {"get_time"}, {"{\"tz\": \"UTC\"}"}});
    check(TCALL_LLAMA3_JSON, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}",
          &(want){"", NULL, 2, {"a", "b"}, {"{}", "{\"n\": 2}"}});
    check(TCALL_LLAMA3_JSON, "  The answer is {x}.", &(want){"  The answer is {x}.", NULL, 0, {0}, {0}});
}

static void test_tcall_mistral(void **state)
{
    (void)state;
    check(TCALL_MISTRAL, "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"neg\", \"arguments\": {\"a\": 3}}]",
          &(want){"", NULL, 2, {"add", "neg"}, {"{\"a\": 1, \"b\": 2}", "{\"a\": 3}"}});
    check(TCALL_MISTRAL, "Sure.[TOOL_CALLS]add[ARGS]{\"a\": 1, \"s\": \"[ARGS]\"}[TOOL_CALLS]neg[ARGS]{\"a\": {\"b\": []}}",
          &(want){"Sure.", NULL, 2, {"add", "neg"}, {"{\"a\": 1, \"s\": \"[ARGS]\"}", "{\"a\": {\"b\": []}}"}});
}

static void test_tcall_deepseek_v3(void **state)
{
    (void)state;
    check(TCALL_DEEPSEEK_V3,
          "I'll look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>\n"
          "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
          &(want){"I'll look.", NULL, 2, {"get_weather", "get_time"}, {"{\"city\": \"Oslo\"}", "{}"}});
}

static void test_tcall_openai_harmony(void **state)
{
    (void)state;
    check(TCALL_OPENAI,
          "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
          "<|constrain|>json<|message|>{\"city\":\"Rome\"}<|call|>",
          &(want){"", "Need weather.", 1, {"get_weather"}, {"{\"city\":\"Rome\"}"}});
    check(TCALL_OPENAI, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
          &(want){"Hello!", "Think.", 0, {0}, {0}});
}

static void test_tcall_unknown_parser_named(void **state)
{
    (void)state;
    tcall_kind k;
    inf_err e = {0};
    assert_int_equal(tcall_kind_parse("hermes2", &k, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "'hermes2'"));
    assert_non_null(strstr(e.msg, "llama3_json"));
    assert_int_equal(tcall_kind_parse("deepseek_v3", &k, &e), INF_OK);
    assert_int_equal(k, TCALL_DEEPSEEK_V3);
}

/* ------------------------------------------------------------ reasoning */

typedef struct rgot {
    char r[256], c[256];
} rgot;

static void on_rsn(void *ctx, int reasoning, const char *t, size_t n)
{
    rgot *g = ctx;
    assert_true(n > 0);
    app(reasoning ? g->r : g->c, 256, t, n);
}

static void check_rsn(rsn_kind k, const char *text, const char *want_r, const char *want_c)
{
    size_t pieces[] = {strlen(text) + 1, 1, 2};
    for (int i = 0; i < 3; i++) {
        rgot g = {{0}, {0}};
        rsn *p = NULL;
        assert_int_equal(rsn_create(k, &p, NULL), INF_OK);
        size_t n = strlen(text);
        for (size_t j = 0; j < n; j += pieces[i])
            rsn_feed(p, text + j, n - j < pieces[i] ? n - j : pieces[i], on_rsn, &g);
        rsn_finish(p, on_rsn, &g);
        rsn_destroy(p);
        assert_string_equal(g.r, want_r);
        assert_string_equal(g.c, want_c);
    }
}

static void test_reason_deepseek_r1(void **state)
{
    (void)state;
    check_rsn(RSN_DEEPSEEK_R1, "Let me think.</think>\n\nThe answer is 4.", "Let me think.", "\n\nThe answer is 4.");
    check_rsn(RSN_DEEPSEEK_R1, "<think>\nhmm</think>ok", "\nhmm", "ok");
    check_rsn(RSN_DEEPSEEK_R1, "still thinking </thi", "still thinking </thi", ""); /* no end: all reasoning */
}

static void test_reason_qwen3(void **state)
{
    (void)state;
    check_rsn(RSN_QWEN3, "<think>\nsteps\n</think>\n\nDone.", "\nsteps\n", "\n\nDone.");
    check_rsn(RSN_QWEN3, "Just an answer </think> here.", "", "Just an answer </think> here.");
    check_rsn(RSN_QWEN3, "\n<think>x</think>y", "x", "y");
    check_rsn(RSN_QWEN3, "<thin", "", "<thin");
    rsn_kind k;
    inf_err e = {0};
    assert_int_equal(rsn_kind_parse("r1", &k, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "deepseek_r1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcall_hermes),
        cmocka_unit_test(test_tcall_llama3_json),
        cmocka_unit_test(test_tcall_mistral),
        cmocka_unit_test(test_tcall_deepseek_v3),
        cmocka_unit_test(test_tcall_openai_harmony),
        cmocka_unit_test(test_tcall_unknown_parser_named),
        cmocka_unit_test(test_reason_deepseek_r1),
        cmocka_unit_test(test_reason_qwen3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
