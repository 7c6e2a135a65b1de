/* spec_: speculative decoding. A proposer drafts up to k tokens for a
 * sequence; the target model computes them all in one forward (a batch row
 * per drafted token); the verifier keeps the longest acceptable prefix plus
 * one token of the target's own, so the output distribution is exactly the
 * target's (Leviathan et al. 2023; Chen et al. 2023).
 *
 * Proposers sit behind spec_proposer_ops: the n-gram prompt lookup here, the
 * draft model in spec_draft.h; one that reads the target's final hidden
 * state (an MLP speculator) says so in wants_hidden and finds it in
 * spec_seq.hidden. */
#ifndef INFERD_SPEC_H
#define INFERD_SPEC_H

#include "common.h"
#include "smp.h"

/* ---- the proposer interface ------------------------------------------------ */

/* A sequence as a proposer sees it: its tokens (prompt then output), and a
 * slot for the proposer's own per-sequence state. */
typedef struct spec_seq {
    const int32_t *tokens;
    int n_tokens;
    int n_prompt;
    void *state;              /* proposer-owned; NULL until first proposal   */
    /* [hidden_size] the target's final hidden state (after the final norm)
     * at the row its last token was sampled from, i.e. at position
     * n_tokens - 2; only for proposers with wants_hidden, else NULL */
    const float *hidden;
} spec_seq;

typedef struct spec_proposer spec_proposer;

typedef struct spec_proposer_ops {
    const char *name;
    /* Drafts up to k[i] tokens for each sequence into drafts[i*kmax..]; sets
     * k[i] to the number drafted (0 is fine). probs: when not NULL, the
     * proposal distribution of each drafted token (probs[(i*kmax+j)*V..]),
     * as the draft sampled it with params[i]; a proposer whose proposals
     * are deterministic leaves it untouched and says so in `deterministic`. */
    int (*propose)(spec_proposer *p, spec_seq *const *seqs, int n, const smp_params *params,
                   int kmax, int *k, int32_t *drafts, float *probs, inf_err *err);
    /* The first n_valid tokens of s are final (the rest were rejected or
     * not yet computed): roll back state beyond them. */
    void (*rollback)(spec_proposer *p, spec_seq *s, int n_valid);
    /* s is gone: free its state. */
    void (*release)(spec_proposer *p, spec_seq *s);
    void (*destroy)(spec_proposer *p);
    int deterministic;        /* proposals are point masses (no probs)      */
    int wants_hidden;         /* reads spec_seq.hidden                      */
} spec_proposer_ops;

struct spec_proposer {
    const spec_proposer_ops *ops;
};

/* ---- n-gram prompt lookup ----------------------------------------------------- */

typedef struct spec_ngram_config {
    int lookup_max;           /* longest n-gram matched (vLLM's prompt_lookup_max) */
    int lookup_min;           /* shortest (prompt_lookup_min)                      */
} spec_ngram_config;

/* Finds the most recent earlier occurrence of the sequence's last n tokens
 * (n from lookup_max down to lookup_min) in its prompt and output, and
 * proposes the tokens that followed it. Each sequence keeps an index of its
 * n-grams updated as tokens arrive, so a lookup costs the same at any
 * context length. */
int spec_ngram_create(const spec_ngram_config *cfg, spec_proposer **out, inf_err *err);

/* The lookup as a pure function (no index), for tests and as the
 * definition the indexed one must match: returns the number of tokens
 * proposed (at most k) into out. */
int spec_ngram_lookup(const int32_t *tokens, int n_tokens, int lookup_min, int lookup_max, int k,
                      int32_t *out);

/* ---- verification ------------------------------------------------------------- */

/* The outcome for one sequence: drafts[0..accepted) are kept, then `next`
 * (the target's own token: a recovered one after a rejection, or the bonus
 * when all k were accepted). */
typedef struct spec_result {
    int accepted;
    int32_t next;
    int bonus;                /* all drafts accepted; next is the bonus       */
} spec_result;

/* Rejection sampling over flat arrays. p: the target's distribution at each
 * of the k+1 positions ([k+1][V], each the distribution the request samples
 * from there). q: the proposal distributions ([k][V]) or NULL for point-mass
 * proposals. Draws uniforms from rng: one per drafted token examined, one
 * for the token it ends with. Greedy requests don't come here: they accept
 * a draft exactly when it equals the target's argmax. */
spec_result spec_verify(int k, const int32_t *drafts, const float *p, const float *q, int V,
                        smp_rng *rng, float *scratch /* [V] */);

#endif
