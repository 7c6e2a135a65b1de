#include "gen.h"

#include <stdlib.h>
#include <string.h>

struct gen_seq {
    const gen_request *req;
    kv_seq kv;
    int32_t *toks;  /* prompt then output                       */
    int n_toks;
    int computed;   /* tokens whose KV is in the cache           */
    int finish;
    smp_rng rng;
};

typedef struct step_bufs {
    int32_t *tokens, *positions, *slots, *seq_start, *seq_len, *table, *rows;
    int32_t *row_seq; /* [n_seqs] sequence behind each logits row */
    float *logits;
    int max_blocks;
} step_bufs;

static int is_eos(const gen_config *cfg, int32_t t)
{
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos[i] == t)
            return 1;
    return 0;
}

static void bufs_free(step_bufs *b)
{
    free(b->tokens), free(b->positions), free(b->slots), free(b->seq_start);
    free(b->seq_len), free(b->table), free(b->rows), free(b->row_seq), free(b->logits);
}

static int bufs_alloc(step_bufs *b, int n, int max_tokens, int max_blocks, int vocab)
{
    memset(b, 0, sizeof *b);
    b->max_blocks = max_blocks;
    b->tokens = malloc(sizeof(int32_t) * max_tokens);
    b->positions = malloc(sizeof(int32_t) * max_tokens);
    b->slots = malloc(sizeof(int32_t) * max_tokens);
    b->seq_start = malloc(sizeof(int32_t) * (n + 1));
    b->seq_len = malloc(sizeof(int32_t) * n);
    b->table = calloc((size_t)n * max_blocks, sizeof(int32_t));
    b->rows = malloc(sizeof(int32_t) * n);
    b->row_seq = malloc(sizeof(int32_t) * n);
    b->logits = malloc(sizeof(float) * (size_t)n * vocab);
    if (!b->tokens || !b->positions || !b->slots || !b->seq_start || !b->seq_len ||
        !b->table || !b->rows || !b->row_seq || !b->logits) {
        bufs_free(b);
        return INF_ERR_NOMEM;
    }
    return INF_OK;
}

/* Lays out one step: each running sequence contributes its next prompt chunk
 * or its one decode token, while the budget lasts. Returns the batch. */
static int plan_step(gen_seq *seqs, int n, kv_pool *kv, const gen_config *cfg,
                     step_bufs *sb, be_batch *b, inf_err *err)
{
    int T = 0, S = 0, R = 0, bs = kv_block_size(kv);
    for (int i = 0; i < n && T < cfg->max_step_tokens; i++) {
        gen_seq *s = &seqs[i];
        if (s->finish)
            continue;
        int todo = s->n_toks - s->computed;
        int take = todo;
        if (cfg->chunk > 0 && take > cfg->chunk)
            take = cfg->chunk;
        if (take > cfg->max_step_tokens - T)
            take = cfg->max_step_tokens - T;
        int new_len = s->computed + take;
        int rc = kv_seq_reserve(kv, &s->kv, new_len);
        if (rc == INF_ERR_NOSPACE)
            return inf_fail(err, rc, "gen: KV cache full (%d blocks of %d tokens) for "
                            "sequence %d at %d tokens", kv_num_blocks(kv), bs, i, new_len);
        if (rc)
            return inf_fail(err, rc, "gen: out of memory for a block table");
        sb->seq_start[S] = T;
        for (int p = s->computed; p < new_len; p++, T++) {
            sb->tokens[T] = s->toks[p];
            sb->positions[T] = p;
            sb->slots[T] = kv_seq_slot(kv, &s->kv, p);
        }
        sb->seq_len[S] = new_len;
        memcpy(sb->table + (size_t)S * sb->max_blocks, s->kv.blocks,
               sizeof(int32_t) * s->kv.n_blocks);
        if (new_len == s->n_toks) { /* prompt done or decoding: sample next */
            sb->rows[R] = T - 1;
            sb->row_seq[R++] = i;
        }
        s->computed = new_len;
        S++;
    }
    sb->seq_start[S] = T;
    be_batch bb = {.n_tokens = T, .tokens = sb->tokens, .positions = sb->positions,
                   .slots = sb->slots, .n_seqs = S, .seq_start = sb->seq_start,
                   .seq_len = sb->seq_len, .block_table = sb->table,
                   .max_blocks = sb->max_blocks, .logit_rows = sb->rows, .n_logits = R};
    *b = bb;
    return INF_OK;
}

static void append(gen_seq *s, int idx, int32_t tok, const gen_config *cfg)
{
    const gen_request *r = s->req;
    s->toks[s->n_toks++] = tok;
    if (cfg->on_token)
        cfg->on_token(cfg->user, idx, tok);
    int n_out = s->n_toks - r->n_prompt;
    if (!r->ignore_eos && is_eos(cfg, tok))
        s->finish = GEN_FINISH_EOS;
    else if (n_out >= r->max_tokens || s->n_toks >= cfg->max_context)
        s->finish = GEN_FINISH_LENGTH;
}

int gen_run(be_backend *be, kv_pool *kv, smp_ctx *smp, const gen_config *cfg,
            const gen_request *reqs, int n, gen_result *results, inf_err *err)
{
    int rc = INF_OK;
    memset(results, 0, sizeof *results * (size_t)n);
    gen_seq *seqs = calloc((size_t)n, sizeof *seqs);
    step_bufs sb = {0};
    int max_blocks = (cfg->max_context + kv_block_size(kv) - 1) / kv_block_size(kv);
    if (!seqs || bufs_alloc(&sb, n, cfg->max_step_tokens, max_blocks, cfg->vocab)) {
        rc = inf_fail(err, INF_ERR_NOMEM, "gen: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const gen_request *r = &reqs[i];
        if (r->n_prompt < 1 || r->n_prompt >= cfg->max_context) {
            rc = inf_fail(err, INF_ERR_INVALID,
                          "gen: prompt %d has %d tokens; it must have 1 to %d", i,
                          r->n_prompt, cfg->max_context - 1);
            goto done;
        }
        int cap = r->n_prompt + (r->max_tokens > 0 ? r->max_tokens : 0);
        if (cap > cfg->max_context)
            cap = cfg->max_context;
        seqs[i].req = r;
        seqs[i].toks = malloc(sizeof(int32_t) * (size_t)cap);
        if (!seqs[i].toks) {
            rc = inf_fail(err, INF_ERR_NOMEM, "gen: out of memory");
            goto done;
        }
        memcpy(seqs[i].toks, r->prompt, sizeof(int32_t) * r->n_prompt);
        seqs[i].n_toks = r->n_prompt;
        smp_rng_seed(&seqs[i].rng, r->sampling.seed);
        if (r->max_tokens <= 0)
            seqs[i].finish = GEN_FINISH_LENGTH;
    }
    for (;;) {
        be_batch b;
        if ((rc = plan_step(seqs, n, kv, cfg, &sb, &b, err)))
            goto done;
        if (b.n_tokens == 0)
            break;
        if ((rc = be_forward(be, &b, sb.logits, err)))
            goto done;
        for (int r = 0; r < b.n_logits; r++) {
            gen_seq *s = &seqs[sb.row_seq[r]];
            smp_history h = {.prompt = s->toks, .n_prompt = s->req->n_prompt,
                             .output = s->toks + s->req->n_prompt,
                             .n_output = s->n_toks - s->req->n_prompt};
            int32_t tok = smp_sample(smp, &s->req->sampling, &h, &s->rng,
                                     sb.logits + (size_t)r * cfg->vocab);
            append(s, sb.row_seq[r], tok, cfg);
        }
    }
    for (int i = 0; i < n; i++) {
        gen_seq *s = &seqs[i];
        results[i].n = s->n_toks - s->req->n_prompt;
        results[i].finish = s->finish;
        results[i].tokens = malloc(sizeof(int32_t) * (size_t)(results[i].n + 1));
        if (!results[i].tokens) {
            rc = inf_fail(err, INF_ERR_NOMEM, "gen: out of memory");
            goto done;
        }
        memcpy(results[i].tokens, s->toks + s->req->n_prompt,
               sizeof(int32_t) * (size_t)results[i].n);
    }
done:
    if (rc)
        gen_results_free(results, n);
    if (seqs)
        for (int i = 0; i < n; i++) {
            kv_seq_release(kv, &seqs[i].kv);
            free(seqs[i].toks);
        }
    free(seqs);
    bufs_free(&sb);
    return rc;
}

void gen_results_free(gen_result *results, int n)
{
    for (int i = 0; i < n; i++) {
        free(results[i].tokens);
        results[i].tokens = NULL;
        results[i].n = 0;
    }
}
