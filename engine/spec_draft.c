#include "spec_draft.h"

#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "kv.h"
#include "mdesc.h"

typedef struct draft_state {
    kv_seq kv;
    int n_computed;     /* leading tokens of the sequence the draft has KV for */
    smp_rng rng;        /* its own draws: the target's stream is untouched     */
    int seeded;
} draft_state;

typedef struct draft {
    spec_proposer base;
    spec_draft_config cfg;
    kv_pool *kv;
    smp_ctx *smp;
    batch_builder *bb;
    float *logits;      /* [max_seqs][vocab]                                    */
    float *work;        /* [vocab]                                              */
    int32_t *hist;      /* [max_len] history with the drafts so far             */
    int kv_window;      /* the draft's positions looked back over when every
                           layer has a window (mdesc_kv_window), else 0     */
} draft;

static draft_state *state_of(spec_seq *q)
{
    if (!q->state)
        q->state = calloc(1, sizeof(draft_state));
    return q->state;
}

/* A draft with a window in every layer gives back the KV blocks wholly
 * behind the window of its next position, n_computed (as the scheduler does
 * for the target): its KV stays bounded however long the sequence. Only real
 * tokens are computed from there on (rollback never goes below the tokens
 * the sequence had when it was proposed for), so nothing dropped is read. */
static void drop_behind(draft *d, draft_state *s)
{
    if (d->kv_window > 0)
        kv_seq_drop_front(d->kv, &s->kv, s->n_computed - d->kv_window + 1);
}

/* One draft forward over batch entries (seq i computes toks[i][0..cnt[i])
 * from position pos[i]); logits of each entry's last token land in
 * d->logits in entry order. */
static int forward(draft *d, spec_seq *const *seqs, const int *idx, int n, const int32_t *const *toks,
                   const int *cnt, inf_err *err)
{
    batch_reset(d->bb);
    for (int e = 0; e < n; e++) {
        draft_state *s = seqs[idx[e]]->state;
        int t0 = batch_add_seq(d->bb, d->kv, &s->kv, toks[e], s->n_computed, cnt[e]);
        if (t0 < 0 || batch_add_logits(d->bb, t0 + cnt[e] - 1) < 0)
            return inf_fail(err, INF_ERR_INVALID, "draft model: a step does not fit its batch "
                            "buffers");
    }
    int rc = be_forward(d->cfg.backend, batch_get(d->bb), d->logits, err);
    for (int e = 0; e < n && !rc; e++)
        ((draft_state *)seqs[idx[e]]->state)->n_computed += cnt[e];
    return rc;
}

/* The draft's next token from its logits row, sampled as the request
 * samples (its distribution into probs when wanted). */
static int32_t pick(draft *d, spec_seq *q, draft_state *s, const smp_params *p, const float *row,
                    const int32_t *drafted, int n_drafted, float *probs)
{
    int penalized = p->repetition_penalty != 1.0f || p->frequency_penalty != 0.0f ||
                    p->presence_penalty != 0.0f;
    if (!penalized && (p->temperature == 0 || !probs))
        return smp_argmax(row, d->cfg.vocab);
    memcpy(d->work, row, sizeof(float) * (size_t)d->cfg.vocab);
    if (penalized) { /* the output so far and the drafts before this one */
        int hist_n = q->n_tokens - q->n_prompt;
        memcpy(d->hist, q->tokens + q->n_prompt, sizeof(int32_t) * (size_t)hist_n);
        if (n_drafted) /* drafted is NULL for the first draft */
            memcpy(d->hist + hist_n, drafted, sizeof(int32_t) * (size_t)n_drafted);
        smp_history h = {.prompt = q->tokens, .n_prompt = q->n_prompt, .output = d->hist,
                         .n_output = hist_n + n_drafted};
        smp_apply_penalties(d->smp, p, &h, d->work);
    }
    if (p->temperature == 0 || !probs)
        return smp_argmax(d->work, d->cfg.vocab);
    smp_probs(d->smp, p, d->work, probs);
    if (!s->seeded) {
        smp_rng_seed(&s->rng, p->seed ^ 0x5bd1e995u);
        s->seeded = 1;
    }
    return smp_draw(probs, d->cfg.vocab, smp_rng_uniform(&s->rng));
}

static int draft_propose(spec_proposer *pp, spec_seq *const *seqs, int n, const smp_params *params,
                         int kmax, int *k, int32_t *drafts, float *probs, inf_err *err)
{
    draft *d = (draft *)pp;
    int V = d->cfg.vocab, idx[n > 0 ? n : 1], cnt[n > 0 ? n : 1], m = 0;
    const int32_t *toks[n > 0 ? n : 1];
    /* who drafts: state, and room for the catch-up plus k - 1 drafts */
    for (int i = 0; i < n; i++) {
        int room = d->cfg.draft_len - seqs[i]->n_tokens + 1; /* positions the draft knows */
        if (k[i] > room)
            k[i] = room > 0 ? room : 0;
        draft_state *s = k[i] > 0 ? state_of(seqs[i]) : NULL;
        if (s && s->n_computed >= seqs[i]->n_tokens) /* logits come from the last token */
            s->n_computed = seqs[i]->n_tokens - 1;
        if (s) /* before reserving: the blocks given back can be reused */
            drop_behind(d, s);
        if (!s || kv_seq_reserve(d->kv, &s->kv, seqs[i]->n_tokens + k[i] - 1) != INF_OK) {
            k[i] = 0;
            continue;
        }
        idx[m++] = i;
    }
    /* catch up on new tokens, in rounds that fit the draft's step, until
     * no drafting sequence has any left (each starts with at least one) */
    for (;;) {
        int e = 0, budget = d->cfg.max_tokens;
        int batch[n > 0 ? n : 1];
        for (int t = 0; t < m && budget > 0; t++) {
            spec_seq *q = seqs[idx[t]];
            draft_state *s = q->state;
            int todo = q->n_tokens - s->n_computed;
            if (todo <= 0)
                continue;
            int c = todo < budget ? todo : budget;
            drop_behind(d, s); /* a long prompt caught up over several rounds */
            batch[e] = idx[t];
            toks[e] = q->tokens + s->n_computed;
            cnt[e] = c;
            budget -= c;
            e++;
        }
        if (e == 0)
            break;
        int rc = forward(d, seqs, batch, e, toks, cnt, err);
        if (rc)
            return rc;
        for (int t = 0; t < e; t++) {
            spec_seq *q = seqs[batch[t]];
            draft_state *s = q->state;
            if (s->n_computed < q->n_tokens)
                continue;
            int i = batch[t];
            float *pr = probs && params[i].temperature > 0 ? probs + (size_t)i * kmax * V : NULL;
            drafts[(size_t)i * kmax] = pick(d, q, s, &params[i], d->logits + (size_t)t * V,
                                            NULL, 0, pr);
        }
    }
    /* then k - 1 more steps, one token per drafting sequence */
    for (int j = 1; j < kmax; j++) {
        int e = 0, batch[n > 0 ? n : 1];
        for (int t = 0; t < m; t++)
            if (k[idx[t]] > j) {
                int i = idx[t];
                batch[e] = i;
                toks[e] = drafts + (size_t)i * kmax + j - 1;
                cnt[e] = 1;
                e++;
            }
        if (e == 0)
            break;
        int rc = forward(d, seqs, batch, e, toks, cnt, err);
        if (rc)
            return rc;
        for (int t = 0; t < e; t++) {
            int i = batch[t];
            spec_seq *q = seqs[i];
            float *pr = probs && params[i].temperature > 0 ? probs + ((size_t)i * kmax + j) * V
                                                           : NULL;
            drafts[(size_t)i * kmax + j] = pick(d, q, q->state, &params[i],
                                                d->logits + (size_t)t * V,
                                                drafts + (size_t)i * kmax, j, pr);
        }
    }
    return INF_OK;
}

static void draft_rollback(spec_proposer *pp, spec_seq *q, int n_valid)
{
    draft *d = (draft *)pp;
    draft_state *s = q->state;
    if (!s)
        return;
    if (s->n_computed > n_valid)
        s->n_computed = n_valid;
    kv_seq_truncate(d->kv, &s->kv, s->n_computed);
}

static void draft_release(spec_proposer *pp, spec_seq *q)
{
    draft *d = (draft *)pp;
    draft_state *s = q->state;
    if (!s)
        return;
    kv_seq_release(d->kv, &s->kv);
    free(s);
    q->state = NULL;
}

static void draft_destroy(spec_proposer *pp)
{
    draft *d = (draft *)pp;
    if (!d)
        return;
    kv_destroy(d->kv);
    smp_destroy(d->smp);
    batch_destroy(d->bb);
    free(d->logits), free(d->work), free(d->hist);
    free(d);
}

static const spec_proposer_ops draft_ops = {
    .name = "draft_model", .propose = draft_propose, .rollback = draft_rollback,
    .release = draft_release, .destroy = draft_destroy, .deterministic = 0,
};

int spec_draft_create(const spec_draft_config *cfg, spec_proposer **out, inf_err *err)
{
    *out = NULL;
    draft *d = calloc(1, sizeof *d);
    if (!d)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    d->base.ops = &draft_ops;
    d->cfg = *cfg;
    if (d->cfg.draft_len <= 0 || d->cfg.draft_len > cfg->max_len)
        d->cfg.draft_len = cfg->max_len;
    d->kv_window = cfg->draft ? mdesc_kv_window(&cfg->draft->cfg.desc) : 0;
    kv_config kc = {.num_blocks = cfg->num_blocks, .block_size = cfg->block_size};
    batch_limits bl = {.max_tokens = cfg->max_tokens, .max_seqs = cfg->max_seqs,
                       .max_rows = cfg->max_seqs,
                       .max_blocks = (cfg->max_len + cfg->block_size - 1) / cfg->block_size};
    int rc = kv_create(&kc, &d->kv, err);
    if (!rc)
        rc = smp_create(cfg->vocab, &d->smp, err);
    if (!rc)
        rc = batch_create(&bl, &d->bb, err);
    if (rc) {
        draft_destroy(&d->base);
        return rc;
    }
    size_t S = (size_t)cfg->max_seqs;
    d->logits = malloc(sizeof(float) * S * (size_t)cfg->vocab);
    d->work = malloc(sizeof(float) * (size_t)cfg->vocab);
    d->hist = malloc(sizeof(int32_t) * (size_t)cfg->max_len);
    if (!d->logits || !d->work || !d->hist) {
        draft_destroy(&d->base);
        return inf_fail(err, INF_ERR_NOMEM, "draft model: out of memory for step buffers");
    }
    *out = &d->base;
    return INF_OK;
}

int spec_draft_kv_blocks_used(const spec_proposer *p)
{
    if (!p || p->ops != &draft_ops)
        return -1;
    const draft *d = (const draft *)p;
    return kv_num_blocks(d->kv) - kv_num_free(d->kv);
}

int spec_draft_check_tokenizers(const tok *target, const tok *draft_tok, const char *draft_dir,
                                inf_err *err)
{
    int n = tok_vocab_size(target);
    if (tok_vocab_size(draft_tok) != n)
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "%s: the draft's tokenizer has %d pieces, the target's %d: speculative "
                        "decoding needs the same tokenizer",
                        draft_dir, tok_vocab_size(draft_tok), n);
    if (tok_bos_id(target) != tok_bos_id(draft_tok) || tok_eos_id(target) != tok_eos_id(draft_tok))
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "%s: the draft's BOS/EOS ids (%d/%d) differ from the target's (%d/%d)",
                        draft_dir, tok_bos_id(draft_tok), tok_eos_id(draft_tok),
                        tok_bos_id(target), tok_eos_id(target));
    for (int i = 0; i < n; i++)
        if (strcmp(tok_piece(target, i), tok_piece(draft_tok, i)) != 0)
            return inf_fail(err, INF_ERR_UNSUPPORTED,
                            "%s: the draft's tokenizer differs from the target's at id %d "
                            "('%s' vs '%s')",
                            draft_dir, i, tok_piece(draft_tok, i), tok_piece(target, i));
    return INF_OK;
}
