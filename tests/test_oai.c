/* Unit tests for oai_ (the OpenAI wire format): every request field's happy
 * path and default, a table of validation failures (status, param, message),
 * malformed bodies, and the encoders read back with cJSON: exact key names
 * and order, logprobs shapes, SSE framing, UTF-8 safety. Ends with 10,000
 * seeded random mutations of valid bodies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/common.h"
#include "server/oai.h"

/* ---- helpers ------------------------------------------------------------- */

static int parse(oai_kind kind, const char *body, oai_request *r, oai_error *e)
{
    oai_limits lim = oai_limits_default();
    memset(e, 0, sizeof *e);
    return oai_parse(kind, body, strlen(body), &lim, r, e);
}

static void parse_ok(oai_kind kind, const char *body, oai_request *r)
{
    oai_error e;
    int rc = parse(kind, body, r, &e);
    if (rc != 0)
        fail_msg("body %s: %d %s (param %s)", body, rc, e.message, e.param);
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *u = p;
    for (size_t i = 0; i < n; i++)
        if (u[i])
            return 0;
    return 1;
}

/* An independent UTF-8 check (RFC 3629): the encoders must never emit
 * anything else. */
static int valid_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int len;
        if (u[i] < 0x80) { i++; continue; }
        if ((u[i] & 0xE0) == 0xC0) { len = 2; cp = u[i] & 0x1F; }
        else if ((u[i] & 0xF0) == 0xE0) { len = 3; cp = u[i] & 0x0F; }
        else if ((u[i] & 0xF8) == 0xF0) { len = 4; cp = u[i] & 0x07; }
        else return 0;
        if (i + (size_t)len > n)
            return 0;
        for (int k = 1; k < len; k++) {
            if ((u[i + k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (u[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
            (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += (size_t)len;
    }
    return 1;
}

/* Parses an encoder's output (and frees it); fails the test when it is not
 * valid UTF-8 JSON. */
static cJSON *json_of(char *s)
{
    assert_non_null(s);
    assert_true(valid_utf8(s, strlen(s)));
    cJSON *j = cJSON_Parse(s);
    if (!j)
        fail_msg("not JSON: %s", s);
    free(s);
    return j;
}

/* The object's keys are exactly names, in this order. */
static void assert_keys(const cJSON *o, const char *names)
{
    char buf[512], *save = NULL;
    const cJSON *it = o ? o->child : NULL;
    assert_true(cJSON_IsObject(o));
    snprintf(buf, sizeof buf, "%s", names);
    for (char *k = strtok_r(buf, ",", &save); k; k = strtok_r(NULL, ",", &save)) {
        if (!it)
            fail_msg("key %s missing (want %s)", k, names);
        if (strcmp(it->string, k))
            fail_msg("key %s where %s was expected (want %s)", it->string, k, names);
        it = it->next;
    }
    if (it)
        fail_msg("extra key %s (want %s)", it->string, names);
}

static const cJSON *at(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v)
        fail_msg("no key %s", k);
    return v;
}

static const char *str_at(const cJSON *o, const char *k)
{
    const cJSON *v = at(o, k);
    assert_true(cJSON_IsString(v));
    return v->valuestring;
}

static double num_at(const cJSON *o, const char *k)
{
    const cJSON *v = at(o, k);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static const cJSON *idx(const cJSON *a, int i)
{
    const cJSON *v = cJSON_GetArrayItem(a, i);
    assert_non_null(v);
    return v;
}

/* ---- parsing: happy paths and defaults ----------------------------------- */

/* The defaults are the documented ones. */
static void test_oai_limits_default_values(void **state)
{
    (void)state;
    oai_limits l = oai_limits_default();
    assert_int_equal(l.max_n, 16);
    assert_int_equal(l.max_logprobs, 20);
    assert_int_equal(l.max_prompts, 64);
    assert_int_equal(l.max_stop, 16);
}

static void assert_defaults(const oai_request *r)
{
    assert_null(r->model);
    assert_int_equal(r->add_generation_prompt, 1);
    assert_int_equal(r->stream, 0);
    assert_int_equal(r->include_usage, 0);
    assert_int_equal(r->max_tokens, -1);
    assert_int_equal(r->min_tokens, 0);
    assert_int_equal(r->n, 1);
    assert_true(r->temperature == 1.0f);
    assert_true(r->top_p == 1.0f);
    assert_int_equal(r->top_k, -1);
    assert_true(r->min_p == 0.0f);
    assert_true(r->presence_penalty == 0.0f);
    assert_true(r->frequency_penalty == 0.0f);
    assert_true(r->repetition_penalty == 1.0f);
    assert_int_equal(r->has_seed, 0);
    assert_int_equal(r->logprobs, -1);
    assert_int_equal(r->echo, 0);
    assert_int_equal(r->n_stop, 0);
    assert_null(r->stop);
    assert_int_equal(r->n_stop_token_ids, 0);
    assert_int_equal(r->n_bias, 0);
    assert_int_equal(r->ignore_eos, 0);
    assert_int_equal(r->skip_special_tokens, 1);
    assert_null(r->user);
    assert_null(r->cache_salt);
    assert_int_equal(r->speculative, 1);
}

/* A bare completions body gets every default and one text prompt. */
static void test_oai_parse_completion_defaults(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"Once upon\"}", &r);
    assert_int_equal(r.kind, OAI_COMPLETION);
    assert_defaults(&r);
    assert_int_equal(r.n_prompts, 1);
    assert_string_equal(r.prompts[0].text, "Once upon");
    assert_null(r.prompts[0].ids);
    assert_int_equal(r.n_messages, 0);
    oai_request_free(&r);
    assert_true(all_zero(&r, sizeof r));
}

/* A bare chat body gets every default and its message. */
static void test_oai_parse_chat_defaults(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &r);
    assert_int_equal(r.kind, OAI_CHAT);
    assert_defaults(&r);
    assert_int_equal(r.n_messages, 1);
    assert_string_equal(r.messages[0].role, "user");
    assert_string_equal(r.messages[0].content, "Hi");
    assert_int_equal(r.n_prompts, 0);
    oai_request_free(&r);
}

/* A Responses body maps onto chat: instructions first as system, input
 * parts joined, max_output_tokens as max_tokens; stored responses are a 400. */
static void test_oai_parse_responses_mapping(void **state)
{
    (void)state;
    oai_limits lim = oai_limits_default();
    oai_request r;
    oai_error e;
    const char *b = "{\"instructions\":\"Be brief.\",\"max_output_tokens\":7,\"temperature\":0.5,"
                    "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
                    "\"text\":\"a\"},{\"type\":\"input_text\",\"text\":\"b\"}]},"
                    "{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"c\"}]}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 0);
    assert_int_equal(r.kind, OAI_CHAT);
    assert_int_equal(r.n_messages, 3);
    assert_string_equal(r.messages[0].role, "system");
    assert_string_equal(r.messages[0].content, "Be brief.");
    assert_string_equal(r.messages[1].content, "a\nb");
    assert_string_equal(r.messages[2].role, "assistant");
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.temperature == 0.5f);
    assert_int_equal(r.n, 1);
    oai_request_free(&r);
    b = "{\"input\":\"x\",\"store\":true}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 400);
    assert_string_equal(e.param, "store");
    b = "{\"input\":[{\"type\":\"function_call_output\",\"output\":\"x\"}]}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 400);
    b = "{\"input\":\"x\",\"max_output_tokens\":0}"; /* chat's own range check */
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 400);
    /* named in the Responses' terms, not chat's */
    assert_string_equal(e.param, "max_output_tokens");
    assert_non_null(strstr(e.message, "max_output_tokens"));
    assert_null(strstr(e.message, "max_tokens"));
    b = "{\"input\":[]}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 400);
    assert_string_equal(e.param, "input");
    assert_null(strstr(e.message, "messages"));
}

/* Responses' flat function tools, tool_choice by name, and text.format map
 * onto chat's: a named choice or a json_schema format sets the grammar;
 * function_call items become an assistant turn's tool_calls (consecutive
 * ones one turn), function_call_output items tool messages. */
static void test_oai_parse_responses_tools_and_format(void **state)
{
    (void)state;
    oai_limits lim = oai_limits_default();
    oai_request r;
    oai_error e;
    const char *b = "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"get\","
                    "\"description\":\"d\",\"parameters\":{\"type\":\"object\",\"properties\":"
                    "{\"q\":{\"type\":\"string\"}}}}],\"tool_choice\":{\"type\":\"function\","
                    "\"name\":\"get\"}}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 0);
    assert_int_equal(r.n_tools, 1);
    assert_string_equal(r.tools[0].name, "get");
    assert_int_equal(r.tool_choice, OAI_TOOL_NAMED);
    assert_string_equal(r.tool_name, "get");
    assert_non_null(r.grammar);
    assert_non_null(strstr(r.tools_json, "\"function\":{\"name\":\"get\""));
    oai_request_free(&r);
    b = "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"get\"}],"
        "\"tool_choice\":\"required\"}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 0);
    assert_int_equal(r.tool_choice, OAI_TOOL_REQUIRED);
    oai_request_free(&r);
    b = "{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 400);
    assert_string_equal(e.param, "tools");
    b = "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"s\","
        "\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":"
        "{\"type\":\"integer\"}},\"required\":[\"a\"]}}}}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 0);
    assert_non_null(r.grammar);
    oai_request_free(&r);
    b = "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_object\"}}}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 0);
    assert_non_null(r.grammar);
    oai_request_free(&r);
    b = "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"yaml\"}}}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 400);
    assert_string_equal(e.param, "text.format.type");
    assert_null(strstr(e.message, "response_format"));
    b = "{\"input\":[{\"role\":\"user\",\"content\":\"q\"},"
        "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"get\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"get\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"42\"}]}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 0);
    assert_int_equal(r.n_messages, 3);
    assert_string_equal(r.messages[1].role, "assistant");
    assert_string_equal(r.messages[2].role, "tool");
    assert_string_equal(r.messages[2].content, "42");
    assert_non_null(strstr(r.messages_json, "\"tool_call_id\":\"c1\""));
    assert_non_null(strstr(r.messages_json, "\"id\":\"c2\""));
    oai_request_free(&r);
    b = "{\"input\":[{\"type\":\"function_call\",\"name\":\"get\"}]}";
    assert_int_equal(oai_parse_responses(b, strlen(b), &lim, &r, &e), 400);
    assert_string_equal(e.param, "input");
}

/* A choice with tool calls is a Response whose output holds function_call
 * items after the message; an empty text with calls has no message. */
static void test_oai_resp_json_function_calls(void **state)
{
    (void)state;
    oai_meta m = {.kind = OAI_CHAT, .id = "resp_1", .created = 5, .model = "m"};
    oai_tool_call calls[2] = {{0, "call_a", "get", "{\"q\":1}", 7},
                              {1, "call_b", "put", "{}", 2}};
    oai_choice c = {.text = "", .finish_reason = "stop", .calls = calls, .n_calls = 2,
                    .content_null = 1, .stop_reason_id = -1};
    oai_usage u = {3, 4, 0};
    cJSON *j = json_of(oai_resp_json(&m, &c, &u));
    assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "completed");
    cJSON *out = cJSON_GetObjectItem(j, "output");
    assert_int_equal(cJSON_GetArraySize(out), 2);
    cJSON *f = cJSON_GetArrayItem(out, 0);
    assert_string_equal(cJSON_GetObjectItem(f, "type")->valuestring, "function_call");
    assert_string_equal(cJSON_GetObjectItem(f, "call_id")->valuestring, "call_a");
    assert_string_equal(cJSON_GetObjectItem(f, "id")->valuestring, "fc_call_a");
    assert_string_equal(cJSON_GetObjectItem(f, "name")->valuestring, "get");
    assert_string_equal(cJSON_GetObjectItem(f, "arguments")->valuestring, "{\"q\":1}");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(out, 1), "name")->valuestring,
                        "put");
    cJSON_Delete(j);
    c.text = "hi";
    c.text_len = 2;
    c.n_calls = 0;
    c.finish_reason = "length";
    j = json_of(oai_resp_json(&m, &c, &u));
    assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "incomplete");
    out = cJSON_GetObjectItem(j, "output");
    assert_int_equal(cJSON_GetArraySize(out), 1);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(out, 0), "type")->valuestring,
                        "message");
    cJSON_Delete(j);
}

/* The event types of an SSE text, in order, and whether sequence numbers
 * run 0, 1, 2, ... */
static int event_types(const char *sse, char types[][64], int max, int *seq)
{
    int n = 0;
    for (const char *p = strstr(sse, "data: "); p && n < max; p = strstr(p + 1, "data: ")) {
        const char *e = strstr(p, "\n\n");
        char *d = strndup(p + 6, (size_t)(e - p - 6));
        cJSON *j = cJSON_Parse(d);
        free(d);
        assert_non_null(j);
        snprintf(types[n++], 64, "%s", cJSON_GetObjectItem(j, "type")->valuestring);
        assert_int_equal((int)cJSON_GetObjectItem(j, "sequence_number")->valuedouble, (*seq)++);
        cJSON_Delete(j);
    }
    return n;
}

/* A streamed function call: output_item.added with the name, argument
 * deltas, then arguments.done and output_item.done before
 * response.completed; a failure is an error event and response.failed. */
static void test_oai_resp_stream_function_call_events(void **state)
{
    (void)state;
    oai_meta m = {.kind = OAI_CHAT, .id = "resp_2", .created = 5, .model = "m"};
    oai_resp_stream s;
    oai_resp_stream_init(&s);
    inf_buf all = {0};
    char *x = oai_resp_start_sse(&m, &s);
    inf_buf_put(&all, x, strlen(x));
    free(x);
    oai_tool_call first = {0, "call_a", "get", "{\"q\"", 4}, more = {0, NULL, NULL, ":1}", 3};
    oai_choice c = {.text = "", .calls = &first, .n_calls = 1, .stop_reason_id = -1};
    x = oai_resp_delta_sse(&m, &s, &c);
    inf_buf_put(&all, x, strlen(x));
    free(x);
    c.calls = &more;
    x = oai_resp_delta_sse(&m, &s, &c);
    inf_buf_put(&all, x, strlen(x));
    free(x);
    oai_usage u = {1, 2, 0};
    x = oai_resp_end_sse(&m, &s, "stop", &u);
    inf_buf_put(&all, x, strlen(x) + 1);
    free(x);
    char types[32][64];
    int seq = 0, n = event_types(all.p, types, 32, &seq);
    static const char *const want[] = {
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"};
    assert_int_equal(n, 8);
    for (int i = 0; i < n; i++)
        assert_string_equal(types[i], want[i]);
    assert_non_null(strstr(all.p, "\"arguments\":\"{\\\"q\\\":1}\""));
    free(all.p);
    oai_resp_stream_free(&s);

    oai_resp_stream_init(&s);
    oai_error e;
    oai_fail(&e, 500, "internal_error", "", "the step failed");
    x = oai_resp_fail_sse(&m, &s, &e);
    seq = 0;
    n = event_types(x, types, 32, &seq);
    assert_int_equal(n, 2);
    assert_string_equal(types[0], "error");
    assert_string_equal(types[1], "response.failed");
    assert_non_null(strstr(x, "\"status\":\"failed\""));
    assert_non_null(strstr(x, "the step failed"));
    free(x);
    oai_resp_stream_free(&s);
}

/* Every completions field is read into its member. */
static void test_oai_parse_completion_all_fields(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION,
             "{\"model\":\"stories\",\"prompt\":\"x\",\"max_tokens\":32,"
             "\"min_tokens\":4,\"n\":3,\"best_of\":3,\"temperature\":0.5,"
             "\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"presence_penalty\":-1.5,"
             "\"frequency_penalty\":2,\"repetition_penalty\":1.3,\"seed\":-7,"
             "\"logprobs\":5,\"echo\":true,\"stop\":[\"\\n\",\"END\"],"
             "\"stop_token_ids\":[2,13],\"logit_bias\":{\"5\":-100,\"17\":2.5},"
             "\"ignore_eos\":true,\"skip_special_tokens\":false,\"user\":\"u1\","
             "\"cache_salt\":\"salt\",\"speculative\":false,\"stream\":true,"
             "\"stream_options\":{\"include_usage\":true},\"suffix\":null,"
             "\"unknown_field\":{\"x\":[1,2]}}",
             &r);
    assert_string_equal(r.model, "stories");
    assert_int_equal(r.max_tokens, 32);
    assert_int_equal(r.min_tokens, 4);
    assert_int_equal(r.n, 3);
    assert_float_equal(r.temperature, 0.5, 1e-7);
    assert_float_equal(r.top_p, 0.9, 1e-7);
    assert_int_equal(r.top_k, 40);
    assert_float_equal(r.min_p, 0.05, 1e-7);
    assert_float_equal(r.presence_penalty, -1.5, 1e-7);
    assert_float_equal(r.frequency_penalty, 2.0, 1e-7);
    assert_float_equal(r.repetition_penalty, 1.3, 1e-7);
    assert_int_equal(r.has_seed, 1);
    assert_true(r.seed == -7);
    assert_int_equal(r.logprobs, 5);
    assert_int_equal(r.echo, 1);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[0], "\n");
    assert_string_equal(r.stop[1], "END");
    assert_int_equal(r.n_stop_token_ids, 2);
    assert_int_equal(r.stop_token_ids[0], 2);
    assert_int_equal(r.stop_token_ids[1], 13);
    assert_int_equal(r.n_bias, 2);
    assert_int_equal(r.bias_ids[0], 5); /* sorted by id */
    assert_float_equal(r.bias_values[0], -100.0, 0);
    assert_int_equal(r.bias_ids[1], 17);
    assert_float_equal(r.bias_values[1], 2.5, 0);
    assert_int_equal(r.ignore_eos, 1);
    assert_int_equal(r.skip_special_tokens, 0);
    assert_string_equal(r.user, "u1");
    assert_string_equal(r.cache_salt, "salt");
    assert_int_equal(r.speculative, 0);
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.include_usage, 1);
    oai_request_free(&r);
}

/* Every chat field is read; chat-only fields land, completions-only ones
 * (echo) are ignored. */
static void test_oai_parse_chat_all_fields(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_CHAT,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
             "{\"role\":\"user\",\"content\":\"U\",\"name\":\"bob\"},"
             "{\"role\":\"assistant\",\"content\":\"A\"}],"
             "\"add_generation_prompt\":false,\"logprobs\":true,\"top_logprobs\":3,"
             "\"max_completion_tokens\":9,\"stop\":\"x\",\"echo\":\"ignored\","
             "\"temperature\":0,\"seed\":1,\"stream\":false}",
             &r);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.n_messages, 3);
    assert_string_equal(r.messages[0].role, "system");
    assert_string_equal(r.messages[2].role, "assistant");
    assert_string_equal(r.messages[2].content, "A");
    assert_int_equal(r.add_generation_prompt, 0);
    assert_int_equal(r.logprobs, 3);
    assert_int_equal(r.max_tokens, 9);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "x");
    assert_int_equal(r.echo, 0);
    assert_true(r.temperature == 0.0f);
    oai_request_free(&r);
}

/* prompt: a string, a list of strings, a flat id list (one prompt) and a
 * list of id lists (one prompt each). */
static void test_oai_parse_prompt_shapes(void **state)
{
    (void)state;
    oai_request r;

    parse_ok(OAI_COMPLETION, "{\"prompt\":[\"a\",\"\",\"c\"]}", &r);
    assert_int_equal(r.n_prompts, 3);
    assert_string_equal(r.prompts[0].text, "a");
    assert_string_equal(r.prompts[1].text, "");
    assert_string_equal(r.prompts[2].text, "c");
    oai_request_free(&r);

    parse_ok(OAI_COMPLETION, "{\"prompt\":[1,0,2147483647,16.0]}", &r);
    assert_int_equal(r.n_prompts, 1);
    assert_null(r.prompts[0].text);
    assert_int_equal(r.prompts[0].n_ids, 4);
    assert_int_equal(r.prompts[0].ids[0], 1);
    assert_int_equal(r.prompts[0].ids[1], 0);
    assert_int_equal(r.prompts[0].ids[2], 2147483647);
    assert_int_equal(r.prompts[0].ids[3], 16);
    oai_request_free(&r);

    parse_ok(OAI_COMPLETION, "{\"prompt\":[[1,2,3],[4]]}", &r);
    assert_int_equal(r.n_prompts, 2);
    assert_int_equal(r.prompts[0].n_ids, 3);
    assert_int_equal(r.prompts[0].ids[2], 3);
    assert_int_equal(r.prompts[1].n_ids, 1);
    assert_int_equal(r.prompts[1].ids[0], 4);
    oai_request_free(&r);

    parse_ok(OAI_COMPLETION, "{\"prompt\":\"\"}", &r); /* the BOS alone */
    assert_string_equal(r.prompts[0].text, "");
    oai_request_free(&r);
}

/* Exactly max_prompts prompts pass; one more is a 400 on "prompt". */
static void test_oai_parse_prompt_max_prompts(void **state)
{
    (void)state;
    oai_limits lim = oai_limits_default();
    lim.max_prompts = 2;
    oai_request r;
    oai_error e;
    const char *two = "{\"prompt\":[[1],[2]]}", *three = "{\"prompt\":[\"a\",\"b\",\"c\"]}";
    assert_int_equal(oai_parse(OAI_COMPLETION, two, strlen(two), &lim, &r, &e), 0);
    oai_request_free(&r);
    assert_int_equal(oai_parse(OAI_COMPLETION, three, strlen(three), &lim, &r, &e), 400);
    assert_string_equal(e.param, "prompt");
    assert_non_null(strstr(e.message, "at most 2 prompts, got 3"));
    /* a flat id list is one prompt however long */
    const char *ids = "{\"prompt\":[1,2,3,4,5]}";
    assert_int_equal(oai_parse(OAI_COMPLETION, ids, strlen(ids), &lim, &r, &e), 0);
    oai_request_free(&r);
}

/* Text content parts are joined with "\n"; an empty part list is "". */
static void test_oai_parse_chat_content_parts(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
             "\"text\":\"one\"},{\"type\":\"text\",\"text\":\"\"},{\"text\":\"three\","
             "\"type\":\"text\"}]},{\"role\":\"user\",\"content\":[]}]}",
             &r);
    assert_string_equal(r.messages[0].content, "one\n\nthree");
    assert_string_equal(r.messages[1].content, "");
    oai_request_free(&r);
}

/* "developer" is read as "system"; an assistant turn may have null or no
 * content (read as ""). */
static void test_oai_parse_chat_roles(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_CHAT,
             "{\"messages\":[{\"role\":\"developer\",\"content\":\"D\"},"
             "{\"role\":\"user\",\"content\":\"\"},"
             "{\"role\":\"assistant\",\"content\":null},{\"role\":\"assistant\"}]}",
             &r);
    assert_string_equal(r.messages[0].role, "system");
    assert_string_equal(r.messages[0].content, "D");
    assert_string_equal(r.messages[1].content, "");
    assert_string_equal(r.messages[2].content, "");
    assert_string_equal(r.messages[3].content, "");
    oai_request_free(&r);
}

/* What a Jinja chat template needs is kept as JSON text: the messages as
 * sent (tool calls, tool results, the original role), tools, documents,
 * chat_template_kwargs; continue_final_message with add_generation_prompt
 * false. */
static void test_oai_parse_chat_template_inputs(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_CHAT,
             "{\"messages\":[{\"role\":\"developer\",\"content\":\"D\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\","
             "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"r\"}],"
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
             "\"documents\":[{\"text\":\"t\"}],\"chat_template_kwargs\":{\"enable_thinking\":false},"
             "\"add_generation_prompt\":false,\"continue_final_message\":true}",
             &r);
    assert_string_equal(r.messages[2].role, "tool");
    assert_string_equal(r.messages_json,
                        "[{\"role\":\"developer\",\"content\":\"D\"},{\"role\":\"assistant\","
                        "\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
                        "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                        "\"tool_call_id\":\"c\",\"content\":\"r\"}]");
    assert_string_equal(r.tools_json, "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
    assert_string_equal(r.documents_json, "[{\"text\":\"t\"}]");
    assert_string_equal(r.chat_template_kwargs_json, "{\"enable_thinking\":false}");
    assert_int_equal(r.continue_final_message, 1);
    assert_int_equal(r.add_generation_prompt, 0);
    oai_request_free(&r);
}

/* max_completion_tokens is max_tokens; given both, it wins (as vLLM). */
static void test_oai_parse_max_completion_tokens_alias(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"max_completion_tokens\":7}", &r);
    assert_int_equal(r.max_tokens, 7);
    oai_request_free(&r);
    parse_ok(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"max_completion_tokens\":7,\"max_tokens\":100}", &r);
    assert_int_equal(r.max_tokens, 7);
    oai_request_free(&r);
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":100,"
                             "\"max_completion_tokens\":null}", &r);
    assert_int_equal(r.max_tokens, 100);
    oai_request_free(&r);
}

/* Integral floats are integers (JSON has one number type); exponents too. */
static void test_oai_parse_integral_floats(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":16.0,\"n\":2e0,"
                             "\"logprobs\":1.0,\"seed\":1E3,\"top_k\":-1.0}", &r);
    assert_int_equal(r.max_tokens, 16);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.logprobs, 1);
    assert_true(r.seed == 1000);
    assert_int_equal(r.top_k, -1);
    oai_request_free(&r);
}

/* null reads as absent for every optional field. */
static void test_oai_parse_nulls_are_defaults(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION,
             "{\"prompt\":\"x\",\"model\":null,\"max_tokens\":null,\"min_tokens\":null,"
             "\"n\":null,\"temperature\":null,\"top_p\":null,\"top_k\":null,"
             "\"min_p\":null,\"presence_penalty\":null,\"frequency_penalty\":null,"
             "\"repetition_penalty\":null,\"seed\":null,\"logprobs\":null,"
             "\"echo\":null,\"stop\":null,\"stop_token_ids\":null,\"logit_bias\":null,"
             "\"ignore_eos\":null,\"skip_special_tokens\":null,\"user\":null,"
             "\"cache_salt\":null,\"speculative\":null,\"stream\":null,"
             "\"stream_options\":null,\"best_of\":null,\"suffix\":null}",
             &r);
    assert_defaults(&r);
    oai_request_free(&r);
    parse_ok(OAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
             "\"logprobs\":null,\"top_logprobs\":null,\"add_generation_prompt\":null,"
             "\"max_completion_tokens\":null}",
             &r);
    assert_defaults(&r);
    oai_request_free(&r);
}

/* top_k 0 means off (-1), as vLLM. */
static void test_oai_parse_top_k_zero_is_off(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"top_k\":0}", &r);
    assert_int_equal(r.top_k, -1);
    oai_request_free(&r);
}

/* Empty stop and stop_token_ids lists mean none. */
static void test_oai_parse_empty_lists(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"stop\":[],\"stop_token_ids\":[],"
                             "\"logit_bias\":{}}", &r);
    assert_int_equal(r.n_stop, 0);
    assert_null(r.stop);
    assert_int_equal(r.n_stop_token_ids, 0);
    assert_int_equal(r.n_bias, 0);
    oai_request_free(&r);
}

/* Bounds that are inclusive accept their edges. */
static void test_oai_parse_range_edges(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION,
             "{\"prompt\":\"x\",\"temperature\":100,\"top_p\":1,\"min_p\":1,"
             "\"presence_penalty\":-2,\"frequency_penalty\":2,\"n\":16,"
             "\"logprobs\":20,\"max_tokens\":2147483647,\"min_tokens\":2147483647,"
             "\"logit_bias\":{\"0\":-100,\"2147483647\":100}}",
             &r);
    assert_true(r.temperature == 100.0f);
    assert_int_equal(r.n, 16);
    assert_int_equal(r.logprobs, 20);
    assert_int_equal(r.max_tokens, 2147483647);
    assert_int_equal(r.bias_ids[1], 2147483647);
    oai_request_free(&r);
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"temperature\":0,\"logprobs\":0,"
                             "\"min_tokens\":0,\"max_tokens\":1}", &r);
    assert_int_equal(r.logprobs, 0);
    assert_int_equal(r.max_tokens, 1);
    oai_request_free(&r);
}

/* A repeated logit_bias key keeps its last value (as a JSON dict would). */
static void test_oai_parse_logit_bias_last_wins(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"9\":1,\"3\":2,"
                             "\"9\":-3,\"009\":4.5}}", &r);
    assert_int_equal(r.n_bias, 2);
    assert_int_equal(r.bias_ids[0], 3);
    assert_float_equal(r.bias_values[0], 2.0, 0);
    assert_int_equal(r.bias_ids[1], 9);
    assert_float_equal(r.bias_values[1], 4.5, 0);
    oai_request_free(&r);
}

/* seed takes any int64 (doubles at 2^63 saturate to INT64_MAX). */
static void test_oai_parse_seed_int64(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"seed\":9223372036854775807}", &r);
    assert_true(r.seed == INT64_MAX);
    oai_request_free(&r);
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"seed\":-9223372036854775808}", &r);
    assert_true(r.seed == INT64_MIN);
    oai_request_free(&r);
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"seed\":0}", &r);
    assert_int_equal(r.has_seed, 1);
    assert_true(r.seed == 0);
    oai_request_free(&r);
}

/* chat logprobs: false -> -1, true -> top_logprobs (default 0). */
static void test_oai_parse_chat_logprobs(void **state)
{
    (void)state;
    oai_request r;
    static const struct {
        const char *extra;
        int want;
    } cases[] = {
        {"\"logprobs\":false", -1},
        {"\"logprobs\":true", 0},
        {"\"logprobs\":true,\"top_logprobs\":5", 5},
        {"\"logprobs\":true,\"top_logprobs\":0", 0},
        {"\"logprobs\":true,\"top_logprobs\":null", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}",
                 cases[i].extra);
        parse_ok(OAI_CHAT, body, &r);
        assert_int_equal(r.logprobs, cases[i].want);
        oai_request_free(&r);
    }
}

/* stream_options with stream true sets include_usage; false keeps it off. */
static void test_oai_parse_stream_options(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"stream\":true,"
                             "\"stream_options\":{\"include_usage\":false}}", &r);
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.include_usage, 0);
    oai_request_free(&r);
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{}}", &r);
    assert_int_equal(r.include_usage, 0);
    oai_request_free(&r);
}

/* Strings keep their bytes: escapes decoded, non-ASCII kept, a BOM and
 * surrounding whitespace allowed. */
static void test_oai_parse_strings_unescaped(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION, "\xEF\xBB\xBF \n{\"prompt\":\"caf\\u00e9 \xE2\x82\xAC "
                             "\\ud83d\\ude00\\t\\\"q\\\"\"} \r\n", &r);
    assert_string_equal(r.prompts[0].text, "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\t\"q\"");
    oai_request_free(&r);
}

/* ---- parsing: failures --------------------------------------------------- */

typedef struct bad_case {
    oai_kind kind;
    const char *body;
    const char *param;
    const char *msg; /* a substring of the message */
} bad_case;

#define C OAI_COMPLETION
#define H OAI_CHAT
#define UM "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
static const bad_case bad_cases[] = {
    /* prompt */
    {C, "{}", "prompt", "prompt is required"},
    {C, "{\"prompt\":null}", "prompt", "prompt is required"},
    {C, "{\"prompt\":[]}", "prompt", "prompt must not be empty, got []"},
    {C, "{\"prompt\":[[]]}", "prompt", "empty list of token ids"},
    {C, "{\"prompt\":[[1],[]]}", "prompt", "empty list of token ids"},
    {C, "{\"prompt\":[1,-2]}", "prompt", "prompt token ids must be non-negative integers, got -2"},
    {C, "{\"prompt\":[1,2.5]}", "prompt", "got 2.5"},
    {C, "{\"prompt\":[1,\"a\"]}", "prompt", "got string"},
    {C, "{\"prompt\":[[1],[true]]}", "prompt", "got boolean"},
    {C, "{\"prompt\":[1,3000000000]}", "prompt", "got 3000000000"},
    {C, "{\"prompt\":[\"a\",[1]]}", "prompt", "got a list mixing string and array"},
    {C, "{\"prompt\":[[1],\"a\"]}", "prompt", "got a list mixing array and string"},
    {C, "{\"prompt\":[{}]}", "prompt", "got a list of object"},
    {C, "{\"prompt\":5}", "prompt", "got number"},
    {C, "{\"prompt\":{\"text\":\"a\"}}", "prompt", "got object"},
    {C, "{\"prompt\":\"a\",\"suffix\":\"b\"}", "suffix", "suffix is not currently supported"},
    {C, "{\"prompt\":\"a\",\"echo\":1}", "echo", "echo must be a boolean, got number"},
    {C, "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs", "logprobs must be in [0, 20], got 21"},
    {C, "{\"prompt\":\"a\",\"logprobs\":-1}", "logprobs", "logprobs must be in [0, 20], got -1"},
    {C, "{\"prompt\":\"a\",\"logprobs\":true}", "logprobs", "logprobs must be an integer or null, got boolean"},
    {C, "{\"prompt\":\"a\",\"best_of\":2}", "best_of", "best_of must be null or equal to n (1), got 2"},
    {C, "{\"prompt\":\"a\",\"n\":2,\"best_of\":1}", "best_of", "equal to n (2), got 1"},
    /* common fields (on completions) */
    {C, "{\"prompt\":\"a\",\"model\":5}", "model", "model must be a string, got number"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":0}", "max_tokens", "max_tokens must be at least 1, got 0"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":-5}", "max_tokens", "max_tokens must be at least 1, got -5"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":16.5}", "max_tokens", "max_tokens must be an integer, got 16.5"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":\"16\"}", "max_tokens", "max_tokens must be an integer, got string"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":true}", "max_tokens", "max_tokens must be an integer, got boolean"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":1e10}", "max_tokens", "max_tokens must be at most 2147483647, got 10000000000"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":1e999}", "max_tokens", "max_tokens must be at most 2147483647, got inf"},
    {C, "{\"prompt\":\"a\",\"max_completion_tokens\":0}", "max_completion_tokens", "max_completion_tokens must be at least 1, got 0"},
    {C, "{\"prompt\":\"a\",\"min_tokens\":-1}", "min_tokens", "min_tokens must be at least 0, got -1"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":4,\"min_tokens\":5}", "min_tokens", "min_tokens must be at most max_tokens (4), got 5"},
    {C, "{\"prompt\":\"a\",\"n\":0}", "n", "n must be in [1, 16], got 0"},
    {C, "{\"prompt\":\"a\",\"n\":17}", "n", "n must be in [1, 16], got 17"},
    {C, "{\"prompt\":\"a\",\"n\":[1]}", "n", "n must be an integer, got array"},
    {C, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", "temperature", "temperature must be a number, got string"},
    {C, "{\"prompt\":\"a\",\"temperature\":-0.5}", "temperature", "temperature must be in [0, 100], got -0.5"},
    {C, "{\"prompt\":\"a\",\"temperature\":1e308}", "temperature", "temperature must be in [0, 100], got 1e+308"},
    {C, "{\"prompt\":\"a\",\"temperature\":-1e999}", "temperature", "got -inf"},
    {C, "{\"prompt\":\"a\",\"top_p\":0}", "top_p", "top_p must be in (0, 1], got 0"},
    {C, "{\"prompt\":\"a\",\"top_p\":1.5}", "top_p", "top_p must be in (0, 1], got 1.5"},
    {C, "{\"prompt\":\"a\",\"top_k\":-2}", "top_k", "top_k must be -1 (off) or at least 1, got -2"},
    {C, "{\"prompt\":\"a\",\"top_k\":1.5}", "top_k", "top_k must be an integer, got 1.5"},
    {C, "{\"prompt\":\"a\",\"top_k\":1e12}", "top_k", "top_k must be at most 2147483647"},
    {C, "{\"prompt\":\"a\",\"min_p\":1.5}", "min_p", "min_p must be in [0, 1], got 1.5"},
    {C, "{\"prompt\":\"a\",\"min_p\":-0.1}", "min_p", "min_p must be in [0, 1], got -0.1"},
    {C, "{\"prompt\":\"a\",\"presence_penalty\":3}", "presence_penalty", "presence_penalty must be in [-2, 2], got 3"},
    {C, "{\"prompt\":\"a\",\"frequency_penalty\":-2.5}", "frequency_penalty", "frequency_penalty must be in [-2, 2], got -2.5"},
    {C, "{\"prompt\":\"a\",\"frequency_penalty\":false}", "frequency_penalty", "must be a number, got boolean"},
    {C, "{\"prompt\":\"a\",\"repetition_penalty\":0}", "repetition_penalty", "repetition_penalty must be greater than 0, got 0"},
    {C, "{\"prompt\":\"a\",\"repetition_penalty\":-1}", "repetition_penalty", "greater than 0, got -1"},
    {C, "{\"prompt\":\"a\",\"repetition_penalty\":1e300}", "repetition_penalty", "repetition_penalty must be at most"},
    {C, "{\"prompt\":\"a\",\"repetition_penalty\":1e-50}", "repetition_penalty", "repetition_penalty must be greater than 0 (as a 32-bit float), got 1e-50"},
    {C, "{\"prompt\":\"a\",\"top_p\":1e-60}", "top_p", "top_p must be greater than 0 (as a 32-bit float)"},
    {C, "{\"prompt\":\"a\",\"seed\":1.5}", "seed", "seed must be an integer, got 1.5"},
    {C, "{\"prompt\":\"a\",\"seed\":1e30}", "seed", "seed must be a 64-bit integer, got 1e+30"},
    {C, "{\"prompt\":\"a\",\"seed\":\"1\"}", "seed", "seed must be an integer, got string"},
    {C, "{\"prompt\":\"a\",\"stop\":5}", "stop", "stop must be a string or a list of strings, got number"},
    {C, "{\"prompt\":\"a\",\"stop\":\"\"}", "stop", "stop strings must not be empty"},
    {C, "{\"prompt\":\"a\",\"stop\":[\"a\",\"\"]}", "stop", "stop strings must not be empty"},
    {C, "{\"prompt\":\"a\",\"stop\":[\"a\",1]}", "stop", "got a list holding a number"},
    {C, "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
        "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}", "stop",
     "stop must have at most 16 strings, got 17"},
    {C, "{\"prompt\":\"a\",\"stop_token_ids\":[1,-1]}", "stop_token_ids", "stop_token_ids must be non-negative integers, got -1"},
    {C, "{\"prompt\":\"a\",\"stop_token_ids\":3}", "stop_token_ids", "stop_token_ids must be a list of token ids, got number"},
    {C, "{\"prompt\":\"a\",\"logit_bias\":{\"x\":1}}", "logit_bias", "logit_bias keys must be token ids (non-negative integers), got \"x\""},
    {C, "{\"prompt\":\"a\",\"logit_bias\":{\"-5\":1}}", "logit_bias", "got \"-5\""},
    {C, "{\"prompt\":\"a\",\"logit_bias\":{\"\":1}}", "logit_bias", "got \"\""},
    {C, "{\"prompt\":\"a\",\"logit_bias\":{\"1.5\":1}}", "logit_bias", "got \"1.5\""},
    {C, "{\"prompt\":\"a\",\"logit_bias\":{\"99999999999\":1}}", "logit_bias", "got \"99999999999\""},
    {C, "{\"prompt\":\"a\",\"logit_bias\":{\"5\":101}}", "logit_bias", "logit_bias values must be in [-100, 100], got 101 for token 5"},
    {C, "{\"prompt\":\"a\",\"logit_bias\":{\"5\":\"1\"}}", "logit_bias", "logit_bias values must be numbers, got string"},
    {C, "{\"prompt\":\"a\",\"logit_bias\":[1]}", "logit_bias", "logit_bias must be an object of token id -> bias, got array"},
    {C, "{\"prompt\":\"a\",\"stream\":\"yes\"}", "stream", "stream must be a boolean, got string"},
    {C, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", "stream_options", "stream_options can only be set when stream is true"},
    {C, "{\"prompt\":\"a\",\"stream\":false,\"stream_options\":{}}", "stream_options", "only be set when stream is true"},
    {C, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", "stream_options.include_usage", "stream_options.include_usage must be a boolean, got number"},
    {C, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":true}", "stream_options", "stream_options must be an object, got boolean"},
    {C, "{\"prompt\":\"a\",\"user\":[]}", "user", "user must be a string, got array"},
    {C, "{\"prompt\":\"a\",\"cache_salt\":\"\"}", "cache_salt", "cache_salt must be a non-empty string"},
    {C, "{\"prompt\":\"a\",\"cache_salt\":1}", "cache_salt", "cache_salt must be a string, got number"},
    {C, "{\"prompt\":\"a\",\"ignore_eos\":\"no\"}", "ignore_eos", "ignore_eos must be a boolean, got string"},
    {C, "{\"prompt\":\"a\",\"skip_special_tokens\":0}", "skip_special_tokens", "must be a boolean, got number"},
    {C, "{\"prompt\":\"a\",\"speculative\":{}}", "speculative", "speculative must be a boolean, got object"},
    /* chat */
    {H, "{}", "messages", "messages is required"},
    {H, "{\"prompt\":\"a\"}", "messages", "messages is required"},
    {H, "{\"messages\":[]}", "messages", "messages must be a non-empty list of messages, got []"},
    {H, "{\"messages\":\"hi\"}", "messages", "messages must be a non-empty list of messages, got string"},
    {H, "{\"messages\":[1]}", "messages.[0]", "messages[0] must be an object, got number"},
    {H, "{\"messages\":[{\"content\":\"x\"}]}", "messages.[0].role", "messages[0].role must be one of \"system\", \"developer\", \"user\", \"assistant\", \"tool\", got nothing"},
    {H, "{\"messages\":[{\"role\":7,\"content\":\"x\"}]}", "messages.[0].role", "got number"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"content\":7}]}", "messages.[1].content", "got number"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", "messages.[0].tool_calls", "on an assistant message"},
    {H, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", "messages.[0].tool_calls", "must be a list"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", "tools", "tools must be a list, got object"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":[]}", "chat_template_kwargs", "must be an object"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"continue_final_message\":true}", "continue_final_message", "Cannot set both"},
    {H, "{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", "messages.[0].role", "got \"function\""},
    {H, "{\"messages\":[{\"role\":\"User\",\"content\":\"x\"}]}", "messages.[0].role", "got \"User\""},
    {H, "{\"messages\":[{\"role\":\"a\\nb\\u0001\",\"content\":\"x\"}]}", "messages.[0].role", "got \"a\\nb\\u0001\""},
    {H, "{\"messages\":[{\"role\":\"0123456789012345678901234567890123456789xyz\",\"content\":\"x\"}]}", "messages.[0].role", "got \"0123456789012345678901234567890123456789\"..."},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\"}]}", "messages.[1].content", "messages[1].content must be a string or a list of text parts, got nothing"},
    {H, "{\"messages\":[{\"role\":\"system\",\"content\":null}]}", "messages.[0].content", "got null"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages.[0].content", "got number"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":{\"type\":\"text\"}}]}", "messages.[0].content", "got object"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}", "messages.[0].content.[1].type", "messages[0].content[1].type must be \"text\" (other content types are not supported), got \"image_url\""},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}", "messages.[0].content.[0].type", "got nothing"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":1,\"text\":\"a\"}]}]}", "messages.[0].content.[0].type", "must be \"text\", got number"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", "messages.[0].content.[0].text", "messages[0].content[0].text must be a string, got nothing"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":3}]}]}", "messages.[0].content.[0].text", "got number"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", "messages.[0].content.[0]", "messages[0].content[0] must be an object, got string"},
    {H, "{" UM ",\"logprobs\":1}", "logprobs", "logprobs must be a boolean, got number"},
    {H, "{" UM ",\"top_logprobs\":2}", "top_logprobs", "top_logprobs requires logprobs to be true, got logprobs absent"},
    {H, "{" UM ",\"logprobs\":false,\"top_logprobs\":2}", "top_logprobs", "got logprobs false"},
    {H, "{" UM ",\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs", "top_logprobs must be in [0, 20], got 21"},
    {H, "{" UM ",\"logprobs\":true,\"top_logprobs\":\"2\"}", "top_logprobs", "top_logprobs must be an integer, got string"},
    {H, "{" UM ",\"add_generation_prompt\":\"x\"}", "add_generation_prompt", "add_generation_prompt must be a boolean, got string"},
    {H, "{" UM ",\"max_completion_tokens\":\"x\"}", "max_completion_tokens", "got string"},
    {H, "{" UM ",\"temperature\":-1}", "temperature", "temperature must be in [0, 100], got -1"},
    {H, "{" UM ",\"stream_options\":{\"include_usage\":true}}", "stream_options", "when stream is true"},
    {H, "{" UM ",\"best_of\":3}", "best_of", "equal to n (1), got 3"},
};
#undef C
#undef H

/* Each bad body is a 400 invalid_request_error naming its param, with a
 * one-line message saying what was expected and got; out is left empty. */
static void test_oai_parse_invalid_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        oai_request r;
        oai_error e;
        memset(&r, 0xAB, sizeof r);
        int rc = parse(c->kind, c->body, &r, &e);
        if (rc != 400)
            fail_msg("case %zu %s: rc %d", i, c->body, rc);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.type, "invalid_request_error");
        if (strcmp(e.param, c->param))
            fail_msg("case %zu %s: param \"%s\", want \"%s\" (%s)", i, c->body,
                     e.param, c->param, e.message);
        if (!strstr(e.message, c->msg))
            fail_msg("case %zu %s: message \"%s\" lacks \"%s\"", i, c->body,
                     e.message, c->msg);
        assert_null(strchr(e.message, '\n'));
        assert_null(e.code);
        assert_true(all_zero(&r, sizeof r));
    }
}

/* Malformed JSON is a 400 that says the body is not valid JSON, param
 * null; the output is left empty. */
static void test_oai_parse_malformed_json(void **state)
{
    (void)state;
    static const char *bodies[] = {
        "{", "{\"prompt\":}", "{\"prompt\":\"a\"} x", "{\"prompt\":\"a\",}",
        "nul", "\"abc", "{\"a\":1}{", "{'prompt':'a'}", "{\"prompt\":\"a\\q\"}",
        "{\"prompt\":\"\\ud800\"}", "{\"prompt\":\"\\udc00x\"}", "   ",
        /* cJSON would take these; RFC 8259 (and Python's json) does not */
        "{\"prompt\":01}", "{\"prompt\":1.}", "{\"prompt\":.5}", "{\"prompt\":+1}",
        "{\"prompt\":-}", "{\"prompt\":1e}", "{\"prompt\":\"a\nb\"}",
        "{\"prompt\":\"\\u12\"}", "{\"prompt\":[1,]}", "{\"prompt\":\"a\",}",
        "{\"prompt\" \"a\"}", "{\"prompt\":tru}", "{\"prompt\":NaN}",
        "{\"prompt\":Infinity}", "{prompt:\"a\"}", "{\"prompt\":\"a\"}}",
        "[[[", "{\"a\":[}", "{\"a\":{]}", "{\"prompt\":\"\\ud83d\\u0041\"}",
        "{\"prompt\":\"\\ud83d\"}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        oai_request r;
        oai_error e;
        memset(&r, 0x5A, sizeof r);
        assert_int_equal(parse(OAI_COMPLETION, bodies[i], &r, &e), 400);
        if (!strstr(e.message, "could not parse the JSON body"))
            fail_msg("%s: %s", bodies[i], e.message);
        assert_string_equal(e.param, "");
        assert_true(all_zero(&r, sizeof r));
    }
}

/* Nesting beyond 256 levels is refused before cJSON recurses into it;
 * 200 levels parse. */
static void test_oai_parse_deep_nesting(void **state)
{
    (void)state;
    static char body[2048];
    oai_request r;
    oai_error e;
    for (int depth = 200; depth <= 300; depth += 100) {
        int n = snprintf(body, sizeof body, "{\"prompt\":\"a\",\"x\":");
        for (int i = 0; i < depth; i++)
            body[n++] = '[';
        for (int i = 0; i < depth; i++)
            body[n++] = ']';
        body[n++] = '}';
        body[n] = '\0';
        int rc = parse(OAI_COMPLETION, body, &r, &e);
        if (depth == 200) {
            assert_int_equal(rc, 0);
            oai_request_free(&r);
        } else {
            assert_int_equal(rc, 400);
            assert_non_null(strstr(e.message, "nested too deeply"));
        }
    }
}

/* Valid JSON that is not an object, an empty body and a body that is not
 * UTF-8 are 400s that say so. */
static void test_oai_parse_not_an_object(void **state)
{
    (void)state;
    oai_request r;
    oai_error e;
    static const char *bodies[] = {"[]", "\"prompt\"", "1", "null", "true"};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        assert_int_equal(parse(OAI_CHAT, bodies[i], &r, &e), 400);
        assert_non_null(strstr(e.message, "request body must be a JSON object, got"));
    }
    assert_int_equal(parse(OAI_CHAT, "[1]", &r, &e), 400);
    assert_string_equal(e.message, "request body must be a JSON object, got array");
    assert_int_equal(oai_parse(OAI_CHAT, "", 0, NULL, &r, &e), 400);
    assert_non_null(strstr(e.message, "empty"));
    assert_int_equal(parse(OAI_COMPLETION, "{\"prompt\":\"\xC3\x28\"}", &r, &e), 400);
    assert_string_equal(e.message, "request body must be UTF-8 JSON, got an invalid byte at offset 11");
    assert_int_equal(parse(OAI_COMPLETION, "{\"prompt\":\"\xED\xA0\x80\"}", &r, &e), 400);
}

/* The body length is what counts, not a NUL: bytes past len are not read
 * and a NUL inside len is malformed JSON. */
static void test_oai_parse_uses_length(void **state)
{
    (void)state;
    oai_request r;
    oai_error e;
    const char body[] = "{\"prompt\":\"a\"}garbage";
    assert_int_equal(oai_parse(OAI_COMPLETION, body, 14, NULL, &r, &e), 0);
    oai_request_free(&r);
    const char nul[] = "{\"prompt\":\"a\"}\0";
    assert_int_equal(oai_parse(OAI_COMPLETION, nul, sizeof nul - 1, NULL, &r, &e), 400);
}

/* Limits come from the caller: n, logprobs and stop follow them. */
static void test_oai_parse_custom_limits(void **state)
{
    (void)state;
    oai_limits lim = {.max_n = 2, .max_logprobs = 5, .max_prompts = 4, .max_stop = 1};
    oai_request r;
    oai_error e;
    const char *ok = "{\"prompt\":\"a\",\"n\":2,\"logprobs\":5,\"stop\":[\"x\"]}";
    assert_int_equal(oai_parse(OAI_COMPLETION, ok, strlen(ok), &lim, &r, &e), 0);
    oai_request_free(&r);
    const char *n3 = "{\"prompt\":\"a\",\"n\":3}";
    assert_int_equal(oai_parse(OAI_COMPLETION, n3, strlen(n3), &lim, &r, &e), 400);
    assert_string_equal(e.message, "n must be in [1, 2], got 3");
    const char *lp = "{\"prompt\":\"a\",\"logprobs\":6}";
    assert_int_equal(oai_parse(OAI_COMPLETION, lp, strlen(lp), &lim, &r, &e), 400);
    assert_string_equal(e.message, "logprobs must be in [0, 5], got 6");
    const char *st = "{\"prompt\":\"a\",\"stop\":[\"x\",\"y\"]}";
    assert_int_equal(oai_parse(OAI_COMPLETION, st, strlen(st), &lim, &r, &e), 400);
    assert_string_equal(e.param, "stop");
    const char *tl = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                     "\"logprobs\":true,\"top_logprobs\":6}";
    assert_int_equal(oai_parse(OAI_CHAT, tl, strlen(tl), &lim, &r, &e), 400);
    assert_string_equal(e.param, "top_logprobs");
}

/* oai_fail fills every field, defaults the type from the status, is
 * NULL-safe, and returns the status. */
static void test_oai_fail_fills_error(void **state)
{
    (void)state;
    oai_error e;
    memset(&e, 0, sizeof e);
    e.code = "stale";
    assert_int_equal(oai_fail(&e, 404, NULL, "model", "model %s does not exist", "x"), 404);
    assert_int_equal(e.status, 404);
    assert_string_equal(e.type, "not_found_error");
    assert_string_equal(e.param, "model");
    assert_string_equal(e.message, "model x does not exist");
    assert_null(e.code);
    assert_int_equal(oai_fail(&e, 401, NULL, NULL, "no"), 401);
    assert_string_equal(e.type, "authentication_error");
    assert_string_equal(e.param, "");
    assert_int_equal(oai_fail(&e, 503, NULL, "", "busy"), 503);
    assert_string_equal(e.type, "server_error");
    assert_int_equal(oai_fail(&e, 413, "invalid_request_error", "", "big"), 413);
    assert_string_equal(e.type, "invalid_request_error");
    assert_int_equal(oai_fail(NULL, 400, NULL, "x", "y"), 400);
}

/* ---- encoding ------------------------------------------------------------ */

static oai_meta meta(oai_kind kind)
{
    oai_meta m = {.kind = kind, .id = kind == OAI_CHAT ? "chatcmpl-7" : "cmpl-7",
                  .created = 1700000000, .model = "stories260K"};
    return m;
}

static oai_choice choice(int index, const char *text, const char *finish)
{
    oai_choice c = {.index = index, .text = text, .text_len = text ? strlen(text) : 0,
                    .finish_reason = finish, .stop_reason_id = -1};
    return c;
}

static void assert_usage(const cJSON *u, int p, int c, int cached)
{
    assert_keys(u, "prompt_tokens,completion_tokens,total_tokens,prompt_tokens_details");
    assert_int_equal((int)num_at(u, "prompt_tokens"), p);
    assert_int_equal((int)num_at(u, "completion_tokens"), c);
    assert_int_equal((int)num_at(u, "total_tokens"), p + c);
    const cJSON *d = at(u, "prompt_tokens_details");
    assert_keys(d, "cached_tokens");
    assert_int_equal((int)num_at(d, "cached_tokens"), cached);
}

/* A completions response: exact keys, values, stop_reason string / id /
 * null, usage with cached tokens. */
static void test_oai_response_completion_fields(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_COMPLETION);
    oai_choice cs[3] = {choice(0, "Once upon a time", "length"),
                        choice(1, "The end", "stop"), choice(2, "", "stop")};
    cs[1].stop_reason_str = "\n\n";
    cs[2].stop_reason_id = 13;
    oai_usage u = {.prompt_tokens = 5, .completion_tokens = 7, .cached_tokens = 4};
    cJSON *j = json_of(oai_response_json(&m, cs, 3, &u));
    assert_keys(j, "id,object,created,model,choices,usage");
    assert_string_equal(str_at(j, "id"), "cmpl-7");
    assert_string_equal(str_at(j, "object"), "text_completion");
    assert_true(num_at(j, "created") == 1700000000.0);
    assert_string_equal(str_at(j, "model"), "stories260K");
    const cJSON *ch = at(j, "choices");
    assert_int_equal(cJSON_GetArraySize(ch), 3);
    for (int i = 0; i < 3; i++) {
        assert_keys(idx(ch, i), "index,text,logprobs,finish_reason,stop_reason");
        assert_int_equal((int)num_at(idx(ch, i), "index"), i);
        assert_true(cJSON_IsNull(at(idx(ch, i), "logprobs")));
    }
    assert_string_equal(str_at(idx(ch, 0), "text"), "Once upon a time");
    assert_string_equal(str_at(idx(ch, 0), "finish_reason"), "length");
    assert_true(cJSON_IsNull(at(idx(ch, 0), "stop_reason")));
    assert_string_equal(str_at(idx(ch, 1), "finish_reason"), "stop");
    assert_string_equal(str_at(idx(ch, 1), "stop_reason"), "\n\n");
    assert_true(num_at(idx(ch, 2), "stop_reason") == 13);
    assert_string_equal(str_at(idx(ch, 2), "text"), "");
    assert_usage(at(j, "usage"), 5, 7, 4);
    cJSON_Delete(j);
}

/* A chat response: exact keys, the assistant message, EOS stop (-1) gives
 * stop_reason null, finish_reason null when not given. */
static void test_oai_response_chat_fields(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_CHAT);
    oai_choice cs[2] = {choice(0, "Hi there", "stop"), choice(1, "x", NULL)};
    oai_usage u = {.prompt_tokens = 9, .completion_tokens = 3};
    cJSON *j = json_of(oai_response_json(&m, cs, 2, &u));
    assert_keys(j, "id,object,created,model,choices,usage");
    assert_string_equal(str_at(j, "object"), "chat.completion");
    assert_string_equal(str_at(j, "id"), "chatcmpl-7");
    const cJSON *c0 = idx(at(j, "choices"), 0);
    assert_keys(c0, "index,message,logprobs,finish_reason,stop_reason");
    assert_keys(at(c0, "message"), "role,content");
    assert_string_equal(str_at(at(c0, "message"), "role"), "assistant");
    assert_string_equal(str_at(at(c0, "message"), "content"), "Hi there");
    assert_true(cJSON_IsNull(at(c0, "logprobs")));
    assert_string_equal(str_at(c0, "finish_reason"), "stop");
    assert_true(cJSON_IsNull(at(c0, "stop_reason")));
    const cJSON *c1 = idx(at(j, "choices"), 1);
    assert_true(cJSON_IsNull(at(c1, "finish_reason")));
    assert_usage(at(j, "usage"), 9, 3, 0);
    cJSON_Delete(j);
}

/* stop_reason only accompanies finish_reason "stop": a "length" finish
 * with a stale id says null. */
static void test_oai_response_stop_reason_only_on_stop(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_COMPLETION);
    oai_choice c = choice(0, "x", "length");
    c.stop_reason_id = 0;
    c.stop_reason_str = "y";
    cJSON *j = json_of(oai_response_json(&m, &c, 1, NULL));
    assert_true(cJSON_IsNull(at(idx(at(j, "choices"), 0), "stop_reason")));
    assert_true(cJSON_IsNull(at(j, "usage")));
    cJSON_Delete(j);
    c.finish_reason = "stop";
    c.stop_reason_str = NULL;
    j = json_of(oai_response_json(&m, &c, 1, NULL));
    assert_true(num_at(idx(at(j, "choices"), 0), "stop_reason") == 0);
    cJSON_Delete(j);
}

/* Completions logprobs: tokens, token_logprobs, top_logprobs as dicts,
 * text_offset; an echoed first prompt token (NAN) is null in both lists;
 * -inf is -9999; repeated top tokens keep the first. */
static void test_oai_response_completion_logprobs(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_COMPLETION);
    oai_top t1[] = {{"He", 2, -0.5f, 0}, {"She", 3, -1.25f, 0}, {"He", 2, -3.0f, 0}};
    oai_top t2[] = {{"llo", 3, -0.25f, 0}, {"\xff", 1, -2.0f, 0}, {"\xfe", 1, -4.0f, 0}};
    oai_token_lp lps[] = {
        {"<s>", 3, NAN, NULL, 0, 0, 0, 0},
        {"He", 2, -0.5f, t1, 3, 0, 0, 0},
        {"llo", 3, -0.25f, t2, 3, 2, 0, 0},
        {"!", 1, -INFINITY, NULL, 0, 5, 0, 0},
    };
    oai_choice c = choice(0, "Hello!", "length");
    c.lps = lps;
    c.n_lps = 4;
    c.want_logprobs = 1;
    cJSON *j = json_of(oai_response_json(&m, &c, 1, NULL));
    const cJSON *lp = at(idx(at(j, "choices"), 0), "logprobs");
    assert_keys(lp, "tokens,token_logprobs,top_logprobs,text_offset");
    const cJSON *tok = at(lp, "tokens"), *tlp = at(lp, "token_logprobs"),
                *top = at(lp, "top_logprobs"), *off = at(lp, "text_offset");
    for (const cJSON *a = tok; a; a = a == tok ? tlp : a == tlp ? top : a == top ? off : NULL)
        assert_int_equal(cJSON_GetArraySize(a), 4);
    assert_string_equal(idx(tok, 0)->valuestring, "<s>");
    assert_string_equal(idx(tok, 2)->valuestring, "llo");
    assert_true(cJSON_IsNull(idx(tlp, 0)));
    assert_true(cJSON_IsNull(idx(top, 0)));
    assert_true(idx(tlp, 1)->valuedouble == -0.5);
    assert_true(idx(tlp, 3)->valuedouble == -9999.0);
    assert_keys(idx(top, 1), "He,She");
    assert_true(num_at(idx(top, 1), "He") == -0.5);
    assert_true(num_at(idx(top, 1), "She") == -1.25);
    assert_keys(idx(top, 2), "llo,\xEF\xBF\xBD"); /* \xff and \xfe both read U+FFFD */
    assert_true(num_at(idx(top, 2), "\xEF\xBF\xBD") == -2.0);
    assert_keys(idx(top, 3), "");
    assert_int_equal((int)idx(off, 2)->valuedouble, 2);
    assert_int_equal((int)idx(off, 3)->valuedouble, 5);
    cJSON_Delete(j);
}

/* vLLM's prompt_logprobs: parsed on both kinds (null: off, 0..20);
 * written as [null, {"<id>": {logprob, rank, decoded_token}}, ...], the
 * token first and an alternative equal to it once; chat at the top level. */
static void test_oai_prompt_logprobs(void **state)
{
    (void)state;
    oai_request r;
    oai_error e;
    parse_ok(OAI_COMPLETION, "{\"prompt\":\"x\",\"prompt_logprobs\":3}", &r);
    assert_int_equal(r.prompt_logprobs, 3);
    oai_request_free(&r);
    parse_ok(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
             "\"prompt_logprobs\":null}", &r);
    assert_int_equal(r.prompt_logprobs, -1);
    oai_request_free(&r);
    assert_int_equal(parse(OAI_COMPLETION, "{\"prompt\":\"x\",\"prompt_logprobs\":-1}", &r, &e),
                     400);
    assert_string_equal(e.param, "prompt_logprobs");
    assert_int_equal(parse(OAI_COMPLETION, "{\"prompt\":\"x\",\"prompt_logprobs\":\"2\"}", &r,
                           &e), 400);

    oai_top tops[] = {{"b", 1, -0.25f, 7}, {"a", 1, -1.5f, 5}};
    oai_token_lp plps[] = {{"a", 1, -1.5f, tops, 2, 0, 5, 2},
                           {"c", 1, -9.0f, tops, 1, 0, 9, 40}};
    for (int kind = 0; kind < 2; kind++) {
        oai_meta m = meta(kind ? OAI_CHAT : OAI_COMPLETION);
        oai_choice c = choice(0, "z", "length");
        c.plps = plps;
        c.n_plps = 2;
        c.want_prompt_logprobs = 1;
        cJSON *j = json_of(oai_response_json(&m, &c, 1, NULL));
        const cJSON *a = kind ? at(j, "prompt_logprobs")
                              : at(idx(at(j, "choices"), 0), "prompt_logprobs");
        assert_int_equal(cJSON_GetArraySize(a), 3);
        assert_true(cJSON_IsNull(idx(a, 0)));
        assert_keys(idx(a, 1), "5,7"); /* the token (5) first, once */
        assert_true(num_at(at(idx(a, 1), "5"), "logprob") == -1.5);
        assert_int_equal((int)num_at(at(idx(a, 1), "5"), "rank"), 2);
        assert_string_equal(at(at(idx(a, 1), "5"), "decoded_token")->valuestring, "a");
        assert_int_equal((int)num_at(at(idx(a, 1), "7"), "rank"), 1);
        assert_keys(idx(a, 2), "9,7");
        assert_int_equal((int)num_at(at(idx(a, 2), "9"), "rank"), 40);
        cJSON_Delete(j);
    }
}

/* A logprob is written as the shortest text that reads back as the float. */
static void test_oai_response_logprob_text(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_COMPLETION);
    oai_token_lp lp = {"a", 1, -0.1f, NULL, 0, 0, 0, 0};
    oai_choice c = choice(0, "a", NULL);
    c.lps = &lp;
    c.n_lps = 1;
    char *s = oai_response_json(&m, &c, 1, NULL);
    assert_non_null(strstr(s, "\"token_logprobs\":[-0.1]"));
    cJSON *j = json_of(s);
    const cJSON *v = idx(at(at(idx(at(j, "choices"), 0), "logprobs"), "token_logprobs"), 0);
    assert_true((float)v->valuedouble == -0.1f);
    cJSON_Delete(j);
}

/* Chat logprobs: content entries {token, logprob, bytes, top_logprobs}; a
 * partial UTF-8 piece's token is U+FFFD but its bytes are the raw ones. */
static void test_oai_response_chat_logprobs(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_CHAT);
    oai_top tops[] = {{"\xE4\xBD", 2, -0.125f, 0}, {"A", 1, -2.5f, 0}};
    oai_token_lp lps[] = {{"\xE4\xBD", 2, -0.125f, tops, 2, 0, 0, 0},
                          {"\xA0", 1, -0.5f, NULL, 0, 0, 0, 0},
                          {"", 0, -1.0f, NULL, 0, 0, 0, 0}};
    oai_choice c = choice(0, "\xE4\xBD\xA0", "length");
    c.lps = lps;
    c.n_lps = 3;
    cJSON *j = json_of(oai_response_json(&m, &c, 1, NULL));
    const cJSON *ch = idx(at(j, "choices"), 0);
    assert_string_equal(str_at(at(ch, "message"), "content"), "\xE4\xBD\xA0");
    const cJSON *lp = at(ch, "logprobs");
    assert_keys(lp, "content");
    const cJSON *content = at(lp, "content");
    assert_int_equal(cJSON_GetArraySize(content), 3);
    const cJSON *e0 = idx(content, 0);
    assert_keys(e0, "token,logprob,bytes,top_logprobs");
    assert_string_equal(str_at(e0, "token"), "\xEF\xBF\xBD");
    assert_true(num_at(e0, "logprob") == -0.125);
    const cJSON *b = at(e0, "bytes");
    assert_int_equal(cJSON_GetArraySize(b), 2);
    assert_int_equal((int)idx(b, 0)->valuedouble, 0xE4);
    assert_int_equal((int)idx(b, 1)->valuedouble, 0xBD);
    const cJSON *t = at(e0, "top_logprobs");
    assert_int_equal(cJSON_GetArraySize(t), 2);
    assert_keys(idx(t, 0), "token,logprob,bytes");
    assert_string_equal(str_at(idx(t, 1), "token"), "A");
    assert_true(num_at(idx(t, 1), "logprob") == -2.5);
    assert_int_equal((int)idx(at(idx(t, 1), "bytes"), 0)->valuedouble, 'A');
    assert_int_equal((int)idx(at(idx(content, 1), "bytes"), 0)->valuedouble, 0xA0);
    assert_int_equal(cJSON_GetArraySize(at(idx(content, 1), "top_logprobs")), 0);
    assert_int_equal(cJSON_GetArraySize(at(idx(content, 2), "bytes")), 0);
    cJSON_Delete(j);
}

/* Asked-for logprobs with no tokens yet are empty lists, not null. */
static void test_oai_response_logprobs_empty(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_CHAT);
    oai_choice c = choice(0, "", "stop");
    c.want_logprobs = 1;
    cJSON *j = json_of(oai_response_json(&m, &c, 1, NULL));
    const cJSON *lp = at(idx(at(j, "choices"), 0), "logprobs");
    assert_keys(lp, "content");
    assert_int_equal(cJSON_GetArraySize(at(lp, "content")), 0);
    cJSON_Delete(j);
    m = meta(OAI_COMPLETION);
    j = json_of(oai_response_json(&m, &c, 1, NULL));
    lp = at(idx(at(j, "choices"), 0), "logprobs");
    assert_keys(lp, "tokens,token_logprobs,top_logprobs,text_offset");
    assert_int_equal(cJSON_GetArraySize(at(lp, "tokens")), 0);
    cJSON_Delete(j);
}

/* Token text that is not valid UTF-8 (partial pieces, surrogates, bytes
 * above U+10FFFF, NUL and control bytes) still makes valid UTF-8 JSON. */
static void test_oai_encode_invalid_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t len;
        const char *want; /* the string as read back */
    } cases[] = {
        {"ok\xff", 3, "ok\xEF\xBF\xBD"},
        {"\xC3(", 2, "\xEF\xBF\xBD("},
        {"\xE2\x82", 2, "\xEF\xBF\xBD"},            /* one maximal subpart  */
        {"\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
        {"\xF4\x90\x80\x80", 4,
         "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},          /* > U+10FFFF */
        {"\xC0\xAF", 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},  /* overlong */
        {"\xF0\x9F\x98", 3, "\xEF\xBF\xBD"},
        {"\xF0\x9F\x98\x80!", 5, "\xF0\x9F\x98\x80!"},
        {"a\x01\x1f\x7f\"\\/\r\t\b\f", 11, "a\x01\x1f\x7f\"\\/\r\t\b\f"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        oai_meta m = meta(OAI_COMPLETION);
        oai_choice c = choice(0, NULL, NULL);
        c.text = cases[i].in;
        c.text_len = cases[i].len;
        cJSON *j = json_of(oai_response_json(&m, &c, 1, NULL));
        assert_string_equal(str_at(idx(at(j, "choices"), 0), "text"), cases[i].want);
        cJSON_Delete(j);
        char *chunk = oai_chunk_sse(&m, &c, 0, NULL);
        assert_non_null(chunk);
        assert_true(valid_utf8(chunk, strlen(chunk)));
        free(chunk);
    }
    /* a NUL byte is escaped, not a cut */
    oai_meta m = meta(OAI_CHAT);
    oai_choice c = choice(0, NULL, NULL);
    c.text = "a\0b";
    c.text_len = 3;
    char *s = oai_response_json(&m, &c, 1, NULL);
    assert_non_null(strstr(s, "\"content\":\"a\\u0000b\""));
    cJSON_Delete(json_of(s));
}

/* SSE framing: "data: " + one line of JSON + "\n\n"; [DONE] is exact. */
static void test_oai_chunk_sse_framing(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_COMPLETION);
    oai_choice c = choice(0, "line1\nline2\n\n", NULL);
    char *s = oai_chunk_sse(&m, &c, 0, NULL);
    size_t n = strlen(s);
    assert_memory_equal(s, "data: {", 7);
    assert_memory_equal(s + n - 3, "}\n\n", 3);
    assert_null(memchr(s, '\n', n - 2)); /* the text's newlines are escaped */
    s[n - 2] = '\0';
    char *json = strdup(s + 6);
    free(s);
    cJSON *j = json_of(json);
    assert_string_equal(str_at(idx(at(j, "choices"), 0), "text"), "line1\nline2\n\n");
    cJSON_Delete(j);
    assert_string_equal(oai_sse_done(), "data: [DONE]\n\n");
}

/* Reads one SSE event's JSON (and frees the event). */
static cJSON *sse_json(char *s)
{
    assert_non_null(s);
    size_t n = strlen(s);
    assert_true(n > 8);
    assert_memory_equal(s, "data: ", 6);
    assert_memory_equal(s + n - 2, "\n\n", 2);
    s[n - 2] = '\0';
    char *json = strdup(s + 6);
    free(s);
    return json_of(json);
}

/* A completions chunk: object text_completion, exact keys; no usage key
 * unless usage_null asks for "usage": null. */
static void test_oai_chunk_completion(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_COMPLETION);
    oai_choice c = choice(1, " upon", NULL);
    cJSON *j = sse_json(oai_chunk_sse(&m, &c, 0, NULL));
    assert_keys(j, "id,object,created,model,choices");
    assert_string_equal(str_at(j, "object"), "text_completion");
    assert_string_equal(str_at(j, "id"), "cmpl-7");
    const cJSON *c0 = idx(at(j, "choices"), 0);
    assert_keys(c0, "index,text,logprobs,finish_reason,stop_reason");
    assert_int_equal((int)num_at(c0, "index"), 1);
    assert_string_equal(str_at(c0, "text"), " upon");
    assert_true(cJSON_IsNull(at(c0, "finish_reason")));
    assert_true(cJSON_IsNull(at(c0, "stop_reason")));
    cJSON_Delete(j);
    m.usage_null = 1;
    c = choice(0, "", "stop");
    c.stop_reason_str = "END";
    j = sse_json(oai_chunk_sse(&m, &c, 0, NULL));
    assert_keys(j, "id,object,created,model,choices,usage");
    assert_true(cJSON_IsNull(at(j, "usage")));
    c0 = idx(at(j, "choices"), 0);
    assert_string_equal(str_at(c0, "finish_reason"), "stop");
    assert_string_equal(str_at(c0, "stop_reason"), "END");
    cJSON_Delete(j);
}

/* Chat chunks as vLLM: the first carries role (and content "" when empty),
 * later ones content only, a finishing empty one an empty delta. */
static void test_oai_chunk_chat_deltas(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_CHAT);
    oai_choice c = choice(0, "", NULL);
    cJSON *j = sse_json(oai_chunk_sse(&m, &c, 1, NULL));
    assert_keys(j, "id,object,created,model,choices");
    assert_string_equal(str_at(j, "object"), "chat.completion.chunk");
    const cJSON *c0 = idx(at(j, "choices"), 0);
    assert_keys(c0, "index,delta,logprobs,finish_reason,stop_reason");
    assert_keys(at(c0, "delta"), "role,content");
    assert_string_equal(str_at(at(c0, "delta"), "role"), "assistant");
    assert_string_equal(str_at(at(c0, "delta"), "content"), "");
    cJSON_Delete(j);

    c = choice(0, "Hi", NULL);
    j = sse_json(oai_chunk_sse(&m, &c, 1, NULL));
    assert_keys(at(idx(at(j, "choices"), 0), "delta"), "role,content");
    assert_string_equal(str_at(at(idx(at(j, "choices"), 0), "delta"), "content"), "Hi");
    cJSON_Delete(j);

    c = choice(2, " there", NULL);
    j = sse_json(oai_chunk_sse(&m, &c, 0, NULL));
    c0 = idx(at(j, "choices"), 0);
    assert_int_equal((int)num_at(c0, "index"), 2);
    assert_keys(at(c0, "delta"), "content");
    assert_string_equal(str_at(at(c0, "delta"), "content"), " there");
    cJSON_Delete(j);

    c = choice(0, "", "stop");
    c.stop_reason_id = 2;
    j = sse_json(oai_chunk_sse(&m, &c, 0, NULL));
    c0 = idx(at(j, "choices"), 0);
    assert_keys(at(c0, "delta"), "");
    assert_string_equal(str_at(c0, "finish_reason"), "stop");
    assert_true(num_at(c0, "stop_reason") == 2);
    cJSON_Delete(j);
}

/* A chat chunk with logprobs carries {"content": [...]} for its delta. */
static void test_oai_chunk_chat_logprobs(void **state)
{
    (void)state;
    oai_meta m = meta(OAI_CHAT);
    oai_token_lp lp = {"Hi", 2, -0.75f, NULL, 0, 0, 0, 0};
    oai_choice c = choice(0, "Hi", NULL);
    c.lps = &lp;
    c.n_lps = 1;
    cJSON *j = sse_json(oai_chunk_sse(&m, &c, 0, NULL));
    const cJSON *content = at(at(idx(at(j, "choices"), 0), "logprobs"), "content");
    assert_int_equal(cJSON_GetArraySize(content), 1);
    assert_string_equal(str_at(idx(content, 0), "token"), "Hi");
    assert_true(num_at(idx(content, 0), "logprob") == -0.75);
    cJSON_Delete(j);
}

/* The usage chunk: choices [] and usage; a chunk may also carry both. */
static void test_oai_chunk_usage(void **state)
{
    (void)state;
    oai_usage u = {.prompt_tokens = 3, .completion_tokens = 16, .cached_tokens = 1};
    for (int k = 0; k < 2; k++) {
        oai_meta m = meta(k ? OAI_CHAT : OAI_COMPLETION);
        m.usage_null = 1;
        cJSON *j = sse_json(oai_chunk_sse(&m, NULL, 0, &u));
        assert_keys(j, "id,object,created,model,choices,usage");
        assert_string_equal(str_at(j, "object"), k ? "chat.completion.chunk" : "text_completion");
        assert_true(cJSON_IsArray(at(j, "choices")));
        assert_int_equal(cJSON_GetArraySize(at(j, "choices")), 0);
        assert_usage(at(j, "usage"), 3, 16, 1);
        cJSON_Delete(j);
        oai_choice c = choice(0, "x", NULL);
        j = sse_json(oai_chunk_sse(&m, &c, 0, &u));
        assert_int_equal(cJSON_GetArraySize(at(j, "choices")), 1);
        assert_usage(at(j, "usage"), 3, 16, 1);
        cJSON_Delete(j);
        assert_null(oai_chunk_sse(&m, NULL, 0, NULL));
    }
}

/* The error body: exact keys; param null when empty, code null unless set;
 * a message cut inside a character is still valid UTF-8. */
static void test_oai_error_json_shape(void **state)
{
    (void)state;
    oai_error e;
    oai_fail(&e, 400, NULL, "temperature", "temperature must be a number, got string");
    cJSON *j = json_of(oai_error_json(&e));
    assert_keys(j, "error");
    const cJSON *x = at(j, "error");
    assert_keys(x, "message,type,param,code");
    assert_string_equal(str_at(x, "message"), "temperature must be a number, got string");
    assert_string_equal(str_at(x, "type"), "invalid_request_error");
    assert_string_equal(str_at(x, "param"), "temperature");
    assert_true(cJSON_IsNull(at(x, "code")));
    cJSON_Delete(j);

    oai_fail(&e, 404, NULL, "", "The model `x` does not exist.");
    e.code = "model_not_found";
    j = json_of(oai_error_json(&e));
    x = at(j, "error");
    assert_string_equal(str_at(x, "type"), "not_found_error");
    assert_true(cJSON_IsNull(at(x, "param")));
    assert_string_equal(str_at(x, "code"), "model_not_found");
    cJSON_Delete(j);

    /* a message holding bytes that are not UTF-8 */
    oai_fail(&e, 400, NULL, "x\xff", "bad \xC3");
    j = json_of(oai_error_json(&e));
    assert_string_equal(str_at(at(j, "error"), "message"), "bad \xEF\xBF\xBD");
    assert_string_equal(str_at(at(j, "error"), "param"), "x\xEF\xBF\xBD");
    cJSON_Delete(j);

    /* an echoed role cut after 40 bytes, inside a two-byte character */
    char body[256] = "{\"messages\":[{\"content\":\"x\",\"role\":\"a";
    for (int i = 0; i < 30; i++)
        strcat(body, "\xC3\xA9");
    strcat(body, "\"}]}");
    oai_request r;
    assert_int_equal(parse(OAI_CHAT, body, &r, &e), 400);
    j = json_of(oai_error_json(&e));
    assert_non_null(strstr(str_at(at(j, "error"), "message"), "\xEF\xBF\xBD"));
    cJSON_Delete(j);
    assert_null(oai_error_json(NULL));
}

/* GET /v1/models: one card with vLLM's fields. */
static void test_oai_models_json_shape(void **state)
{
    (void)state;
    cJSON *j = json_of(oai_models_json("../models/stories260K", 1700000001, 512));
    assert_keys(j, "object,data");
    assert_string_equal(str_at(j, "object"), "list");
    const cJSON *d = at(j, "data");
    assert_int_equal(cJSON_GetArraySize(d), 1);
    const cJSON *m = idx(d, 0);
    assert_keys(m, "id,object,created,owned_by,root,parent,max_model_len,permission");
    assert_string_equal(str_at(m, "id"), "../models/stories260K");
    assert_string_equal(str_at(m, "object"), "model");
    assert_true(num_at(m, "created") == 1700000001.0);
    assert_string_equal(str_at(m, "owned_by"), "inferd");
    assert_string_equal(str_at(m, "root"), "../models/stories260K");
    assert_true(cJSON_IsNull(at(m, "parent")));
    assert_int_equal((int)num_at(m, "max_model_len"), 512);
    assert_true(cJSON_IsArray(at(m, "permission")));
    assert_int_equal(cJSON_GetArraySize(at(m, "permission")), 0);
    cJSON_Delete(j);
}

/* A parsed request re-encoded nowhere else: a response built from parsed
 * values round-trips (the model name and stop string come back intact). */
static void test_oai_roundtrip_parse_encode(void **state)
{
    (void)state;
    oai_request r;
    parse_ok(OAI_COMPLETION, "{\"model\":\"m\\u00e9\",\"prompt\":\"x\",\"stop\":\"\\n\\\"\"}", &r);
    oai_meta m = meta(OAI_COMPLETION);
    m.model = r.model;
    oai_choice c = choice(0, "y", "stop");
    c.stop_reason_str = r.stop[0];
    cJSON *j = json_of(oai_response_json(&m, &c, 1, NULL));
    assert_string_equal(str_at(j, "model"), "m\xC3\xA9");
    assert_string_equal(str_at(idx(at(j, "choices"), 0), "stop_reason"), "\n\"");
    cJSON_Delete(j);
    oai_request_free(&r);
}

/* ---- allocation failures ------------------------------------------------- */

/* cJSON allocates through hooks; this budget makes its n-th allocation
 * fail. File-static because cJSON's hooks take no context (tests only). */
static long alloc_budget;

static void *budget_malloc(size_t n)
{
    return alloc_budget-- > 0 ? malloc(n) : NULL;
}

static void set_budget(long n)
{
    cJSON_Hooks h = {budget_malloc, free};
    alloc_budget = n;
    cJSON_InitHooks(&h);
}

/* Every cJSON allocation that fails makes an encoder return NULL and
 * oai_parse a 500, never a crash or a leak (run it under SAN=1); with
 * enough allocations each succeeds. */
static void test_oai_alloc_failures_unwind(void **state)
{
    (void)state;
    oai_top tops[] = {{"a", 1, -0.5f, 0}, {"b", 1, -1.5f, 0}};
    oai_token_lp lps[] = {{"a", 1, -0.5f, tops, 2, 0, 0, 0}, {"b", 1, NAN, NULL, 0, 1, 0, 0}};
    oai_usage u = {1, 2, 0};
    oai_error e;
    oai_fail(&e, 400, NULL, "n", "n must be in [1, 16], got 0");
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"stop\":[\"a\"],\"logit_bias\":{\"1\":2}}";
    for (int which = 0; which < 7; which++) {
        int done = 0;
        for (long budget = 0; !done; budget++) {
            assert_true(budget < 10000);
            oai_meta m = meta(which % 2 ? OAI_CHAT : OAI_COMPLETION);
            oai_choice c = choice(0, "ab", "stop");
            c.lps = lps;
            c.n_lps = 2;
            char *out = NULL;
            set_budget(budget);
            if (which < 2) {
                out = oai_response_json(&m, &c, 1, &u);
            } else if (which < 4) {
                out = oai_chunk_sse(&m, &c, 1, &u);
            } else if (which == 4) {
                out = oai_error_json(&e);
            } else if (which == 5) {
                out = oai_models_json("m", 1, 2);
            } else {
                oai_request r;
                oai_error pe;
                int rc = oai_parse(OAI_CHAT, body, strlen(body), NULL, &r, &pe);
                cJSON_InitHooks(NULL);
                if (rc == 0) {
                    assert_string_equal(r.messages[0].content, "x");
                    oai_request_free(&r);
                    done = 1;
                } else {
                    assert_int_equal(rc, 500);
                    assert_true(all_zero(&r, sizeof r));
                }
                continue;
            }
            cJSON_InitHooks(NULL);
            if (out) {
                assert_true(valid_utf8(out, strlen(out)));
                free(out);
                done = 1;
            }
        }
    }
}

/* ---- fuzz ---------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static const char *const fuzz_bases[] = {
    "{\"model\":\"m\",\"prompt\":[[1,2,3],[4,5]],\"max_tokens\":16,\"temperature\":0.7,"
    "\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"n\":2,\"best_of\":2,\"stop\":[\"\\n\",\"END\"],"
    "\"stop_token_ids\":[2],\"logit_bias\":{\"5\":-100,\"7\":2.5},\"seed\":42,\"logprobs\":3,"
    "\"echo\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
    "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,"
    "\"min_tokens\":2,\"ignore_eos\":false,\"skip_special_tokens\":true,\"user\":\"u\","
    "\"cache_salt\":\"s\",\"speculative\":false}",
    "{\"prompt\":[\"Once upon a time\",\"caf\xC3\xA9\"],\"max_tokens\":8,\"stop\":\"x\"}",
    "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"},{\"type\":\"text\","
    "\"text\":\"there\"}]},{\"role\":\"assistant\",\"content\":null},{\"role\":\"user\","
    "\"content\":\"Go\"}],\"max_completion_tokens\":8,\"logprobs\":true,\"top_logprobs\":2,"
    "\"add_generation_prompt\":true,\"stream\":true,\"stream_options\":{\"include_usage\":false},"
    "\"seed\":-1,\"stop\":[\"a\"],\"logit_bias\":{\"1\":1}}",
};

static const char *const fuzz_tokens[] = {
    "null", "true", "false", "-1", "0", "1", "16.5", "1e999", "-1e999", "1e30",
    "\"\"", "\"x\"", "[", "]", "{", "}", ",", ":", "[]", "{}", "[[]]", "[1,2]",
    "\"prompt\"", "\"messages\"", "\"role\"", "\"content\"", "\"tool\"", "\"text\"",
    "\"type\"", "\"image_url\"", "\"stop\"", "\"logit_bias\"", "\"stream\"",
    "\"stream_options\"", "\"n\"", "\"logprobs\"", "\"top_logprobs\"", "\"seed\"",
    "\"\\u0000\"", "\"\\ud800\"", "\"\\ud83d\\ude00\"", "\xff", "\xC3", "\xE2\x82",
    "99999999999999999999999", "-0", "2147483648", "\"-5\"", "\\", "\"", " ",
};

/* 10,000 seeded mutations of valid bodies never crash or leak (run it under
 * SAN=1) and always give 0 or a 400 with a message and an empty result; an
 * accepted request holds what its kind needs. */
static void test_oai_parse_fuzz_mutations(void **state)
{
    (void)state;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    size_t n_tok = sizeof fuzz_tokens / sizeof fuzz_tokens[0];
    int accepted = 0;
    for (int iter = 0; iter < 10000; iter++) {
        const char *base = fuzz_bases[rng_next(&seed) % 3];
        oai_kind kind = strstr(base, "\"messages\"") ? OAI_CHAT : OAI_COMPLETION;
        if (rng_next(&seed) % 16 == 0)
            kind = kind == OAI_CHAT ? OAI_COMPLETION : OAI_CHAT;
        size_t len = strlen(base), cap = len + 1024;
        char *b = malloc(cap);
        assert_non_null(b);
        memcpy(b, base, len);
        int muts = 1 + (int)(rng_next(&seed) % 4);
        for (int k = 0; k < muts; k++) {
            size_t pos = len ? rng_next(&seed) % len : 0;
            switch (rng_next(&seed) % 5) {
            case 0: /* overwrite one byte */
                if (len)
                    b[pos] = (char)(rng_next(&seed) & 0xFF);
                break;
            case 1: { /* delete a run */
                size_t d = 1 + rng_next(&seed) % 8;
                if (pos + d > len)
                    d = len - pos;
                memmove(b + pos, b + pos + d, len - pos - d);
                len -= d;
                break;
            }
            case 2: { /* insert a token */
                const char *t = fuzz_tokens[rng_next(&seed) % n_tok];
                size_t tl = strlen(t);
                if (len + tl < cap) {
                    memmove(b + pos + tl, b + pos, len - pos);
                    memcpy(b + pos, t, tl);
                    len += tl;
                }
                break;
            }
            case 3: /* truncate */
                len = pos;
                break;
            default: { /* replace a run with a token */
                const char *t = fuzz_tokens[rng_next(&seed) % n_tok];
                size_t tl = strlen(t), d = 1 + rng_next(&seed) % 12;
                if (pos + d > len)
                    d = len - pos;
                if (len - d + tl < cap) {
                    memmove(b + pos + tl, b + pos + d, len - pos - d);
                    memcpy(b + pos, t, tl);
                    len = len - d + tl;
                }
            }
            }
        }
        /* an exact-size copy, no NUL after it, so ASan sees any over-read */
        char *exact = malloc(len ? len : 1);
        assert_non_null(exact);
        memcpy(exact, b, len);
        free(b);
        oai_request r;
        oai_error e;
        memset(&e, 0, sizeof e);
        int rc = oai_parse(kind, exact, len, NULL, &r, &e);
        free(exact);
        if (rc == 0) {
            accepted++;
            if (kind == OAI_CHAT)
                assert_true(r.n_messages >= 1);
            else
                assert_true(r.n_prompts >= 1);
            assert_true(r.n >= 1 && r.n <= 16);
            oai_request_free(&r);
        } else {
            if (rc != 400)
                fail_msg("iteration %d: status %d (%s)", iter, rc, e.message);
            assert_int_equal(e.status, 400);
            assert_true(e.message[0] != '\0');
            assert_null(strchr(e.message, '\n'));
            assert_true(all_zero(&r, sizeof r));
            cJSON_Delete(json_of(oai_error_json(&e)));
        }
    }
    /* the mutations leave some bodies valid, so both paths were taken */
    assert_true(accepted > 100 && accepted < 9900);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oai_limits_default_values),
        cmocka_unit_test(test_oai_parse_completion_defaults),
        cmocka_unit_test(test_oai_parse_chat_defaults),
        cmocka_unit_test(test_oai_parse_completion_all_fields),
        cmocka_unit_test(test_oai_parse_chat_all_fields),
        cmocka_unit_test(test_oai_parse_prompt_shapes),
        cmocka_unit_test(test_oai_parse_prompt_max_prompts),
        cmocka_unit_test(test_oai_parse_chat_content_parts),
        cmocka_unit_test(test_oai_parse_chat_roles),
        cmocka_unit_test(test_oai_parse_chat_template_inputs),
        cmocka_unit_test(test_oai_parse_max_completion_tokens_alias),
        cmocka_unit_test(test_oai_parse_integral_floats),
        cmocka_unit_test(test_oai_parse_nulls_are_defaults),
        cmocka_unit_test(test_oai_parse_top_k_zero_is_off),
        cmocka_unit_test(test_oai_parse_empty_lists),
        cmocka_unit_test(test_oai_parse_range_edges),
        cmocka_unit_test(test_oai_parse_logit_bias_last_wins),
        cmocka_unit_test(test_oai_parse_seed_int64),
        cmocka_unit_test(test_oai_parse_chat_logprobs),
        cmocka_unit_test(test_oai_parse_stream_options),
        cmocka_unit_test(test_oai_parse_strings_unescaped),
        cmocka_unit_test(test_oai_parse_invalid_table),
        cmocka_unit_test(test_oai_parse_malformed_json),
        cmocka_unit_test(test_oai_parse_deep_nesting),
        cmocka_unit_test(test_oai_parse_not_an_object),
        cmocka_unit_test(test_oai_parse_uses_length),
        cmocka_unit_test(test_oai_parse_custom_limits),
        cmocka_unit_test(test_oai_fail_fills_error),
        cmocka_unit_test(test_oai_response_completion_fields),
        cmocka_unit_test(test_oai_response_chat_fields),
        cmocka_unit_test(test_oai_response_stop_reason_only_on_stop),
        cmocka_unit_test(test_oai_response_completion_logprobs),
        cmocka_unit_test(test_oai_prompt_logprobs),
        cmocka_unit_test(test_oai_response_logprob_text),
        cmocka_unit_test(test_oai_response_chat_logprobs),
        cmocka_unit_test(test_oai_response_logprobs_empty),
        cmocka_unit_test(test_oai_encode_invalid_utf8),
        cmocka_unit_test(test_oai_chunk_sse_framing),
        cmocka_unit_test(test_oai_chunk_completion),
        cmocka_unit_test(test_oai_chunk_chat_deltas),
        cmocka_unit_test(test_oai_chunk_chat_logprobs),
        cmocka_unit_test(test_oai_chunk_usage),
        cmocka_unit_test(test_oai_error_json_shape),
        cmocka_unit_test(test_oai_models_json_shape),
        cmocka_unit_test(test_oai_roundtrip_parse_encode),
        cmocka_unit_test(test_oai_alloc_failures_unwind),
        cmocka_unit_test(test_oai_parse_fuzz_mutations),
        cmocka_unit_test(test_oai_parse_responses_mapping),
        cmocka_unit_test(test_oai_parse_responses_tools_and_format),
        cmocka_unit_test(test_oai_resp_json_function_calls),
        cmocka_unit_test(test_oai_resp_stream_function_call_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
