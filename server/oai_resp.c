/* oai_: OpenAI's Responses API (POST /v1/responses), stateless, mapped
 * onto chat: the body becomes a chat body that oai_parse validates (input
 * items as messages, text.format as response_format, the flat function
 * tools as chat's); oai_resp_enc.c encodes the output. */
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

/* A function_call input item {"call_id", "name", "arguments"} as a tool call
 * of an assistant turn: consecutive calls share one (*calls, its list). */
static int function_call(const cJSON *it, int i, cJSON *msgs, cJSON **calls, oai_error *err)
{
    const cJSON *id = oai__get(it, "call_id"), *name = oai__get(it, "name"),
                *args = oai__get(it, "arguments");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
        return oai_fail(err, 400, OAI_INVALID, "input",
                        "input[%d]: a function_call needs call_id, name and arguments (strings)",
                        i);
    if (!*calls) {
        cJSON *m = cJSON_CreateObject();
        if (!m || !cJSON_AddItemToArray(msgs, m)) {
            cJSON_Delete(m);
            return oai__no_memory(err);
        }
        if (!cJSON_AddStringToObject(m, "role", "assistant") ||
            !cJSON_AddStringToObject(m, "content", "") ||
            !(*calls = cJSON_AddArrayToObject(m, "tool_calls")))
            return oai__no_memory(err);
    }
    cJSON *c = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    if (!c || !fn || !cJSON_AddItemToArray(*calls, c)) {
        cJSON_Delete(c);
        cJSON_Delete(fn);
        return oai__no_memory(err);
    }
    if (!cJSON_AddStringToObject(c, "id", id->valuestring) ||
        !cJSON_AddStringToObject(c, "type", "function") ||
        !cJSON_AddItemToObject(c, "function", fn)) {
        cJSON_Delete(fn);
        return oai__no_memory(err);
    }
    if (!cJSON_AddStringToObject(fn, "name", name->valuestring) ||
        !cJSON_AddStringToObject(fn, "arguments", args->valuestring))
        return oai__no_memory(err);
    return 0;
}

/* A function_call_output item {"call_id", "output"} as a tool message. */
static int function_output(const cJSON *it, int i, cJSON *msgs, oai_error *err)
{
    const cJSON *id = oai__get(it, "call_id"), *out = oai__get(it, "output");
    if (!cJSON_IsString(id) || !cJSON_IsString(out))
        return oai_fail(err, 400, OAI_INVALID, "input",
                        "input[%d]: a function_call_output needs call_id and output (strings)",
                        i);
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddItemToArray(msgs, m)) {
        cJSON_Delete(m);
        return oai__no_memory(err);
    }
    if (!cJSON_AddStringToObject(m, "role", "tool") ||
        !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring) ||
        !cJSON_AddStringToObject(m, "content", out->valuestring))
        return oai__no_memory(err);
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
    cJSON *calls = NULL; /* the assistant turn consecutive function_call items make */
    cJSON_ArrayForEach(it, in) {
        const cJSON *type = oai__get(it, "type"), *role = oai__get(it, "role");
        const char *ty = cJSON_IsString(type) ? type->valuestring : NULL;
        if (cJSON_IsObject(it) && ty && !strcmp(ty, "function_call")) {
            if (function_call(it, i++, msgs, &calls, err))
                return err->status;
            continue;
        }
        calls = NULL;
        if (cJSON_IsObject(it) && ty && !strcmp(ty, "function_call_output")) {
            if (function_output(it, i++, msgs, err))
                return err->status;
            continue;
        }
        if (!cJSON_IsObject(it) || (type && (!ty || strcmp(ty, "message"))) ||
            !cJSON_IsString(role))
            return oai_fail(err, 400, OAI_INVALID, "input",
                            "input[%d] must be a message {\"role\", \"content\"}, a "
                            "function_call or a function_call_output (other item types are not "
                            "supported)", i);
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

/* tools [{"type": "function", "name", "description", "parameters",
 * "strict"}] as chat's {"type": "function", "function": {...}}, and
 * tool_choice {"type": "function", "name"} as chat's named choice. */
static int tools_of(const cJSON *root, cJSON *chat, oai_error *err)
{
    const cJSON *tools = oai__get(root, "tools"), *tc = oai__get(root, "tool_choice");
    if (tools) {
        if (!cJSON_IsArray(tools))
            return oai__bad_type(err, "tools", "a list", tools);
        cJSON *list = cJSON_AddArrayToObject(chat, "tools");
        if (!list)
            return oai__no_memory(err);
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *type = oai__get(t, "type");
            if (!cJSON_IsObject(t) || !cJSON_IsString(type) ||
                strcmp(type->valuestring, "function"))
                return oai_fail(err, 400, OAI_INVALID, "tools",
                                "tools[%d] must be {\"type\": \"function\", \"name\", "
                                "\"parameters\"} (other tool types are not supported)", i);
            cJSON *fn = cJSON_Duplicate(t, 1), *w = cJSON_CreateObject();
            if (fn)
                cJSON_DeleteItemFromObjectCaseSensitive(fn, "type");
            if (!fn || !w || !cJSON_AddItemToArray(list, w)) {
                cJSON_Delete(fn);
                cJSON_Delete(w);
                return oai__no_memory(err);
            }
            if (!cJSON_AddStringToObject(w, "type", "function") ||
                !cJSON_AddItemToObject(w, "function", fn)) {
                cJSON_Delete(fn);
                return oai__no_memory(err);
            }
            i++;
        }
    }
    if (!tc)
        return 0;
    cJSON *c;
    if (cJSON_IsObject(tc)) {
        const cJSON *type = oai__get(tc, "type"), *name = oai__get(tc, "name");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsString(name))
            return oai_fail(err, 400, OAI_INVALID, "tool_choice",
                            "tool_choice must be \"none\", \"auto\", \"required\" or "
                            "{\"type\": \"function\", \"name\": ...}");
        c = cJSON_CreateObject();
        cJSON *fn = c ? cJSON_AddObjectToObject(c, "function") : NULL;
        if (!fn || !cJSON_AddStringToObject(c, "type", "function") ||
            !cJSON_AddStringToObject(fn, "name", name->valuestring)) {
            cJSON_Delete(c);
            return oai__no_memory(err);
        }
    } else {
        c = cJSON_Duplicate(tc, 1);
    }
    if (!c || !cJSON_AddItemToObject(chat, "tool_choice", c)) {
        cJSON_Delete(c);
        return oai__no_memory(err);
    }
    return 0;
}

static int name_char(char c) { return c == '_' || (c >= 'a' && c <= 'z'); }

/* Replaces the whole-word from with to in s (capacity cap), as room allows. */
static void rename_word(char *s, size_t cap, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to);
    char *p = s;
    while ((p = strstr(p, from))) {
        if ((p > s && name_char(p[-1])) || name_char(p[fl])) {
            p += fl;
            continue;
        }
        size_t rest = strlen(p + fl);
        if ((size_t)(p - s) + tl + rest + 1 > cap)
            return;
        memmove(p + tl, p + fl, rest + 1);
        memcpy(p, to, tl);
        p += tl;
    }
}

void oai_resp_rename_error(oai_error *err)
{
    static const char *const names[][2] = {
        {"max_completion_tokens", "max_output_tokens"}, {"max_tokens", "max_output_tokens"},
        {"response_format", "text.format"}, {"messages", "input"}};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        rename_word(err->param, sizeof err->param, names[k][0], names[k][1]);
        rename_word(err->message, sizeof err->message, names[k][0], names[k][1]);
    }
}

int oai_parse_responses(const char *body, size_t len, const oai_limits *lim, oai_request *out,
                        oai_error *err)
{
    cJSON *root = NULL;
    int st = oai__parse_body(body, len, &root, err);
    if (st)
        return st;
    static const char *const copied[] = {"model", "temperature", "top_p", "stream", "user",
                                         "seed", "top_k", "min_p", "stop",
                                         "parallel_tool_calls", "logit_bias"};
    const cJSON *store = oai__get(root, "store");
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
    } else if (!cJSON_AddItemToObject(chat, "messages", msgs)) {
        cJSON_Delete(msgs);
        st = oai__no_memory(err);
    } else if (!(st = messages_of(root, msgs, err)) && !(st = format_of(root, chat, err)) &&
               !(st = tools_of(root, chat, err))) {
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
    if (!st && (st = oai_parse(OAI_CHAT, text, strlen(text), lim, out, err)))
        oai_resp_rename_error(err);
    free(text);
    return st;
}
