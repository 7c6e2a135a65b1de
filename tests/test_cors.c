/* cors_: the answers of Starlette's CORSMiddleware (vLLM's) for simple
 * requests and preflights, off when no origin is configured. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "server/cors.h"

static const char *hdr(const cors_result *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->h[i].name, name))
            return r->h[i].value;
    return NULL;
}

static void test_cors_off_without_origins(void **state)
{
    (void)state;
    cors *c = (cors *)1;
    inf_err e = {0};
    cors_config cfg = {0};
    assert_int_equal(cors_create(&cfg, &c, &e), INF_OK);
    assert_null(c);
    cors_result r;
    cors_apply(NULL, "OPTIONS", "https://a", "POST", NULL, &r);
    assert_int_equal(r.preflight, 0);
    assert_int_equal(r.n, 0);
}

/* listed origins are echoed with Vary; others get nothing; no Origin, nothing */
static void test_cors_listed_origins(void **state)
{
    (void)state;
    cors *c = NULL;
    inf_err e = {0};
    cors_config cfg = {.allowed_origins = "[\"https://a.example\", \"https://b.example\"]",
                       .allowed_methods = "GET,POST", .allowed_headers = "[\"X-Trace\"]"};
    assert_int_equal(cors_create(&cfg, &c, &e), INF_OK);
    cors_result r;
    cors_apply(c, "POST", "https://b.example", NULL, NULL, &r);
    assert_int_equal(r.preflight, 0);
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), "https://b.example");
    assert_string_equal(hdr(&r, "Vary"), "Origin");
    assert_null(hdr(&r, "Access-Control-Allow-Credentials"));
    cors_apply(c, "POST", "https://c.example", NULL, NULL, &r);
    assert_int_equal(r.n, 0);
    cors_apply(c, "POST", NULL, NULL, NULL, &r);
    assert_int_equal(r.n, 0);
    /* preflights */
    cors_apply(c, "OPTIONS", "https://a.example", "POST", "x-trace, content-type", &r);
    assert_int_equal(r.preflight, 1);
    assert_int_equal(r.status, 200);
    assert_string_equal(hdr(&r, "Access-Control-Allow-Methods"), "GET, POST");
    assert_string_equal(hdr(&r, "Access-Control-Allow-Headers"),
                        "Accept, Accept-Language, Content-Language, Content-Type, X-Trace");
    assert_string_equal(hdr(&r, "Access-Control-Max-Age"), "600");
    cors_apply(c, "OPTIONS", "https://c.example", "POST", NULL, &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(r.body, "Disallowed CORS origin");
    cors_apply(c, "OPTIONS", "https://a.example", "PUT", NULL, &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(r.body, "Disallowed CORS method");
    cors_apply(c, "OPTIONS", "https://a.example", "POST", "authorization", &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(r.body, "Disallowed CORS headers");
    /* OPTIONS without Access-Control-Request-Method is an ordinary request */
    cors_apply(c, "OPTIONS", "https://a.example", NULL, NULL, &r);
    assert_int_equal(r.preflight, 0);
    cors_destroy(c);
}

/* "*": "*" without credentials, the origin echoed with them */
static void test_cors_any_origin(void **state)
{
    (void)state;
    cors *c = NULL;
    inf_err e = {0};
    cors_config cfg = {.allowed_origins = "*"};
    assert_int_equal(cors_create(&cfg, &c, &e), INF_OK);
    cors_result r;
    cors_apply(c, "GET", "https://x", NULL, NULL, &r);
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), "*");
    assert_null(hdr(&r, "Vary"));
    cors_apply(c, "OPTIONS", "https://x", "DELETE", "x-a, x-b", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(hdr(&r, "Access-Control-Allow-Headers"), "x-a, x-b");
    assert_string_equal(hdr(&r, "Access-Control-Allow-Methods"),
                        "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
    cors_destroy(c);
    cfg.allow_credentials = 1;
    assert_int_equal(cors_create(&cfg, &c, &e), INF_OK);
    cors_apply(c, "GET", "https://x", NULL, NULL, &r);
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), "https://x");
    assert_string_equal(hdr(&r, "Access-Control-Allow-Credentials"), "true");
    cors_destroy(c);
}

static void test_cors_bad_lists(void **state)
{
    (void)state;
    cors *c = NULL;
    inf_err e = {0};
    cors_config cfg = {.allowed_origins = "[\"a\", 1]"};
    assert_int_equal(cors_create(&cfg, &c, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "--allowed-origins"));
    cfg = (cors_config){.allowed_origins = "*", .allowed_methods = "[\"GET\""};
    assert_int_equal(cors_create(&cfg, &c, &e), INF_ERR_INVALID);
    assert_non_null(strstr(e.msg, "--allowed-methods"));
    cfg = (cors_config){.allowed_origins = "[]"};
    assert_int_equal(cors_create(&cfg, &c, &e), INF_ERR_INVALID);
    assert_null(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cors_off_without_origins),
        cmocka_unit_test(test_cors_listed_origins),
        cmocka_unit_test(test_cors_any_origin),
        cmocka_unit_test(test_cors_bad_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
