/* spec_mlp: the MLP speculator (IBM's "accelerator" checkpoints, vLLM's
 * MLPSpeculator): a small network that reads the target's final hidden
 * state at a sequence's last position and the token sampled there, and
 * proposes the next k tokens in k cheap stages, with no second transformer
 * and no KV cache of its own. The target hands it the hidden state through
 * the backend seam (be_batch.want_hidden -> spec_seq.hidden).
 *
 * Format (what vLLM loads): config.json with model_type "mlp_speculator"
 * (or architectures ["MLPSpeculatorPreTrainedModel"]) and vocab_size,
 * emb_dim, inner_dim (0: emb_dim), n_predict, top_k_tokens_per_head,
 * n_candidates, tie_weights, scale_input; tensors [speculator.]emb.{i},
 * proj.{i}, head.{i} (".weight") and ln.{i}.weight / .bias, where with
 * tie_weights every stage uses emb/head/ln 0, and proj 0 then proj 1.
 *
 * Computation, per sequence (sw = 0.5^(0.5 / n_predict), ew =
 * sqrt((1 - sw^2) * inner_dim / 2)): s = the hidden state, RMS-normalized
 * without a weight and divided by sqrt(2) when scale_input; then for stage
 * i with the last token t: s = proj_i(s) * sw + emb_i[t] * ew; s =
 * gelu(rmsnorm(s) * ln_i.weight + ln_i.bias) (eps 1e-6, exact erf GELU);
 * logits = head_i(s); t = argmax (greedy requests) or a draw from the
 * request's distribution over them (temperature, top-k/p, min-p; the
 * proposal probabilities go to the verifier). Weights are widened to f32 at
 * load; dot products accumulate in double. */
#ifndef INFERD_SPEC_MLP_H
#define INFERD_SPEC_MLP_H

#include "spec.h"

typedef struct spec_mlp_config {
    const char *dir;      /* the speculator's checkpoint directory           */
    int target_vocab;     /* refused unless equal to the checkpoint's         */
    int target_hidden;    /* refused unless equal to emb_dim                  */
} spec_mlp_config;

/* Whether dir/config.json describes an MLP speculator (model_type
 * "mlp_speculator" or architectures ["MLPSpeculatorPreTrainedModel"]); 0
 * when it does not or cannot be read. */
int spec_mlp_detect(const char *dir);

/* Loads and checks the checkpoint: a missing tensor, a wrong shape, a
 * vocabulary or hidden size that does not match the target's is a clear
 * error naming the file, tensor and numbers. */
int spec_mlp_create(const spec_mlp_config *cfg, spec_proposer **out, inf_err *err);

/* n_predict: the most tokens it proposes at once; vocab_size. */
int spec_mlp_n_predict(const spec_proposer *p);
int spec_mlp_vocab(const spec_proposer *p);

/* The speculator's shape and weights (host f32, owned by the proposer), for
 * a backend that runs the stages on its device: stage[i] for every i <
 * n_predict (tied stages point at the same arrays). proj is [inner][in]
 * with in = emb_dim at stage 0, else inner; emb and head [vocab][inner]. */
typedef struct spec_mlp_stage_w {
    const float *emb, *proj, *head, *ln_w, *ln_b;
} spec_mlp_stage_w;

typedef struct spec_mlp_weights {
    int vocab, emb_dim, inner, n_predict;
    double sw, ew;            /* the state and embedding weights            */
    const spec_mlp_stage_w *stage;
} spec_mlp_weights;

void spec_mlp_weights_of(const spec_proposer *p, spec_mlp_weights *out);

/* The stages on a device (the target's GPU; cuda/mlp.h fills this). stage
 * runs stage i for n rows: at i == 0 from s0 [n][emb_dim] (the state before
 * stage 0: the hidden state, RMS-normalized and / sqrt 2 with scale_input),
 * later from the state the device kept; tok [n] each row's token; the
 * stage's logits [n][vocab] come back to the host, where the proposer picks
 * each row's next token (greedy or sampled) as it does on the host. */
typedef struct spec_mlp_device {
    void *user;
    int (*stage)(void *user, int i, int n, const float *s0, const int32_t *tok, float *logits,
                 inf_err *err);
    void (*destroy)(void *user);
} spec_mlp_device;

/* The proposer runs its stages through dev from now on and owns it
 * (destroyed with the proposer). */
void spec_mlp_set_device(spec_proposer *p, const spec_mlp_device *dev);

/* The stages on one hidden state [emb_dim] and token, greedy: k (<=
 * n_predict) tokens into toks, each stage's logits into logits [k][vocab]
 * when not NULL. For tests and tools; the proposer runs the same code. */
void spec_mlp_run(spec_proposer *p, const float *hidden, int32_t token, int k, int32_t *toks,
                  float *logits);

#endif
