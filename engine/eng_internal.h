/* The engine's private header: the request and engine structs and the calls
 * between its rooms (eng_* are the public API, eng.h; eng__* stay inside).
 *   eng.c       the thread, its inbox, admission, notification, lifecycle
 *   eng_req.c   requests and their output buffers (text, stop strings,
 *               logprobs)
 *   eng_step.c  one step: plan -> batch -> forward -> sample, and running
 *               one step ahead
 *   eng_emit.c  tokens into requests (detokenize, stop checks, output)
 *   eng_spec.c  speculation inside the step: propose, verify, roll back */
#ifndef INFERD_ENG_INTERNAL_H
#define INFERD_ENG_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "batch.h"
#include "eng.h"
#include "gram.h"
#include "kv.h"
#include "lp.h"
#include "sched.h"
#include "stop.h"

#define ENG_MAX_LOGPROBS 20

struct eng_req {
    atomic_int refs;
    atomic_int cancelled;
    void *user;
    /* parameters (immutable after create) */
    eng_params p;
    char **stop;
    int32_t *stop_ids, *bias_ids;
    float *bias;
    char *grammar;            /* GBNF text, or NULL                        */
    gram_match *gm;           /* its matcher, inside the grammar processor
                                 of lp (eng_gram.c); engine thread only     */
    struct eng_gram_proc *gproc;
    const char *gent_text;    /* its cache entry's key                     */
    /* engine-thread state */
    lp_chain lp;              /* its logits processors (the caller's until
                                 admission, then built-ins first)           */
    sched_seq seq;
    int n_output;
    int plp_next;             /* prompt logprobs: rows below it recorded    */
    int plp_row0, plp_rows;   /* this step's prompt rows (position plp_next
                                 on), at logits row plp_row0               */
    smp_rng rng;
    tok_stream *ts;
    stop *stopper;            /* stop strings, when the request has any     */
    char *sbuf;               /* stop_feed's output                         */
    size_t sbuf_cap;
    tok_stream *sts;          /* parse_special: the decoder keeping special
                                 tokens, its stop matcher, and whether that
                                 matched (its later text is dropped)        */
    stop *sstopper;
    int s_stopped;
    int active;               /* inside the engine                         */
    double t_arrival, t_last;  /* submit time; last token (for latencies)    */
    /* speculation */
    spec_seq ss;              /* the proposer's view and state             */
    float *hidden;            /* [hidden_size] the target's hidden state at
                                 the row of its last sampled token, for a
                                 proposer that wants it (else NULL)         */
    int has_hidden;
    int n_draft;              /* drafted tokens appended after the last real */
    int draft_slot;           /* row block of their probs in eng.dprobs     */
    double accept_avg;        /* recent acceptance (moving average)        */
    int spec_pause, spec_backoff; /* steps without drafting, next pause     */
    int spec_k;               /* draft length now: shrinks on rejections    */
    long plan_stamp;          /* step in which it was last planned          */
    int scheduled;            /* has been scheduled once (queue time)      */
    int touched;              /* on eng.touched this step                  */
    struct eng_req *next_touched;
    struct eng_req *next_in;  /* inbox link                                */
    /* output handed to the front end, under mu */
    pthread_mutex_t mu;
    eng_out out;
};

/* A step submitted to the backend: what its results are for. */
typedef struct eng_fly {
    int n;                      /* plan entries                             */
    int n_tokens;               /* batch tokens                             */
    struct eng_req **reqs;      /* [max_num_seqs] their requests (one
                                   reference each until the step is done)  */
    int *n_new;                 /* [max_num_seqs] tokens each computes      */
    int *row0, *nrows;          /* [max_num_seqs] logits rows of each entry  */
    int dev;                    /* sampled on the device: ids come back     */
    batch_builder *bb;          /* its batch, valid until its wait          */
    be_smp_row *smp_rows;       /* [max_rows] device sampling, else NULL    */
} eng_fly;

struct eng {
    eng_config cfg;
    const model *m;
    const tok *tk;
    be_backend *be;
    kv_pool *kv;
    sched *sch;
    smp_ctx *smp;
    int vocab;
    pthread_t thread;
    pthread_mutex_t mu;         /* inbox, stop, wake-ups                    */
    pthread_cond_t cv;
    eng_req *inbox_head, *inbox_tail;
    int inbox_n;
    int stop;
    atomic_int pending_cancel;
    atomic_int queued;          /* submitted, not yet running               */
    _Atomic double beat;        /* inf_now() at the loop's last turn        */
    atomic_int idle;            /* waiting for work                         */
    /* engine-thread state */
    eng_req **active;           /* requests inside the engine               */
    int n_active, cap_active;
    eng_req *touched;           /* to notify after this step (a list: adding
                                   never fails, so no finish goes unsaid)  */
    smp_rng seeds;              /* seeds for requests that bring none       */
    /* step buffers (eng_step.c) */
    eng_fly fly[2];             /* submitted steps not yet waited for: a ring
                                   from fly_at, fly_n of them (2 only while a
                                   step runs ahead, see eng_step.c)          */
    int fly_at, fly_n;
    long ahead_steps;           /* steps queued ahead (tests)               */
    float *logits;              /* [rows][vocab]: rows = max_num_seqs * (k+1) */
    float *hidden;              /* [rows][hidden_size] when the proposer
                                   wants hidden states, else NULL           */
    int hidden_size;
    float *scratch;             /* [vocab]                                  */
    int max_rows;
    /* device sampling (backends with device_sampling; else NULL): a step
     * whose every row is a plain next-token row comes back as ids */
    int32_t *ids;               /* [max_rows]                               */
    uint32_t *dmask;            /* [max_num_seqs][mask_words]: grammar masks */
    size_t mask_words;          /* (vocab + 31) / 32                        */
    long device_steps;          /* steps sampled on the device (tests)      */
    /* speculation (eng_spec.c) */
    int kmax;                   /* spec_k, or 0                             */
    eng_req **cand;             /* [max_num_seqs] sequences drafting        */
    spec_seq **cand_ss;
    smp_params *cand_params;
    int *cand_k;
    int32_t *drafts;            /* [max_num_seqs][kmax]                     */
    float *dprobs;              /* [max_num_seqs][kmax][vocab] or NULL      */
    float *tprobs;              /* [kmax+1][vocab] target distributions     */
    int32_t *argmaxes;          /* [kmax+1]                                 */
    long step_no;
    /* grammars (eng_gram.c) */
    gram_vocab *gvocab;         /* token id -> bytes, built at first use    */
    struct eng_gram_ent *gcache;
    int n_gcache, cap_gcache;
    /* the periodic log line */
    met_snap log_prev;
    double log_at;
};

/* ---- eng_req.c: requests and output --------------------------------------- */

/* Grows *p (elements of elem bytes) to hold need; 0 when out of memory. */
int eng__grow(void **p, int *cap, int need, size_t elem);

/* Appends detokenized text to r's output through its stop strings (under
 * r->mu). final: the sequence ends here, release what stop matching holds.
 * Returns the index of a stop string that matched, or -1. */
int eng__emit(eng_req *r, const char *text, size_t len, int final);

/* parse_special: token t (-1: none) through the decoder that keeps special
 * tokens and its stop strings onto r's stext (under r->mu); final releases
 * what they hold. */
void eng__emit_special(eng_req *r, int32_t t, int final);

/* Records the logprob of token tokid under the raw logits row and the top
 * r->p.logprobs alternatives (under r->mu); text is what the token added. */
void eng__record_logprobs(const tok *tk, int vocab, eng_req *r, const float *logits,
                          int32_t tokid, const char *text, size_t text_len);

/* Records prompt token tokid's logprob under the raw logits row of the
 * position before it, with the top r->p.prompt_logprobs - 1 alternatives (under
 * r->mu) into r->out.plps. */
void eng__record_prompt_logprob(const tok *tk, int vocab, eng_req *r, const float *logits,
                                int32_t tokid);

/* Builds r's logits-processor chain at admission: logit_bias, min_tokens
 * (EOS of c unless ignore_eos, and the stop ids), penalties (scratch: the
 * engine's sampler context), then the caller's processors. */
int eng__req_lp_init(eng_req *r, smp_ctx *scratch, const model_config *c, inf_err *err);

/* ---- eng_step.c: the step (eng_emit.c: its tokens into requests) ------------ */

int eng__step_init(eng *e, inf_err *err);   /* step and speculation buffers */
void eng__step_free(eng *e);

/* One scheduler step through the backend. Returns 0 when idle. */
int eng__step(eng *e);

/* Waits for the steps still in flight and drops their results (shutdown). */
void eng__step_drain(eng *e);

static inline eng_req *eng__req_of(sched_seq *q)
{
    return (eng_req *)((char *)q - offsetof(eng_req, seq));
}

/* Puts r on the list of requests to notify after this step. */
void eng__touch(eng *e, eng_req *r);

/* Takes r out of the engine with the given finish; its owner is notified. */
void eng__finish(eng *e, eng_req *r, int reason, const char *error);

/* Appends token t (sampled from raw logits row) to r and its output:
 * detokenized, through stop strings, EOS / stop ids / max_tokens checked.
 * The caller has told r's logits processors (lp_chain_accept). Returns 1
 * when r finished. */
int eng__emit_token(eng *e, eng_req *r, int32_t t, const float *row);

/* The raw row through r's logits processors, into lg: what r samples its
 * next token from (temperature and filters still to come). */
void eng__process_row(eng *e, eng_req *r, const float *row, float *lg);

/* Samples r's next token on the host from its raw logits row and emits it. */
void eng__advance(eng *e, eng_req *r, const float *row);

/* ---- eng_gram.c: grammar-constrained output -------------------------------- */

typedef struct eng_gram_ent eng_gram_ent;

/* Gives r (with a grammar) its matcher, compiling or reusing the grammar's
 * automaton, as the last processor of r->lp. */
int eng__gram_attach(eng *e, eng_req *r, inf_err *err);
/* At finish (engine thread): the matcher goes and the processor becomes a
 * no-op, so freeing the request later (any thread) touches no engine state.
 * No grammar: nothing. */
void eng__gram_detach(eng *e, eng_req *r);
/* The grammar refused an accepted token (then the request fails), or only
 * EOS can follow (then it stops). */
int eng__gram_refused(const eng_req *r);
int eng__gram_must_end(const eng_req *r);
/* Whether r's logits processors are its grammar's mask alone (or none):
 * what the device sampler can apply (be.h's be_smp_row.mask). */
int eng__gram_only(const eng_req *r);
/* r's allowed tokens now (gram_match_mask's words); r has a grammar. */
void eng__gram_mask(eng_req *r, uint32_t *words);
void eng__gram_free(eng *e);

/* ---- eng_spec.c: speculation ---------------------------------------------- */

/* Takes r's unverified drafts off its tokens (and the proposer's state). */
void eng__strip_drafts(eng *e, eng_req *r);

/* Verifies r's first m drafts against the target's rows (hid: their hidden
 * states, or NULL) and emits what survives; rejected drafts are rolled back
 * (tokens, KV, logits processors, proposer). */
void eng__verify(eng *e, eng_req *r, const float *rows, const float *hid, int m);

/* Keeps the hidden state of the row r's last token was sampled from. */
void eng__keep_hidden(eng *e, eng_req *r, const float *hid);

/* Drafts tokens for next step's decode tokens. */
void eng__propose(eng *e);

#endif
