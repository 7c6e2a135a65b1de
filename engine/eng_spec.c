/* Speculative decoding inside the step: the proposer drafts tokens after a
 * sequence's last real one; the next step computes them all and the
 * verifier keeps the longest acceptable prefix plus one token of the
 * target's own; what was rejected is rolled back (tokens, KV blocks, the
 * proposer's state). */
#include "eng_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Takes r's unverified drafts off its tokens (and the proposer's state). */
void eng__strip_drafts(eng *e, eng_req *r)
{
    if (!r->n_draft)
        return;
    r->seq.n_tokens -= r->n_draft;
    r->n_draft = 0;
    r->ss.tokens = r->seq.tokens;
    r->ss.n_tokens = r->seq.n_tokens;
    e->cfg.spec->ops->rollback(e->cfg.spec, &r->ss, r->seq.n_tokens);
}

/* Verifies r's first m drafts against the target's rows (row j predicts the
 * token after the last real one plus j drafts) and emits what survives. */
void eng__verify(eng *e, eng_req *r, const float *rows, const float *hid, int m)
{
    int V = e->vocab;
    sched_seq *q = &r->seq;
    int L0 = q->n_tokens - r->n_draft; /* real length: drafts start here */
    const int32_t *d = q->tokens + L0;
    const smp_params *sp = &r->p.sampling;
    int greedy = sp->temperature == 0;
    /* the distribution the request samples from at each row: the logits
     * processors advance over the drafts as the rows do (each row sees the
     * drafts before it as output), and step back over the rejected ones
     * below */
    for (int j = 0; j <= m; j++) {
        eng__process_row(e, r, rows + (size_t)j * V, e->scratch);
        if (greedy)
            e->argmaxes[j] = smp_argmax(e->scratch, V);
        else
            smp_probs(e->smp, sp, e->scratch, e->tprobs + (size_t)j * V);
        if (j < m)
            lp_chain_accept(&r->lp, d[j]);
    }
    spec_result res;
    if (greedy) {
        res.accepted = 0;
        while (res.accepted < m && d[res.accepted] == e->argmaxes[res.accepted])
            res.accepted++;
        res.next = e->argmaxes[res.accepted];
    } else {
        const float *qp = e->dprobs && !e->cfg.spec->ops->deterministic
                              ? e->dprobs + (size_t)r->draft_slot * e->kmax * V
                              : NULL;
        res = spec_verify(m, d, e->tprobs, qp, V, &r->rng, e->scratch);
    }
    lp_chain_rollback(&r->lp, m - res.accepted);
    lp_chain_accept(&r->lp, res.next);
    if (hid) /* the row `next` came from */
        eng__keep_hidden(e, r, hid + (size_t)res.accepted * e->hidden_size);
    int32_t out[64];
    int n_out = res.accepted + 1;
    memcpy(out, d, sizeof(int32_t) * (size_t)res.accepted);
    out[res.accepted] = res.next;
    if (e->cfg.met && m > 0)
        met_spec_draft(e->cfg.met, m, res.accepted);
    /* acceptance controller. The draft length (used while other requests
     * run) follows the runs being accepted (doubles after a full
     * acceptance, falls to what was accepted plus one), since every
     * rejected draft is a row computed for nothing;
     * when even short drafts keep failing (moving average below the
     * floor), drafting pauses, backing off 4, 8, 16 steps: a one-token
     * probe then costs little, and a text that starts repeating is caught
     * soon. */
    if (m > 0)
        r->spec_k = res.accepted == m ? (2 * m < e->kmax ? 2 * m : e->kmax) : res.accepted + 1;
    double rate = m ? (double)res.accepted / m : 1.0;
    r->accept_avg = 0.7 * r->accept_avg + 0.3 * rate;
    if (r->accept_avg < e->cfg.spec_min_accept) {
        r->spec_backoff = r->spec_backoff ? (r->spec_backoff < 16 ? 2 * r->spec_backoff : 16) : 4;
        r->spec_pause = r->spec_backoff;
        r->accept_avg = e->cfg.spec_min_accept; /* probe again after the pause */
    } else {
        r->spec_backoff = 0;
    }
    /* the rejected drafts' KV is discarded by shortening the sequence */
    q->n_tokens = L0;
    r->n_draft = 0;
    int valid = L0 + res.accepted;
    if (q->n_computed > valid)
        q->n_computed = valid;
    for (int i = 0; i < n_out; i++)
        if (eng__emit_token(e, r, out[i], rows + (size_t)i * V))
            return; /* finished inside the accepted run: the rest is dropped */
    kv_seq_truncate(e->kv, &q->kv, q->n_tokens);
    r->ss.tokens = q->tokens;
    r->ss.n_tokens = q->n_tokens;
    e->cfg.spec->ops->rollback(e->cfg.spec, &r->ss, valid);
}

/* Drafts tokens for next step's decode tokens. */
void eng__propose(eng *e)
{
    spec_proposer *sp = e->cfg.spec;
    if (!sp)
        return;
    int running = sched_num_running(e->sch);
    if (e->cfg.spec_disable_batch > 0 && running >= e->cfg.spec_disable_batch)
        return; /* big batches: verification costs more than it saves */
    int n = 0;
    for (int i = 0; i < e->n_active && n < e->cfg.max_num_seqs; i++) {
        eng_req *r = e->active[i];
        sched_seq *q = &r->seq;
        if (!r->active || q->state != SCHED_RUNNING || q->n_computed != q->n_tokens - 1 ||
            r->n_draft || r->p.no_speculation)
            continue;
        /* a seeded sampled request keeps its sample path whatever the load */
        if (r->p.sampling.temperature > 0 && r->p.has_seed)
            continue;
        /* a prompt whose chunk ended just before its last token has no
         * hidden state yet: a proposer that reads one waits a step */
        if (sp->ops->wants_hidden && !r->has_hidden)
            continue;
        if (r->spec_pause > 0) {
            r->spec_pause--;
            continue;
        }
        /* r->spec_k is in [1, kmax]: set by admit, kept there by verify.
         * Alone, a step of k+1 rows is memory-bound and costs little more
         * than one (4 rows 1.22x one on the Zen 4 VM, docs/serving.md), so
         * a lone request drafts the full k; among others every rejected
         * row is arithmetic the whole batch waits for. */
        int k = running > 1 ? r->spec_k : e->kmax;
        int room = r->p.max_tokens - r->n_output - 1;
        int ctx = e->cfg.max_model_len - q->n_tokens - 1;
        k = k < room ? k : room;
        k = k < ctx ? k : ctx;
        if (k < 1)
            continue;
        r->ss.tokens = q->tokens;
        r->ss.n_tokens = q->n_tokens;
        r->ss.n_prompt = q->n_prompt;
        r->ss.hidden = r->has_hidden ? r->hidden : NULL;
        e->cand[n] = r;
        e->cand_ss[n] = &r->ss;
        e->cand_params[n] = r->p.sampling;
        e->cand_k[n] = k;
        n++;
    }
    if (!n)
        return;
    inf_err err = {0};
    if (sp->ops->propose(sp, e->cand_ss, n, e->cand_params, e->kmax, e->cand_k, e->drafts,
                         e->dprobs, &err) != INF_OK) {
        log_msg(e->cfg.log, LOG_WARN, "engine", NULL, "speculation: %s (no drafts this step)",
                err.msg);
        return;
    }
    for (int i = 0; i < n; i++) {
        eng_req *r = e->cand[i];
        sched_seq *q = &r->seq;
        int k = e->cand_k[i];
        memcpy(q->tokens + q->n_tokens, e->drafts + (size_t)i * e->kmax, sizeof(int32_t) * (size_t)k);
        q->n_tokens += k;
        r->n_draft = k;
        r->draft_slot = i;
    }
}

