/* be_: the backend seam. The engine hands a backend one flattened batch per
 * step and gets logits back; a backend never sees requests, text or HTTP. */
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
} be_batch;

typedef struct be_backend be_backend;

typedef struct be_ops {
    const char *name;
    /* Runs the model over b; writes n_logits rows of vocab floats to logits,
     * in logit_rows order. */
    int (*forward)(be_backend *be, const be_batch *b, float *logits,
                   inf_err *err);
    void (*destroy)(be_backend *be);
} be_ops;

/* Implementations embed this as their first member. */
struct be_backend {
    const be_ops *ops;
    int vocab_size;
    int block_size;
    int num_blocks;  /* KV blocks the backend holds storage for */
};

/* Checks a batch against the backend's limits (at most max_tokens tokens;
 * token ids in [-n_placeholders, vocab_size), the negative ones being
 * placeholders a backend resolves itself (0 where it has none); slot ranges;
 * sequences no longer than max_ctx, positions inside them; seq_start
 * monotone; logit rows in range); the engine builds batches, so a failure
 * here is a bug upstream. */
int be_batch_check(const be_backend *be, const be_batch *b, int max_tokens, int max_ctx,
                   int n_placeholders, inf_err *err);

static inline int be_forward(be_backend *be, const be_batch *b, float *logits,
                             inf_err *err)
{
    return be->ops->forward(be, b, logits, err);
}

static inline void be_destroy(be_backend *be)
{
    if (be)
        be->ops->destroy(be);
}

#endif
