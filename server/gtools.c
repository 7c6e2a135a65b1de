/* gtools_ (see gtools.h): text -> reasoning parser -> tool stage. Each feed
 * collects this response's or chunk's pieces in buffers; the tool calls'
 * strings live in one arena, turned into pointers once the feed is done. */
#include "server/gtools.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/reason.h"
#include "server/tcall.h"

typedef struct entry {
    int index;
    long id, name;   /* offsets in arena, -1: none */
    size_t args, args_len;
} entry;

struct gtools {
    int mode;        /* OAI_TOOL_* */
    const char *tool_name;
    char prefix[64];
    rsn *rp;
    tcall *tp;
    int n_calls;     /* calls started */
    inf_buf required;/* "required": the whole JSON list */
    /* this feed's pieces */
    inf_buf content, reasoning, arena;
    entry *e;
    int n_e, cap_e;
    oai_tool_call *out;
    int oom;
};

int gtools_create(const oai_request *r, int tool_parser, int reasoning_parser,
                  const char *id_prefix, gtools **out)
{
    *out = NULL;
    int mode = r->kind == OAI_CHAT ? r->tool_choice : OAI_TOOL_NONE;
    if (mode == OAI_TOOL_AUTO && tool_parser < 0)
        mode = OAI_TOOL_NONE;
    if (r->grammar) /* the grammar leaves no room for a <think> part */
        reasoning_parser = -1;
    if (mode == OAI_TOOL_NONE && (reasoning_parser < 0 || r->kind != OAI_CHAT))
        return 0;
    gtools *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    t->mode = mode;
    t->tool_name = r->tool_name;
    snprintf(t->prefix, sizeof t->prefix, "%s", id_prefix);
    if ((reasoning_parser >= 0 && rsn_create((rsn_kind)reasoning_parser, &t->rp, NULL)) ||
        (mode == OAI_TOOL_AUTO && tcall_create((tcall_kind)tool_parser, &t->tp, NULL))) {
        gtools_destroy(t);
        return -1;
    }
    *out = t;
    return 0;
}

void gtools_destroy(gtools *t)
{
    if (!t)
        return;
    rsn_destroy(t->rp);
    tcall_destroy(t->tp);
    free(t->required.p);
    free(t->content.p);
    free(t->reasoning.p);
    free(t->arena.p);
    free(t->e);
    free(t->out);
    free(t);
}

int gtools_special(const gtools *t)
{
    return t->tp != NULL;
}

int gtools_calls(const gtools *t)
{
    return t->n_calls;
}

static long put_str(gtools *t, const char *s, size_t n)
{
    size_t at = t->arena.len;
    inf_buf_put(&t->arena, s, n);
    inf_buf_put(&t->arena, "", 1); /* NUL-terminate each string */
    return (long)at;
}

/* A new call starts: an entry with its id and name. */
static void call_start(gtools *t, const char *name, size_t n)
{
    entry *e = realloc(t->e, sizeof *e * (size_t)(t->n_e + 1));
    if (!e) {
        t->oom = 1;
        return;
    }
    t->e = e;
    char id[96];
    snprintf(id, sizeof id, "call_%s_%d", t->prefix, t->n_calls);
    e = &t->e[t->n_e++];
    e->index = t->n_calls++;
    e->id = put_str(t, id, strlen(id));
    e->name = put_str(t, name, n);
    e->args = t->arena.len;
    e->args_len = 0;
}

/* Arguments text for call index: appended to this feed's entry of it when
 * that is the last one, else a new entry. */
static void call_args(gtools *t, int index, const char *s, size_t n)
{
    if (!t->n_e || t->e[t->n_e - 1].index != index) {
        entry *e = realloc(t->e, sizeof *e * (size_t)(t->n_e + 1));
        if (!e) {
            t->oom = 1;
            return;
        }
        t->e = e;
        e = &t->e[t->n_e++];
        *e = (entry){index, -1, -1, t->arena.len, 0};
    }
    entry *e = &t->e[t->n_e - 1];
    if (e->args + e->args_len != t->arena.len) { /* strings came between: move */
        size_t at = t->arena.len;
        inf_buf_put(&t->arena, t->arena.p + e->args, e->args_len);
        e->args = at;
    }
    inf_buf_put(&t->arena, s, n);
    e->args_len += n;
}

static void on_call(void *ctx, const tcall_event *ev)
{
    gtools *t = ctx;
    if (ev->type == TCALL_EV_CONTENT)
        inf_buf_put(&t->content, ev->text, ev->len);
    else if (ev->type == TCALL_EV_REASONING)
        inf_buf_put(&t->reasoning, ev->text, ev->len);
    else if (ev->type == TCALL_EV_CALL)
        call_start(t, ev->text, ev->len);
    else
        call_args(t, ev->index, ev->text, ev->len);
}

/* Content text after the reasoning split: into the tool stage. */
static void tool_stage(gtools *t, const char *s, size_t n)
{
    switch (t->mode) {
    case OAI_TOOL_NAMED:
        if (!t->n_calls && n)
            call_start(t, t->tool_name, strlen(t->tool_name));
        if (n)
            call_args(t, 0, s, n);
        break;
    case OAI_TOOL_REQUIRED:
        inf_buf_put(&t->required, s, n);
        break;
    case OAI_TOOL_AUTO:
        if (tcall_feed(t->tp, s, n, on_call, t))
            t->oom = 1;
        break;
    default:
        inf_buf_put(&t->content, s, n);
    }
}

static void on_rsn(void *ctx, int reasoning, const char *s, size_t n)
{
    gtools *t = ctx;
    if (reasoning)
        inf_buf_put(&t->reasoning, s, n);
    else
        tool_stage(t, s, n);
}

/* "required": the grammar made the text a JSON list of {name, parameters}. */
static void required_calls(gtools *t)
{
    cJSON *list = cJSON_ParseWithLength(t->required.p ? t->required.p : "", t->required.len), *it;
    if (!cJSON_IsArray(list)) { /* cut by max_tokens: the text as it is */
        inf_buf_put(&t->content, t->required.p ? t->required.p : "", t->required.len);
        cJSON_Delete(list);
        return;
    }
    cJSON_ArrayForEach(it, list) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        char *args = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(it, "parameters"));
        if (cJSON_IsString(name) && args) {
            call_start(t, name->valuestring, strlen(name->valuestring));
            call_args(t, t->n_calls - 1, args, strlen(args));
        }
        free(args);
    }
    cJSON_Delete(list);
}

int gtools_feed(gtools *t, const char *text, size_t len, int final, oai_choice *oc)
{
    t->content.len = t->reasoning.len = t->arena.len = 0;
    t->n_e = 0;
    if (t->rp) {
        rsn_feed(t->rp, text, len, on_rsn, t);
        if (final)
            rsn_finish(t->rp, on_rsn, t);
    } else {
        tool_stage(t, text, len);
    }
    if (final && t->mode == OAI_TOOL_AUTO)
        tcall_finish(t->tp, on_call, t);
    if (final && t->mode == OAI_TOOL_REQUIRED)
        required_calls(t);
    inf_buf_put(&t->content, "", 0);
    inf_buf_put(&t->reasoning, "", 0);
    inf_buf_put(&t->arena, "", 0);
    free(t->out);
    t->out = t->n_e ? calloc((size_t)t->n_e, sizeof *t->out) : NULL;
    if (t->oom || t->content.oom || t->reasoning.oom || t->arena.oom || (t->n_e && !t->out))
        return -1;
    for (int i = 0; i < t->n_e; i++) {
        const entry *e = &t->e[i];
        t->out[i] = (oai_tool_call){e->index, e->id >= 0 ? t->arena.p + e->id : NULL,
                                    e->name >= 0 ? t->arena.p + e->name : NULL,
                                    t->arena.p + e->args, e->args_len};
    }
    oc->text = t->content.p;
    oc->text_len = t->content.len;
    oc->reasoning = t->rp && t->reasoning.len ? t->reasoning.p : NULL;
    oc->reasoning_len = t->reasoning.len;
    oc->calls = t->out;
    oc->n_calls = t->n_e;
    oc->content_null = t->n_calls > 0 && !t->content.len;
    if (t->n_calls && oc->finish_reason && !strcmp(oc->finish_reason, "stop"))
        oc->finish_reason = "tool_calls";
    return 0;
}
