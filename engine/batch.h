/* batch_: builds the be_batch of one step, the one place a batch is laid
 * out (the engine's step, the draft model's catch-up and draft steps). A
 * builder owns its arrays, sized once at creation; a step resets it, adds
 * each sequence's token range (positions and KV slots from the sequence's
 * block table) and the rows it wants logits of, then hands
 * the backend batch_get(). Nothing is allocated per step. */
#ifndef INFERD_BATCH_H
#define INFERD_BATCH_H

#include "be.h"
#include "kv.h"

typedef struct batch_limits {
    int max_tokens;  /* tokens in one batch                              */
    int max_seqs;    /* sequences in one batch                           */
    int max_rows;    /* logit rows in one batch                          */
    int max_blocks;  /* block-table width: blocks of the longest sequence */
} batch_limits;

typedef struct batch_builder batch_builder;

int batch_create(const batch_limits *lim, batch_builder **out, inf_err *err);
void batch_destroy(batch_builder *b); /* NULL-safe */

/* Empties the batch for the next step. */
void batch_reset(batch_builder *b);

/* Appends one sequence that computes tokens[0..n) at positions pos0.. (its
 * context is pos0 + n after the step), KV slots from s, whose table must
 * cover those positions. Returns the batch index of its first token, or -1
 * when the batch's limits would be passed (nothing is added then). */
int batch_add_seq(batch_builder *b, const kv_pool *kv, const kv_seq *s, const int32_t *tokens,
                  int pos0, int n);

/* Asks for the logits of batch token t; returns its logits row (rows come
 * back in the order they were asked), or -1 past max_rows. */
int batch_add_logits(batch_builder *b, int t);

/* Whether the batches also ask for the final hidden state of each logit
 * row (be_batch.want_hidden); kept across resets. */
void batch_set_want_hidden(batch_builder *b, int on);

int batch_n_tokens(const batch_builder *b);
int batch_n_seqs(const batch_builder *b);
int batch_n_logits(const batch_builder *b);

/* The batch as built; valid until the next reset or add. */
const be_batch *batch_get(batch_builder *b);

#endif
