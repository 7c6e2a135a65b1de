#include "batch.h"

#include <stdlib.h>
#include <string.h>

struct batch_builder {
    batch_limits lim;
    int32_t *tokens, *positions, *slots; /* [max_tokens]                 */
    int32_t *seq_start;                  /* [max_seqs + 1]               */
    int32_t *seq_len;                    /* [max_seqs]                   */
    int32_t *table;                      /* [max_seqs][max_blocks]       */
    int32_t *rows;                       /* [max_rows]                   */
    be_batch b;
};

void batch_destroy(batch_builder *b)
{
    if (!b)
        return;
    free(b->tokens), free(b->positions), free(b->slots), free(b->seq_start);
    free(b->seq_len), free(b->table), free(b->rows);
    free(b);
}

int batch_create(const batch_limits *lim, batch_builder **out, inf_err *err)
{
    *out = NULL;
    if (lim->max_tokens < 1 || lim->max_seqs < 1 || lim->max_rows < 1 || lim->max_blocks < 1)
        return inf_fail(err, INF_ERR_INVALID, "batch: limits must be >= 1 (tokens %d, seqs %d, "
                        "rows %d, blocks %d)", lim->max_tokens, lim->max_seqs, lim->max_rows,
                        lim->max_blocks);
    batch_builder *b = calloc(1, sizeof *b);
    if (!b)
        return inf_fail(err, INF_ERR_NOMEM, "batch: out of memory");
    b->lim = *lim;
    size_t T = (size_t)lim->max_tokens, S = (size_t)lim->max_seqs, R = (size_t)lim->max_rows;
    b->tokens = malloc(sizeof(int32_t) * T);
    b->positions = malloc(sizeof(int32_t) * T);
    b->slots = malloc(sizeof(int32_t) * T);
    b->seq_start = malloc(sizeof(int32_t) * (S + 1));
    b->seq_len = malloc(sizeof(int32_t) * S);
    /* zeroed: the tail of a row past a sequence's blocks is the null block */
    b->table = calloc(S * (size_t)lim->max_blocks, sizeof(int32_t));
    b->rows = malloc(sizeof(int32_t) * R);
    if (!b->tokens || !b->positions || !b->slots || !b->seq_start || !b->seq_len || !b->table ||
        !b->rows) {
        batch_destroy(b);
        return inf_fail(err, INF_ERR_NOMEM, "batch: out of memory for %zu tokens, %zu sequences",
                        T, S);
    }
    b->b = (be_batch){.tokens = b->tokens, .positions = b->positions, .slots = b->slots,
                      .seq_start = b->seq_start, .seq_len = b->seq_len,
                      .block_table = b->table, .max_blocks = lim->max_blocks,
                      .logit_rows = b->rows};
    batch_reset(b);
    *out = b;
    return INF_OK;
}

void batch_reset(batch_builder *b)
{
    b->b.n_tokens = b->b.n_seqs = b->b.n_logits = 0;
    b->seq_start[0] = 0;
}

int batch_add_seq(batch_builder *b, const kv_pool *kv, const kv_seq *s, const int32_t *tokens,
                  int pos0, int n)
{
    be_batch *x = &b->b;
    if (x->n_seqs >= b->lim.max_seqs || n > b->lim.max_tokens - x->n_tokens ||
        s->n_blocks > b->lim.max_blocks)
        return -1;
    int t0 = x->n_tokens;
    for (int j = 0; j < n; j++) {
        b->tokens[t0 + j] = tokens[j];
        b->positions[t0 + j] = pos0 + j;
        b->slots[t0 + j] = kv_seq_slot(kv, s, pos0 + j);
    }
    int i = x->n_seqs++;
    b->seq_start[i] = t0;
    b->seq_len[i] = pos0 + n;
    memcpy(b->table + (size_t)i * b->lim.max_blocks, s->blocks,
           sizeof(int32_t) * (size_t)s->n_blocks);
    x->n_tokens += n;
    b->seq_start[i + 1] = x->n_tokens;
    return t0;
}

int batch_add_logits(batch_builder *b, int t)
{
    if (b->b.n_logits >= b->lim.max_rows)
        return -1;
    b->rows[b->b.n_logits] = t;
    return b->b.n_logits++;
}

void batch_set_want_hidden(batch_builder *b, int on) { b->b.want_hidden = on; }

int batch_n_tokens(const batch_builder *b) { return b->b.n_tokens; }
int batch_n_seqs(const batch_builder *b) { return b->b.n_seqs; }
int batch_n_logits(const batch_builder *b) { return b->b.n_logits; }

const be_batch *batch_get(batch_builder *b) { return &b->b; }
