#include "server/api.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/json_esc.h"
#include "engine/version.h"
#include "server/gcall.h"
#include "server/keys.h"

struct api {
    api_config cfg;
    keys *keys;                /* NULL: no authentication                   */
    cors *cors;                /* NULL: no CORS headers                     */
    srv *srv;
    atomic_int ready;
    const model *m;
    const tok *tk;
    const tmpl *t;
    eng *e;
    met_registry *met;
    long created;
    uint64_t next_id;
};

int api_create(const api_config *cfg, api **out, inf_err *err)
{
    api *a = calloc(1, sizeof *a);
    if (!a)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    a->cfg = *cfg;
    int rc = keys_create(cfg->api_keys, cfg->n_api_keys, cfg->api_key_file, &a->keys, err);
    if (!rc)
        rc = cors_create(&cfg->cors, &a->cors, err);
    if (rc) {
        api_destroy(a);
        return rc;
    }
    a->cfg.api_keys = NULL; /* borrowed only until here */
    a->created = (long)time(NULL);
    a->next_id = (uint64_t)time(NULL) * 1000003u;
    *out = a;
    return INF_OK;
}

void api_destroy(api *a)
{
    if (!a)
        return;
    keys_destroy(a->keys);
    cors_destroy(a->cors);
    free(a);
}

int api_reload(api *a, inf_err *err)
{
    return keys_reload(a->keys, NULL, err);
}

void api_set_server(api *a, srv *s) { a->srv = s; }

void api_set_ready(api *a, const model *m, const tok *tk, const tmpl *t, eng *e,
                   met_registry *met, int max_model_len)
{
    a->t = t;
    a->cfg.max_model_len = max_model_len;
    a->cfg.limits.vocab_size = m->cfg.vocab_size;
    a->m = m;
    a->tk = tk;
    a->e = e;
    a->met = met;
    atomic_store(&a->ready, 1);
}

/* ---- replies ----------------------------------------------------------------- */

static void reply_json(srv_conn *c, int status, char *body)
{
    srv_reply(c, status, "application/json", body, body ? strlen(body) : 0, NULL);
}

static void fail(srv_conn *c, int status, const char *type, const char *param, const char *msg)
{
    oai_error e;
    oai_fail(&e, status, type, param, "%s", msg);
    gcall_reply_error(c, &e, NULL);
}

static int authorized(api *a, srv_conn *c)
{
    return keys_check(a->keys, srv_header(c, "Authorization"));
}

static int chat_prompt(api *a, const oai_request *r, int32_t **ids, int *n, oai_error *err);

/* ---- simple endpoints ----------------------------------------------------------- */

static void do_models(api *a, srv_conn *c)
{
    reply_json(c, 200, oai_models_json(a->cfg.model_id, a->created, a->cfg.max_model_len));
}

static void do_version(srv_conn *c)
{
    inf_buf b = {0};
    inf_buf_printf(&b, "{\"version\":\"%s\",\"build\":", inf_version());
    json_esc_put(&b, inf_version_build(), strlen(inf_version_build()));
    inf_buf_put(&b, "}", 2); /* with the NUL */
    if (b.oom) {
        free(b.p);
        b.p = NULL;
    }
    reply_json(c, 200, b.p);
}

/* POST /tokenize (vLLM): {"prompt": "...", "add_special_tokens": true} or
 * {"messages": [...]} -> {"count", "max_model_len", "tokens"}. */
static void do_tokenize(api *a, srv_conn *c, const char *body, size_t len)
{
    oai_tokenize t;
    oai_error err = {0};
    int32_t *ids = NULL;
    int n = 0;
    if (oai_parse_tokenize(body, len, &a->cfg.limits, &t, &err) == 0) {
        inf_err ie = {0};
        if (t.prompt) {
            if (tok_encode(a->tk, t.prompt, strlen(t.prompt), t.add_special_tokens, &ids, &n,
                           &ie))
                oai_fail(&err, 400, "invalid_request_error", "prompt", "%s", ie.msg);
        } else {
            chat_prompt(a, &t.chat, &ids, &n, &err);
        }
        oai_tokenize_free(&t);
    }
    if (err.status) {
        gcall_reply_error(c, &err, NULL);
        free(ids);
        return;
    }
    reply_json(c, 200, oai_tokenize_json(ids, n, a->cfg.max_model_len));
    free(ids);
}

/* POST /detokenize (vLLM): {"tokens": [...]} -> {"prompt": "..."}. */
static void do_detokenize(api *a, srv_conn *c, const char *body, size_t len)
{
    oai_detokenize d;
    oai_error err = {0};
    char *text = NULL;
    size_t text_len = 0;
    if (oai_parse_detokenize(body, len, &d, &err) == 0) {
        for (int i = 0; i < d.n_tokens && !err.status; i++)
            if (d.tokens[i] >= tok_vocab_size(a->tk))
                oai_fail(&err, 400, "invalid_request_error", "tokens",
                         "token %d is not an id in the vocabulary (0..%d)", i,
                         tok_vocab_size(a->tk) - 1);
        inf_err ie = {0};
        if (!err.status && tok_decode(a->tk, d.tokens, d.n_tokens, &text, &text_len, &ie))
            oai_fail(&err, 400, "invalid_request_error", "tokens", "%s", ie.msg);
        oai_detokenize_free(&d);
    }
    if (err.status) {
        gcall_reply_error(c, &err, NULL);
        free(text);
        return;
    }
    reply_json(c, 200, oai_detokenize_json(text, text_len));
    free(text);
}

/* ---- prompts ----------------------------------------------------------------------- */

/* Chat messages to token ids through the model's chat template. */
static int chat_prompt(api *a, const oai_request *r, int32_t **ids, int *n, oai_error *err)
{
    tmpl_msg *msgs = calloc((size_t)r->n_messages, sizeof *msgs);
    if (!msgs)
        return oai_fail(err, 500, "internal_error", "", "out of memory");
    for (int i = 0; i < r->n_messages; i++) {
        msgs[i].role = r->messages[i].role;
        msgs[i].content = r->messages[i].content;
    }
    tmpl_out out;
    tmpl_out_init(&out);
    inf_err ie = {0};
    /* a Jinja template sees the messages as sent, tools and the rest;
     * a built-in, the roles and contents */
    tmpl_chat chat = {.messages_json = r->messages_json, .tools_json = r->tools_json,
                      .documents_json = r->documents_json,
                      .kwargs_json = r->chat_template_kwargs_json,
                      .add_generation_prompt = r->add_generation_prompt,
                      .continue_final_message = r->continue_final_message};
    int rc = (tmpl_get_kind(a->t) == TMPL_JINJA || r->continue_final_message) && r->messages_json
                 ? tmpl_render_chat(a->t, &chat, &out, &ie)
                 : tmpl_render(a->t, msgs, r->n_messages, r->add_generation_prompt, &out, &ie);
    if (rc == INF_OK)
        rc = tmpl_tokens(a->t, &out, a->tk, ids, n, &ie);
    tmpl_out_free(&out);
    free(msgs);
    if (rc)
        return oai_fail(err, rc == INF_ERR_NOMEM ? 500 : 400, "invalid_request_error",
                        "messages", "%s", ie.msg);
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return oai_fail(err, 400, "invalid_request_error", "messages",
                        "the messages render to an empty prompt with the %s chat template",
                        tmpl_name(a->t));
    }
    return 0;
}

/* Tokenized prompts of a request (completions: each prompt; chat: one). */
static int prepare_prompts(api *a, const oai_request *r, gcall_prompt **out, int *n_out,
                           oai_error *err)
{
    int n = r->kind == OAI_CHAT ? 1 : r->n_prompts;
    gcall_prompt *p = calloc((size_t)n, sizeof *p);
    if (!p)
        return oai_fail(err, 500, "internal_error", "", "out of memory");
    for (int i = 0; i < n && !err->status; i++) {
        inf_err ie = {0};
        if (r->kind == OAI_CHAT) {
            chat_prompt(a, r, &p[i].ids, &p[i].n, err);
            continue;
        }
        const oai_prompt *q = &r->prompts[i];
        if (q->text) {
            if (tok_encode(a->tk, q->text, strlen(q->text), 1, &p[i].ids, &p[i].n, &ie))
                oai_fail(err, 400, "invalid_request_error", "prompt", "%s", ie.msg);
            else if (r->echo && !(p[i].echo = strdup(q->text)))
                oai_fail(err, 500, "internal_error", "", "out of memory");
        } else {
            p[i].ids = malloc(sizeof(int32_t) * (size_t)(q->n_ids ? q->n_ids : 1));
            if (!p[i].ids) {
                oai_fail(err, 500, "internal_error", "", "out of memory");
                break;
            }
            memcpy(p[i].ids, q->ids, sizeof(int32_t) * (size_t)q->n_ids);
            p[i].n = q->n_ids;
            for (int k = 0; k < q->n_ids && !err->status; k++)
                if (q->ids[k] < 0 || q->ids[k] >= tok_vocab_size(a->tk))
                    oai_fail(err, 400, "invalid_request_error", "prompt",
                             "token id %d is out of vocabulary (0..%d)", q->ids[k],
                             tok_vocab_size(a->tk) - 1);
            if (!err->status && r->echo &&
                tok_decode(a->tk, q->ids, q->n_ids, &p[i].echo, NULL, &ie))
                oai_fail(err, 400, "invalid_request_error", "prompt", "%s", ie.msg);
        }
    }
    if (err->status) {
        for (int i = 0; i < n; i++)
            free(p[i].ids), free(p[i].echo);
        free(p);
        return err->status;
    }
    *out = p;
    *n_out = n;
    return 0;
}

/* ---- generation ----------------------------------------------------------------- */

/* A generation body parsed, checked and prompted: 0 with *r and the
 * prompts set, or the status with err filled. responses: a /v1/responses
 * body (a chat request, answered in its shapes). */
static int prepare(api *a, oai_kind kind, int responses, const char *body, size_t len,
                   oai_request **out, gcall_prompt **prompts, int *n_prompts, oai_error *err)
{
    oai_request *r = calloc(1, sizeof *r);
    if (!r)
        return oai_fail(err, 500, "internal_error", "", "out of memory");
    if ((responses ? oai_parse_responses(body, len, &a->cfg.limits, r, err)
                   : oai_parse(kind, body, len, &a->cfg.limits, r, err)) != 0) {
        free(r);
        return err->status;
    }
    if (r->model && strcmp(r->model, a->cfg.model_id) != 0) {
        oai_fail(err, 404, "NotFoundError", "model", "The model `%s` does not exist.", r->model);
        err->code = "model_not_found";
    } else {
        prepare_prompts(a, r, prompts, n_prompts, err);
    }
    if (err->status) {
        if (responses)
            oai_resp_rename_error(err);
        oai_request_free(r);
        free(r);
        return err->status;
    }
    *out = r;
    return 0;
}

static gcall_env env_of(api *a, int responses)
{
    return (gcall_env){.srv = a->srv, .e = a->e, .m = a->m, .tk = a->tk,
                       .model_id = a->cfg.model_id, .max_model_len = a->cfg.max_model_len,
                       .max_waiting = a->cfg.max_waiting, .id_seq = ++a->next_id,
                       .tool_parser = a->cfg.tool_parser,
                       .reasoning_parser = a->cfg.reasoning_parser, .responses = responses};
}

static void do_generate(api *a, srv_conn *c, oai_kind kind, int responses, const char *body,
                        size_t len)
{
    oai_request *r = NULL;
    oai_error err = {0};
    gcall_prompt *prompts = NULL;
    int n_prompts = 0;
    if (prepare(a, kind, responses, body, len, &r, &prompts, &n_prompts, &err)) {
        gcall_reply_error(c, &err, NULL);
        return;
    }
    gcall_env env = env_of(a, responses);
    gcall_start(&env, c, r, prompts, n_prompts); /* takes r and prompts */
}

int api_submit(api *a, const char *path, const char *body, size_t len, void (*wake)(void *user),
               void *user, gcall **call, oai_error *err)
{
    *call = NULL;
    int responses = !strcmp(path, "/v1/responses");
    oai_kind kind = !strcmp(path, "/v1/completions") ? OAI_COMPLETION : OAI_CHAT;
    if (!responses && kind == OAI_CHAT && strcmp(path, "/v1/chat/completions"))
        return oai_fail(err, 404, "NotFoundError", "", "Not Found");
    if (!atomic_load(&a->ready))
        return oai_fail(err, 503, "service_unavailable", "", "the model is still loading");
    oai_request *r = NULL;
    gcall_prompt *prompts = NULL;
    int n_prompts = 0;
    if (prepare(a, kind, responses, body, len, &r, &prompts, &n_prompts, err))
        return err->status;
    gcall_env env = env_of(a, responses);
    return gcall_submit(&env, r, prompts, n_prompts, wake, user, call, err);
}

/* ---- routing ----------------------------------------------------------------------- */

enum { R_NONE, R_HEALTH, R_VERSION, R_METRICS, R_MODELS, R_COMPLETIONS, R_CHAT, R_TOKENIZE,
       R_DETOKENIZE, R_RESPONSES };

static const struct route {
    const char *path;
    const char *method;
    int id;
    int needs_key;
    int needs_model;
} routes[] = {
    {"/health", "GET", R_HEALTH, 0, 0},
    {"/version", "GET", R_VERSION, 0, 0},
    {"/metrics", "GET", R_METRICS, 0, 0},
    {"/v1/models", "GET", R_MODELS, 1, 0},
    {"/v1/completions", "POST", R_COMPLETIONS, 1, 1},
    {"/v1/chat/completions", "POST", R_CHAT, 1, 1},
    {"/v1/responses", "POST", R_RESPONSES, 1, 1},
    {"/tokenize", "POST", R_TOKENIZE, 1, 1},
    {"/detokenize", "POST", R_DETOKENIZE, 1, 1},
};

void api_handle(void *app, srv_conn *c, const char *method, const char *path, const char *body,
                size_t len)
{
    api *a = app;
    if (a->cors) { /* CORS headers on every answer, errors included */
        cors_result cr;
        cors_apply(a->cors, method, srv_header(c, "Origin"),
                   srv_header(c, "Access-Control-Request-Method"),
                   srv_header(c, "Access-Control-Request-Headers"), &cr);
        for (int i = 0; i < cr.n; i++)
            srv_conn_add_header(c, cr.h[i].name, cr.h[i].value);
        if (cr.preflight) { /* before authentication: browsers send no key here */
            char *b = strdup(cr.body);
            srv_reply(c, cr.status, "text/plain; charset=utf-8", b, b ? strlen(b) : 0, NULL);
            return;
        }
    }
    const struct route *rt = NULL;
    size_t plen = strcspn(path, "?");
    for (size_t i = 0; i < sizeof routes / sizeof *routes && !rt; i++)
        if (strlen(routes[i].path) == plen && !strncmp(routes[i].path, path, plen))
            rt = &routes[i];
    if (!rt) {
        fail(c, 404, "NotFoundError", "", "Not Found");
        return;
    }
    if (strcmp(method, rt->method) != 0 && !(rt->id == R_HEALTH && !strcmp(method, "HEAD"))) {
        oai_error e;
        oai_fail(&e, 405, "invalid_request_error", "", "Method %s not allowed on %s; use %s",
                 method, rt->path, rt->method);
        char allow[32];
        snprintf(allow, sizeof allow, "Allow: %s", rt->method);
        gcall_reply_error(c, &e, allow);
        return;
    }
    if (rt->needs_key && !authorized(a, c)) {
        fail(c, 401, "authentication_error", "",
             "Incorrect or missing API key: send it as \"Authorization: Bearer KEY\"");
        return;
    }
    int ready = atomic_load(&a->ready);
    if ((rt->needs_model || rt->id == R_HEALTH) && !ready) {
        oai_error e;
        oai_fail(&e, 503, "service_unavailable", "", "the model is still loading");
        gcall_reply_error(c, &e, "Retry-After: 1");
        return;
    }
    switch (rt->id) {
    case R_HEALTH:
        srv_reply(c, 200, NULL, NULL, 0, NULL);
        break;
    case R_VERSION:
        do_version(c);
        break;
    case R_METRICS: {
        char *text = NULL;
        size_t tl = 0;
        if (a->met && met_render(a->met, &text, &tl, NULL) == INF_OK)
            srv_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, tl, NULL);
        else
            srv_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, 0, NULL);
        break;
    }
    case R_MODELS:
        do_models(a, c);
        break;
    case R_COMPLETIONS:
        do_generate(a, c, OAI_COMPLETION, 0, body, len);
        break;
    case R_CHAT:
        do_generate(a, c, OAI_CHAT, 0, body, len);
        break;
    case R_RESPONSES:
        do_generate(a, c, OAI_CHAT, 1, body, len);
        break;
    case R_TOKENIZE:
        do_tokenize(a, c, body, len);
        break;
    case R_DETOKENIZE:
        do_detokenize(a, c, body, len);
        break;
    }
}
