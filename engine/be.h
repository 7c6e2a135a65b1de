/* be_: the backend seam. The engine hands a backend one flattened batch per
 * step and gets logits back (and, when asked, the final hidden state of the
 * same rows, or ids sampled on the device); a backend never sees requests,
 * text or HTTP.
 *
 * A step is submitted, then waited for: submit queues it and may return
 * before the backend has run it (CUDA: the host prepares the next step while
 * the GPU works), wait delivers its results. The CPU backend runs the step
 * inside wait. be_forward is the two back to back. */
#ifndef INFERD_BE_H
#define INFERD_BE_H

#include "common.h"

/* One engine step: every token of every sequence in it, prompt chunks and
 * decode tokens alike. A token at position p attends to positions 0..p of its
 * sequence, read from KV slots through the sequence's block table (its own KV
 * is written first, at slots[i]). */
typedef struct be_batch {
    int n_tokens;
    const int32_t *tokens;      /* [n_tokens]                                 */
    const int32_t *positions;   /* [n_tokens]                                 */
    const int32_t *slots;       /* [n_tokens] block * block_size + offset      */
    int n_seqs;
    const int32_t *seq_start;   /* [n_seqs+1] token ranges per sequence        */
    const int32_t *seq_len;     /* [n_seqs] context length after this step     */
    const int32_t *block_table; /* [n_seqs][max_blocks]                        */
    int max_blocks;
    const int32_t *logit_rows;  /* [n_logits] token indices needing logits     */
    int n_logits;
    int want_hidden;            /* also the final hidden state (after the final
                                   norm: the LM head's input) of each logit row,
                                   for a speculator that reads it             */
} be_batch;

/* Sampling of one logit row on the device (backends with device_sampling),
 * as smp_ does it (engine/smp.h): temperature 0 is the argmax (lowest id on
 * ties); else softmax(logits / T) restricted by top-k, then top-p (mass
 * within the top-k set), then min-p, renormalized, and one inverse-CDF draw
 * in token-id order at u. A token mask (a grammar's: gram_match_mask) is
 * applied first, as the host's chain applies it: a token whose bit is clear
 * has logit -inf before the temperature and every filter, so greedy is the
 * argmax over the allowed tokens. No other logits processor (engine/lp.h)
 * runs on the device: rows whose request has any are sampled on the host. */
typedef struct be_smp_row {
    float temperature; /* >= 0                                               */
    int32_t top_k;     /* <= 0 or >= vocab: off                              */
    float top_p;       /* (0, 1]; 1: off                                     */
    float min_p;       /* [0, 1]; 0: off                                     */
    double u;          /* the request's uniform in [0, 1) (smp_rng_uniform)  */
    const uint32_t *mask; /* NULL: none; else (vocab_size + 31) / 32 words,
                             bit t % 32 of word t / 32 set: token t allowed.
                             Host memory at be_submit (a backend copies it
                             before submit returns)                          */
} be_smp_row;

/* Where a waited-for step's results go; any pointer may be NULL to drop
 * that result. */
typedef struct be_out {
    float *logits;   /* [n_logits][vocab_size], for a step without sampling  */
    int32_t *ids;    /* [n_logits], for a step submitted with smp rows       */
    float *hidden;   /* [n_logits][hidden_size], for a step with want_hidden */
} be_out;

typedef struct be_backend be_backend;

typedef struct be_ops {
    const char *name;
    /* Queues the model over b. smp: one row per logit row to sample on the
     * device (only with device_sampling; NULL: the step returns logits).
     * b and its arrays must stay valid until the matching wait (a backend
     * may read them there). At most max_inflight steps may be queued. */
    int (*submit)(be_backend *be, const be_batch *b, const be_smp_row *smp, inf_err *err);
    /* Waits for the oldest queued step and writes its results (logits or
     * ids, in logit_rows order; hidden states when it wanted them) where out
     * says. A failure of the step is reported here. */
    int (*wait)(be_backend *be, const be_out *out, inf_err *err);
    void (*destroy)(be_backend *be);
} be_ops;

/* Implementations embed this as their first member. */
struct be_backend {
    const be_ops *ops;
    int vocab_size;
    int hidden_size;     /* floats of one row of be_out.hidden            */
    int block_size;
    int num_blocks;      /* KV blocks the backend holds storage for       */
    int max_inflight;    /* steps submit may queue before a wait (>= 1)    */
    int device_sampling; /* submit takes be_smp_row rows                  */
    int placeholders;    /* a token -1 - i in a batch is the id the step
                            submitted before it sampled for logit row i
                            (resolved on the device; that step had smp rows) */
};

/* Checks a batch against the backend's limits (at most max_tokens tokens;
 * token ids in [-n_placeholders, vocab_size), the negative ones being
 * placeholders a backend resolves itself (0 where it has none); slot ranges;
 * sequences no longer than max_ctx, positions inside them; seq_start
 * monotone; logit rows in range); the engine builds batches, so a failure
 * here is a bug upstream. */
int be_batch_check(const be_backend *be, const be_batch *b, int max_tokens, int max_ctx,
                   int n_placeholders, inf_err *err);

static inline int be_submit(be_backend *be, const be_batch *b, const be_smp_row *smp,
                            inf_err *err)
{
    return be->ops->submit(be, b, smp, err);
}

static inline int be_wait(be_backend *be, const be_out *out, inf_err *err)
{
    return be->ops->wait(be, out, err);
}

/* One step now: submit, then wait, results into out. */
static inline int be_forward_out(be_backend *be, const be_batch *b, const be_out *out,
                                 inf_err *err)
{
    int rc = be_submit(be, b, NULL, err);
    return rc ? rc : be_wait(be, out, err);
}

/* One step now, logits only. */
static inline int be_forward(be_backend *be, const be_batch *b, float *logits, inf_err *err)
{
    be_out out = {logits, NULL, NULL}; /* positional: nvcc's C++ includes this */
    return be_forward_out(be, b, &out, err);
}

static inline void be_destroy(be_backend *be)
{
    if (be)
        be->ops->destroy(be);
}

#endif
