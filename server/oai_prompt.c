/* oai_: completions' prompts and chat messages. */
#include "server/oai_int.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_ids(const cJSON *arr, oai_prompt *p, oai_error *err)
{
    const cJSON *it;
    int n = cJSON_GetArraySize(arr);

    if (n == 0)
        return oai_fail(err, 400, OAI_INVALID, "prompt",
                        "prompt must not hold an empty list of token ids, got []");
    p->ids = malloc((size_t)n * sizeof *p->ids);
    if (!p->ids)
        return oai__no_memory(err);
    cJSON_ArrayForEach(it, arr) {
        int rc = oai__want_id(it, "prompt", "prompt token ids", &p->ids[p->n_ids], err);
        if (rc)
            return rc;
        p->n_ids++;
    }
    return 0;
}

/* A string, a list of strings, a list of token ids, or a list of lists of
 * token ids; the shape is fixed by the first element. */
int oai__parse_prompt(const cJSON *o, const oai_limits *lim, oai_request *r,
                        oai_error *err)
{
    static const char shapes[] = "a string, a list of strings, a list of token "
                                 "ids or a list of lists of token ids";
    const cJSON *v = oai__get(o, "prompt"), *it;
    int n;

    if (!v)
        return oai_fail(err, 400, OAI_INVALID, "prompt",
                        "prompt is required: expected %s", shapes);
    if (!cJSON_IsString(v) && !cJSON_IsArray(v))
        return oai__bad_type(err, "prompt", shapes, v);
    n = cJSON_IsString(v) ? 1 : cJSON_GetArraySize(v);
    if (n == 0)
        return oai_fail(err, 400, OAI_INVALID, "prompt",
                        "prompt must not be empty, got []");
    if (cJSON_IsArray(v) && cJSON_IsNumber(v->child))
        n = 1; /* one flat prompt of token ids */
    if (n > lim->max_prompts)
        return oai_fail(err, 400, OAI_INVALID, "prompt",
                        "prompt must hold at most %d prompts, got %d",
                        lim->max_prompts, n);
    r->prompts = calloc((size_t)n, sizeof *r->prompts);
    if (!r->prompts)
        return oai__no_memory(err);
    if (cJSON_IsString(v) || cJSON_IsNumber(v->child)) {
        r->n_prompts = 1;
        if (cJSON_IsNumber(v->child))
            return parse_ids(v, &r->prompts[0], err);
        r->prompts[0].text = strdup(v->valuestring);
        return r->prompts[0].text ? 0 : oai__no_memory(err);
    }
    int strings = cJSON_IsString(v->child);
    if (!strings && !cJSON_IsArray(v->child))
        return oai_fail(err, 400, OAI_INVALID, "prompt",
                        "prompt must be %s, got a list of %s", shapes,
                        oai__json_type(v->child));
    cJSON_ArrayForEach(it, v) {
        oai_prompt *p = &r->prompts[r->n_prompts++];
        if (strings && cJSON_IsString(it)) {
            p->text = strdup(it->valuestring);
            if (!p->text)
                return oai__no_memory(err);
        } else if (!strings && cJSON_IsArray(it)) {
            int rc = parse_ids(it, p, err);
            if (rc)
                return rc;
        } else {
            return oai_fail(err, 400, OAI_INVALID, "prompt",
                            "prompt must be %s, got a list mixing %s and %s",
                            shapes, oai__json_type(v->child), oai__json_type(it));
        }
    }
    return 0;
}

/* Content parts: {"type":"text","text":...} only, joined with "\n". */
static int parse_parts(const cJSON *parts, int i, char **out, oai_error *err)
{
    const cJSON *it;
    size_t total = 0;
    int j = 0;
    char param[64];

    cJSON_ArrayForEach(it, parts) {
        if (!cJSON_IsObject(it)) {
            snprintf(param, sizeof param, "messages.[%d].content.[%d]", i, j);
            return oai_fail(err, 400, OAI_INVALID, param,
                            "messages[%d].content[%d] must be an object, got %s",
                            i, j, oai__json_type(it));
        }
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(it, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text")) {
            snprintf(param, sizeof param, "messages.[%d].content.[%d].type", i, j);
            if (!cJSON_IsString(type))
                return oai_fail(err, 400, OAI_INVALID, param,
                                "messages[%d].content[%d].type must be \"text\", "
                                "got %s", i, j, type ? oai__json_type(type) : "nothing");
            char got[96];
            oai__echo_str(type->valuestring, got, sizeof got);
            return oai_fail(err, 400, OAI_INVALID, param,
                            "messages[%d].content[%d].type must be \"text\" "
                            "(other content types are not supported), got %s",
                            i, j, got);
        }
        if (!cJSON_IsString(text)) {
            snprintf(param, sizeof param, "messages.[%d].content.[%d].text", i, j);
            return oai_fail(err, 400, OAI_INVALID, param,
                            "messages[%d].content[%d].text must be a string, "
                            "got %s", i, j, text ? oai__json_type(text) : "nothing");
        }
        total += strlen(text->valuestring) + 1;
        j++;
    }
    char *s = malloc(total + 1), *w = s;
    if (!s)
        return oai__no_memory(err);
    j = 0;
    cJSON_ArrayForEach(it, parts) {
        const char *t = cJSON_GetObjectItemCaseSensitive(it, "text")->valuestring;
        size_t n = strlen(t);
        if (j++)
            *w++ = '\n';
        memcpy(w, t, n);
        w += n;
    }
    *w = '\0';
    *out = s;
    return 0;
}

static int parse_message(const cJSON *m, int i, oai_message *out, oai_error *err)
{
    char param[64];
    const char *role;

    if (!cJSON_IsObject(m)) {
        snprintf(param, sizeof param, "messages.[%d]", i);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "messages[%d] must be an object, got %s", i, oai__json_type(m));
    }
    const cJSON *rv = cJSON_GetObjectItemCaseSensitive(m, "role");
    snprintf(param, sizeof param, "messages.[%d].role", i);
    if (!cJSON_IsString(rv))
        return oai_fail(err, 400, OAI_INVALID, param,
                        "messages[%d].role must be one of \"system\", \"developer\", "
                        "\"user\", \"assistant\", \"tool\", got %s", i,
                        rv ? oai__json_type(rv) : "nothing");
    role = rv->valuestring;
    if (!strcmp(role, "developer"))
        role = "system"; /* OpenAI's newer name for the system role */
    if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
        strcmp(role, "tool")) {
        char got[96];
        oai__echo_str(role, got, sizeof got);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "messages[%d].role must be one of \"system\", \"developer\", "
                        "\"user\", \"assistant\", \"tool\", got %s", i, got);
    }
    const cJSON *tc = oai__get(m, "tool_calls");
    if (tc && (!cJSON_IsArray(tc) || strcmp(role, "assistant"))) {
        snprintf(param, sizeof param, "messages.[%d].tool_calls", i);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "messages[%d].tool_calls must be a list, on an assistant message", i);
    }
    out->role = strdup(role);
    if (!out->role)
        return oai__no_memory(err);

    /* Only an assistant turn may come without content (null or absent). */
    const cJSON *raw = cJSON_GetObjectItemCaseSensitive(m, "content");
    const cJSON *c = oai__get(m, "content");
    if (!c && !strcmp(role, "assistant")) {
        out->content = strdup("");
    } else if (cJSON_IsString(c)) {
        out->content = strdup(c->valuestring);
    } else if (cJSON_IsArray(c)) {
        return parse_parts(c, i, &out->content, err);
    } else {
        snprintf(param, sizeof param, "messages.[%d].content", i);
        return oai_fail(err, 400, OAI_INVALID, param,
                        "messages[%d].content must be a string or a list of "
                        "text parts, got %s", i, raw ? oai__json_type(raw) : "nothing");
    }
    return out->content ? 0 : oai__no_memory(err);
}

int oai__parse_messages(const cJSON *o, oai_request *r, oai_error *err)
{
    const cJSON *v = oai__get(o, "messages"), *it;
    int n, i = 0;

    if (!v)
        return oai_fail(err, 400, OAI_INVALID, "messages",
                        "messages is required: expected a non-empty list of "
                        "messages");
    if (!cJSON_IsArray(v))
        return oai__bad_type(err, "messages", "a non-empty list of messages", v);
    n = cJSON_GetArraySize(v);
    if (n == 0)
        return oai_fail(err, 400, OAI_INVALID, "messages",
                        "messages must be a non-empty list of messages, got []");
    r->messages = calloc((size_t)n, sizeof *r->messages);
    /* the messages as sent, for a Jinja chat template */
    if (!r->messages || !(r->messages_json = cJSON_PrintUnformatted(v)))
        return oai__no_memory(err);
    cJSON_ArrayForEach(it, v) {
        r->n_messages = i + 1; /* so a failure frees what this one holds */
        int rc = parse_message(it, i, &r->messages[i], err);
        if (rc)
            return rc;
        i++;
    }
    return 0;
}

/* The chat template's extra inputs: tools and documents (lists),
 * chat_template_kwargs (an object), kept as JSON text;
 * continue_final_message excludes add_generation_prompt (vLLM). */
int oai__parse_template_inputs(const cJSON *o, oai_request *r, oai_error *err)
{
    static const struct {
        const char *key;
        size_t off;
        int object;
    } f[] = {
        {"tools", offsetof(oai_request, tools_json), 0},
        {"documents", offsetof(oai_request, documents_json), 0},
        {"chat_template_kwargs", offsetof(oai_request, chat_template_kwargs_json), 1},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        const cJSON *v = oai__get(o, f[i].key);
        if (!v)
            continue;
        if (f[i].object ? !cJSON_IsObject(v) : !cJSON_IsArray(v))
            return oai__bad_type(err, f[i].key, f[i].object ? "an object" : "a list", v);
        char **dst = (char **)((char *)r + f[i].off);
        if (!(*dst = cJSON_PrintUnformatted(v)))
            return oai__no_memory(err);
    }
    if (r->continue_final_message && r->add_generation_prompt)
        return oai_fail(err, 400, OAI_INVALID, "continue_final_message",
                        "Cannot set both `continue_final_message` and `add_generation_prompt` "
                        "to True.");
    return 0;
}
