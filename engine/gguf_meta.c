/* gguf_meta: GGUF metadata onto config.json's keys (gguf_meta.h). */
#include "gguf_meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const gguf_arch archs[] = {
    {"llama", 1, 0}, {"qwen2", 0, 0}, {"qwen3", 0, 0},
    {"gemma2", 0, 1}, {"gemma3", 0, 1}, {"phi3", 0, 0},
};
static const char *const hf_names[] = {
    "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
    "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM",
};

/* An integer key: 1 and *out when present, 0 when absent; -1 (message) when
 * of another type or out of int range. */
static int meta_int(const gguf_file *g, const char *key, int *out, inf_err *err)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return 0;
    int is_int = kv->type <= GGUF_V_I32 || kv->type == GGUF_V_U64 || kv->type == GGUF_V_I64;
    if (!is_int || kv->type == GGUF_V_F32 || kv->inum < -2147483647 || kv->inum > 2147483647) {
        inf_fail(err, INF_ERR_FORMAT, "%s: metadata '%s' must be an integer", gguf_path(g), key);
        return -1;
    }
    *out = (int)kv->inum;
    return 1;
}

static int meta_num(const gguf_file *g, const char *key, double *out, inf_err *err)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return 0;
    if (kv->type == GGUF_V_STRING || kv->type == GGUF_V_ARRAY || kv->type == GGUF_V_BOOL) {
        inf_fail(err, INF_ERR_FORMAT, "%s: metadata '%s' must be a number", gguf_path(g), key);
        return -1;
    }
    *out = kv->num;
    return 1;
}

/* A string key into buf (NUL-terminated, truncated to cap); 0 when absent. */
static int meta_str(const gguf_file *g, const char *key, char *buf, size_t cap, inf_err *err)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return 0;
    if (kv->type != GGUF_V_STRING) {
        inf_fail(err, INF_ERR_FORMAT, "%s: metadata '%s' must be a string", gguf_path(g), key);
        return -1;
    }
    size_t n = kv->str_len < cap - 1 ? (size_t)kv->str_len : cap - 1;
    memcpy(buf, kv->str, n);
    buf[n] = 0;
    return 1;
}

/* A 1-D F32 tensor of n values as a JSON list (LongRoPE's factors). */
static cJSON *f32_list(const gguf_file *g, const char *name, int n)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t || t->type != GGUF_F32 || t->n_dims != 1 || t->ne[0] != n)
        return NULL;
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        float f;
        memcpy(&f, (const char *)t->data + 4 * (size_t)i, 4);
        cJSON_AddItemToArray(a, cJSON_CreateNumber(f));
    }
    return a;
}

/* {arch}.rope.scaling.*: none, linear, yarn; longrope (Phi-3) from its
 * factor tensors. */
static int rope_scaling(const gguf_file *g, const char *arch, cJSON *c, int rot, inf_err *err)
{
    const char *path = gguf_path(g);
    char key[128], rs[32] = "";
    double factor = 0;
    int orig = 0, rc;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if ((rc = meta_str(g, key, rs, sizeof rs, err)) < 0)
        return INF_ERR_FORMAT;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    if (meta_num(g, key, &factor, err) < 0)
        return INF_ERR_FORMAT;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if (meta_int(g, key, &orig, err) < 0)
        return INF_ERR_FORMAT;
    int longrope = gguf_find_tensor(g, "rope_factors_long.weight") != NULL;
    if ((!rc || !strcmp(rs, "none")) && !longrope)
        return INF_OK;
    cJSON *o = cJSON_AddObjectToObject(c, "rope_scaling");
    if (longrope) { /* Phi-3: the factors are tensors, the type key absent or "su"/"longrope" */
        cJSON *sf = f32_list(g, "rope_factors_short.weight", rot / 2);
        cJSON *lf = f32_list(g, "rope_factors_long.weight", rot / 2);
        cJSON_AddStringToObject(o, "type", "longrope");
        if (sf)
            cJSON_AddItemToObject(o, "short_factor", sf);
        if (lf)
            cJSON_AddItemToObject(o, "long_factor", lf);
        if (orig > 0)
            cJSON_AddNumberToObject(c, "original_max_position_embeddings", orig);
        if (!sf || !lf || orig <= 0)
            return inf_fail(err, INF_ERR_FORMAT, "%s: LongRoPE needs F32 rope_factors_short / "
                            "rope_factors_long of %d values and %s.rope.scaling."
                            "original_context_length", path, rot / 2, arch);
        return INF_OK;
    }
    if (strcmp(rs, "linear") && strcmp(rs, "yarn"))
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: %s.rope.scaling.type '%s' is not "
                        "supported (none, linear, yarn)", path, arch, rs);
    if (!(factor > 0))
        return inf_fail(err, INF_ERR_FORMAT, "%s: %s rope scaling without a positive "
                        "%s.rope.scaling.factor", path, rs, arch);
    cJSON_AddStringToObject(o, "rope_type", rs);
    cJSON_AddNumberToObject(o, "factor", factor);
    if (!strcmp(rs, "yarn") && orig > 0)
        cJSON_AddNumberToObject(o, "original_max_position_embeddings", orig);
    return INF_OK;
}

/* Gemma's keys: soft-caps, the window and its layer pattern, the local
 * RoPE base; query_pre_attn_scalar is the head size (llama.cpp's choice for
 * every Gemma but 2-27B, whose scalar GGUF does not carry). */
static int gemma_keys(const gguf_file *g, const char *arch, cJSON *c, int hd, inf_err *err)
{
    static const struct { const char *gguf, *hf; } nums[] = {
        {"attn_logit_softcapping", "attn_logit_softcapping"},
        {"final_logit_softcapping", "final_logit_softcapping"},
        {"attention.sliding_window", "sliding_window"},
        {"attention.sliding_window_pattern", "sliding_window_pattern"},
        {"rope.freq_base_swa", "rope_local_base_freq"},
    };
    char key[128];
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        double d;
        snprintf(key, sizeof key, "%s.%s", arch, nums[i].gguf);
        int rc = meta_num(g, key, &d, err);
        if (rc < 0)
            return INF_ERR_FORMAT;
        if (rc)
            cJSON_AddNumberToObject(c, nums[i].hf, d);
    }
    if (!strcmp(arch, "gemma3")) { /* HF's Gemma 3 has no soft-caps unless given */
        if (!cJSON_GetObjectItem(c, "attn_logit_softcapping"))
            cJSON_AddNullToObject(c, "attn_logit_softcapping");
        if (!cJSON_GetObjectItem(c, "final_logit_softcapping"))
            cJSON_AddNullToObject(c, "final_logit_softcapping");
    }
    cJSON_AddNumberToObject(c, "query_pre_attn_scalar", hd);
    cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
    return INF_OK;
}

int gguf__config(const gguf_file *g, cJSON **out, const gguf_arch **arch_out, inf_err *err)
{
    const char *path = gguf_path(g);
    char arch[64] = "", key[128];
    int rc = meta_str(g, "general.architecture", arch, sizeof arch, err), ai = -1;
    if (rc < 0)
        return INF_ERR_FORMAT;
    if (!rc)
        return inf_fail(err, INF_ERR_FORMAT, "%s: no general.architecture", path);
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(arch, archs[i].name))
            ai = (int)i;
    if (ai < 0)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: GGUF architecture '%s' is not supported "
                        "(llama, qwen2, qwen3, gemma2, gemma3, phi3)", path, arch);
    static const struct { const char *gguf, *hf; int required; } ints[] = {
        {"embedding_length", "hidden_size", 1},
        {"feed_forward_length", "intermediate_size", 1},
        {"block_count", "num_hidden_layers", 1},
        {"attention.head_count", "num_attention_heads", 1},
        {"attention.head_count_kv", "num_key_value_heads", 0},
        {"attention.key_length", "head_dim", 0},
        {"context_length", "max_position_embeddings", 0},
        {"vocab_size", "vocab_size", 0},
    };
    cJSON *c = cJSON_CreateObject();
    if (!c)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
    cJSON_AddItemToObject(c, "architectures", cJSON_CreateStringArray(&hf_names[ai], 1));
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int v;
        snprintf(key, sizeof key, "%s.%s", arch, ints[i].gguf);
        if ((rc = meta_int(g, key, &v, err)) < 0)
            goto fail;
        if (!rc && ints[i].required) {
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: missing metadata '%s'", path, key);
            goto fail;
        }
        if (rc)
            cJSON_AddNumberToObject(c, ints[i].hf, v);
    }
    if (!cJSON_GetObjectItem(c, "vocab_size")) { /* older files: the embedding's rows */
        const gguf_tensor *e = gguf_find_tensor(g, "token_embd.weight");
        if (e && e->n_dims == 2 && e->ne[1] < 1 << 30)
            cJSON_AddNumberToObject(c, "vocab_size", (double)e->ne[1]);
    }
    double d;
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    if ((rc = meta_num(g, key, &d, err)) < 0)
        goto fail;
    if (rc)
        cJSON_AddNumberToObject(c, "rope_theta", d);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if ((rc = meta_num(g, key, &d, err)) < 0)
        goto fail;
    cJSON_AddNumberToObject(c, "rms_norm_eps", rc ? d : 1e-5); /* llama.cpp's default */
    int rot = 0, heads = cJSON_GetObjectItem(c, "num_attention_heads")->valueint;
    cJSON *hdj = cJSON_GetObjectItem(c, "head_dim");
    int hidden = cJSON_GetObjectItem(c, "hidden_size")->valueint;
    int hd = hdj ? hdj->valueint : heads > 0 ? hidden / heads : 0;
    if (!hdj) /* GGUF's default is hidden / heads, for Gemma too (HF's is 256) */
        cJSON_AddNumberToObject(c, "head_dim", hd);
    snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
    if ((rc = meta_int(g, key, &rot, err)) < 0)
        goto fail;
    if (!rc || rot <= 0 || rot > hd)
        rot = hd;
    if (rot != hd) { /* partial rotary (Phi-3 can have it) */
        if (ai != 5) {
            rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: %s is %d, not the head size %d "
                          "(partial rotary is read for phi3 only)", path, key, rot, hd);
            goto fail;
        }
        cJSON_AddNumberToObject(c, "partial_rotary_factor", (double)rot / hd);
    }
    if ((rc = rope_scaling(g, arch, c, rot, err)))
        goto fail;
    if (archs[ai].norm_plus_one && (rc = gemma_keys(g, arch, c, hd, err)))
        goto fail;
    cJSON_AddBoolToObject(c, "attention_bias",
                          gguf_find_tensor(g, "blk.0.attn_output.bias") != NULL);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", !gguf_find_tensor(g, "output.weight"));
    static const char *const ids[][2] = {{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                                         {"tokenizer.ggml.eos_token_id", "eos_token_id"}};
    for (int i = 0; i < 2; i++) {
        int v;
        if ((rc = meta_int(g, ids[i][0], &v, err)) < 0)
            goto fail;
        if (rc)
            cJSON_AddNumberToObject(c, ids[i][1], v);
    }
    *out = c;
    *arch_out = &archs[ai];
    return INF_OK;
fail:
    cJSON_Delete(c);
    return rc < 0 ? INF_ERR_FORMAT : rc;
}
