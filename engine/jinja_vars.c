/* jinja_vars: a render's variables read from request JSON text, and
 * vLLM's rebuilding of the messages (entrypoints/chat_utils.py:
 * _parse_chat_message_content and _postprocess_messages) done on the
 * values themselves, so a request's JSON is read once, into the values
 * the template sees. */
#include "jinja_int.h"

#include <stdlib.h>
#include <string.h>

int jinja_vars_create(const jinja_opts *opts, jinja_vars **out)
{
    jinja_vars *v = calloc(1, sizeof *v);
    *out = v;
    if (!v)
        return INF_ERR_NOMEM;
    v->o = opts ? *opts : jinja_opts_default();
    v->c.o = &v->o;
    v->c.arena.cap = v->o.max_memory;
    return INF_OK;
}

void jinja_vars_destroy(jinja_vars *v)
{
    if (!v)
        return;
    jx_arena_free(&v->c.arena);
    free(v);
}

/* The context's error as the caller's (without jx_fail's "line 0: "). */
static int vfail(jinja_vars *v, const char *what, inf_err *err)
{
    const char *m = v->c.msg;
    if (!strncmp(m, "line 0: ", 8))
        m += 8;
    int code = v->c.code ? v->c.code : INF_ERR_INVALID;
    inf_fail(err, code, "%s%s%s", what ? what : "", what ? ": " : "", m);
    v->c.failed = 0; /* the next call starts clean */
    v->c.code = 0;
    return code;
}

static int bind(jinja_vars *v, const char *name, size_t nlen, jv val)
{
    jv n;
    if (jv_str(&v->c, name, nlen, &n))
        return -1;
    return jx_scope_set(&v->c, &v->s, n.u.s->b, val);
}

int jinja_vars_set_json(jinja_vars *v, const char *name, const char *json, size_t len,
                        inf_err *err)
{
    jv val;
    if (jx_json_read(&v->c, json, len, &val) || bind(v, name, strlen(name), val))
        return vfail(v, name, err);
    return INF_OK;
}

int jinja_vars_set_bool(jinja_vars *v, const char *name, int b, inf_err *err)
{
    if (bind(v, name, strlen(name), jv_bool(b)))
        return vfail(v, name, err);
    return INF_OK;
}

int jinja_vars_set_members(jinja_vars *v, const char *json, size_t len,
                           const char *const *skip, inf_err *err)
{
    jv d;
    if (jx_json_read(&v->c, json, len, &d))
        return vfail(v, NULL, err);
    if (d.t != JV_DICT)
        return inf_fail(err, INF_ERR_INVALID, "expected a JSON object");
    for (int i = 0; i < d.u.d->n; i++) {
        const jstr *k = d.u.d->k[i].u.s;
        int skipped = 0;
        for (int s = 0; skip && skip[s] && !skipped; s++)
            skipped = strlen(skip[s]) == k->len && !memcmp(skip[s], k->b, k->len);
        if (!skipped && jx_scope_set(&v->c, &v->s, k->b, d.u.d->v[i]))
            return vfail(v, NULL, err);
    }
    return INF_OK;
}

/* ------------------------------------------------------- vLLM's messages */

static int is_key(const jv *k, const char *name)
{
    size_t n = strlen(name);
    return k->t == JV_STR && k->u.s->len == n && !memcmp(k->u.s->b, name, n);
}

static const jv *get(jv d, const char *key)
{
    return d.t == JV_DICT ? jv_dict_get(d, key, strlen(key)) : NULL;
}

static int put(jctx *c, jv d, const char *key, jv val)
{
    jv k;
    return jv_cstr(c, key, &k) || jv_dict_add(c, d, k, val);
}

/* Keys a message keeps, and the types they must have to be kept. */
static int kept(const jv *k, const jv *val, const char *role)
{
    if (is_key(k, "role") || is_key(k, "content"))
        return 1;
    if (is_key(k, "name") || is_key(k, "reasoning_content"))
        return val->t == JV_STR;
    if (is_key(k, "tool_calls"))
        return !strcmp(role, "assistant") && val->t == JV_LIST;
    if (is_key(k, "tool_call_id"))
        return !strcmp(role, "tool") && val->t == JV_STR;
    return 0;
}

/* The content vLLM hands the template. */
static int content_for(jinja_vars *v, jv in, int openai, int i, jv *out, inf_err *err)
{
    jctx *c = &v->c;
    if (openai) {
        if (jv_list_new(c, 0, out))
            return vfail(v, NULL, err);
        jv part, t;
        if (in.t == JV_STR) {
            if (jv_dict_new(c, &part) || jv_cstr(c, "text", &t) || put(c, part, "type", t) ||
                put(c, part, "text", in) || jv_list_push(c, *out, part))
                return vfail(v, NULL, err);
        } else if (in.t == JV_LIST) {
            for (int k = 0; k < in.u.l->n; k++) {
                const jv *type = get(in.u.l->v[k], "type"), *text = get(in.u.l->v[k], "text");
                if (jv_dict_new(c, &part))
                    return vfail(v, NULL, err);
                if (type && type->t == JV_STR)
                    t = *type;
                else if (jv_cstr(c, "text", &t))
                    return vfail(v, NULL, err);
                if (put(c, part, "type", t) ||
                    (text && text->t == JV_STR && put(c, part, "text", *text)) ||
                    jv_list_push(c, *out, part))
                    return vfail(v, NULL, err);
            }
        }
        return INF_OK;
    }
    if (in.t == JV_STR) {
        *out = in;
        return INF_OK;
    }
    if (in.t == JV_NONE || in.t == JV_UNDEF)
        return jv_str(c, "", 0, out) ? vfail(v, NULL, err) : INF_OK;
    if (in.t != JV_LIST)
        return inf_fail(err, INF_ERR_INVALID,
                        "chat template: messages[%d].content must be a string, a list of parts "
                        "or null", i);
    size_t total = 0;
    for (int k = 0; k < in.u.l->n; k++) {
        const jv *text = get(in.u.l->v[k], "text");
        if (text && text->t == JV_STR)
            total += text->u.s->len + 1;
    }
    if (jv_str(c, NULL, total ? total - 1 : 0, out))
        return vfail(v, NULL, err);
    char *w = out->u.s->b;
    int first = 1;
    for (int k = 0; k < in.u.l->n; k++) {
        const jv *text = get(in.u.l->v[k], "text");
        if (!text || text->t != JV_STR)
            continue;
        if (!first)
            *w++ = '\n';
        first = 0;
        memcpy(w, text->u.s->b, text->u.s->len);
        w += text->u.s->len;
    }
    return INF_OK;
}

/* Each tool call's function.arguments a mapping (json.loads of the
 * string), in place: the values are this request's own. */
static int tool_calls(jinja_vars *v, jv calls, int i, inf_err *err)
{
    for (int k = 0; k < calls.u.l->n; k++) {
        const jv *fn = get(calls.u.l->v[k], "function");
        jv *args = fn && fn->t == JV_DICT ? jv_dict_get(*fn, "arguments", 9) : NULL;
        if (!args || args->t != JV_STR)
            continue;
        jv parsed;
        if (jx_json_read(&v->c, args->u.s->b, args->u.s->len, &parsed)) {
            if (v->c.code == INF_ERR_NOMEM)
                return vfail(v, NULL, err);
            v->c.failed = 0;
            v->c.code = 0;
            return inf_fail(err, INF_ERR_INVALID,
                            "messages[%d].tool_calls[%d].function.arguments is not valid JSON",
                            i, k);
        }
        *args = parsed;
    }
    return INF_OK;
}

int jinja_vars_set_messages(jinja_vars *v, const char *json, size_t len, int openai,
                            inf_err *err)
{
    jctx *c = &v->c;
    jv in, msgs;
    int rc;
    if (jx_json_read(c, json, len, &in))
        return vfail(v, "messages", err);
    if (in.t != JV_LIST || in.u.l->n == 0)
        return inf_fail(err, INF_ERR_INVALID, "chat template: messages must be a non-empty list");
    if (jv_list_new(c, in.u.l->n, &msgs))
        return vfail(v, NULL, err);
    for (int i = 0; i < in.u.l->n; i++) {
        jv m = in.u.l->v[i], out;
        const jv *role = get(m, "role");
        if (!role || role->t != JV_STR)
            return inf_fail(err, INF_ERR_INVALID, "chat template: messages[%d] needs a role", i);
        if (jv_dict_new(c, &out))
            return vfail(v, NULL, err);
        int has_content = 0;
        for (int k = 0; k < m.u.d->n; k++) {
            jv key = m.u.d->k[k], val = m.u.d->v[k];
            if (!kept(&key, &val, role->u.s->b))
                continue;
            if (is_key(&key, "content")) {
                has_content = 1;
                if ((openai || val.t != JV_STR) &&
                    (rc = content_for(v, val, openai, i, &val, err)))
                    return rc;
            } else if (is_key(&key, "tool_calls") && (rc = tool_calls(v, val, i, err))) {
                return rc;
            }
            if (jv_dict_add(c, out, key, val))
                return vfail(v, NULL, err);
        }
        if (!has_content) {
            jv val;
            if ((rc = content_for(v, jv_none(), openai, i, &val, err)))
                return rc;
            if (put(c, out, "content", val))
                return vfail(v, NULL, err);
        }
        if (jv_list_push(c, msgs, out))
            return vfail(v, NULL, err);
    }
    if (bind(v, "messages", 8, msgs))
        return vfail(v, NULL, err);
    return INF_OK;
}

const char *jinja_vars_final_text(const jinja_vars *v, size_t *len)
{
    const jv *msgs = NULL;
    for (int i = 0; i < v->s.n; i++)
        if (!strcmp(v->s.names[i], "messages"))
            msgs = &v->s.vals[i];
    if (!msgs || msgs->t != JV_LIST || !msgs->u.l->n)
        return NULL;
    const jv *c = get(msgs->u.l->v[msgs->u.l->n - 1], "content"), *t = NULL;
    if (c && c->t == JV_STR)
        t = c;
    for (int k = 0; c && c->t == JV_LIST && k < c->u.l->n; k++) {
        const jv *x = get(c->u.l->v[k], "text");
        if (x && x->t == JV_STR)
            t = x;
    }
    if (!t)
        return NULL;
    *len = t->u.s->len;
    return t->u.s->b;
}
