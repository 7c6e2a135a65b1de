/* mdesc_: each family's forward recipe read from config.json, with Hugging
 * Face's defaults for absent keys (RoPE's frequencies: mdesc_rope.c), and
 * what a backend must implement for it. */
#include "model_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct md_family {
    const char *arch, *model_type, *name;
    int head_dim; /* HF's default when head_dim is absent; 0: D / H  */
    int tied;     /* HF's tie_word_embeddings default                */
} md_family;

static const md_family families[] = {
    {"LlamaForCausalLM", "llama", "llama", 0, 0},
    {"MistralForCausalLM", "mistral", "mistral", 0, 0},
    {"Qwen2ForCausalLM", "qwen2", "qwen2", 0, 0},
    {"Qwen3ForCausalLM", "qwen3", "qwen3", 128, 0},
    {"Gemma2ForCausalLM", "gemma2", "gemma2", 256, 1},
    {"Gemma3ForCausalLM", "gemma3_text", "gemma3", 256, 1},
    {"Phi3ForCausalLM", "phi3", "phi3", 0, 0},
};
#define N_FAMILIES     (sizeof families / sizeof families[0])
#define SUPPORTED_LIST "Llama, Mistral, Qwen2, Qwen3, Gemma2, Gemma3 (text), Phi3"

static int is(const mdesc *d, const char *name) { return strcmp(d->family, name) == 0; }

int mdesc__family(const cJSON *root, model_config *c, int *default_head_dim, const char *path,
                  inf_err *err)
{
    const md_family *f = NULL;
    const cJSON *a = cfgj_item(root, "architectures");
    if (a) {
        const cJSON *a0 = cJSON_GetArrayItem(a, 0);
        if (!cJSON_IsArray(a) || !cJSON_IsString(a0))
            return inf_fail(err, INF_ERR_FORMAT, "%s: 'architectures' must be a list of names",
                            path);
        for (size_t i = 0; i < N_FAMILIES && !f; i++)
            if (strcmp(a0->valuestring, families[i].arch) == 0)
                f = &families[i];
        if (!f)
            return inf_fail(err, INF_ERR_UNSUPPORTED,
                            "%s: architecture '%s' is not supported (" SUPPORTED_LIST ")", path,
                            a0->valuestring);
    } else {
        const cJSON *t = cfgj_item(root, "model_type");
        if (!t)
            return inf_fail(err, INF_ERR_FORMAT,
                            "%s: neither 'architectures' nor 'model_type' is set", path);
        if (!cJSON_IsString(t))
            return inf_fail(err, INF_ERR_FORMAT, "%s: 'model_type' must be a string", path);
        for (size_t i = 0; i < N_FAMILIES && !f; i++)
            if (strcmp(t->valuestring, families[i].model_type) == 0)
                f = &families[i];
        if (!f)
            return inf_fail(err, INF_ERR_UNSUPPORTED,
                            "%s: model_type '%s' is not supported (" SUPPORTED_LIST ")", path,
                            t->valuestring);
    }
    snprintf(c->arch, sizeof c->arch, "%s", f->arch);
    c->desc.family = f->name;
    c->tie_word_embeddings = f->tied;
    *default_head_dim = f->head_dim;
    return INF_OK;
}

static int md_str(const cJSON *o, const char *key, const char **out, const char *path, inf_err *err)
{
    const cJSON *v = cfgj_item(o, key);
    if (!v)
        return INF_OK;
    if (!cJSON_IsString(v))
        return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be a string", path, key);
    *out = v->valuestring;
    return INF_OK;
}

/* ---- the recipe -------------------------------------------------------------- */

static int parse_act(const cJSON *root, mdesc *d, const char *path, inf_err *err)
{
    const char *act = d->norm == MD_NORM_RMS_1P ? "gelu_pytorch_tanh" : "silu";
    const char *key = "hidden_act";
    int rc = md_str(root, "hidden_act", &act, path, err);
    if (!rc && cfgj_item(root, "hidden_activation")) { /* Gemma's key wins */
        key = "hidden_activation";
        rc = md_str(root, key, &act, path, err);
    }
    if (rc)
        return rc;
    if (!strcmp(act, "silu"))
        d->act = MD_ACT_SILU;
    else if (!strcmp(act, "gelu_pytorch_tanh"))
        d->act = MD_ACT_GELU_TANH;
    else
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "%s: %s '%s' is not supported (silu, "
                        "gelu_pytorch_tanh)",
                        path, key, act);
    return INF_OK;
}

static int parse_bias(const cJSON *root, mdesc *d, const char *path, inf_err *err)
{
    int attn = 0, mlp = 0, rc;
    if ((rc = cfgj_bool(root, "attention_bias", &attn, path, err)) ||
        (rc = cfgj_bool(root, "mlp_bias", &mlp, path, err)))
        return rc;
    if (mlp)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: mlp_bias true is not supported", path);
    d->bias_qkv = attn || is(d, "qwen2"); /* Qwen2's q, k, v always have one */
    d->bias_o = attn;
    return INF_OK;
}

/* Which layers are local (sliding-window) and their window. */
static int parse_layers(const cJSON *root, model_config *c, const char *path, inf_err *err)
{
    mdesc *d = &c->desc;
    int W = is(d, "gemma2") || is(d, "gemma3") ? 4096 : 0, rc;
    if ((rc = cfgj_int(root, "sliding_window", 0, &W, path, err)))
        return rc;
    if (W < 0)
        return inf_fail(err, INF_ERR_FORMAT, "%s: 'sliding_window' must not be negative (is %d)",
                        path, W);
    c->sliding_window = W;
    memset(d->local, 0, sizeof d->local);
    d->window[0] = d->window[1] = 0;
    const cJSON *types = cfgj_item(root, "layer_types");
    if (is(d, "qwen2") || is(d, "qwen3")) {
        int use = 0, mwl = 28;
        if ((rc = cfgj_bool(root, "use_sliding_window", &use, path, err)) ||
            (rc = cfgj_int(root, "max_window_layers", 0, &mwl, path, err)))
            return rc;
        if (!use) /* HF drops the window then, layer_types included */
            return INF_OK;
        if (!types)
            for (int l = mwl < 0 ? 0 : mwl; l < c->n_layers; l++)
                d->local[l] = 1;
    } else if (is(d, "gemma2") || is(d, "gemma3")) {
        int pattern = is(d, "gemma2") ? 2 : 6;
        if ((rc = cfgj_int(root, "sliding_window_pattern", 0, &pattern, path, err)))
            return rc;
        if (pattern < 1)
            return inf_fail(err, INF_ERR_FORMAT, "%s: 'sliding_window_pattern' must be positive",
                            path);
        for (int l = 0; l < c->n_layers && !types; l++)
            d->local[l] = (l + 1) % pattern != 0;
    } else if (W > 0 && !types) { /* Llama, Mistral, Phi-3: every layer */
        d->window[0] = W;
    }
    if (types) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != c->n_layers)
            return inf_fail(err, INF_ERR_FORMAT,
                            "%s: 'layer_types' must list num_hidden_layers (%d) "
                            "names",
                            path, c->n_layers);
        int l = 0;
        for (const cJSON *t = types->child; t; t = t->next, l++) {
            if (cJSON_IsString(t) && !strcmp(t->valuestring, "sliding_attention"))
                d->local[l] = 1;
            else if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention"))
                return inf_fail(err, INF_ERR_UNSUPPORTED,
                                "%s: layer_types[%d] must be "
                                "'full_attention' or 'sliding_attention'",
                                path, l);
        }
    }
    d->window[1] = W;
    for (int l = 0; l < c->n_layers; l++)
        if (d->local[l] && W == 0)
            return inf_fail(err, INF_ERR_FORMAT,
                            "%s: layer %d slides but 'sliding_window' is not "
                            "set",
                            path, l);
    return INF_OK;
}

static int parse_rope(const cJSON *root, model_config *c, const char *path, inf_err *err)
{
    mdesc *d = &c->desc;
    double prf = 1.0;
    int rc = cfgj_num(root, "partial_rotary_factor", &prf, path, err);
    if (rc)
        return rc;
    d->rot_dim = prf > 0 && prf <= 1 ? (int)(c->head_dim * prf) : 0; /* no cast of junk */
    if (!(prf > 0 && prf <= 1) || d->rot_dim < 2 || d->rot_dim % 2 || d->rot_dim / 2 > MD_MAX_FREQ)
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "%s: partial_rotary_factor %g gives %d rotary "
                        "dimensions (need an even number, 2 to %d)",
                        path, prf, d->rot_dim, 2 * MD_MAX_FREQ);
    d->rope[0].theta = c->rope_theta;
    if ((rc = mdesc__rope(root, cfgj_item(root, "rope_scaling"), &d->rope[0], d->rot_dim, c, path,
                         err)))
        return rc;
    d->rope[1] = d->rope[0];
    double local = 10000.0;
    if (is(d, "gemma3")) { /* local layers: their own base, never scaled */
        if ((rc = cfgj_num(root, "rope_local_base_freq", &local, path, err)))
            return rc;
        if (!(local > 0))
            return inf_fail(err, INF_ERR_FORMAT, "%s: 'rope_local_base_freq' must be positive",
                            path);
        d->rope[1].theta = local;
        rc = mdesc__rope(root, NULL, &d->rope[1], d->rot_dim, c, path, err);
    }
    return rc;
}

int mdesc__parse(const cJSON *root, model_config *c, const char *path, inf_err *err)
{
    mdesc *d = &c->desc;
    int gemma = is(d, "gemma2") || is(d, "gemma3"), rc;
    if (c->n_layers > MD_MAX_LAYERS)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: num_hidden_layers %d (at most %d)", path,
                        c->n_layers, MD_MAX_LAYERS);
    d->n_layers = c->n_layers;
    d->head_dim = c->head_dim;
    d->eps = c->rms_norm_eps;
    d->norm = gemma ? MD_NORM_RMS_1P : MD_NORM_RMS;
    d->qk_norm = is(d, "qwen3") || is(d, "gemma3");
    d->sandwich = gemma;
    d->fused_qkv = is(d, "phi3");
    d->tied = c->tie_word_embeddings;
    d->embed_scale = gemma ? sqrt((double)c->hidden_size) : 1.0;
    d->attn_scale = 1.0 / sqrt((double)c->head_dim);
    d->attn_softcap = d->logit_softcap = 0.0;
    if (gemma) {
        double qpas = 256.0;
        d->attn_softcap = is(d, "gemma2") ? 50.0 : 0.0;
        d->logit_softcap = is(d, "gemma2") ? 30.0 : 0.0;
        if ((rc = cfgj_num(root, "query_pre_attn_scalar", &qpas, path, err)) ||
            (rc = cfgj_num(root, "attn_logit_softcapping", &d->attn_softcap, path, err)) ||
            (rc = cfgj_num(root, "final_logit_softcapping", &d->logit_softcap, path, err)))
            return rc;
        /* "key": null means none (cfgj_num leaves the default otherwise) */
        if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "attn_logit_softcapping")))
            d->attn_softcap = 0.0;
        if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "final_logit_softcapping")))
            d->logit_softcap = 0.0;
        if (!(qpas > 0) || d->attn_softcap < 0 || d->logit_softcap < 0)
            return inf_fail(err, INF_ERR_FORMAT,
                            "%s: query_pre_attn_scalar must be positive and "
                            "the soft-caps not negative",
                            path);
        d->attn_scale = 1.0 / sqrt(qpas);
    }
    if ((rc = parse_act(root, d, path, err)) || (rc = parse_bias(root, d, path, err)) ||
        (rc = parse_layers(root, c, path, err)) || (rc = parse_rope(root, c, path, err)))
        return rc;
    return INF_OK;
}

/* ---- what a backend must implement ------------------------------------------- */

static int rope_same(const md_rope *a, const md_rope *b, int n)
{
    return a->attn_factor == b->attn_factor && a->long_from == b->long_from &&
           !memcmp(a->inv_freq, b->inv_freq, (size_t)n * sizeof(double)) &&
           (a->long_from == INT_MAX ||
            !memcmp(a->inv_freq_long, b->inv_freq_long, (size_t)n * sizeof(double)));
}

unsigned mdesc_features(const mdesc *d)
{
    unsigned f = 0;
    int any_local = 0;
    for (int l = 0; l < d->n_layers; l++)
        any_local |= d->local[l];
    f |= d->norm == MD_NORM_RMS_1P ? MD_F_NORM_1P : 0;
    f |= d->act == MD_ACT_GELU_TANH ? MD_F_GELU_TANH : 0;
    f |= d->bias_qkv ? MD_F_BIAS_QKV : 0;
    f |= d->bias_o ? MD_F_BIAS_O : 0;
    f |= d->qk_norm ? MD_F_QK_NORM : 0;
    f |= d->sandwich ? MD_F_SANDWICH : 0;
    f |= d->rot_dim != d->head_dim ? MD_F_PARTIAL_ROTARY : 0;
    for (int k = 0; k < 1 + any_local; k++) {
        f |= d->rope[k].attn_factor != 1.0 ? MD_F_ROPE_ATTN : 0;
        f |= d->rope[k].long_from != INT_MAX ? MD_F_ROPE_LONG : 0;
    }
    f |= d->attn_scale != 1.0 / sqrt((double)d->head_dim) ? MD_F_ATTN_SCALE : 0;
    f |= d->attn_softcap > 0 ? MD_F_ATTN_SOFTCAP : 0;
    f |= d->logit_softcap > 0 ? MD_F_LOGIT_SOFTCAP : 0;
    f |= mdesc_min_window(d) > 0 ? MD_F_WINDOW : 0;
    f |= any_local && !rope_same(&d->rope[0], &d->rope[1], d->rot_dim / 2) ? MD_F_LOCAL_ROPE : 0;
    f |= d->embed_scale != 1.0 ? MD_F_EMBED_SCALE : 0;
    return f;
}

const char *mdesc_feature_key(unsigned f)
{
    switch (f) {
        case MD_F_NORM_1P: return "RMSNorm with (1 + weight)";
        case MD_F_GELU_TANH: return "hidden_activation gelu_pytorch_tanh";
        case MD_F_BIAS_QKV: return "q/k/v projection bias";
        case MD_F_BIAS_O: return "attention_bias (o_proj)";
        case MD_F_QK_NORM: return "q_norm/k_norm";
        case MD_F_SANDWICH: return "post_attention/post_feedforward norms";
        case MD_F_PARTIAL_ROTARY: return "partial_rotary_factor";
        case MD_F_ROPE_ATTN: return "rope_scaling attention factor";
        case MD_F_ROPE_LONG: return "rope_scaling longrope";
        case MD_F_ATTN_SCALE: return "query_pre_attn_scalar";
        case MD_F_ATTN_SOFTCAP: return "attn_logit_softcapping";
        case MD_F_LOGIT_SOFTCAP: return "final_logit_softcapping";
        case MD_F_WINDOW: return "sliding_window";
        case MD_F_LOCAL_ROPE: return "rope_local_base_freq";
        case MD_F_EMBED_SCALE: return "embedding scale sqrt(hidden_size)";
        default: return "?";
    }
}

int mdesc_require(const mdesc *d, unsigned supported, const char *who, inf_err *err)
{
    unsigned missing = mdesc_features(d) & ~supported;
    for (unsigned f = 1; f & MD_F_ALL; f <<= 1)
        if (missing & f)
            return inf_fail(err, INF_ERR_UNSUPPORTED,
                            "%s: %s setting '%s' is not implemented by "
                            "this backend",
                            who, d->family, mdesc_feature_key(f));
    return INF_OK;
}

int mdesc_min_window(const mdesc *d)
{
    int w = 0;
    for (int l = 0; l < d->n_layers; l++) {
        int x = mdesc_window(d, l);
        if (x > 0 && (w == 0 || x < w))
            w = x;
    }
    return w;
}

int mdesc_kv_window(const mdesc *d)
{
    int w = 0;
    for (int l = 0; l < d->n_layers; l++) {
        int x = mdesc_window(d, l);
        if (x == 0)
            return 0;
        w = x > w ? x : w;
    }
    return w;
}
