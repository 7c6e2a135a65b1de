/* spec_draft: a smaller model with the same tokenizer proposes tokens. It
 * has its own backend and paged KV blocks; each proposal first catches the
 * draft up on the sequence's new tokens, then runs k steps batched over all
 * drafting sequences; its KV is rolled back with the target's when drafts
 * are rejected. A sequence the draft's KV pool or context cannot hold just
 * gets no proposals (never an error). When every layer of the draft has a
 * sliding window, the draft's KV blocks wholly behind the window are given
 * back each proposal, as the target's are, so its KV stays bounded. */
#ifndef INFERD_SPEC_DRAFT_H
#define INFERD_SPEC_DRAFT_H

#include "be.h"
#include "model.h"
#include "spec.h"
#include "tok.h"

typedef struct spec_draft_config {
    const model *draft;        /* borrowed; must outlive the proposer       */
    be_backend *backend;       /* the draft's backend (borrowed)            */
    int num_blocks, block_size; /* the draft backend's KV storage           */
    int max_tokens;            /* most tokens the draft backend takes a step */
    int max_seqs;              /* sequences drafting at once, at most       */
    int max_len;               /* longest sequence                          */
    int draft_len;             /* the draft's own context: longer sequences
                                  get no proposals (0: max_len)             */
    int vocab;
} spec_draft_config;

int spec_draft_create(const spec_draft_config *cfg, spec_proposer **out, inf_err *err);

/* KV blocks the draft holds now (all sequences), or -1 when p is not a
 * draft-model proposer: the counter that shows a windowed draft's KV flat. */
int spec_draft_kv_blocks_used(const spec_proposer *p);

/* Checks that the draft's tokenizer is the target's (same pieces, same
 * special ids): a mismatch is a clear start-up error naming the first
 * difference. */
int spec_draft_check_tokenizers(const tok *target, const tok *draft, const char *draft_dir,
                                inf_err *err);

#endif
