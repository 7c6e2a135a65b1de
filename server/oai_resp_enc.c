/* oai_: the Responses API's output: the Response object with its output
 * items (one assistant message, function_call items), and the typed stream
 * events, in the order OpenAI sends them: response.created,
 * response.in_progress; per item output_item.added, its content or argument
 * deltas, their .done events and output_item.done; then
 * response.completed (or .incomplete), or error and response.failed. */
#include "server/oai_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_esc.h"

#define PUT(b, lit) inf_buf_put(b, lit, sizeof lit - 1)

/* One output item: the message, or a function call. */
struct oai_resp_item {
    int call;
    int chat_index;   /* a call: its index among the chat choice's calls   */
    char *call_id, *name;
    inf_buf text;     /* the message's text, or the call's arguments      */
};

void oai_resp_stream_init(oai_resp_stream *s)
{
    memset(s, 0, sizeof *s);
    s->msg = -1;
}

void oai_resp_stream_free(oai_resp_stream *s)
{
    for (int i = 0; i < s->n_items; i++) {
        free(s->items[i].call_id);
        free(s->items[i].name);
        free(s->items[i].text.p);
    }
    free(s->items);
    oai_resp_stream_init(s);
}

static oai_resp_item *add_item(oai_resp_stream *s, int call)
{
    if (s->n_items == s->cap) {
        int cap = s->cap ? 2 * s->cap : 4;
        oai_resp_item *q = realloc(s->items, (size_t)cap * sizeof *q);
        if (!q)
            return NULL;
        s->items = q;
        s->cap = cap;
    }
    oai_resp_item *it = &s->items[s->n_items++];
    memset(it, 0, sizeof *it);
    it->call = call;
    return it;
}

/* The items of a whole choice: its text as the message (also when there is
 * nothing else, as an empty one), then its calls. 0, or -1 out of memory. */
static int items_of(oai_resp_stream *s, const oai_choice *c)
{
    if (c->text_len || !c->n_calls) {
        oai_resp_item *m = add_item(s, 0);
        if (!m)
            return -1;
        s->msg = 0;
        inf_buf_put(&m->text, c->text ? c->text : "", c->text_len);
    }
    for (int k = 0; k < c->n_calls; k++) {
        oai_resp_item *it = add_item(s, 1);
        if (!it)
            return -1;
        it->chat_index = c->calls[k].index;
        it->call_id = strdup(c->calls[k].id ? c->calls[k].id : "");
        it->name = strdup(c->calls[k].name ? c->calls[k].name : "");
        inf_buf_put(&it->text, c->calls[k].args ? c->calls[k].args : "", c->calls[k].args_len);
        if (!it->call_id || !it->name || it->text.oom)
            return -1;
    }
    return 0;
}

static void put_str(inf_buf *b, const inf_buf *t)
{
    json_esc_put(b, t->p ? t->p : "", t->len);
}

/* A function_call item's id: "fc_" and its call id. */
static void put_fc_id(inf_buf *b, const char *call_id)
{
    inf_buf t = {0};
    PUT(&t, "fc_");
    inf_buf_put(&t, call_id, strlen(call_id));
    if (t.oom)
        b->oom = 1;
    else
        json_esc_put(b, t.p, t.len);
    free(t.p);
}

/* One item as the output array holds it; done: finished (else in
 * progress, empty). */
static void put_item(inf_buf *b, const oai_meta *m, const oai_resp_item *it, int done,
                     int incomplete)
{
    const char *st = !done ? "in_progress" : incomplete ? "incomplete" : "completed";
    if (it->call) {
        PUT(b, "{\"type\":\"function_call\",\"id\":");
        put_fc_id(b, it->call_id);
        PUT(b, ",\"call_id\":");
        json_esc_put(b, it->call_id, strlen(it->call_id));
        PUT(b, ",\"name\":");
        json_esc_put(b, it->name, strlen(it->name));
        PUT(b, ",\"arguments\":");
        if (done)
            put_str(b, &it->text);
        else
            PUT(b, "\"\"");
        inf_buf_printf(b, ",\"status\":\"%s\"}", st);
        return;
    }
    inf_buf_printf(b, "{\"type\":\"message\",\"id\":\"msg_%s\",\"status\":\"%s\","
                      "\"role\":\"assistant\",\"content\":[",
                   m->id, st);
    if (done) {
        PUT(b, "{\"type\":\"output_text\",\"text\":");
        put_str(b, &it->text);
        PUT(b, ",\"annotations\":[]}");
    }
    PUT(b, "]}");
}

/* The Response object; status "in_progress", "completed", "incomplete"
 * or "failed" (then e says why). */
static void put_response(inf_buf *b, const oai_meta *m, const oai_resp_stream *s,
                         const char *status, const oai_usage *u, const oai_error *e)
{
    int incomplete = !strcmp(status, "incomplete");
    inf_buf_printf(b, "{\"id\":\"%s\",\"object\":\"response\",\"created_at\":%ld,"
                      "\"status\":\"%s\",\"error\":",
                   m->id, m->created, status);
    if (e) {
        PUT(b, "{\"code\":");
        const char *code = e->code ? e->code : "server_error";
        json_esc_put(b, code, strlen(code));
        PUT(b, ",\"message\":");
        json_esc_put(b, e->message, strlen(e->message));
        PUT(b, "}");
    } else {
        PUT(b, "null");
    }
    inf_buf_printf(b, ",\"incomplete_details\":%s,\"model\":",
                   incomplete ? "{\"reason\":\"max_output_tokens\"}" : "null");
    json_esc_put(b, m->model, strlen(m->model));
    PUT(b, ",\"output\":[");
    int done = strcmp(status, "in_progress") != 0;
    for (int i = 0; done && i < s->n_items; i++) {
        if (i)
            PUT(b, ",");
        put_item(b, m, &s->items[i], 1, incomplete);
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

static char *take(inf_buf *b)
{
    if (b->oom) {
        free(b->p);
        return NULL;
    }
    return b->p;
}

static char *lost(inf_buf *b)
{
    b->oom = 1;
    return take(b);
}

static const char *end_status(const char *finish)
{
    return finish && !strcmp(finish, "length") ? "incomplete" : "completed";
}

char *oai_resp_json(const oai_meta *m, const oai_choice *c, const oai_usage *u)
{
    oai_resp_stream s;
    oai_resp_stream_init(&s);
    inf_buf b = {0};
    if (items_of(&s, c))
        b.oom = 1;
    else
        put_response(&b, m, &s, end_status(c->finish_reason), u, NULL);
    oai_resp_stream_free(&s);
    return take(&b);
}

/* ---- stream events ----------------------------------------------------------- */

/* "event: TYPE\ndata: {"type":TYPE,"sequence_number":N" (the caller closes). */
static void event(inf_buf *b, oai_resp_stream *s, const char *type)
{
    inf_buf_printf(b, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", type, type,
                   s->seq++);
}

/* The id of item i as its events name it. */
static void put_item_id(inf_buf *b, const oai_meta *m, const oai_resp_item *it)
{
    if (it->call) {
        put_fc_id(b, it->call_id);
    } else {
        inf_buf_printf(b, "\"msg_%s\"", m->id);
    }
}

static void item_added(inf_buf *b, const oai_meta *m, oai_resp_stream *s, int i)
{
    event(b, s, "response.output_item.added");
    inf_buf_printf(b, ",\"output_index\":%d,\"item\":", i);
    put_item(b, m, &s->items[i], 0, 0);
    PUT(b, "}\n\n");
    if (s->items[i].call)
        return;
    event(b, s, "response.content_part.added");
    PUT(b, ",\"item_id\":");
    put_item_id(b, m, &s->items[i]);
    inf_buf_printf(b, ",\"output_index\":%d,\"content_index\":0,\"part\":{\"type\":"
                      "\"output_text\",\"text\":\"\",\"annotations\":[]}}\n\n", i);
}

char *oai_resp_start_sse(const oai_meta *m, oai_resp_stream *s)
{
    inf_buf b = {0};
    static const char *const kinds[] = {"response.created", "response.in_progress"};
    for (int i = 0; i < 2; i++) {
        event(&b, s, kinds[i]);
        PUT(&b, ",\"response\":");
        put_response(&b, m, s, "in_progress", NULL, NULL);
        PUT(&b, "}\n\n");
    }
    return take(&b);
}

/* Opens the message item when text first comes; -1 out of memory. */
static int open_message(inf_buf *b, const oai_meta *m, oai_resp_stream *s)
{
    if (s->msg >= 0)
        return 0;
    if (!add_item(s, 0))
        return -1;
    s->msg = s->n_items - 1;
    item_added(b, m, s, s->msg);
    return 0;
}

char *oai_resp_delta_sse(const oai_meta *m, oai_resp_stream *s, const oai_choice *c)
{
    inf_buf b = {0};
    if (c->text_len) {
        if (open_message(&b, m, s))
            return lost(&b);
        oai_resp_item *it = &s->items[s->msg];
        inf_buf_put(&it->text, c->text, c->text_len);
        event(&b, s, "response.output_text.delta");
        PUT(&b, ",\"item_id\":");
        put_item_id(&b, m, it);
        inf_buf_printf(&b, ",\"output_index\":%d,\"content_index\":0,\"delta\":", s->msg);
        json_esc_put(&b, c->text, c->text_len);
        PUT(&b, "}\n\n");
    }
    for (int k = 0; k < c->n_calls; k++) {
        const oai_tool_call *tc = &c->calls[k];
        int i = 0;
        while (i < s->n_items && !(s->items[i].call && s->items[i].chat_index == tc->index))
            i++;
        if (i == s->n_items) { /* a new call: its id and name come first */
            oai_resp_item *it = add_item(s, 1);
            if (!it)
                return lost(&b);
            it->chat_index = tc->index;
            it->call_id = strdup(tc->id ? tc->id : "");
            it->name = strdup(tc->name ? tc->name : "");
            if (!it->call_id || !it->name)
                return lost(&b);
            item_added(&b, m, s, i);
        }
        if (!tc->args_len)
            continue;
        inf_buf_put(&s->items[i].text, tc->args, tc->args_len);
        event(&b, s, "response.function_call_arguments.delta");
        PUT(&b, ",\"item_id\":");
        put_item_id(&b, m, &s->items[i]);
        inf_buf_printf(&b, ",\"output_index\":%d,\"delta\":", i);
        json_esc_put(&b, tc->args, tc->args_len);
        PUT(&b, "}\n\n");
    }
    if (!b.p && !b.oom)
        return strdup("");
    return take(&b);
}

char *oai_resp_end_sse(const oai_meta *m, oai_resp_stream *s, const char *finish,
                       const oai_usage *u)
{
    inf_buf b = {0};
    const char *status = end_status(finish);
    int incomplete = !strcmp(status, "incomplete");
    if (!s->n_items && open_message(&b, m, s)) /* an empty answer is an empty message */
        b.oom = 1;
    for (int i = 0; i < s->n_items; i++) {
        const oai_resp_item *it = &s->items[i];
        if (it->call) {
            event(&b, s, "response.function_call_arguments.done");
            PUT(&b, ",\"item_id\":");
            put_item_id(&b, m, it);
            inf_buf_printf(&b, ",\"output_index\":%d,\"arguments\":", i);
            put_str(&b, &it->text);
            PUT(&b, "}\n\n");
        } else {
            event(&b, s, "response.output_text.done");
            PUT(&b, ",\"item_id\":");
            put_item_id(&b, m, it);
            inf_buf_printf(&b, ",\"output_index\":%d,\"content_index\":0,\"text\":", i);
            put_str(&b, &it->text);
            PUT(&b, "}\n\n");
            event(&b, s, "response.content_part.done");
            PUT(&b, ",\"item_id\":");
            put_item_id(&b, m, it);
            inf_buf_printf(&b, ",\"output_index\":%d,\"content_index\":0,\"part\":"
                               "{\"type\":\"output_text\",\"text\":", i);
            put_str(&b, &it->text);
            PUT(&b, ",\"annotations\":[]}}\n\n");
        }
        event(&b, s, "response.output_item.done");
        inf_buf_printf(&b, ",\"output_index\":%d,\"item\":", i);
        put_item(&b, m, it, 1, incomplete);
        PUT(&b, "}\n\n");
    }
    event(&b, s, incomplete ? "response.incomplete" : "response.completed");
    PUT(&b, ",\"response\":");
    put_response(&b, m, s, status, u, NULL);
    PUT(&b, "}\n\n");
    return take(&b);
}

char *oai_resp_fail_sse(const oai_meta *m, oai_resp_stream *s, const oai_error *e)
{
    inf_buf b = {0};
    const char *code = e->code ? e->code : "server_error";
    event(&b, s, "error");
    PUT(&b, ",\"code\":");
    json_esc_put(&b, code, strlen(code));
    PUT(&b, ",\"message\":");
    json_esc_put(&b, e->message, strlen(e->message));
    PUT(&b, ",\"param\":");
    if (e->param[0])
        json_esc_put(&b, e->param, strlen(e->param));
    else
        PUT(&b, "null");
    PUT(&b, "}\n\n");
    event(&b, s, "response.failed");
    PUT(&b, ",\"response\":");
    put_response(&b, m, s, "failed", NULL, e);
    PUT(&b, "}\n\n");
    return take(&b);
}
