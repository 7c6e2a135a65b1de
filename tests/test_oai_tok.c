/* Unit tests for oai_'s /tokenize and /detokenize bodies: what each parser
 * accepts (defaults included), what it refuses (status, param, message),
 * and the two encoders read back with cJSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai.h"

static int tokenize(const char *body, oai_tokenize *t, oai_error *e)
{
    oai_limits lim = oai_limits_default();
    memset(e, 0, sizeof *e);
    return oai_parse_tokenize(body, strlen(body), &lim, t, e);
}

static int detokenize(const char *body, oai_detokenize *d, oai_error *e)
{
    memset(e, 0, sizeof *e);
    return oai_parse_detokenize(body, strlen(body), d, e);
}

/* A prompt body: the text, and add_special_tokens defaulting to true. */
static void test_oai_tokenize_prompt_defaults(void **state)
{
    (void)state;
    oai_tokenize t;
    oai_error e;
    assert_int_equal(tokenize("{\"model\":\"m\",\"prompt\":\"Once upon\"}", &t, &e), 0);
    assert_string_equal(t.prompt, "Once upon");
    assert_int_equal(t.add_special_tokens, 1);
    assert_int_equal(t.chat.n_messages, 0);
    oai_tokenize_free(&t);
    assert_int_equal(tokenize("{\"prompt\":\"x\",\"add_special_tokens\":false}", &t, &e), 0);
    assert_int_equal(t.add_special_tokens, 0);
    oai_tokenize_free(&t);
}

/* A messages body is a chat request, validated as chat completions are. */
static void test_oai_tokenize_messages_as_chat(void **state)
{
    (void)state;
    oai_tokenize t;
    oai_error e;
    assert_int_equal(tokenize("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &t, &e),
                     0);
    assert_null(t.prompt);
    assert_int_equal(t.chat.n_messages, 1);
    assert_string_equal(t.chat.messages[0].role, "user");
    assert_string_equal(t.chat.messages[0].content, "hi");
    oai_tokenize_free(&t);
    /* a bad message is the chat parser's 400 */
    assert_int_equal(tokenize("{\"messages\":[{\"role\":\"robot\",\"content\":\"hi\"}]}", &t, &e),
                     400);
    assert_string_equal(e.param, "messages.[0].role");
    assert_null(t.prompt);
}

/* Bodies refused: not JSON, not an object, neither field, wrong types. */
static void test_oai_tokenize_refused(void **state)
{
    (void)state;
    static const struct {
        const char *body, *param, *msg;
    } cases[] = {
        {"{\"prompt\": 01}", "", "invalid JSON"},
        {"[1]", "", "must be a JSON object, got array"},
        {"{}", "prompt", "either \"prompt\" (a string) or \"messages\" is required"},
        {"{\"prompt\": 5}", "prompt", "either \"prompt\""},
        {"{\"prompt\":\"x\",\"add_special_tokens\":1}", "add_special_tokens",
         "add_special_tokens must be a boolean, got number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        oai_tokenize t;
        oai_error e;
        assert_int_equal(tokenize(cases[i].body, &t, &e), 400);
        assert_string_equal(e.param, cases[i].param);
        if (!strstr(e.message, cases[i].msg))
            fail_msg("%s: message %s lacks %s", cases[i].body, e.message, cases[i].msg);
        assert_null(t.prompt);
    }
}

/* Token ids: non-negative int32 integers; anything else is named. */
static void test_oai_detokenize_ids(void **state)
{
    (void)state;
    oai_detokenize d;
    oai_error e;
    assert_int_equal(detokenize("{\"tokens\":[1, 9038, 2.0]}", &d, &e), 0);
    assert_int_equal(d.n_tokens, 3);
    assert_int_equal(d.tokens[0], 1);
    assert_int_equal(d.tokens[1], 9038);
    assert_int_equal(d.tokens[2], 2);
    oai_detokenize_free(&d);
    assert_int_equal(detokenize("{\"tokens\":[]}", &d, &e), 0);
    assert_int_equal(d.n_tokens, 0);
    oai_detokenize_free(&d);
    static const char *bad[] = {"{\"tokens\":[1,-1]}", "{\"tokens\":[1.5]}",
                                "{\"tokens\":[\"a\"]}", "{\"tokens\":[4294967296]}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(detokenize(bad[i], &d, &e), 400);
        assert_string_equal(e.param, "tokens");
        assert_non_null(strstr(e.message, "tokens must be non-negative integers"));
        assert_null(d.tokens);
    }
    assert_int_equal(detokenize("{\"tokens\":\"1 2\"}", &d, &e), 400);
    assert_string_equal(e.message, "\"tokens\" must be a list of token ids");
}

/* The encoders: exact keys, and any bytes become valid JSON text. */
static void test_oai_tokenize_encoders(void **state)
{
    (void)state;
    int32_t ids[] = {1, 9038, 2501};
    char *s = oai_tokenize_json(ids, 3, 512);
    assert_string_equal(s, "{\"count\":3,\"max_model_len\":512,\"tokens\":[1,9038,2501]}");
    free(s);
    s = oai_detokenize_json("a\"b\n\xff\0c", 7);
    assert_string_equal(s, "{\"prompt\":\"a\\\"b\\n\xEF\xBF\xBD\\u0000c\"}");
    cJSON *j = cJSON_Parse(s);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "prompt")->valuestring, "a\"b\n\xEF\xBF\xBD");
    cJSON_Delete(j);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oai_tokenize_prompt_defaults),
        cmocka_unit_test(test_oai_tokenize_messages_as_chat),
        cmocka_unit_test(test_oai_tokenize_refused),
        cmocka_unit_test(test_oai_detokenize_ids),
        cmocka_unit_test(test_oai_tokenize_encoders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
