/* oai_tokenize_: the /tokenize and /detokenize bodies, parsed apart from
 * the tokenizer: prompt or messages, add_special_tokens, ids in range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "server/oai_tokenize.h"

static int tok_parse(const char *body, oai_tokenize_req *q, oai_error *e)
{
    oai_limits lim = oai_limits_default();
    return oai_tokenize_parse(body, strlen(body), &lim, q, e);
}

static void test_oai_tokenize_prompt_and_messages(void **state)
{
    (void)state;
    oai_tokenize_req q;
    oai_error e = {0};
    assert_int_equal(tok_parse("{\"prompt\": \"Hi there\"}", &q, &e), 0);
    assert_string_equal(q.prompt, "Hi there");
    assert_int_equal(q.add_special_tokens, 1);
    assert_int_equal(q.chat, 0);
    oai_tokenize_free(&q);
    assert_int_equal(tok_parse("{\"prompt\": \"x\", \"add_special_tokens\": false}", &q, &e), 0);
    assert_int_equal(q.add_special_tokens, 0);
    oai_tokenize_free(&q);
    assert_int_equal(tok_parse("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", &q, &e),
                     0);
    assert_int_equal(q.chat, 1);
    assert_int_equal(q.chat_req.n_messages, 1);
    oai_tokenize_free(&q);
}

static void test_oai_tokenize_errors(void **state)
{
    (void)state;
    oai_tokenize_req q;
    oai_error e = {0};
    assert_int_equal(tok_parse("[1]", &q, &e), 400);
    assert_int_equal(tok_parse("{\"prompt\": 3}", &q, &e), 400);
    assert_string_equal(e.param, "prompt");
    assert_int_equal(tok_parse("{\"prompt\": \"x\", \"add_special_tokens\": \"no\"}", &q, &e), 400);
    assert_string_equal(e.param, "add_special_tokens");
    assert_int_equal(tok_parse("{\"messages\": [{\"role\": \"user\"}]}", &q, &e), 400);
    assert_null(q.prompt);
}

static void test_oai_detokenize_ids(void **state)
{
    (void)state;
    int32_t *ids = NULL;
    int n = -1;
    oai_error e = {0};
    const char *ok = "{\"tokens\": [0, 5, 99]}";
    assert_int_equal(oai_detokenize_parse(ok, strlen(ok), 100, &ids, &n, &e), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[2], 99);
    free(ids);
    const char *empty = "{\"tokens\": []}";
    assert_int_equal(oai_detokenize_parse(empty, strlen(empty), 100, &ids, &n, &e), 0);
    assert_int_equal(n, 0);
    const char *bad[] = {"{\"tokens\": [100]}", "{\"tokens\": [-1]}", "{\"tokens\": [1.5]}",
                         "{\"tokens\": [1e300]}", "{\"tokens\": [\"1\"]}", "{\"tokens\": 1}",
                         "{}", "nope"};
    for (int i = 0; i < 8; i++) {
        assert_int_equal(oai_detokenize_parse(bad[i], strlen(bad[i]), 100, &ids, &n, &e), 400);
        assert_null(ids);
        assert_string_equal(e.type, "invalid_request_error");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oai_tokenize_prompt_and_messages),
        cmocka_unit_test(test_oai_tokenize_errors),
        cmocka_unit_test(test_oai_detokenize_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
