/* Model output through the tool-call parsers (first byte: the kind and the
 * piece size) and the reasoning parsers: fed whole and in pieces, the
 * concatenated events must be the same. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/reason.h"
#include "server/tcall.h"

typedef struct agg {
    inf_buf out; /* type-tagged concatenation of every event */
    int last;
} agg;

static void on_ev(void *ctx, const tcall_event *e)
{
    agg *a = ctx;
    /* pieces of one kind in a row are one piece, however they were split */
    if (e->type == TCALL_EV_CALL || a->last != (int)e->type) {
        char tag[32];
        int n = snprintf(tag, sizeof tag, "\x01%d:%d:", (int)e->type, e->index);
        inf_buf_put(&a->out, tag, (size_t)n);
    }
    a->last = e->type == TCALL_EV_CALL ? -1 : (int)e->type;
    inf_buf_put(&a->out, e->text, e->len);
}

static void on_rsn(void *ctx, int reasoning, const char *t, size_t n)
{
    tcall_event e = {reasoning ? TCALL_EV_REASONING : TCALL_EV_CONTENT, 0, t, n};
    on_ev(ctx, &e);
}

static void run(int kind, const char *s, size_t n, size_t piece, agg *a)
{
    if (kind < 6) {
        tcall *p = NULL;
        if (tcall_create((tcall_kind)kind, &p, NULL))
            return;
        for (size_t i = 0; i < n; i += piece)
            tcall_feed(p, s + i, n - i < piece ? n - i : piece, on_ev, a);
        tcall_finish(p, on_ev, a);
        tcall_destroy(p);
    } else {
        rsn *p = NULL;
        if (rsn_create(kind == 6 ? RSN_DEEPSEEK_R1 : RSN_QWEN3, &p, NULL))
            return;
        for (size_t i = 0; i < n; i += piece)
            rsn_feed(p, s + i, n - i < piece ? n - i : piece, on_rsn, a);
        rsn_finish(p, on_rsn, a);
        rsn_destroy(p);
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    int kind = data[0] % 8;
    size_t piece = 1 + data[0] / 8 % 7;
    agg whole = {{0}, -2}, parts = {{0}, -2};
    run(kind, (const char *)data + 1, size - 1, size, &whole);
    run(kind, (const char *)data + 1, size - 1, piece, &parts);
    if (whole.out.len != parts.out.len || (whole.out.len && memcmp(whole.out.p, parts.out.p, whole.out.len)))
        abort();
    free(whole.out.p);
    free(parts.out.p);
    return 0;
}
