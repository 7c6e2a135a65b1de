/* oai_: OpenAI's Responses API (POST /v1/responses), stateless, mapped
 * onto chat: the body becomes a chat body that oai_parse validates, and the
 * output is encoded as a Response object or its typed stream events. */
#include "server/oai_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_esc.h"

#define PUT(b, lit) inf_buf_put(b, lit, sizeof lit - 1)

/* A message's content: a string, or a list of {"type": "input_text" |
 * "output_text" | "text", "text"} parts (joined, as chat joins parts). */
static cJSON *content_of(const cJSON *c, int i, oai_error *err)
{
    if (cJSON_IsString(c))
        return cJSON_CreateString(c->valuestring);
    if (!cJSON_IsArray(c)) {
        oai_fail(err, 400, OAI_INVALID, "input", "input[%d].content must be a string or a list", i);
        return NULL;
    }
    inf_buf b = {0};
    const cJSON *p;
    int k = 0;
    cJSON_ArrayForEach(p, c) {
        const cJSON *t = oai__get(p, "type"), *x = oai__get(p, "text");
        if (!cJSON_IsString(t) || !cJSON_IsString(x) ||
            (strcmp(t->valuestring, "input_text") && strcmp(t->valuestring, "output_text") &&
             strcmp(t->valuestring, "text"))) {
            free(b.p);
            oai_fail(err, 400, OAI_INVALID, "input",
                     "input[%d].content[%d] must be a text part (input_text, output_text)", i, k);
            return NULL;
        }
        if (k++)
            PUT(&b, "\n");
        inf_buf_put(&b, x->valuestring, strlen(x->valuestring));
    }
    cJSON *s = b.oom ? NULL : cJSON_CreateString(b.p ? b.p : "");
    free(b.p);
    if (!s)
        oai__no_memory(err);
    return s;
}

static int add_msg(cJSON *msgs, const char *role, cJSON *content, oai_error *err)
{
    cJSON *m = cJSON_CreateObject();
    if (!m || !content || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddItemToObject(m, "content", content) || !cJSON_AddItemToArray(msgs, m)) {
        cJSON_Delete(m);
        return oai__no_memory(err);
    }
    return 0;
}

/* The chat body's messages from instructions and input. */
static int messages_of(const cJSON *root, cJSON *msgs, oai_error *err)
{
    const cJSON *ins = oai__get(root, "instructions"), *in = oai__get(root, "input");
    if (ins) {
        if (!cJSON_IsString(ins))
            return oai__bad_type(err, "instructions", "a string", ins);
        if (add_msg(msgs, "system", cJSON_CreateString(ins->valuestring), err))
            return err->status;
    }
    if (cJSON_IsString(in))
        return add_msg(msgs, "user", cJSON_CreateString(in->valuestring), err);
    if (!cJSON_IsArray(in))
        return in ? oai__bad_type(err, "input", "a string or a list of messages", in)
                  : oai_fail(err, 400, OAI_INVALID, "input", "input is required");
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, in) {
        const cJSON *type = oai__get(it, "type"), *role = oai__get(it, "role");
        if (!cJSON_IsObject(it) || (type && (!cJSON_IsString(type) ||
                                             strcmp(type->valuestring, "message"))) ||
            !cJSON_IsString(role))
            return oai_fail(err, 400, OAI_INVALID, "input",
                            "input[%d] must be a message {\"role\", \"content\"} (other item "
                            "types are not supported)", i);
        cJSON *c = content_of(oai__get(it, "content"), i, err);
        if (!c)
            return err->status;
        if (add_msg(msgs, role->valuestring, c, err)) /* the role is checked by oai_parse */
            return err->status;
        i++;
    }
    return 0;
}

/* text.format {"type": "json_schema", "name", "schema", "strict"} as chat's
 * response_format; {"type": "json_object"} and "text" likewise. */
static int format_of(const cJSON *root, cJSON *chat, oai_error *err)
{
    const cJSON *text = oai__get(root, "text");
    const cJSON *f = text ? oai__get(text, "format") : NULL;
    if (!f)
        return 0;
    const cJSON *type = oai__get(f, "type");
    if (!cJSON_IsObject(f) || !cJSON_IsString(type))
        return oai_fail(err, 400, OAI_INVALID, "text.format", "text.format must be an object "
                                                              "with a type");
    cJSON *rf = cJSON_CreateObject();
    if (!rf || !cJSON_AddItemToObject(chat, "response_format", rf))
        return cJSON_Delete(rf), oai__no_memory(err);
    cJSON_AddStringToObject(rf, "type", type->valuestring);
    if (!strcmp(type->valuestring, "json_schema")) {
        cJSON *js = cJSON_Duplicate(f, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(js, "type");
        if (!js || !cJSON_AddItemToObject(rf, "json_schema", js))
            return cJSON_Delete(js), oai__no_memory(err);
    }
    return 0;
}

int oai_parse_responses(const char *body, size_t len, const oai_limits *lim, oai_request *out,
                        oai_error *err)
{
    cJSON *root = NULL;
    int st = oai__parse_body(body, len, &root, err);
    if (st)
        return st;
    static const char *const copied[] = {"model", "temperature", "top_p", "stream", "user",
                                         "seed", "top_k", "min_p", "stop"};
    const cJSON *store = oai__get(root, "store"), *tools = oai__get(root, "tools");
    cJSON *chat = cJSON_CreateObject(), *msgs = cJSON_CreateArray();
    char *text = NULL;
    if (!chat || !msgs) {
        cJSON_Delete(msgs);
        st = oai__no_memory(err);
    } else if (cJSON_IsTrue(store) || oai__get(root, "previous_response_id")) {
        cJSON_Delete(msgs);
        st = oai_fail(err, 400, OAI_INVALID, store && cJSON_IsTrue(store) ? "store"
                                                                         : "previous_response_id",
                      "stored responses are not supported: send store false and the whole "
                      "conversation as input");
    } else if (cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0) {
        cJSON_Delete(msgs);
        st = oai_fail(err, 400, OAI_INVALID, "tools",
                      "tools are not supported on /v1/responses yet; use /v1/chat/completions");
    } else if (!cJSON_AddItemToObject(chat, "messages", msgs)) {
        cJSON_Delete(msgs);
        st = oai__no_memory(err);
    } else if (!(st = messages_of(root, msgs, err)) && !(st = format_of(root, chat, err))) {
        for (size_t i = 0; i < sizeof copied / sizeof *copied; i++) {
            const cJSON *v = oai__get(root, copied[i]);
            if (v)
                cJSON_AddItemToObject(chat, copied[i], cJSON_Duplicate(v, 1));
        }
        const cJSON *mo = oai__get(root, "max_output_tokens");
        if (mo)
            cJSON_AddItemToObject(chat, "max_tokens", cJSON_Duplicate(mo, 1));
        text = cJSON_PrintUnformatted(chat);
        st = text ? 0 : oai__no_memory(err);
    }
    cJSON_Delete(chat);
    cJSON_Delete(root);
    if (!st)
        st = oai_parse(OAI_CHAT, text, strlen(text), lim, out, err);
    free(text);
    return st;
}

/* ---- encoding --------------------------------------------------------------------- */

/* The Response object; text NULL: no output item yet (in progress). */
static void put_response(inf_buf *b, const oai_meta *m, const char *text, size_t len,
                         const char *finish, const oai_usage *u)
{
    int incomplete = finish && !strcmp(finish, "length");
    const char *status = !text ? "in_progress" : incomplete ? "incomplete" : "completed";
    inf_buf_printf(b, "{\"id\":\"%s\",\"object\":\"response\",\"created_at\":%ld,"
                      "\"status\":\"%s\",\"error\":null,\"incomplete_details\":%s,\"model\":",
                   m->id, m->created, status,
                   incomplete ? "{\"reason\":\"max_output_tokens\"}" : "null");
    json_esc_put(b, m->model, strlen(m->model));
    PUT(b, ",\"output\":[");
    if (text) {
        inf_buf_printf(b, "{\"type\":\"message\",\"id\":\"msg_%s\",\"status\":\"%s\","
                          "\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
                          "\"text\":",
                       m->id, incomplete ? "incomplete" : "completed");
        json_esc_put(b, text, len);
        PUT(b, ",\"annotations\":[]}]}");
    }
    PUT(b, "],\"usage\":");
    if (u)
        inf_buf_printf(b, "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},"
                          "\"output_tokens\":%d,\"output_tokens_details\":"
                          "{\"reasoning_tokens\":0},\"total_tokens\":%d}}",
                       u->prompt_tokens, u->cached_tokens, u->completion_tokens,
                       u->prompt_tokens + u->completion_tokens);
    else
        PUT(b, "null}");
}

char *oai_resp_json(const oai_meta *m, const char *text, size_t len, const char *finish,
                    const oai_usage *u)
{
    inf_buf b = {0};
    put_response(&b, m, text ? text : "", len, finish, u);
    if (b.oom)
        free(b.p), b.p = NULL;
    return b.p;
}

/* One event "event: TYPE\ndata: {...}\n\n" with the fields that follow
 * "type" and "sequence_number" in fmt. */
static void event(inf_buf *b, int *seq, const char *type)
{
    inf_buf_printf(b, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", type, type,
                   (*seq)++);
}

char *oai_resp_start_sse(const oai_meta *m, int *seq)
{
    inf_buf b = {0};
    static const char *const kinds[] = {"response.created", "response.in_progress"};
    for (int i = 0; i < 2; i++) {
        event(&b, seq, kinds[i]);
        PUT(&b, ",\"response\":");
        put_response(&b, m, NULL, 0, NULL, NULL);
        PUT(&b, "}\n\n");
    }
    event(&b, seq, "response.output_item.added");
    inf_buf_printf(&b, ",\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_%s\","
                       "\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n",
                   m->id);
    event(&b, seq, "response.content_part.added");
    inf_buf_printf(&b, ",\"item_id\":\"msg_%s\",\"output_index\":0,\"content_index\":0,"
                       "\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}\n\n",
                   m->id);
    if (b.oom)
        free(b.p), b.p = NULL;
    return b.p;
}

char *oai_resp_delta_sse(const oai_meta *m, int *seq, const char *delta, size_t len)
{
    inf_buf b = {0};
    event(&b, seq, "response.output_text.delta");
    inf_buf_printf(&b, ",\"item_id\":\"msg_%s\",\"output_index\":0,\"content_index\":0,"
                       "\"delta\":", m->id);
    json_esc_put(&b, delta, len);
    PUT(&b, "}\n\n");
    if (b.oom)
        free(b.p), b.p = NULL;
    return b.p;
}

char *oai_resp_end_sse(const oai_meta *m, int *seq, const char *text, size_t len,
                       const char *finish, const oai_usage *u)
{
    inf_buf b = {0};
    int incomplete = finish && !strcmp(finish, "length");
    event(&b, seq, "response.output_text.done");
    inf_buf_printf(&b, ",\"item_id\":\"msg_%s\",\"output_index\":0,\"content_index\":0,"
                       "\"text\":", m->id);
    json_esc_put(&b, text, len);
    PUT(&b, "}\n\n");
    event(&b, seq, "response.content_part.done");
    inf_buf_printf(&b, ",\"item_id\":\"msg_%s\",\"output_index\":0,\"content_index\":0,"
                       "\"part\":{\"type\":\"output_text\",\"text\":", m->id);
    json_esc_put(&b, text, len);
    PUT(&b, ",\"annotations\":[]}}\n\n");
    event(&b, seq, "response.output_item.done");
    inf_buf_printf(&b, ",\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_%s\","
                       "\"status\":\"%s\",\"role\":\"assistant\",\"content\":[{\"type\":"
                       "\"output_text\",\"text\":",
                   m->id, incomplete ? "incomplete" : "completed");
    json_esc_put(&b, text, len);
    PUT(&b, ",\"annotations\":[]}]}}\n\n");
    event(&b, seq, incomplete ? "response.incomplete" : "response.completed");
    PUT(&b, ",\"response\":");
    put_response(&b, m, text, len, finish, u);
    PUT(&b, "}\n\n");
    if (b.oom)
        free(b.p), b.p = NULL;
    return b.p;
}
