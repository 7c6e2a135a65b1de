/* oai_: response bodies and stream chunks.
 *
 * Encoding builds cJSON trees but writes every string through json_esc
 * (as cJSON raw items): token pieces may be partial UTF-8 or hold a NUL
 * byte, and cJSON's printer neither validates UTF-8 nor sees past NUL. */
#include "server/oai_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_esc.h"

/* Puts item under key in an object (or appends it to an array when key is
 * NULL); takes item, frees it on failure; -1 when item is NULL or not added. */
static int attach(cJSON *parent, const char *key, cJSON *item)
{
    if (!item)
        return -1;
    if (key ? !cJSON_AddItemToObject(parent, key, item)
            : !cJSON_AddItemToArray(parent, item)) {
        cJSON_Delete(item);
        return -1;
    }
    return 0;
}

cJSON *oai__str_item(const char *s, size_t n)
{
    inf_buf b = {0};
    cJSON *item = NULL;

    json_esc_put(&b, s ? s : "", s ? n : 0);
    if (!b.oom)
        item = cJSON_CreateRaw(b.p);
    free(b.p);
    return item;
}

static cJSON *cstr_item(const char *s)
{
    return oai__str_item(s, s ? strlen(s) : 0);
}

/* A logprob as the shortest text that reads back as the same float; NAN
 * (a first prompt token) is null, -inf is -9999.0 as vLLM writes it. */
static void fmt_lp(float lp, char *buf, size_t n)
{
    if (isinf(lp) && lp < 0)
        lp = -9999.0f;
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)lp);
        if (strtof(buf, NULL) == lp)
            return;
    }
}

static cJSON *lp_item(float lp)
{
    char buf[32];

    if (isnan(lp) || (isinf(lp) && lp > 0))
        return cJSON_CreateNull();
    fmt_lp(lp, buf, sizeof buf);
    return cJSON_CreateRaw(buf);
}

static cJSON *usage_item(const oai_usage *u)
{
    cJSON *o = cJSON_CreateObject(), *d = NULL;

    if (!o ||
        attach(o, "prompt_tokens", cJSON_CreateNumber(u->prompt_tokens)) ||
        attach(o, "completion_tokens", cJSON_CreateNumber(u->completion_tokens)) ||
        attach(o, "total_tokens",
               cJSON_CreateNumber((double)u->prompt_tokens + u->completion_tokens)) ||
        attach(o, "prompt_tokens_details", d = cJSON_CreateObject()) ||
        attach(d, "cached_tokens", cJSON_CreateNumber(u->cached_tokens))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* id, object, created, model: the head of every response and chunk. */
static cJSON *head_item(const oai_meta *m, const char *object)
{
    cJSON *o = cJSON_CreateObject();

    if (!o || attach(o, "id", cstr_item(m->id)) ||
        attach(o, "object", cJSON_CreateString(object)) ||
        attach(o, "created", cJSON_CreateNumber((double)m->created)) ||
        attach(o, "model", cstr_item(m->model))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* stop_reason as vLLM: the stop string, the stop token id, or null; only a
 * "stop" finish has one. */
static cJSON *stop_reason_item(const oai_choice *c)
{
    if (c->finish_reason && !strcmp(c->finish_reason, "stop")) {
        if (c->stop_reason_str)
            return cstr_item(c->stop_reason_str);
        if (c->stop_reason_id >= 0)
            return cJSON_CreateNumber(c->stop_reason_id);
    }
    return cJSON_CreateNull();
}

static cJSON *finish_item(const oai_choice *c)
{
    return c->finish_reason ? cstr_item(c->finish_reason) : cJSON_CreateNull();
}

/* Completions "top_logprobs" entry: {token: logprob, ...} written by hand
 * so keys get the same escaping as values; a token text that repeats (two
 * ids decoding alike) keeps its first, likelier, entry. */
static cJSON *cmpl_top_item(const oai_token_lp *t)
{
    inf_buf b = {0};
    size_t *key_at = NULL, *key_len = NULL;
    int n_keys = 0;
    cJSON *item = NULL;

    if (isnan(t->logprob) && t->n_top == 0)
        return cJSON_CreateNull(); /* vLLM: no alternatives for it */
    if (t->n_top > 0) {
        key_at = malloc((size_t)t->n_top * sizeof *key_at);
        key_len = malloc((size_t)t->n_top * sizeof *key_len);
        if (!key_at || !key_len)
            goto done;
    }
    inf_buf_put(&b, "{", 1);
    for (int j = 0; j < t->n_top; j++) {
        size_t at = b.len + (n_keys ? 1 : 0), len;
        int dup = 0;
        char num[32];
        if (n_keys)
            inf_buf_put(&b, ",", 1);
        json_esc_put(&b, t->top[j].token, t->top[j].token ? t->top[j].token_len : 0);
        if (b.oom)
            goto done;
        len = b.len - at;
        for (int k = 0; k < n_keys && !dup; k++)
            dup = key_len[k] == len && !memcmp(b.p + key_at[k], b.p + at, len);
        if (dup) {
            b.len = at - (n_keys ? 1 : 0);
            b.p[b.len] = '\0';
            continue;
        }
        key_at[n_keys] = at;
        key_len[n_keys++] = len;
        if (isnan(t->top[j].logprob) || (isinf(t->top[j].logprob) && t->top[j].logprob > 0))
            snprintf(num, sizeof num, "null");
        else
            fmt_lp(t->top[j].logprob, num, sizeof num);
        inf_buf_put(&b, ":", 1);
        inf_buf_put(&b, num, strlen(num));
    }
    inf_buf_put(&b, "}", 1);
    if (!b.oom)
        item = cJSON_CreateRaw(b.p);
done:
    free(key_at);
    free(key_len);
    free(b.p);
    return item;
}

/* Completions logprobs: {"tokens","token_logprobs","top_logprobs",
 * "text_offset"}, or null when not asked. */
static cJSON *cmpl_logprobs_item(const oai_choice *c)
{
    cJSON *o, *tok = NULL, *lps = NULL, *tops = NULL, *offs = NULL;

    if (!c->want_logprobs && c->n_lps == 0)
        return cJSON_CreateNull();
    o = cJSON_CreateObject();
    if (!o || attach(o, "tokens", tok = cJSON_CreateArray()) ||
        attach(o, "token_logprobs", lps = cJSON_CreateArray()) ||
        attach(o, "top_logprobs", tops = cJSON_CreateArray()) ||
        attach(o, "text_offset", offs = cJSON_CreateArray()))
        goto fail;
    for (int i = 0; i < c->n_lps; i++) {
        const oai_token_lp *t = &c->lps[i];
        if (attach(tok, NULL, oai__str_item(t->token, t->token_len)) ||
            attach(lps, NULL, lp_item(t->logprob)) ||
            attach(tops, NULL, cmpl_top_item(t)) ||
            attach(offs, NULL, cJSON_CreateNumber(t->text_offset)))
            goto fail;
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* {"token","logprob","bytes"}: bytes are the piece's raw bytes, so partial
 * UTF-8 can be put back together by the client. */
static cJSON *chat_lp_entry(const char *token, size_t len, float lp)
{
    cJSON *o = cJSON_CreateObject(), *bytes = NULL;

    if (!token)
        len = 0;
    if (!o || attach(o, "token", oai__str_item(token, len)) ||
        attach(o, "logprob", lp_item(lp)) ||
        attach(o, "bytes", bytes = cJSON_CreateArray()))
        goto fail;
    for (size_t i = 0; i < len; i++)
        if (attach(bytes, NULL, cJSON_CreateNumber((unsigned char)token[i])))
            goto fail;
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* Chat logprobs: {"content":[{token, logprob, bytes, top_logprobs}]}, or
 * null when not asked. */
static cJSON *chat_logprobs_item(const oai_choice *c)
{
    cJSON *o, *content = NULL;

    if (!c->want_logprobs && c->n_lps == 0)
        return cJSON_CreateNull();
    o = cJSON_CreateObject();
    if (!o || attach(o, "content", content = cJSON_CreateArray()))
        goto fail;
    for (int i = 0; i < c->n_lps; i++) {
        const oai_token_lp *t = &c->lps[i];
        cJSON *e = chat_lp_entry(t->token, t->token_len, t->logprob), *tops = NULL;
        if (attach(content, NULL, e) ||
            attach(e, "top_logprobs", tops = cJSON_CreateArray()))
            goto fail;
        for (int j = 0; j < t->n_top; j++)
            if (attach(tops, NULL, chat_lp_entry(t->top[j].token, t->top[j].token_len,
                                                 t->top[j].logprob)))
                goto fail;
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* Prints o (then frees it), optionally framed as one SSE event. */
static char *finish_print(cJSON *o, int sse)
{
    char *json = o ? cJSON_PrintUnformatted(o) : NULL, *out;

    cJSON_Delete(o);
    if (!json || !sse)
        return json;
    size_t n = strlen(json);
    out = malloc(n + 9);
    if (out) {
        memcpy(out, "data: ", 6);
        memcpy(out + 6, json, n);
        memcpy(out + 6 + n, "\n\n", 3);
    }
    free(json);
    return out;
}

/* ---- encoding: bodies ---------------------------------------------------- */

/* Tool calls: {"id","type","function":{"name","arguments"}} in a message;
 * in a delta each also has "index", and id, type and name only in the
 * call's first piece (as OpenAI streams them). */
static cJSON *tool_calls_item(const oai_choice *c, int delta)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < c->n_calls; i++) {
        const oai_tool_call *t = &c->calls[i];
        cJSON *o = cJSON_CreateObject(), *f = NULL;
        if (attach(arr, NULL, o) || (delta && attach(o, "index", cJSON_CreateNumber(t->index))) ||
            (t->id && (attach(o, "id", cstr_item(t->id)) || attach(o, "type", cstr_item("function")))) ||
            attach(o, "function", f = cJSON_CreateObject()) ||
            (t->name && attach(f, "name", cstr_item(t->name))) ||
            attach(f, "arguments", oai__str_item(t->args, t->args_len))) {
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

/* One choice: for chat, a `container` object ("message", or "delta" in a
 * chunk) with the role and content when asked, reasoning_content and
 * tool_calls when there are any; for completions, the text. */
/* {"<id>": {"logprob","rank","decoded_token"}} entries into o; an id
 * already there (the prompt token among its alternatives) is kept once. */
static int plp_put(cJSON *o, int32_t id, float lp, int rank, const char *tok, size_t len)
{
    char key[16];
    snprintf(key, sizeof key, "%d", (int)id);
    if (cJSON_GetObjectItemCaseSensitive(o, key))
        return 0;
    cJSON *e = cJSON_CreateObject();
    if (attach(o, key, e) || attach(e, "logprob", lp_item(lp)) ||
        attach(e, "rank", cJSON_CreateNumber(rank)) ||
        attach(e, "decoded_token", oai__str_item(tok, tok ? len : 0)))
        return -1;
    return 0;
}

/* vLLM's prompt_logprobs: [null, {id: {...}}, ...] (NULL when not asked). */
static cJSON *prompt_logprobs_item(const oai_choice *c)
{
    if (!c->want_prompt_logprobs)
        return NULL;
    cJSON *a = cJSON_CreateArray();
    if (!a || attach(a, NULL, cJSON_CreateNull()))
        goto fail;
    for (int i = 0; i < c->n_plps; i++) {
        const oai_token_lp *t = &c->plps[i];
        cJSON *o = cJSON_CreateObject();
        if (attach(a, NULL, o) ||
            plp_put(o, t->id, t->logprob, t->rank, t->token, t->token_len))
            goto fail;
        for (int j = 0; j < t->n_top; j++)
            if (plp_put(o, t->top[j].id, t->top[j].logprob, j + 1, t->top[j].token,
                        t->top[j].token_len))
                goto fail;
    }
    return a;
fail:
    cJSON_Delete(a);
    return NULL;
}

static cJSON *choice_item(int chat, const oai_choice *c, const char *container, int role,
                          int content)
{
    cJSON *ch = cJSON_CreateObject(), *inner = NULL;

    if (!ch || attach(ch, "index", cJSON_CreateNumber(c->index)))
        goto fail;
    if (chat) {
        int delta = !strcmp(container, "delta");
        if (attach(ch, container, inner = cJSON_CreateObject()) ||
            (role && attach(inner, "role", cJSON_CreateString("assistant"))) ||
            (content && attach(inner, "content", c->content_null ? cJSON_CreateNull()
                                                                 : oai__str_item(c->text, c->text_len))) ||
            (c->reasoning && attach(inner, "reasoning_content",
                                    oai__str_item(c->reasoning, c->reasoning_len))) ||
            (c->n_calls && attach(inner, "tool_calls", tool_calls_item(c, delta))) ||
            attach(ch, "logprobs", chat_logprobs_item(c)))
            goto fail;
    } else if (attach(ch, "text", oai__str_item(c->text, c->text_len)) ||
               attach(ch, "logprobs", cmpl_logprobs_item(c)) ||
               (c->want_prompt_logprobs &&
                attach(ch, "prompt_logprobs", prompt_logprobs_item(c)))) {
        goto fail;
    }
    if (attach(ch, "finish_reason", finish_item(c)) ||
        attach(ch, "stop_reason", stop_reason_item(c)))
        goto fail;
    return ch;
fail:
    cJSON_Delete(ch);
    return NULL;
}

char *oai_response_json(const oai_meta *m, const oai_choice *choices, int n,
                        const oai_usage *usage)
{
    int chat;
    cJSON *o, *arr = NULL;

    if (!m || (n > 0 && !choices))
        return NULL;
    chat = m->kind == OAI_CHAT;
    o = head_item(m, chat ? "chat.completion" : "text_completion");
    if (!o || attach(o, "choices", arr = cJSON_CreateArray()))
        goto fail;
    for (int i = 0; i < n; i++)
        if (attach(arr, NULL, choice_item(chat, &choices[i], "message", 1, 1)))
            goto fail;
    if (chat && n > 0 && choices[0].want_prompt_logprobs &&
        attach(o, "prompt_logprobs", prompt_logprobs_item(&choices[0])))
        goto fail;
    if (attach(o, "usage", usage ? usage_item(usage) : cJSON_CreateNull()))
        goto fail;
    return finish_print(o, 0);
fail:
    cJSON_Delete(o);
    return NULL;
}

char *oai_chunk_sse(const oai_meta *m, const oai_choice *c, int role_first,
                    const oai_usage *usage)
{
    int chat;
    cJSON *o, *arr = NULL;

    if (!m || (!c && !usage))
        return NULL;
    chat = m->kind == OAI_CHAT;
    o = head_item(m, chat ? "chat.completion.chunk" : "text_completion");
    if (!o || attach(o, "choices", arr = cJSON_CreateArray()) ||
        /* chat deltas follow vLLM: the first carries the role (and content
         * "" when it has no text), later empty ones are {} */
        (c && attach(arr, NULL, choice_item(chat, c, "delta", role_first,
                                            role_first || c->text_len > 0))) ||
        /* chat: vLLM's prompt_logprobs at the top level, in the first chunk
         * after the prompt (completions have them in the choice) */
        (chat && c && c->want_prompt_logprobs &&
         attach(o, "prompt_logprobs", prompt_logprobs_item(c))))
        goto fail;
    if (usage ? attach(o, "usage", usage_item(usage))
              : m->usage_null && attach(o, "usage", cJSON_CreateNull()))
        goto fail;
    return finish_print(o, 1);
fail:
    cJSON_Delete(o);
    return NULL;
}

const char *oai_sse_done(void)
{
    return "data: [DONE]\n\n";
}

/* code: null unless the caller set one (OpenAI's strings such as
 * "model_not_found"); vLLM writes the HTTP status there, OpenAI does not. */
char *oai_error_json(const oai_error *err)
{
    cJSON *o, *e = NULL;

    if (!err)
        return NULL;
    o = cJSON_CreateObject();
    if (!o || attach(o, "error", e = cJSON_CreateObject()) ||
        attach(e, "message", cstr_item(err->message)) ||
        attach(e, "type", cstr_item(err->type ? err->type : oai__default_type(err->status))) ||
        attach(e, "param", err->param[0] ? cstr_item(err->param) : cJSON_CreateNull()) ||
        attach(e, "code", err->code ? cstr_item(err->code) : cJSON_CreateNull())) {
        cJSON_Delete(o);
        return NULL;
    }
    return finish_print(o, 0);
}

char *oai_models_json(const char *model_id, long created, int max_model_len)
{
    cJSON *o = cJSON_CreateObject(), *data = NULL, *card = NULL;

    if (!o || attach(o, "object", cJSON_CreateString("list")) ||
        attach(o, "data", data = cJSON_CreateArray()) ||
        attach(data, NULL, card = cJSON_CreateObject()) ||
        attach(card, "id", cstr_item(model_id)) ||
        attach(card, "object", cJSON_CreateString("model")) ||
        attach(card, "created", cJSON_CreateNumber((double)created)) ||
        attach(card, "owned_by", cJSON_CreateString("inferd")) ||
        attach(card, "root", cstr_item(model_id)) ||
        attach(card, "parent", cJSON_CreateNull()) ||
        attach(card, "max_model_len", cJSON_CreateNumber(max_model_len)) ||
        attach(card, "permission", cJSON_CreateArray())) {
        cJSON_Delete(o);
        return NULL;
    }
    return finish_print(o, 0);
}

char *oai_tokenize_json(const int32_t *ids, int n, int max_model_len)
{
    cJSON *o = cJSON_CreateObject(), *arr = NULL;

    if (!o || attach(o, "count", cJSON_CreateNumber(n)) ||
        attach(o, "max_model_len", cJSON_CreateNumber(max_model_len)) ||
        attach(o, "tokens", arr = cJSON_CreateArray())) {
        cJSON_Delete(o);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (attach(arr, NULL, cJSON_CreateNumber(ids[i]))) {
            cJSON_Delete(o);
            return NULL;
        }
    return finish_print(o, 0);
}

char *oai_detokenize_json(const char *text, size_t len)
{
    cJSON *o = cJSON_CreateObject();

    if (!o || attach(o, "prompt", oai__str_item(text, len))) {
        cJSON_Delete(o);
        return NULL;
    }
    return finish_print(o, 0);
}
