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
    char *special_json;      /* special as JSON text, for each render's vars  */
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
    if (!(j->special_json = cJSON_PrintUnformatted(j->special))) {
        tmpl_jx_destroy(j);
        return nomem(err);
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
    free(j->special_json);
    free(j);
}

const char *tmpl_jx_token(const tmpl_jx *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j->special, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

/* HF's continue_final_message: cut after the final message's content (its
 * trailing whitespace too when the template kept it). */
static int cut_final(const jinja_vars *v, char *text, size_t *len, inf_err *err)
{
    size_t fl;
    const char *fm = jinja_vars_final_text(v, &fl);
    if (!fm)
        return inf_fail(err, INF_ERR_INVALID,
                        "continue_final_message is set but the final message has no text");
    size_t b = 0, e = fl;
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
    size_t keep = (size_t)(at - text) + n, full = fl - b;
    if ((size_t)(at - text) + full <= *len && memcmp(at, fm + b, full) == 0)
        keep = (size_t)(at - text) + full;
    *len = keep;
    text[keep] = 0;
    return INF_OK;
}

/* Whether a field's JSON text is absent or null (the tools template is
 * for requests with tools). */
static int absent(const char *json)
{
    if (!json)
        return 1;
    while (is_ws(*json))
        json++;
    return !strncmp(json, "null", 4);
}

static int set_opt(jinja_vars *v, const char *name, const char *json, inf_err *err)
{
    return jinja_vars_set_json(v, name, json ? json : "null", json ? strlen(json) : 4, err);
}

int tmpl_jx_render(const tmpl_jx *j, const tmpl_chat *chat, char **text, size_t *len,
                   inf_err *err)
{
    jinja_vars *v = NULL;
    jinja_opts o = jinja_opts_default();
    inf_err e = {0};
    int rc;
    *text = NULL;
    if (!chat->messages_json)
        return inf_fail(err, INF_ERR_INVALID, "chat template: no messages");
    const jinja_tmpl *t = !absent(chat->tools_json) && j->tools_t ? j->tools_t : j->t;
    if (jinja_vars_create(&o, &v))
        return nomem(err);
    if ((rc = jinja_vars_set_members(v, j->special_json, strlen(j->special_json), NULL, err)) ||
        (rc = jinja_vars_set_messages(v, chat->messages_json, strlen(chat->messages_json),
                                      jinja_iterates_content(t), err)) ||
        (rc = set_opt(v, "tools", chat->tools_json, err)) ||
        (rc = set_opt(v, "documents", chat->documents_json, err)) ||
        (rc = jinja_vars_set_bool(v, "add_generation_prompt", chat->add_generation_prompt, err)))
        goto done;
    if (chat->kwargs_json &&
        (rc = jinja_vars_set_members(v, chat->kwargs_json, strlen(chat->kwargs_json), RESERVED,
                                     &e))) {
        rc = inf_fail(err, rc, "chat_template_kwargs must be an object (%s)", e.msg);
        goto done;
    }
    if ((rc = jinja_render_vars(t, v, &o, text, len, &e))) {
        inf_fail(err, rc, "%s", e.msg);
        goto done;
    }
    if (chat->continue_final_message && (rc = cut_final(v, *text, len, err))) {
        free(*text);
        *text = NULL;
    }
done:
    jinja_vars_destroy(v);
    return rc;
}
