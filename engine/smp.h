/* smp_: turns one row of logits into the next token.
 *
 * Order, as vLLM's: penalties (repetition, then frequency and presence) on the
 * raw logits; then temperature; then top-k, top-p and min-p filters; then a
 * draw with the request's own generator. temperature 0 is greedy: the argmax
 * of the penalized logits (lowest id on a tie), no filters, no draw.
 *
 * Filters, in vLLM's order (its v0 sampler): top-k, then top-p, then min-p.
 * Each filter sees the survivors of the ones before it renormalized to sum 1:
 * top-p measures mass within the top-k set (as vLLM does); min-p cuts relative
 * to the largest probability, which every filter keeps, so for min-p the
 * renormalization changes nothing. Every filter keeps at least one token, and
 * ties go to the lower token id, so the kept set is always deterministic.
 * NaN logits get probability 0; a row whose largest logit is not finite
 * (+inf, or nothing but -inf and NaN) is treated as greedy. */
#ifndef INFERD_SMP_H
#define INFERD_SMP_H

#include "common.h"

typedef struct smp_params {
    float temperature;        /* >= 0; 0 means greedy                          */
    int top_k;                /* keep the k most likely; <= 0 or >= vocab: off  */
    float top_p;              /* smallest set with mass >= top_p; (0,1], 1: off */
    float min_p;              /* drop p < min_p * p_max; [0,1], 0: off          */
    float presence_penalty;   /* [-2,2], subtracted once per token in output    */
    float frequency_penalty;  /* [-2,2], subtracted per occurrence in output    */
    float repetition_penalty; /* > 0, 1: off; tokens in prompt or output:
                                 logit > 0 ? logit / r : logit * r             */
    uint64_t seed;            /* seeds the request's generator                 */
} smp_params;

/* temperature 1, no filters, no penalties, seed 0. */
smp_params smp_params_default(void);

/* Checks ranges; INF_ERR_INVALID with a message naming the field. */
int smp_params_check(const smp_params *p, inf_err *err);

/* A request's own random generator (xoshiro256**): same seed, same draws,
 * whatever else runs. */
typedef struct smp_rng {
    uint64_t s[4];
} smp_rng;

void smp_rng_seed(smp_rng *r, uint64_t seed);
uint64_t smp_rng_next(smp_rng *r);
double smp_rng_uniform(smp_rng *r); /* in [0, 1), 53 random bits */

/* Tokens seen so far by one sequence, for penalties. */
typedef struct smp_history {
    const int32_t *prompt;
    int n_prompt;
    const int32_t *output;
    int n_output;
} smp_history;

/* Scratch space for one vocabulary size; one per engine thread. */
typedef struct smp_ctx smp_ctx;

int smp_create(int vocab, smp_ctx **out, inf_err *err);
void smp_destroy(smp_ctx *c); /* NULL-safe */

/* Applies repetition, frequency and presence penalties to logits in place.
 * h may be NULL (no history: nothing to do); ids outside [0, vocab) in it are
 * ignored (vLLM pads with vocab). */
void smp_apply_penalties(smp_ctx *c, const smp_params *p,
                         const smp_history *h, float *logits);

/* The distribution the request samples from, given (penalized) logits:
 * softmax(logits / T) restricted by top-k, top-p and min-p, renormalized;
 * one-hot on the argmax when T == 0. probs has vocab entries. */
void smp_probs(smp_ctx *c, const smp_params *p, const float *logits,
               float *probs);

/* The whole pipeline on one row: penalties (logits are modified), then greedy
 * or one draw from smp_probs with one uniform from rng. */
int32_t smp_sample(smp_ctx *c, const smp_params *p, const smp_history *h,
                   smp_rng *rng, float *logits);

/* Inverse-CDF draw: the first id, ascending, whose running sum of probs
 * exceeds u * (sum of probs). probs need not sum to 1; entries that are not
 * > 0 are never drawn (all of them: the argmax). smp_sample draws exactly
 * this way from smp_probs, so a rejection sampler can reproduce its draws. */
int32_t smp_draw(const float *probs, int n, double u);

/* Index of the largest value, lowest index on ties (NaNs never win; 0 when
 * everything is NaN or n <= 0). */
int32_t smp_argmax(const float *x, int n);

#endif
