/* mdesc_: the model description. One record, filled once from config.json,
 * says everything about the forward recipe that differs between the
 * decoder families inferd computes (Llama 2/3, Mistral, Qwen 2/2.5/3,
 * Gemma 2/3, Phi-3/4): how to normalize, which activation, which
 * projections carry a bias, RoPE and its scaling (frequencies computed here,
 * once), QK-norm, the attention scale, soft-caps, sliding windows per layer,
 * the embedding scale and the tied head. Both backends read it; the numpy
 * reference (tests/ref) derives the same from config.json on its own.
 * docs/architectures.md says how to add a family. */
#ifndef INFERD_MDESC_H
#define INFERD_MDESC_H

#include <limits.h>

#include "common.h"

#define MD_MAX_LAYERS 512
#define MD_MAX_FREQ 256 /* rotary pairs per head: head_dim up to 512 */

typedef enum md_norm {
    MD_NORM_RMS = 0,   /* x / rms(x) * w                                    */
    MD_NORM_RMS_1P,    /* x / rms(x) * (1 + w)   (Gemma)                    */
} md_norm;

typedef enum md_act {
    MD_ACT_SILU = 0,   /* down(silu(gate) * up)                             */
    MD_ACT_GELU_TANH,  /* down(gelu_tanh(gate) * up)  (Gemma's GeGLU)       */
} md_act;

typedef enum md_rope_kind {
    MD_ROPE_DEFAULT = 0,
    MD_ROPE_LINEAR,    /* position interpolation: inv_freq / factor         */
    MD_ROPE_DYNAMIC,   /* dynamic NTK: plain RoPE up to max_position_embeddings,
                          the context limit (HF changes it only beyond)     */
    MD_ROPE_LLAMA3,    /* Llama 3.1's banded rescaling                      */
    MD_ROPE_YARN,      /* YaRN ramp, cos and sin scaled by attn_factor      */
    MD_ROPE_LONGROPE,  /* Phi-3's per-pair factors, short and long          */
} md_rope_kind;

/* One RoPE: rotate-half pairs (i, i + rot_dim/2) of each head's first
 * rot_dim dimensions by angle position * inv_freq[i], cos and sin times
 * attn_factor. */
typedef struct md_rope {
    md_rope_kind kind;
    double theta;                       /* base                              */
    double factor;                      /* scaling factor (1 when none)      */
    double attn_factor;                 /* 1 unless YaRN / LongRoPE          */
    int long_from;                      /* positions >= it use inv_freq_long
                                           (LongRoPE); INT_MAX: never        */
    double inv_freq[MD_MAX_FREQ];       /* [rot_dim / 2]                     */
    double inv_freq_long[MD_MAX_FREQ];  /* [rot_dim / 2] when long_from is set */
} md_rope;

/* Settings a backend may or may not implement (mdesc_features). The
 * Llama 2 / Mistral recipe has none of them. */
enum {
    MD_F_NORM_1P = 1u << 0,       /* (1 + w) RMSNorm gains                  */
    MD_F_GELU_TANH = 1u << 1,     /* GeGLU MLP                              */
    MD_F_BIAS_QKV = 1u << 2,      /* q, k, v projection biases              */
    MD_F_BIAS_O = 1u << 3,        /* o projection bias                      */
    MD_F_QK_NORM = 1u << 4,       /* RMSNorm over each head of q and k      */
    MD_F_SANDWICH = 1u << 5,      /* norms after attention and MLP too      */
    MD_F_PARTIAL_ROTARY = 1u << 6,/* rot_dim < head_dim                     */
    MD_F_ROPE_ATTN = 1u << 7,     /* attn_factor != 1 (YaRN, LongRoPE)       */
    MD_F_ROPE_LONG = 1u << 8,     /* per-position short/long frequencies    */
    MD_F_ATTN_SCALE = 1u << 9,    /* attn_scale != 1/sqrt(head_dim)          */
    MD_F_ATTN_SOFTCAP = 1u << 10, /* cap * tanh(score / cap)                 */
    MD_F_LOGIT_SOFTCAP = 1u << 11,/* the same on the final logits           */
    MD_F_WINDOW = 1u << 12,       /* sliding-window attention in some layer  */
    MD_F_LOCAL_ROPE = 1u << 13,   /* local layers have their own RoPE        */
    MD_F_EMBED_SCALE = 1u << 14,  /* embeddings times embed_scale            */
    MD_F_ALL = (1u << 15) - 1,
};

typedef struct mdesc {
    const char *family;     /* "llama", "mistral", "qwen2", "qwen3", "gemma2",
                               "gemma3", "phi3" (static strings)            */
    md_norm norm;
    double eps;             /* rms_norm_eps                                  */
    md_act act;
    int bias_qkv, bias_o;   /* which projections carry a bias                */
    int qk_norm;            /* q_norm / k_norm [head_dim] before RoPE         */
    int sandwich;           /* post_attention / post_feedforward norms on
                               the sublayer outputs before the residual add
                               (Gemma 2/3); the MLP's input norm is then
                               pre_feedforward_layernorm                      */
    int fused_qkv;          /* qkv_proj [q|k|v] and gate_up_proj [gate|up]
                               (Phi-3), split into views at load              */
    int rot_dim;            /* dimensions rotated per head (even)             */
    double attn_scale;      /* multiplies q.k                                 */
    double attn_softcap;    /* 0: none                                        */
    double logit_softcap;   /* 0: none                                        */
    double embed_scale;     /* 1: none                                        */
    int tied;               /* lm_head is the embedding                       */
    int n_layers;
    int head_dim;
    unsigned char local[MD_MAX_LAYERS]; /* 1: layer l is a local layer       */
    int window[2];          /* attention window of global [0] / local [1]
                               layers: the query at p attends p-W+1..p;
                               0: the whole context                          */
    md_rope rope[2];        /* global [0] / local [1] layers                  */
} mdesc;

/* The settings of d away from the Llama 2 recipe (MD_F_* bits). */
unsigned mdesc_features(const mdesc *d);

/* The config.json key that turns feature bit f on, for messages. */
const char *mdesc_feature_key(unsigned f);

/* INF_OK when every feature of d is in `supported`; else
 * INF_ERR_UNSUPPORTED with "<who>: <family> setting '<key>' is not
 * implemented by this backend". */
int mdesc_require(const mdesc *d, unsigned supported, const char *who, inf_err *err);

/* The window that applies to layer l (0: whole context). */
static inline int mdesc_window(const mdesc *d, int l)
{
    return d->window[d->local[l]];
}

/* The smallest window of any layer, 0 when no layer has one. */
int mdesc_min_window(const mdesc *d);

/* The positions any layer looks back over when every layer has a window
 * (the largest window), else 0: KV before it is never read again. */
int mdesc_kv_window(const mdesc *d);

#endif
