/* Tool-call parsers (see tcall.h). Everything fed is kept in one buffer
 * with a cursor: each feed runs the kind's state machine from the cursor as
 * far as the text allows, so a marker or a JSON value split across feeds is
 * simply waited for. JSON call objects go through a byte scanner that knows
 * the top-level keys and where the arguments value starts and ends, so the
 * arguments stream out as they arrive. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcall.h"

enum {
    ST_TEXT,        /* content, looking for the kind's start marker        */
    ST_TEXT_ONLY,   /* llama3_json: the rest is content                    */
    ST_LLAMA_START, /* llama3_json: undecided at the start                 */
    ST_OBJ_WAIT,    /* before a call object's '{'                          */
    ST_OBJ,         /* inside a call object                                */
    ST_AFTER_OBJ,   /* after one: end marker, ';', ',' or ']'              */
    ST_DROP_WS,     /* whitespace after a call is not content              */
    ST_M_AFTER,     /* mistral: after [TOOL_CALLS]                         */
    ST_M_NAME,      /* mistral: NAME[ARGS]                                 */
    ST_M_ARGS,      /* mistral: a balanced JSON value                      */
    ST_DS_BETWEEN,  /* deepseek: between calls                             */
    ST_DS_TYPE, ST_DS_NAME, ST_DS_FENCE, ST_DS_ARGS, ST_DS_AFTER,
    ST_H_ROLE,      /* harmony: <|start|>ROLE                              */
    ST_H_HEADER,    /* harmony: <|channel|>HEADER<|message|>               */
    ST_H_BODY,      /* harmony: the message until <|end|> / <|call|>       */
};

#define NONE ((size_t)-1)

struct tcall {
    tcall_kind kind;
    inf_buf all;
    size_t pos;
    int state;
    int n_calls;
    int in_array;     /* mistral's [ {..}, {..} ]                          */
    /* the current call */
    int started;      /* CALL emitted                                      */
    int args_any;     /* some ARGS emitted                                 */
    size_t call_from; /* where its text began (for giving it back)         */
    char *name;
    /* JSON object scanner */
    int depth, in_str, esc, role, key_kind, val_is_str;
    size_t key_start, val_start;
    size_t args_start, args_end, args_sent;
    int args_seen, args_done, args_is_str;
    /* harmony */
    int body_kind;    /* TCALL_EV_CONTENT, _REASONING or _ARGS             */
    size_t role_from;
    char *recipient;
    tcall_emit emit;
    void *ctx;
};

static const char *const names[] = {"hermes", "qwen3", "llama3_json", "mistral", "deepseek_v3", "openai"};

int tcall_kind_parse(const char *name, tcall_kind *out, inf_err *err)
{
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (!strcmp(name, names[i])) {
            *out = (tcall_kind)i;
            return INF_OK;
        }
    return inf_fail(err, INF_ERR_INVALID,
                    "unknown tool-call parser '%s' (known: hermes, qwen3, llama3_json, mistral, "
                    "deepseek_v3, openai)", name);
}

const char *tcall_kind_name(tcall_kind k)
{
    return names[k];
}

int tcall_create(tcall_kind kind, tcall **out, inf_err *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return inf_fail(err, INF_ERR_NOMEM, "tool-call parser: out of memory");
    (*out)->kind = kind;
    (*out)->state = kind == TCALL_LLAMA3_JSON ? ST_LLAMA_START : ST_TEXT;
    inf_buf_put(&(*out)->all, "", 0); /* never NULL: the cursor points into it */
    if ((*out)->all.oom) {
        tcall_destroy(*out);
        *out = NULL;
        return inf_fail(err, INF_ERR_NOMEM, "tool-call parser: out of memory");
    }
    return INF_OK;
}

void tcall_destroy(tcall *p)
{
    if (!p)
        return;
    free(p->all.p);
    free(p->name);
    free(p->recipient);
    free(p);
}

int tcall_count(const tcall *p)
{
    return p->n_calls;
}

/* ------------------------------------------------------------- helpers */

static void ev(tcall *p, tcall_ev_type t, const char *s, size_t n)
{
    if (!n && t != TCALL_EV_CALL)
        return;
    tcall_event e = {t, p->n_calls - 1, s, n};
    p->emit(p->ctx, &e);
}

static const char *at(const tcall *p, size_t i)
{
    return p->all.p + i;
}

static size_t avail(const tcall *p)
{
    return p->all.len - p->pos;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* Earliest occurrence of any marker at or after pos: 1 with *where and
 * *which; else 0 with *where = the end of what is certainly no marker. */
static int find(const tcall *p, const char *const *marks, int n, size_t *where, int *which)
{
    const char *s = at(p, p->pos), *end = p->all.p + p->all.len;
    size_t len = (size_t)(end - s);
    size_t best = NONE;
    for (int k = 0; k < n; k++) {
        const char *f = memmem(s, len, marks[k], strlen(marks[k]));
        if (f && (size_t)(f - s) < best) {
            best = (size_t)(f - s);
            *which = k;
        }
    }
    if (best != NONE) {
        *where = p->pos + best;
        return 1;
    }
    size_t hold = 0;
    for (int k = 0; k < n; k++) {
        size_t m = strlen(marks[k]);
        for (size_t h = m - 1 < len ? m - 1 : len; h > hold; h--)
            if (!memcmp(end - h, marks[k], h)) {
                hold = h;
                break;
            }
    }
    *where = p->all.len - hold;
    return 0;
}

/* 1: text at pos starts with m; 0: it cannot; -1: too short to tell. */
static int starts(const tcall *p, const char *m)
{
    size_t n = strlen(m), a = avail(p);
    if (memcmp(at(p, p->pos), m, n < a ? n : a))
        return 0;
    return a >= n ? 1 : -1;
}

static void skip_ws(tcall *p)
{
    while (p->pos < p->all.len && is_ws(*at(p, p->pos)))
        p->pos++;
}

static int start_call(tcall *p, const char *name, size_t n)
{
    p->n_calls++;
    p->started = 1;
    ev(p, TCALL_EV_CALL, name, n);
    return 0;
}

static void reset_call(tcall *p, size_t from)
{
    p->started = p->args_any = 0;
    p->call_from = from;
    free(p->name);
    p->name = NULL;
    p->depth = p->in_str = p->esc = p->role = p->key_kind = p->val_is_str = 0;
    p->key_start = p->val_start = NONE;
    p->args_start = p->args_end = p->args_sent = 0;
    p->args_seen = p->args_done = p->args_is_str = 0;
}

static void args_out(tcall *p, const char *s, size_t n)
{
    if (n) {
        p->args_any = 1;
        ev(p, TCALL_EV_ARGS, s, n);
    }
}

/* A JSON string's text (quotes included) decoded; NULL when malformed. */
static char *json_str(const char *s, size_t n)
{
    cJSON *j = cJSON_ParseWithLength(s, n);
    char *r = cJSON_IsString(j) ? strdup(j->valuestring) : NULL;
    cJSON_Delete(j);
    return r;
}

/* -------------------------------------------------- JSON call objects */

/* Sends the arguments text scanned so far, once the name is out. */
static void obj_flush(tcall *p)
{
    if (p->started && p->args_seen && !p->args_is_str && p->args_end > p->args_sent) {
        args_out(p, at(p, p->args_sent), p->args_end - p->args_sent);
        p->args_sent = p->args_end;
    }
}

/* Scans the call object from pos. Returns 1 when it closed, 0 when more
 * text is needed, -1 when the text is not a call object. */
static int obj_scan(tcall *p)
{
    for (; p->pos < p->all.len; p->pos++) {
        size_t i = p->pos;
        char c = *at(p, i);
        if (!p->depth) {
            if (c == '{') {
                p->depth = 1;
            } else if (!is_ws(c)) {
                return -1;
            }
            continue;
        }
        if (p->in_str) {
            if (p->esc) {
                p->esc = 0;
            } else if (c == '\\') {
                p->esc = 1;
            } else if (c == '"') {
                p->in_str = 0;
                if (p->depth == 1 && !p->role) {
                    size_t n = i - p->key_start - 1;
                    const char *k = at(p, p->key_start + 1);
                    p->key_kind = n == 4 && !memcmp(k, "name", 4) ? 1
                                : (n == 9 && !memcmp(k, "arguments", 9)) || (n == 10 && !memcmp(k, "parameters", 10)) ? 2 : 0;
                } else if (p->depth == 1 && p->val_is_str && p->val_start != NONE) {
                    if (p->key_kind == 1 && !p->name) {
                        p->name = json_str(at(p, p->val_start), i + 1 - p->val_start);
                        if (p->name) {
                            start_call(p, p->name, strlen(p->name));
                            p->args_sent = p->args_sent > p->args_start ? p->args_sent : p->args_start;
                        }
                    } else if (p->key_kind == 2 && p->args_is_str && !p->args_done) {
                        p->args_end = i + 1;
                        p->args_done = 1;
                    }
                    p->val_is_str = 0;
                }
            }
            continue;
        }
        if (c == '"') {
            p->in_str = 1;
            if (p->depth == 1 && !p->role) {
                p->key_start = i;
            } else if (p->depth == 1 && p->val_start == NONE) {
                p->val_start = i;
                p->val_is_str = 1;
                if (p->key_kind == 2 && !p->args_seen) { /* the first arguments only */
                    p->args_start = i;
                    p->args_seen = p->args_is_str = 1;
                }
            }
        } else if (c == '{' || c == '[') {
            if (p->depth == 1 && p->role && p->val_start == NONE) {
                p->val_start = i;
                if (p->key_kind == 2 && !p->args_seen) { /* the first arguments only */
                    p->args_start = p->args_sent = i;
                    p->args_seen = 1;
                }
            }
            p->depth++;
        } else if (c == '}' || c == ']') {
            p->depth--;
            if (p->depth == 1 && p->key_kind == 2 && p->args_seen && !p->args_done) {
                p->args_end = i + 1;
                p->args_done = 1;
            }
            if (!p->depth) {
                if (p->key_kind == 2 && p->args_seen && !p->args_done) { /* a scalar */
                    p->args_end = i;
                    p->args_done = 1;
                }
                p->pos++;
                return 1;
            }
        } else if (c == ':' && p->depth == 1 && !p->role) { /* a stray ':' in a value is part of it */
            p->role = 1;
            p->val_start = NONE;
        } else if (c == ',' && p->depth == 1) {
            if (p->key_kind == 2 && p->args_seen && !p->args_done) {
                p->args_end = i;
                p->args_done = 1;
            }
            p->role = 0;
            p->key_kind = 0;
        } else if (!is_ws(c) && p->depth == 1 && p->role && p->val_start == NONE) {
            p->val_start = i;
            if (p->key_kind == 2 && !p->args_seen) { /* the first arguments only */
                p->args_start = p->args_sent = i;
                p->args_seen = 1;
            }
        }
        if (p->key_kind == 2 && p->args_seen && !p->args_done && !p->args_is_str)
            p->args_end = i + 1;
    }
    return 0;
}

/* The object closed: the rest of its arguments, or all of it as content
 * when it never named a function. */
static void obj_done(tcall *p)
{
    if (!p->started) {
        ev(p, TCALL_EV_CONTENT, at(p, p->call_from), p->pos - p->call_from);
        return;
    }
    if (p->args_is_str && p->args_done) {
        char *a = json_str(at(p, p->args_start), p->args_end - p->args_start);
        if (a)
            args_out(p, a, strlen(a));
        free(a);
    } else {
        obj_flush(p);
    }
    if (!p->args_any)
        args_out(p, "{}", 2);
}

/* ------------------------------------------------------------ the steps */

/* One step of the state machine; 0 when it needs more text. */
static int step(tcall *p)
{
    size_t w;
    int k;
    static const char *const hermes[] = {"<tool_call>"}, *const hermes_end[] = {"</tool_call>"};
    static const char *const mistral[] = {"[TOOL_CALLS]"}, *const margs[] = {"[ARGS]"};
    static const char *const ds_begin[] = {"<｜tool▁calls▁begin｜>"};
    static const char *const ds_between[] = {"<｜tool▁call▁begin｜>", "<｜tool▁calls▁end｜>"};
    static const char *const ds_sep[] = {"<｜tool▁sep｜>"}, *const nl[] = {"\n"};
    static const char *const ds_args_end[] = {"\n```", "```", "<｜tool▁call▁end｜>"};
    static const char *const ds_call_end[] = {"<｜tool▁call▁end｜>"};
    static const char *const h_text[] = {"<|channel|>", "<|start|>"};
    static const char *const h_role[] = {"<|channel|>", "<|message|>"}, *const h_msg[] = {"<|message|>"};
    static const char *const h_end[] = {"<|end|>", "<|call|>", "<|return|>"};
    switch (p->state) {
    case ST_TEXT_ONLY:
        ev(p, TCALL_EV_CONTENT, at(p, p->pos), avail(p));
        p->pos = p->all.len;
        return 0;
    case ST_TEXT: {
        if (p->kind == TCALL_OPENAI) {
            int found = find(p, h_text, 2, &w, &k);
            ev(p, TCALL_EV_CONTENT, at(p, p->pos), w - p->pos);
            p->pos = w;
            if (!found)
                return 0;
            p->pos += strlen(h_text[k]);
            p->role_from = p->pos;
            p->state = k == 0 ? ST_H_HEADER : ST_H_ROLE;
            free(p->recipient);
            p->recipient = NULL;
            return 1;
        }
        const char *const *m = p->kind == TCALL_MISTRAL ? mistral : p->kind == TCALL_DEEPSEEK_V3 ? ds_begin : hermes;
        int found = find(p, m, 1, &w, &k);
        ev(p, TCALL_EV_CONTENT, at(p, p->pos), w - p->pos);
        p->pos = w;
        if (!found)
            return 0;
        reset_call(p, p->pos);
        p->pos += strlen(m[0]);
        p->state = p->kind == TCALL_MISTRAL ? ST_M_AFTER : p->kind == TCALL_DEEPSEEK_V3 ? ST_DS_BETWEEN : ST_OBJ_WAIT;
        return 1;
    }
    case ST_LLAMA_START: {
        size_t save = p->pos;
        skip_ws(p);
        if (!avail(p)) {
            p->pos = save;
            return 0;
        }
        int t = starts(p, "<|python_tag|>");
        if (t < 0) {
            p->pos = save;
            return 0;
        }
        if (t > 0)
            p->pos += strlen("<|python_tag|>");
        if (t > 0 || *at(p, p->pos) == '{') {
            reset_call(p, save);
            p->state = ST_OBJ;
        } else {
            p->pos = save;
            p->state = ST_TEXT_ONLY;
        }
        return 1;
    }
    case ST_OBJ_WAIT:
        skip_ws(p);
        if (!avail(p))
            return 0;
        if (*at(p, p->pos) != '{') { /* not a call after all: the marker is content */
            ev(p, TCALL_EV_CONTENT, at(p, p->call_from), p->pos - p->call_from);
            p->state = ST_TEXT;
            return 1;
        }
        p->state = ST_OBJ;
        return 1;
    case ST_OBJ: {
        int r = obj_scan(p);
        obj_flush(p);
        if (r == 0)
            return 0;
        if (r < 0) {
            ev(p, TCALL_EV_CONTENT, at(p, p->call_from), p->pos - p->call_from);
            p->state = p->kind == TCALL_LLAMA3_JSON ? ST_TEXT_ONLY : ST_TEXT;
            return 1;
        }
        obj_done(p);
        p->state = ST_AFTER_OBJ;
        return 1;
    }
    case ST_AFTER_OBJ: {
        size_t save = p->pos;
        skip_ws(p);
        if (!avail(p)) {
            p->pos = save;
            return 0;
        }
        char c = *at(p, p->pos);
        if (!p->started) { /* given back as content: so is what follows */
            p->pos = save;
            p->state = p->kind == TCALL_LLAMA3_JSON ? ST_TEXT_ONLY : ST_TEXT;
        } else if (p->kind == TCALL_HERMES || p->kind == TCALL_QWEN3) {
            int t = starts(p, hermes_end[0]);
            if (t < 0) {
                p->pos = save;
                return 0;
            }
            if (t > 0) {
                p->pos += strlen(hermes_end[0]);
                p->state = ST_DROP_WS;
            } else {
                p->pos = save;
                p->state = ST_TEXT;
            }
        } else if (p->kind == TCALL_LLAMA3_JSON) {
            if (c == ';') {
                p->pos++;
                reset_call(p, p->pos);
                p->state = ST_OBJ;
            } else {
                p->pos = save;
                p->state = ST_TEXT_ONLY;
            }
        } else { /* mistral's array */
            p->pos++;
            if (c == ',') {
                reset_call(p, p->pos);
                p->state = ST_OBJ;
            } else {
                if (c != ']')
                    p->pos--;
                p->state = ST_TEXT;
            }
        }
        return 1;
    }
    case ST_DROP_WS:
        skip_ws(p);
        if (!avail(p))
            return 0;
        p->state = ST_TEXT;
        return 1;
    case ST_M_AFTER:
        skip_ws(p);
        if (!avail(p))
            return 0;
        if (*at(p, p->pos) == '[') {
            p->pos++;
            reset_call(p, p->pos);
            p->state = ST_OBJ;
        } else {
            p->state = ST_M_NAME;
        }
        return 1;
    case ST_M_NAME: {
        if (!find(p, margs, 1, &w, &k))
            return 0;
        size_t a = p->pos, b = w;
        while (a < b && is_ws(*at(p, a)))
            a++;
        while (b > a && is_ws(*at(p, b - 1)))
            b--;
        reset_call(p, p->pos);
        start_call(p, at(p, a), b - a);
        p->pos = w + strlen(margs[0]);
        p->state = ST_M_ARGS;
        return 1;
    }
    case ST_M_ARGS: {
        /* a balanced value: scan depth and strings, stream as it comes */
        size_t from = p->pos;
        int closed = 0;
        for (; p->pos < p->all.len && !closed; p->pos++) {
            char c = *at(p, p->pos);
            if (p->val_start == NONE) { /* whitespace before the value */
                if (is_ws(c)) {
                    from++;
                    continue;
                }
                p->val_start = p->pos;
            }
            if (p->in_str) {
                if (p->esc)
                    p->esc = 0;
                else if (c == '\\')
                    p->esc = 1;
                else if (c == '"')
                    p->in_str = 0;
            } else if (c == '"') {
                p->in_str = 1;
            } else if (c == '{' || c == '[') {
                p->depth++;
            } else if (c == '}' || c == ']') {
                closed = --p->depth <= 0;
            }
        }
        args_out(p, at(p, from), p->pos - from);
        if (!closed)
            return 0;
        p->state = ST_TEXT;
        return 1;
    }
    case ST_DS_BETWEEN:
        if (!find(p, ds_between, 2, &w, &k)) {
            p->pos = w; /* text between calls is dropped */
            return 0;
        }
        p->pos = w + strlen(ds_between[k]);
        if (k == 0) {
            reset_call(p, w);
            p->state = ST_DS_TYPE;
        } else {
            p->state = ST_TEXT;
        }
        return 1;
    case ST_DS_TYPE:
        if (!find(p, ds_sep, 1, &w, &k))
            return 0;
        p->pos = w + strlen(ds_sep[0]);
        p->state = ST_DS_NAME;
        return 1;
    case ST_DS_NAME: {
        if (!find(p, nl, 1, &w, &k))
            return 0;
        start_call(p, at(p, p->pos), w - p->pos);
        p->pos = w + 1;
        p->state = ST_DS_FENCE;
        return 1;
    }
    case ST_DS_FENCE: {
        int t = starts(p, "```json\n");
        if (t < 0)
            return 0;
        if (t > 0)
            p->pos += strlen("```json\n");
        p->state = ST_DS_ARGS;
        return 1;
    }
    case ST_DS_ARGS: {
        int found = find(p, ds_args_end, 3, &w, &k);
        args_out(p, at(p, p->pos), w - p->pos);
        p->pos = w;
        if (!found)
            return 0;
        if (!p->args_any)
            args_out(p, "{}", 2);
        p->pos += strlen(ds_args_end[k]);
        p->state = k == 2 ? ST_DS_BETWEEN : ST_DS_AFTER;
        return 1;
    }
    case ST_DS_AFTER:
        if (!find(p, ds_call_end, 1, &w, &k)) {
            p->pos = w;
            return 0;
        }
        p->pos = w + strlen(ds_call_end[0]);
        p->state = ST_DS_BETWEEN;
        return 1;
    case ST_H_ROLE:
    case ST_H_HEADER: {
        if (!find(p, p->state == ST_H_ROLE ? h_role : h_msg, p->state == ST_H_ROLE ? 2 : 1, &w, &k))
            return 0;
        /* a recipient may sit in the role part or the header */
        const char *hdr = at(p, p->pos), *to = memmem(hdr, w - p->pos, "to=functions.", 13);
        if (to) {
            const char *n0 = to + 13, *n1 = n0;
            while (n1 < at(p, w) && !is_ws(*n1) && *n1 != '<')
                n1++;
            free(p->recipient);
            p->recipient = strndup(n0, (size_t)(n1 - n0));
        }
        int is_msg = p->state == ST_H_HEADER || k == 1;
        int analysis = p->state == ST_H_HEADER && w - p->pos >= 8 && !memcmp(hdr, "analysis", 8);
        p->pos = w + strlen(is_msg ? h_msg[0] : h_role[0]);
        if (!is_msg) {
            p->state = ST_H_HEADER;
            return 1;
        }
        if (p->recipient) {
            reset_call(p, w);
            start_call(p, p->recipient, strlen(p->recipient));
            p->body_kind = TCALL_EV_ARGS;
        } else {
            p->body_kind = analysis ? TCALL_EV_REASONING : TCALL_EV_CONTENT;
        }
        p->state = ST_H_BODY;
        return 1;
    }
    case ST_H_BODY: {
        int found = find(p, h_end, 3, &w, &k);
        if (p->body_kind == TCALL_EV_ARGS)
            args_out(p, at(p, p->pos), w - p->pos);
        else
            ev(p, (tcall_ev_type)p->body_kind, at(p, p->pos), w - p->pos);
        p->pos = w;
        if (!found)
            return 0;
        if (p->body_kind == TCALL_EV_ARGS && !p->args_any)
            args_out(p, "{}", 2);
        p->pos += strlen(h_end[k]);
        free(p->recipient);
        p->recipient = NULL;
        p->state = ST_TEXT;
        return 1;
    }
    }
    return 0;
}

int tcall_feed(tcall *p, const char *text, size_t len, tcall_emit emit, void *ctx)
{
    p->emit = emit;
    p->ctx = ctx;
    inf_buf_put(&p->all, text, len);
    if (p->all.oom)
        return INF_ERR_NOMEM;
    while (step(p))
        ;
    return INF_OK;
}

int tcall_finish(tcall *p, tcall_emit emit, void *ctx)
{
    p->emit = emit;
    p->ctx = ctx;
    const char *rest = at(p, p->pos);
    size_t n = avail(p);
    switch (p->state) {
    case ST_OBJ:
    case ST_OBJ_WAIT:
    case ST_M_AFTER:
    case ST_M_NAME:
        if (p->started)
            obj_flush(p);
        else
            ev(p, TCALL_EV_CONTENT, at(p, p->call_from), p->all.len - p->call_from);
        break;
    case ST_DS_ARGS:
    case ST_M_ARGS:
        args_out(p, rest, n);
        break;
    case ST_H_BODY:
        if (p->body_kind == TCALL_EV_ARGS)
            args_out(p, rest, n);
        else
            ev(p, (tcall_ev_type)p->body_kind, rest, n);
        break;
    case ST_TEXT:
    case ST_TEXT_ONLY:
    case ST_LLAMA_START:
    case ST_AFTER_OBJ:
        ev(p, TCALL_EV_CONTENT, rest, n);
        break;
    default: /* inside deepseek's or harmony's framing: nothing to show */
        break;
    }
    p->pos = p->all.len;
    return INF_OK;
}

/* ------------------------------------------------------------ all at once */

typedef struct collect {
    inf_buf content, reasoning;
    inf_buf *args;
    tcall_result *r;
    int oom;
} collect;

static void collect_ev(void *ctx, const tcall_event *e)
{
    collect *c = ctx;
    tcall_result *r = c->r;
    if (e->type == TCALL_EV_CONTENT) {
        inf_buf_put(&c->content, e->text, e->len);
    } else if (e->type == TCALL_EV_REASONING) {
        inf_buf_put(&c->reasoning, e->text, e->len);
    } else if (e->type == TCALL_EV_CALL) {
        tcall_call *calls = realloc(r->calls, sizeof *calls * (size_t)(r->n_calls + 1));
        inf_buf *args = realloc(c->args, sizeof *args * (size_t)(r->n_calls + 1));
        if (calls)
            r->calls = calls;
        if (args)
            c->args = args;
        if (!calls || !args) {
            c->oom = 1;
            return;
        }
        r->calls[r->n_calls].name = strndup(e->text, e->len);
        r->calls[r->n_calls].arguments = NULL;
        c->args[r->n_calls] = (inf_buf){0};
        r->n_calls++;
    } else if (e->index >= 0 && e->index < r->n_calls) {
        inf_buf_put(&c->args[e->index], e->text, e->len);
    }
}

int tcall_parse_all(tcall_kind kind, const char *text, size_t len, tcall_result *out, inf_err *err)
{
    memset(out, 0, sizeof *out);
    tcall *p = NULL;
    int rc = tcall_create(kind, &p, err);
    if (rc)
        return rc;
    collect c = {.r = out};
    tcall_feed(p, text, len, collect_ev, &c);
    tcall_finish(p, collect_ev, &c);
    tcall_destroy(p);
    inf_buf_put(&c.content, "", 0);
    inf_buf_put(&c.reasoning, "", 0);
    for (int i = 0; i < out->n_calls; i++) {
        inf_buf_put(&c.args[i], "", 0);
        out->calls[i].arguments = c.args[i].p;
        if (!out->calls[i].name || !c.args[i].p)
            c.oom = 1;
    }
    free(c.args);
    out->content = c.content.p;
    out->reasoning = c.reasoning.p;
    if (c.oom || c.content.oom || c.reasoning.oom || !out->content || !out->reasoning) {
        tcall_result_free(out);
        return inf_fail(err, INF_ERR_NOMEM, "tool-call parser: out of memory");
    }
    return INF_OK;
}

void tcall_result_free(tcall_result *r)
{
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    free(r->content);
    free(r->reasoning);
    memset(r, 0, sizeof *r);
}
