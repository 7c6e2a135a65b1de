#include "be.h"

int be_batch_check(const be_backend *be, const be_batch *b, int max_tokens, int max_ctx,
                   int n_placeholders, inf_err *err)
{
    if (b->n_tokens < 1 || b->n_tokens > max_tokens)
        return inf_fail(err, INF_ERR_INVALID, "batch: %d tokens (limit %d)",
                        b->n_tokens, max_tokens);
    if (b->n_seqs < 1 || b->seq_start[0] != 0 || b->seq_start[b->n_seqs] != b->n_tokens)
        return inf_fail(err, INF_ERR_INVALID, "batch: sequence ranges do not cover the tokens");
    if (b->n_logits < 0 || b->n_logits > b->n_tokens)
        return inf_fail(err, INF_ERR_INVALID, "batch: %d logit rows for %d tokens",
                        b->n_logits, b->n_tokens);
    long n_slots = (long)be->num_blocks * be->block_size;
    for (int s = 0; s < b->n_seqs; s++) {
        int t0 = b->seq_start[s], t1 = b->seq_start[s + 1];
        if (t1 < t0)
            return inf_fail(err, INF_ERR_INVALID, "batch: sequence %d range is reversed", s);
        if (b->seq_len[s] < 1 ||
            b->seq_len[s] > (long)b->max_blocks * be->block_size)
            return inf_fail(err, INF_ERR_INVALID,
                            "batch: sequence %d length %d exceeds its block table",
                            s, b->seq_len[s]);
        if (b->seq_len[s] > max_ctx)
            return inf_fail(err, INF_ERR_INVALID,
                            "batch: sequence %d length %d exceeds the context limit %d",
                            s, b->seq_len[s], max_ctx);
        for (int t = t0; t < t1; t++) {
            if (b->tokens[t] < -n_placeholders || b->tokens[t] >= be->vocab_size)
                return inf_fail(err, INF_ERR_INVALID,
                                "batch: token id %d out of range [%d, %d)", b->tokens[t],
                                -n_placeholders, be->vocab_size);
            if (b->positions[t] < 0 || b->positions[t] >= b->seq_len[s])
                return inf_fail(err, INF_ERR_INVALID,
                                "batch: position %d outside sequence %d (length %d)",
                                b->positions[t], s, b->seq_len[s]);
            if (b->slots[t] < be->block_size || b->slots[t] >= n_slots)
                return inf_fail(err, INF_ERR_INVALID, "batch: slot %d out of range",
                                b->slots[t]);
        }
        for (int i = 0; i * be->block_size < b->seq_len[s]; i++) {
            int32_t blk = b->block_table[(size_t)s * b->max_blocks + i];
            /* 0, the null block (zeros): positions a sliding window no
             * longer reads (kv_seq_drop_front) */
            if (blk < 0 || blk >= be->num_blocks)
                return inf_fail(err, INF_ERR_INVALID,
                                "batch: sequence %d block %d is %d (out of range)", s, i, blk);
        }
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens)
            return inf_fail(err, INF_ERR_INVALID, "batch: logit row %d out of range",
                            b->logit_rows[i]);
    return INF_OK;
}
