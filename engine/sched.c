#include "sched.h"

#include <limits.h>

#include <stdlib.h>
#include <string.h>

typedef struct queue {
    sched_seq *head, *tail;
    int n;
} queue;

struct sched {
    sched_config cfg;
    kv_pool *kv;
    queue waiting;  /* head runs first                                  */
    queue running;  /* admission order: head oldest, tail newest        */
    uint64_t next_order;
    sched_plan plan;
    sched_seq **plan_seqs;
    int *plan_new;
};

static void q_push_tail(queue *q, sched_seq *s)
{
    s->prev = q->tail;
    s->next = NULL;
    if (q->tail)
        q->tail->next = s;
    else
        q->head = s;
    q->tail = s;
    q->n++;
}

static void q_push_head(queue *q, sched_seq *s)
{
    s->next = q->head;
    s->prev = NULL;
    if (q->head)
        q->head->prev = s;
    else
        q->tail = s;
    q->head = s;
    q->n++;
}

static void q_unlink(queue *q, sched_seq *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        q->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        q->tail = s->prev;
    s->prev = s->next = NULL;
    q->n--;
}

int sched_create(const sched_config *cfg, kv_pool *kv, sched **out, inf_err *err)
{
    *out = NULL;
    if (cfg->max_num_seqs < 1 || cfg->max_num_batched_tokens < 1 || cfg->max_model_len < 2)
        return inf_fail(err, INF_ERR_INVALID,
                        "sched: max_num_seqs %d, max_num_batched_tokens %d and "
                        "max_model_len %d must be positive",
                        cfg->max_num_seqs, cfg->max_num_batched_tokens, cfg->max_model_len);
    sched *s = calloc(1, sizeof *s);
    if (!s)
        return inf_fail(err, INF_ERR_NOMEM, "sched: out of memory");
    s->cfg = *cfg;
    s->kv = kv;
    s->plan_seqs = calloc((size_t)cfg->max_num_seqs, sizeof *s->plan_seqs);
    s->plan_new = calloc((size_t)cfg->max_num_seqs, sizeof *s->plan_new);
    if (!s->plan_seqs || !s->plan_new) {
        sched_destroy(s);
        return inf_fail(err, INF_ERR_NOMEM, "sched: out of memory");
    }
    s->plan.seqs = s->plan_seqs;
    s->plan.n_new = s->plan_new;
    *out = s;
    return INF_OK;
}

void sched_destroy(sched *s)
{
    if (!s)
        return;
    free(s->plan_seqs);
    free(s->plan_new);
    free(s);
}

int sched_add(sched *s, sched_seq *q, inf_err *err)
{
    int bs = kv_block_size(s->kv);
    if (q->n_tokens < 1 || q->n_tokens >= s->cfg.max_model_len)
        return inf_fail(err, INF_ERR_INVALID,
                        "the prompt has %d tokens; this server's context is %d tokens",
                        q->n_tokens, s->cfg.max_model_len);
    /* it must be able to reach its full length with the whole pool */
    if ((q->n_tokens + 1 + bs - 1) / bs > kv_num_blocks(s->kv))
        return inf_fail(err, INF_ERR_INVALID,
                        "the prompt needs %d KV blocks but the pool has %d",
                        (q->n_tokens + bs) / bs, kv_num_blocks(s->kv));
    q->state = SCHED_WAITING;
    q->n_computed = 0;
    q_push_tail(&s->waiting, q);
    return INF_OK;
}

void sched_remove(sched *s, sched_seq *q)
{
    /* what it computed stays useful to later requests */
    kv_seq_commit(s->kv, &q->kv, q->tokens, q->n_computed, q->salt);
    if (q->state == SCHED_WAITING)
        q_unlink(&s->waiting, q);
    else if (q->state == SCHED_RUNNING)
        q_unlink(&s->running, q);
    kv_seq_release(s->kv, &q->kv);
    q->state = SCHED_DONE;
}

/* Recompute later: blocks back to the pool, back to the head of the line. */
static void preempt(sched *s, sched_seq *q)
{
    q_unlink(&s->running, q);
    kv_seq_truncate(s->kv, &q->kv, 0);
    q->n_computed = 0;
    q->n_preempt++;
    q->state = SCHED_WAITING;
    q_push_head(&s->waiting, q);
}

static void plan_add(sched *s, sched_seq *q, int n)
{
    s->plan.seqs[s->plan.n] = q;
    s->plan.n_new[s->plan.n] = n;
    s->plan.n++;
    s->plan.n_tokens += n;
}

/* Reserves blocks for q to compute `take` more tokens, preempting the newest
 * running sequences while there is no room. Returns 0 when q itself had to
 * be preempted. */
static int reserve_running(sched *s, sched_seq *q, int take)
{
    while (kv_seq_reserve(s->kv, &q->kv, q->n_computed + take) != INF_OK) {
        sched_seq *victim = s->running.tail;
        preempt(s, victim);
        s->plan.n_preempted++;
        if (victim == q)
            return 0;
    }
    return 1;
}

void sched_schedule(sched *s, sched_plan **out)
{
    int budget = s->cfg.max_num_batched_tokens;
    s->plan.n = 0;
    s->plan.n_tokens = 0;
    s->plan.n_preempted = 0;
    s->plan.cache_queries = s->plan.cache_hits = 0;
    int n_decoding = 0;
    for (sched_seq *q = s->running.head; q; q = q->next) { /* last step's blocks */
        kv_seq_commit(s->kv, &q->kv, q->tokens, q->n_computed, q->salt);
        if (s->cfg.kv_window > 0) /* the next token at n_computed looks back W - 1 */
            kv_seq_drop_front(s->kv, &q->kv, q->n_computed - s->cfg.kv_window + 1);
        n_decoding += q->n_computed >= q->prefill_end;
    }

    /* long prompts' tokens are capped while anything decodes, so streams
     * keep pace; a bigger decode batch already makes a longer step, so it
     * lets through a prompt token per decoding sequence (a step then costs
     * about twice a decode-only one where arithmetic is the limit). Short
     * prompts go in whole: trickling them in would cost more steps than it
     * saves. */
    int prefill_left = INT_MAX;
    if (n_decoding && s->cfg.max_prefill_while_decoding > 0) {
        prefill_left = s->cfg.max_prefill_while_decoding;
        if (prefill_left < n_decoding)
            prefill_left = n_decoding;
    }

    /* running first, oldest first: a victim is always one not yet planned */
    for (sched_seq *q = s->running.head; q && budget > 0; q = q->next) {
        int take = q->n_tokens - q->n_computed;
        if (take > budget)
            take = budget;
        int prefilling = q->n_computed < q->prefill_end && q->prefill_long;
        if (prefilling && take > prefill_left)
            take = prefill_left;
        if (take <= 0)
            continue;
        /* victims come off the tail, so q->next is read after this */
        if (!reserve_running(s, q, take))
            break; /* q was the newest; nothing after it runs */
        plan_add(s, q, take);
        budget -= take;
        if (prefilling)
            prefill_left -= take;
    }

    /* then admit waiting sequences in order, unless memory is short */
    while (s->plan.n_preempted == 0 && budget > 0 && s->waiting.head &&
           s->running.n < s->cfg.max_num_seqs) {
        sched_seq *q = s->waiting.head;
        int hit = q->no_prefix_hit
                      ? 0 : kv_seq_match_prefix(s->kv, &q->kv, q->tokens, q->n_tokens, q->salt);
        int take = q->n_tokens - hit;
        int is_long = take > SCHED_LONG_PROMPT * s->cfg.max_prefill_while_decoding;
        if (take > budget)
            take = budget;
        if (is_long && take > prefill_left)
            take = prefill_left;
        if (take <= 0 || kv_seq_reserve(s->kv, &q->kv, hit + take) != INF_OK) {
            kv_seq_truncate(s->kv, &q->kv, 0); /* give the hits back */
            break; /* first come, first served: nobody jumps the line */
        }
        q->n_computed = hit;
        s->plan.cache_queries += q->n_tokens;
        s->plan.cache_hits += hit;
        if (!q->admitted)
            q->n_cached = hit;
        q->admitted = 1;
        q_unlink(&s->waiting, q);
        q->state = SCHED_RUNNING;
        q->order = s->next_order++;
        q->prefill_end = q->n_tokens;
        q->prefill_long = is_long;
        q_push_tail(&s->running, q);
        plan_add(s, q, take);
        budget -= take;
        if (is_long)
            prefill_left -= take;
    }
    *out = &s->plan;
}

int sched_num_running(const sched *s) { return s->running.n; }
int sched_num_waiting(const sched *s) { return s->waiting.n; }

double sched_kv_usage(const sched *s)
{
    int total = kv_num_blocks(s->kv);
    return total > 0 ? (double)(total - kv_num_free(s->kv)) / total : 0.0;
}
