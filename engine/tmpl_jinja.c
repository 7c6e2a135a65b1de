/* tmpl_jx: a model's Jinja chat template with vLLM's inputs.
 *
 * vLLM (entrypoints/chat_utils.py) rebuilds each message before rendering:
 * role; content as a string (text parts joined with "\n", null as "") or,
 * when the template loops over a message's content ("openai" format), as
 * a list of parts ({"type": "text", "text": ...}; a string becomes one
 * part, null none); tool_calls for the assistant with each
 * function.arguments turned from a JSON string into a mapping; tool_call_id
 * for tool messages; name when a string. reasoning_content is passed
 * through for templates that replay it (Qwen 3, DeepSeek). Hugging Face
 * then renders with messages, tools and documents (None when absent),
 * add_generation_prompt, the special tokens and chat_template_kwargs; with
 * continue_final_message it cuts the text after the final message's
 * content. */
#include "tmpl_jinja.h"

#include <stdlib.h>
#include <string.h>

#include "jinja.h"

struct tmpl_jx {
    jinja_tmpl *t, *tools_t; /* the default template, and "tool_use" or NULL */
    cJSON *special;          /* {"bos_token": ..., ...}                       */
};

static const char *const SPECIAL[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                      "pad_token", "cls_token", "mask_token", NULL};

/* Names HF passes itself: chat_template_kwargs cannot replace them. */
static const char *const RESERVED[] = {"messages", "tools", "documents", "add_generation_prompt",
                                       "continue_final_message", "chat_template", "tokenize",
                                       "return_dict", NULL};

static int nomem(inf_err *err)
{
    return inf_fail(err, INF_ERR_NOMEM, "chat template: out of memory");
}

static int parse_one(const char *src, const char *from, jinja_tmpl **out, inf_err *err)
{
    inf_err e = {0};
    int rc = jinja_parse(src, strlen(src), out, &e);
    if (rc)
        return inf_fail(err, rc, "chat template in %s: %s", from, e.msg);
    return INF_OK;
}

int tmpl_jx_create(const char *src, const char *tools_src, const cJSON *config, const char *from,
                   tmpl_jx **out, inf_err *err)
{
    tmpl_jx *j = calloc(1, sizeof *j);
    int rc;
    *out = NULL;
    if (!j || !(j->special = cJSON_CreateObject())) {
        free(j);
        return nomem(err);
    }
    if ((rc = parse_one(src, from, &j->t, err)) ||
        (tools_src && (rc = parse_one(tools_src, from, &j->tools_t, err)))) {
        tmpl_jx_destroy(j);
        return rc;
    }
    for (int i = 0; config && SPECIAL[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, SPECIAL[i]);
        if (cJSON_IsObject(v))
            v = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(v) && !cJSON_AddStringToObject(j->special, SPECIAL[i], v->valuestring)) {
            tmpl_jx_destroy(j);
            return nomem(err);
        }
    }
    const cJSON *extra = config ? cJSON_GetObjectItemCaseSensitive(config,
                                                                   "additional_special_tokens")
                                : NULL;
    if (cJSON_IsArray(extra)) {
        cJSON *list = cJSON_CreateArray(), *it;
        cJSON_AddItemToObject(j->special, "additional_special_tokens", list);
        cJSON_ArrayForEach(it, extra) {
            const cJSON *s = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "content")
                                                : it;
            if (cJSON_IsString(s))
                cJSON_AddItemToArray(list, cJSON_CreateString(s->valuestring));
        }
    }
    *out = j;
    return INF_OK;
}

void tmpl_jx_destroy(tmpl_jx *j)
{
    if (!j)
        return;
    jinja_destroy(j->t);
    jinja_destroy(j->tools_t);
    cJSON_Delete(j->special);
    free(j);
}

const char *tmpl_jx_token(const tmpl_jx *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j->special, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Parses text as JSON (NULL text: absent). */
static int parse_json(const char *text, const char *what, cJSON **out, inf_err *err)
{
    *out = NULL;
    if (!text)
        return INF_OK;
    if (!(*out = cJSON_Parse(text)))
        return inf_fail(err, INF_ERR_INVALID, "chat template: %s is not valid JSON", what);
    return INF_OK;
}

/* The content vLLM hands the template. */
static int content_for(const cJSON *c, int openai, int i, cJSON **out, inf_err *err)
{
    *out = NULL;
    if (openai) {
        cJSON *parts = cJSON_CreateArray();
        if (!parts)
            return nomem(err);
        *out = parts;
        if (cJSON_IsString(c)) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddItemToArray(parts, p);
            cJSON_AddStringToObject(p, "type", "text");
            cJSON_AddStringToObject(p, "text", c->valuestring);
        } else if (cJSON_IsArray(c)) {
            const cJSON *it;
            cJSON_ArrayForEach(it, c) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(it, "text");
                cJSON *p = cJSON_CreateObject();
                cJSON_AddItemToArray(parts, p);
                cJSON_AddStringToObject(p, "type", cJSON_IsString(type) ? type->valuestring : "text");
                if (cJSON_IsString(text))
                    cJSON_AddStringToObject(p, "text", text->valuestring);
            }
        }
        return INF_OK;
    }
    if (cJSON_IsString(c) || !c || cJSON_IsNull(c)) {
        *out = cJSON_CreateString(cJSON_IsString(c) ? c->valuestring : "");
        return *out ? INF_OK : nomem(err);
    }
    if (!cJSON_IsArray(c))
        return inf_fail(err, INF_ERR_INVALID,
                        "chat template: messages[%d].content must be a string, a list of parts "
                        "or null", i);
    size_t total = 1;
    const cJSON *it;
    cJSON_ArrayForEach(it, c) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(it, "text");
        if (cJSON_IsString(text))
            total += strlen(text->valuestring) + 1;
    }
    char *s = malloc(total), *w = s;
    if (!s)
        return nomem(err);
    int first = 1;
    cJSON_ArrayForEach(it, c) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(it, "text");
        if (!cJSON_IsString(text))
            continue;
        if (!first)
            *w++ = '\n';
        first = 0;
        size_t n = strlen(text->valuestring);
        memcpy(w, text->valuestring, n);
        w += n;
    }
    *w = 0;
    *out = cJSON_CreateString(s);
    free(s);
    return *out ? INF_OK : nomem(err);
}

/* Each tool call's function.arguments a mapping (vLLM's
 * _postprocess_messages: json.loads of the string). */
static int tool_calls_in_place(cJSON *calls, int i, inf_err *err)
{
    cJSON *call;
    int k = 0;
    cJSON_ArrayForEach(call, calls) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        cJSON *args = fn ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
        if (cJSON_IsString(args)) {
            cJSON *parsed = cJSON_Parse(args->valuestring);
            if (!parsed)
                return inf_fail(err, INF_ERR_INVALID,
                                "messages[%d].tool_calls[%d].function.arguments is not valid "
                                "JSON", i, k);
            cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed);
        }
        k++;
    }
    return INF_OK;
}

/* Keys a message keeps (vLLM rebuilds each message from these). */
static int kept_key(const char *k, const char *role)
{
    return !strcmp(k, "role") || !strcmp(k, "content") || !strcmp(k, "name") ||
           !strcmp(k, "reasoning_content") ||
           (!strcmp(k, "tool_calls") && !strcmp(role, "assistant")) ||
           (!strcmp(k, "tool_call_id") && !strcmp(role, "tool"));
}

/* Rewrites the parsed messages in place into what vLLM hands the
 * template (no copies of the texts that stay as they are). */
static int conversation(cJSON *msgs, int openai, inf_err *err)
{
    cJSON *m;
    int i = 0, rc = INF_OK;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return inf_fail(err, INF_ERR_INVALID, "chat template: messages[%d] needs a role", i);
        for (cJSON *k = m->child, *next; k; k = next) {
            next = k->next;
            if (!kept_key(k->string, role->valuestring) ||
                (!strcmp(k->string, "name") && !cJSON_IsString(k)) ||
                (!strcmp(k->string, "reasoning_content") && !cJSON_IsString(k)) ||
                (!strcmp(k->string, "tool_call_id") && !cJSON_IsString(k)) ||
                (!strcmp(k->string, "tool_calls") && !cJSON_IsArray(k)))
                cJSON_Delete(cJSON_DetachItemViaPointer(m, k));
        }
        cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (openai || !cJSON_IsString(c)) {
            cJSON *nc;
            if ((rc = content_for(c, openai, i, &nc, err)))
                return rc;
            if (c)
                cJSON_ReplaceItemInObjectCaseSensitive(m, "content", nc);
            else
                cJSON_AddItemToObject(m, "content", nc);
        }
        cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (tc && (rc = tool_calls_in_place(tc, i, err)))
            return rc;
        i++;
    }
    return INF_OK;
}

static int reserved(const char *k)
{
    for (int i = 0; RESERVED[i]; i++)
        if (!strcmp(RESERVED[i], k))
            return 1;
    return 0;
}

/* The text of the final message (its last text part for a list). */
static const char *final_text(const cJSON *msgs)
{
    const cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(last, "content"), *t = NULL;
    if (cJSON_IsString(c))
        return c->valuestring;
    for (const cJSON *it = cJSON_IsArray(c) ? c->child : NULL; it; it = it->next)
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, "text")))
            t = cJSON_GetObjectItemCaseSensitive(it, "text");
    return t ? t->valuestring : NULL;
}

static int is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

/* HF's continue_final_message: cut after the final message's content (its
 * trailing whitespace too when the template kept it). */
static int cut_final(const cJSON *msgs, char *text, size_t *len, inf_err *err)
{
    const char *fm = final_text(msgs);
    if (!fm)
        return inf_fail(err, INF_ERR_INVALID,
                        "continue_final_message is set but the final message has no text");
    size_t b = 0, e = strlen(fm);
    while (b < e && is_ws(fm[b]))
        b++;
    while (e > b && is_ws(fm[e - 1]))
        e--;
    size_t n = e - b;
    const char *at = NULL;
    for (const char *p = text; n && (p = memmem(p, *len - (size_t)(p - text), fm + b, n)); p++)
        at = p;
    if (!at && n)
        return inf_fail(err, INF_ERR_INVALID,
                        "continue_final_message is set but the final message does not appear "
                        "in the chat after applying the chat template");
    if (!n)
        return INF_OK;
    size_t keep = (size_t)(at - text) + n, full = strlen(fm) - b;
    if ((size_t)(at - text) + full <= *len && memcmp(at, fm + b, full) == 0)
        keep = (size_t)(at - text) + full;
    *len = keep;
    text[keep] = 0;
    return INF_OK;
}

int tmpl_jx_render(const tmpl_jx *j, const tmpl_chat *chat, char **text, size_t *len,
                   inf_err *err)
{
    cJSON *msgs = NULL, *tools = NULL, *docs = NULL, *kw = NULL, *vars = NULL, *conv = NULL;
    int rc;
    *text = NULL;
    if (!chat->messages_json)
        return inf_fail(err, INF_ERR_INVALID, "chat template: no messages");
    if ((rc = parse_json(chat->messages_json, "messages", &msgs, err)) ||
        (rc = parse_json(chat->tools_json, "tools", &tools, err)) ||
        (rc = parse_json(chat->documents_json, "documents", &docs, err)) ||
        (rc = parse_json(chat->kwargs_json, "chat_template_kwargs", &kw, err)))
        goto done;
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        rc = inf_fail(err, INF_ERR_INVALID, "chat template: messages must be a non-empty list");
        goto done;
    }
    const jinja_tmpl *t = tools && !cJSON_IsNull(tools) && j->tools_t ? j->tools_t : j->t;
    rc = INF_ERR_NOMEM;
    if (!(vars = cJSON_CreateObject()))
        goto nomem;
    if ((rc = conversation(msgs, jinja_iterates_content(t), err)))
        goto done;
    conv = msgs; /* vars owns them from here */
    msgs = NULL;
    cJSON_AddItemToObject(vars, "messages", conv);
    cJSON_AddItemToObject(vars, "tools", tools ? tools : cJSON_CreateNull());
    cJSON_AddItemToObject(vars, "documents", docs ? docs : cJSON_CreateNull());
    tools = docs = NULL;
    cJSON_AddBoolToObject(vars, "add_generation_prompt", chat->add_generation_prompt != 0);
    for (const cJSON *s = j->special->child; s; s = s->next)
        cJSON_AddItemToObject(vars, s->string, cJSON_Duplicate(s, 1));
    if (kw && !cJSON_IsObject(kw)) {
        rc = inf_fail(err, INF_ERR_INVALID, "chat_template_kwargs must be an object");
        goto done;
    }
    for (const cJSON *k = kw ? kw->child : NULL; k; k = k->next) {
        if (reserved(k->string))
            continue;
        cJSON_DeleteItemFromObjectCaseSensitive(vars, k->string);
        cJSON_AddItemToObject(vars, k->string, cJSON_Duplicate(k, 1));
    }
    jinja_opts o = jinja_opts_default();
    inf_err e = {0};
    rc = jinja_render(t, vars, &o, text, len, &e);
    if (rc) {
        inf_fail(err, rc, "%s", e.msg);
        goto done;
    }
    if (chat->continue_final_message && (rc = cut_final(conv, *text, len, err))) {
        free(*text);
        *text = NULL;
    }
    goto done;
nomem:
    nomem(err);
done:
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    cJSON_Delete(docs);
    cJSON_Delete(kw);
    cJSON_Delete(vars);
    return rc;
}
