/* Reasoning parsers (see reason.h): three states and a held-back tail. */
#include <stdlib.h>
#include <string.h>

#include "reason.h"

enum { UNDECIDED, REASONING, CONTENT };

struct rsn {
    rsn_kind kind;
    int state;
    int at_start;   /* nothing but whitespace seen in this state yet */
    inf_buf held;   /* text not yet emitted                          */
};

int rsn_kind_parse(const char *name, rsn_kind *out, inf_err *err)
{
    if (!strcmp(name, "deepseek_r1"))
        *out = RSN_DEEPSEEK_R1;
    else if (!strcmp(name, "qwen3"))
        *out = RSN_QWEN3;
    else
        return inf_fail(err, INF_ERR_INVALID, "unknown reasoning parser '%s' (known: deepseek_r1, qwen3)", name);
    return INF_OK;
}

int rsn_create(rsn_kind kind, rsn **out, inf_err *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return inf_fail(err, INF_ERR_NOMEM, "reasoning parser: out of memory");
    (*out)->kind = kind;
    (*out)->state = kind == RSN_QWEN3 ? UNDECIDED : REASONING;
    (*out)->at_start = 1;
    return INF_OK;
}

void rsn_destroy(rsn *r)
{
    if (!r)
        return;
    free(r->held.p);
    free(r);
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial(const char *s, size_t n, const char *tag)
{
    size_t m = strlen(tag);
    for (size_t h = m - 1 < n ? m - 1 : n; h > 0; h--)
        if (!memcmp(s + n - h, tag, h))
            return h;
    return 0;
}

static void drop(inf_buf *b, size_t n)
{
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

static void out(rsn_emit emit, void *ctx, int reasoning, const char *s, size_t n)
{
    if (n)
        emit(ctx, reasoning, s, n);
}

/* Runs over held text; final != 0 at the end of the output. */
static void run(rsn *r, rsn_emit emit, void *ctx, int final)
{
    for (;;) {
        char *s = r->held.p;
        size_t n = r->held.len, ws = 0;
        if (!n)
            return;
        while (ws < n && (s[ws] == ' ' || s[ws] == '\n' || s[ws] == '\t' || s[ws] == '\r'))
            ws++;
        if (r->state != CONTENT && r->at_start) {
            /* a leading <think> opens reasoning (qwen3) or is dropped (r1) */
            size_t m = strlen("<think>"), a = n - ws;
            if (a < m && !memcmp(s + ws, "<think>", a) && !final)
                return;
            if (a >= m && !memcmp(s + ws, "<think>", m)) {
                drop(&r->held, ws + m);
                r->state = REASONING;
                r->at_start = 0;
                continue;
            }
            if (ws < n || final) {
                r->at_start = 0;
                if (r->state == UNDECIDED)
                    r->state = CONTENT;
            } else {
                return;
            }
            continue;
        }
        if (r->state == CONTENT) {
            out(emit, ctx, 0, s, n);
            r->held.len = 0;
            return;
        }
        char *end = memmem(s, n, "</think>", 8);
        if (end) {
            out(emit, ctx, 1, s, (size_t)(end - s));
            drop(&r->held, (size_t)(end - s) + 8);
            r->state = CONTENT;
            continue;
        }
        size_t keep = final ? 0 : partial(s, n, "</think>");
        out(emit, ctx, 1, s, n - keep);
        drop(&r->held, n - keep);
        return;
    }
}

int rsn_feed(rsn *r, const char *text, size_t len, rsn_emit emit, void *ctx)
{
    inf_buf_put(&r->held, text, len);
    if (r->held.oom)
        return INF_ERR_NOMEM;
    run(r, emit, ctx, 0);
    return INF_OK;
}

int rsn_finish(rsn *r, rsn_emit emit, void *ctx)
{
    run(r, emit, ctx, 1);
    return INF_OK;
}
