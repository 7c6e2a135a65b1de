#include "engine/be_fault.h"

#include <stdatomic.h>
#include <stdlib.h>

typedef struct be_fault {
    be_backend base;        /* first: the engine sees a be_backend */
    be_backend *inner;
    be_fault_config cfg;
    atomic_long failed;
} be_fault;

static int fault_forward(be_backend *be, const be_batch *b, float *logits, inf_err *err)
{
    be_fault *f = (be_fault *)be;
    for (int i = 0; i < b->n_tokens; i++)
        if (b->tokens[i] == f->cfg.token_id) {
            atomic_fetch_add(&f->failed, 1);
            return inf_fail(err, INF_ERR_IO, "backend step failed (fault injected: the batch "
                                             "holds token %d)", f->cfg.token_id);
        }
    return be_forward(f->inner, b, logits, err);
}

static void fault_destroy(be_backend *be)
{
    free(be);
}

static const be_ops fault_ops = {.name = "fault", .forward = fault_forward,
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
