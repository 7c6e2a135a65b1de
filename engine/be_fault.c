#include "engine/be_fault.h"

#include <stdatomic.h>
#include <stdlib.h>

typedef struct be_fault {
    be_backend base;        /* first: the engine sees a be_backend */
    be_backend *inner;
    be_fault_config cfg;
    atomic_long failed;
    /* which queued steps fail, oldest first: the inner backend only sees the
     * others, so waits pair with submits in order */
    unsigned char queued[16];
    int head, n;
} be_fault;

static int fault_submit(be_backend *be, const be_batch *b, const be_smp_row *smp, inf_err *err)
{
    be_fault *f = (be_fault *)be;
    if (f->n == (int)sizeof f->queued)
        return inf_fail(err, INF_ERR_INVALID, "fault injection: more steps queued than waited");
    int fail = 0;
    for (int i = 0; i < b->n_tokens && !fail; i++)
        fail = b->tokens[i] == f->cfg.token_id;
    if (!fail) {
        int rc = be_submit(f->inner, b, smp, err);
        if (rc)
            return rc;
    }
    f->queued[(f->head + f->n++) % (int)sizeof f->queued] = (unsigned char)fail;
    return INF_OK;
}

static int fault_wait(be_backend *be, const be_out *out, inf_err *err)
{
    be_fault *f = (be_fault *)be;
    if (!f->n)
        return inf_fail(err, INF_ERR_INVALID, "fault injection: wait without a step");
    int fail = f->queued[f->head];
    f->head = (f->head + 1) % (int)sizeof f->queued;
    f->n--;
    if (!fail)
        return be_wait(f->inner, out, err);
    atomic_fetch_add(&f->failed, 1);
    return inf_fail(err, INF_ERR_IO, "backend step failed (fault injected: the batch holds "
                                     "token %d)", f->cfg.token_id);
}

static void fault_destroy(be_backend *be)
{
    free(be);
}

static const be_ops fault_ops = {.name = "fault", .submit = fault_submit,
                                 .wait = fault_wait,
                                 .destroy = fault_destroy};

int be_fault_create(be_backend *inner, const be_fault_config *c, be_backend **out,
                    inf_err *err)
{
    *out = NULL;
    if (!inner || c->token_id < 0 || c->token_id >= inner->vocab_size)
        return inf_fail(err, INF_ERR_INVALID, "fault injection: token id %d is outside the "
                        "vocabulary", c->token_id);
    be_fault *f = calloc(1, sizeof *f);
    if (!f)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    f->base = *inner;
    f->base.ops = &fault_ops;
    f->base.placeholders = 0; /* a failed step never reached the inner backend:
                                 a placeholder after it would name another's */
    f->inner = inner;
    f->cfg = *c;
    atomic_init(&f->failed, 0);
    *out = &f->base;
    return INF_OK;
}

long be_fault_count(const be_backend *be)
{
    return be && be->ops == &fault_ops ? atomic_load(&((be_fault *)be)->failed) : 0;
}
