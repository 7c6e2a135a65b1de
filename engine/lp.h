/* lp_: logits processors, the one place where a request's per-step changes
 * to its logits happen (logit_bias, min_tokens' EOS and stop-id suppression,
 * repetition/frequency/presence penalties, and later grammar masks), before
 * the sampler turns the row into a token (smp_: temperature, filters, draw).
 *
 * A processor is an ops table and its own state. It sees the row for the
 * next token (apply), is told each token appended to the output (accept),
 * and is told when the last n of those are taken back (rollback): when the
 * engine verifies k drafted tokens it accepts them one by one as it moves
 * from row to row, then rolls back the ones the verifier rejected, so a
 * stateful processor (a grammar's parser state, the penalty history, the
 * min_tokens count) always matches the sequence as it stands.
 *
 * A request's processors form a chain applied in order: logit_bias, then
 * min_tokens, then penalties (vLLM's order), then any the caller added (a
 * grammar mask). An empty chain leaves the row untouched. */
#ifndef INFERD_LP_H
#define INFERD_LP_H

#include "common.h"
#include "smp.h"

typedef struct lp_proc lp_proc;

typedef struct lp_ops {
    const char *name;
    /* Changes the row predicting the next token in place. */
    void (*apply)(lp_proc *p, float *logits, int n_vocab);
    /* token is now the output's last token (may be NULL: stateless). */
    void (*accept)(lp_proc *p, int32_t token);
    /* The last n_tokens accepted tokens are gone (may be NULL). */
    void (*rollback)(lp_proc *p, int n_tokens);
    void (*destroy)(lp_proc *p);
} lp_ops;

/* Implementations embed this as their first member. */
struct lp_proc {
    const lp_ops *ops;
};

/* ---- the chain ----------------------------------------------------------- */

#define LP_MAX_PROCS 8

typedef struct lp_chain {
    lp_proc *procs[LP_MAX_PROCS];
    int n;
} lp_chain;

/* Appends p; the chain owns it from here on, also when this fails
 * (INF_ERR_INVALID: more than LP_MAX_PROCS). */
int lp_chain_add(lp_chain *c, lp_proc *p, inf_err *err);

/* Every processor, in order. */
void lp_chain_apply(lp_chain *c, float *logits, int n_vocab);
void lp_chain_accept(lp_chain *c, int32_t token);
void lp_chain_rollback(lp_chain *c, int n_tokens);

/* Destroys every processor; the chain is empty again. */
void lp_chain_clear(lp_chain *c);

static inline int lp_chain_empty(const lp_chain *c) { return c->n == 0; }

/* ---- the built-in processors ---------------------------------------------- */

/* logit_bias: logits[ids[i]] += bias[i] (ids outside the row ignored);
 * stateless. The arrays are copied. */
int lp_bias_create(const int32_t *ids, const float *bias, int n, lp_proc **out, inf_err *err);

/* min_tokens: while fewer than min_tokens tokens are out (counting from
 * n_out now), ids[] (EOS ids and stop token ids) are set to -inf. Copied. */
int lp_min_tokens_create(int min_tokens, int n_out, const int32_t *ids, int n_ids,
                         lp_proc **out, inf_err *err);

/* Repetition, frequency and presence penalties of p (smp_apply_penalties,
 * bit for bit) over the prompt (borrowed: must outlive the processor) and
 * the output accepted so far (up to max_output tokens; kept here). scratch
 * is the caller's sampler context (borrowed; used by apply only). */
int lp_penalties_create(smp_ctx *scratch, const smp_params *p, const int32_t *prompt,
                        int n_prompt, int max_output, lp_proc **out, inf_err *err);

/* Whether p asks for any penalty (else no penalty processor is needed). */
int lp_penalized(const smp_params *p);

#endif
