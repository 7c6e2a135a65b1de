/* Unit tests for model_ (config.json and weight binding): each test writes a
 * tiny Llama checkpoint (config + safetensors) into a fresh directory under
 * $INFERD_TEST_TMP (or /tmp); the real models in ../shared/models are checked
 * when present and skipped, saying so, when not. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model.h"
#include "tests/tdir.h"

/* ---- fixture: one temporary directory per test (tests/tdir.h) ---- */

static void pjoin(char *out, size_t cap, const char *dir, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[700];
    pjoin(path, sizeof path, dir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
    assert_int_equal(fclose(fp), 0);
}

/* ---- a tiny safetensors writer ---- */

typedef struct wt {
    char name[96];
    const char *dtype;
    int ndim;
    int64_t shape[2];
    size_t nbytes;
} wt;

/* Writes ts[0..n) back to back; f32 data is a deterministic ramp, other
 * dtypes zeros. */
static void write_st(const char *path, const wt *ts, int n)
{
    size_t cap = 256 + (size_t)n * 256, len = 0, off = 0;
    char *h = malloc(cap);
    assert_non_null(h);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", ts[i].name,
                                ts[i].dtype);
        for (int d = 0; d < ts[i].ndim; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "", (long long)ts[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off, off + ts[i].nbytes);
        off += ts[i].nbytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    assert_true(len < cap);
    unsigned char *data = calloc(1, off + 1);
    assert_non_null(data);
    off = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(ts[i].dtype, "F32") == 0)
            for (size_t k = 0; k < ts[i].nbytes / 4; k++) {
                float v = (float)((i * 131 + (int)k) % 97) / 97.0f - 0.5f;
                memcpy(data + off + 4 * k, &v, 4);
            }
        off += ts[i].nbytes;
    }
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)((uint64_t)len >> (8 * i));
    assert_int_equal(fwrite(le, 1, 8, fp), 8);
    assert_int_equal(fwrite(h, 1, len, fp), len);
    assert_int_equal(fwrite(data, 1, off, fp), off);
    assert_int_equal(fclose(fp), 0);
    free(data);
    free(h);
}

/* ---- a tiny Llama checkpoint ---- */

typedef struct tiny {
    int D, F, L, H, KV, hd, V;
    int tied;             /* tie_word_embeddings in config.json          */
    int lm_head;          /* write lm_head.weight                        */
    const char *omit;     /* a tensor left out                           */
    const char *bad;      /* a tensor written with one row too many      */
    const char *i64;      /* a tensor written as I64                     */
    const char *bf16;     /* a tensor written as BF16 (mixed dtypes)     */
    const char *f16;      /* a tensor written as F16                     */
    const char *extra;    /* extra config.json members, or NULL          */
    int shards;           /* 0: model.safetensors; 2: index + 2 shards   */
} tiny;

static tiny tiny_default(void)
{
    return (tiny){.D = 16, .F = 24, .L = 2, .H = 4, .KV = 2, .hd = 4, .V = 32, .tied = 1};
}

static void add_t(wt *ts, int *n, const tiny *t, const char *name, int64_t rows, int64_t cols)
{
    if (t->omit && strcmp(name, t->omit) == 0)
        return;
    wt *w = &ts[(*n)++];
    snprintf(w->name, sizeof w->name, "%s", name);
    w->dtype = "F32";
    size_t es = 4;
    if (t->i64 && strcmp(name, t->i64) == 0) {
        w->dtype = "I64";
        es = 8;
    } else if (t->bf16 && strcmp(name, t->bf16) == 0) {
        w->dtype = "BF16";
        es = 2;
    } else if (t->f16 && strcmp(name, t->f16) == 0) {
        w->dtype = "F16";
        es = 2;
    }
    if (t->bad && strcmp(name, t->bad) == 0)
        rows = rows ? rows + 1 : 0;
    if (rows == 0) { /* 1-D */
        w->ndim = 1;
        w->shape[0] = cols + (t->bad && strcmp(name, t->bad) == 0);
        w->nbytes = (size_t)w->shape[0] * es;
    } else {
        w->ndim = 2;
        w->shape[0] = rows;
        w->shape[1] = cols;
        w->nbytes = (size_t)(rows * cols) * es;
    }
}

static void write_config(const char *dir, const tiny *t)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\",\n"
             " \"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d,\n"
             " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d,\n"
             " \"vocab_size\": %d, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-05,\n"
             " \"rope_theta\": 500000.0, \"hidden_act\": \"silu\", \"tie_word_embeddings\": %s,\n"
             " \"bos_token_id\": 1, \"eos_token_id\": 2%s%s}\n",
             t->D, t->F, t->L, t->H, t->KV, t->hd, t->V, t->tied ? "true" : "false",
             t->extra ? ", " : "", t->extra ? t->extra : "");
    write_text(dir, "config.json", cfg);
}

static void write_tiny(const char *dir, const tiny *t)
{
    write_config(dir, t);
    int cap = 3 + 9 * t->L, n = 0;
    wt *ts = calloc((size_t)cap, sizeof *ts);
    assert_non_null(ts);
    int64_t q = (int64_t)t->H * t->hd, kv = (int64_t)t->KV * t->hd;
    add_t(ts, &n, t, "model.embed_tokens.weight", t->V, t->D);
    for (int i = 0; i < t->L; i++) {
        char nm[96];
#define L_(suffix, r, c) (snprintf(nm, sizeof nm, "model.layers.%d." suffix, i), add_t(ts, &n, t, nm, r, c))
        L_("input_layernorm.weight", 0, t->D);
        L_("self_attn.q_proj.weight", q, t->D);
        L_("self_attn.k_proj.weight", kv, t->D);
        L_("self_attn.v_proj.weight", kv, t->D);
        L_("self_attn.o_proj.weight", t->D, q);
        L_("post_attention_layernorm.weight", 0, t->D);
        L_("mlp.gate_proj.weight", t->F, t->D);
        L_("mlp.up_proj.weight", t->F, t->D);
        L_("mlp.down_proj.weight", t->D, t->F);
#undef L_
    }
    add_t(ts, &n, t, "model.norm.weight", 0, t->D);
    if (t->lm_head)
        add_t(ts, &n, t, "lm_head.weight", t->V, t->D);
    char path[700];
    if (!t->shards) {
        pjoin(path, sizeof path, dir, "model.safetensors");
        write_st(path, ts, n);
    } else { /* first half in shard 1, the rest in shard 2, as HF splits */
        int half = n / 2;
        pjoin(path, sizeof path, dir, "model-00001-of-00002.safetensors");
        write_st(path, ts, half);
        pjoin(path, sizeof path, dir, "model-00002-of-00002.safetensors");
        write_st(path, ts + half, n - half);
        size_t icap = 128 + (size_t)n * 160, il = 0;
        char *idx = malloc(icap);
        assert_non_null(idx);
        il += (size_t)snprintf(idx + il, icap - il, "{\"metadata\": {}, \"weight_map\": {");
        for (int i = 0; i < n; i++)
            il += (size_t)snprintf(idx + il, icap - il, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                                   i ? ", " : "", ts[i].name, i < half ? 1 : 2);
        il += (size_t)snprintf(idx + il, icap - il, "}}");
        assert_true(il < icap);
        write_text(dir, "model.safetensors.index.json", idx);
        free(idx);
    }
    free(ts);
}

/* model_load expecting failure with code; the message is one line and
 * contains want1 and want2 (either may be NULL). */
static void expect_load_fail(const char *dir, int code, const char *want1, const char *want2)
{
    model *m = (model *)1;
    inf_err err = {0, ""};
    int rc = model_load(dir, &m, &err);
    if (rc != code || (want1 && !strstr(err.msg, want1)) || (want2 && !strstr(err.msg, want2)))
        print_error("rc %d (want %d), message: %s\n", rc, code, err.msg);
    assert_int_equal(rc, code);
    assert_int_equal(err.code, code);
    assert_null(m);
    assert_null(strchr(err.msg, '\n'));
    if (want1)
        assert_non_null(strstr(err.msg, want1));
    if (want2)
        assert_non_null(strstr(err.msg, want2));
}

/* model_config_load on a config.json holding text. */
static int load_config_text(const char *dir, const char *text, model_config *c, inf_err *err)
{
    char path[700];
    write_text(dir, "config.json", text);
    pjoin(path, sizeof path, dir, "config.json");
    memset(c, 0x5a, sizeof *c);
    return model_config_load(path, c, err);
}

static void expect_config_fail(const char *dir, const char *text, int code, const char *want1,
                               const char *want2)
{
    model_config c;
    inf_err err = {0, ""};
    int rc = load_config_text(dir, text, &c, &err);
    if (rc != code || (want1 && !strstr(err.msg, want1)) || (want2 && !strstr(err.msg, want2)))
        print_error("rc %d (want %d), message: %s\n", rc, code, err.msg);
    assert_int_equal(rc, code);
    assert_null(strchr(err.msg, '\n'));
    assert_non_null(strstr(err.msg, "config.json"));
    if (want1)
        assert_non_null(strstr(err.msg, want1));
    if (want2)
        assert_non_null(strstr(err.msg, want2));
}

#define MINIMAL_KEYS                                                                          \
    "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "             \
    "\"num_attention_heads\": 4, \"vocab_size\": 100"

static size_t tbytes(const model_tensor *t)
{
    return (size_t)(t->rows * t->cols) * inf_dtype_size(t->dtype);
}

/* ---- config.json ---- */

/* A minimal config gets the documented defaults. */
static void test_model_config_defaults_minimal(void **state)
{
    tdir *f = *state;
    model_config c;
    inf_err err = {0, ""};
    assert_int_equal(load_config_text(f->path, "{\"architectures\": [\"LlamaForCausalLM\"], " MINIMAL_KEYS "}",
                                      &c, &err), INF_OK);
    assert_string_equal(c.arch, "LlamaForCausalLM");
    assert_int_equal(c.hidden_size, 64);
    assert_int_equal(c.intermediate_size, 128);
    assert_int_equal(c.n_layers, 2);
    assert_int_equal(c.n_heads, 4);
    assert_int_equal(c.n_kv_heads, 4);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.vocab_size, 100);
    assert_int_equal(c.max_position_embeddings, 2048);
    assert_true(c.rope_theta == 10000.0);
    assert_true(c.rms_norm_eps == 1e-6);
    assert_int_equal(c.tie_word_embeddings, 0);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(c.bos_token_id, -1);
    assert_int_equal(c.n_eos, 0);
}

/* Without architectures, model_type "mistral" is accepted; null
 * sliding_window and head_dim mean their defaults. */
static void test_model_config_model_type_mistral(void **state)
{
    tdir *f = *state;
    model_config c;
    inf_err err = {0, ""};
    assert_int_equal(load_config_text(f->path,
                                      "{\"model_type\": \"mistral\", \"sliding_window\": null, "
                                      "\"head_dim\": null, \"rope_scaling\": null, " MINIMAL_KEYS "}",
                                      &c, &err), INF_OK);
    assert_string_equal(c.arch, "MistralForCausalLM");
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(load_config_text(f->path,
                                      "{\"architectures\": [\"MistralForCausalLM\"], \"sliding_window\": 4096, "
                                      MINIMAL_KEYS "}", &c, &err), INF_OK);
    assert_int_equal(c.sliding_window, 4096);
}

/* eos_token_id may be a list; duplicates collapse; over MODEL_MAX_EOS is refused. */
static void test_model_config_eos_list(void **state)
{
    tdir *f = *state;
    model_config c;
    inf_err err = {0, ""};
    assert_int_equal(load_config_text(f->path,
                                      "{\"architectures\": [\"LlamaForCausalLM\"], \"bos_token_id\": 1, "
                                      "\"eos_token_id\": [2, 7, 2, 9], " MINIMAL_KEYS "}", &c, &err), INF_OK);
    assert_int_equal(c.bos_token_id, 1);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_token_ids[0], 2);
    assert_int_equal(c.eos_token_ids[1], 7);
    assert_int_equal(c.eos_token_ids[2], 9);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], "
                       "\"eos_token_id\": [1,2,3,4,5,6,7,8,9], " MINIMAL_KEYS "}",
                       INF_ERR_UNSUPPORTED, "eos_token_id", NULL);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"eos_token_id\": [2, \"x\"], " MINIMAL_KEYS
                       "}", INF_ERR_FORMAT, "eos_token_id", NULL);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"eos_token_id\": 100, " MINIMAL_KEYS "}",
                       INF_ERR_FORMAT, "eos_token_id", "vocab_size");
}

/* Another architecture is refused by name. */
static void test_model_config_unsupported_arch(void **state)
{
    tdir *f = *state;
    expect_config_fail(f->path, "{\"architectures\": [\"GPT2LMHeadModel\"], " MINIMAL_KEYS "}",
                       INF_ERR_UNSUPPORTED, "architecture 'GPT2LMHeadModel' is not supported", "Qwen3");
    expect_config_fail(f->path, "{\"model_type\": \"gpt2\", " MINIMAL_KEYS "}", INF_ERR_UNSUPPORTED, "'gpt2'",
                       NULL);
    expect_config_fail(f->path, "{" MINIMAL_KEYS "}", INF_ERR_FORMAT, "architectures", NULL);
}

/* An unknown rope_scaling type is refused by name, a known one missing a
 * key it needs is a format error naming the key; {"rope_type": "default"}
 * is plain RoPE. */
static void test_model_config_rope_scaling_refused(void **state)
{
    tdir *f = *state;
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"rope_scaling\": "
                       "{\"rope_type\": \"ntk-by-parts\", \"factor\": 8.0}, " MINIMAL_KEYS "}",
                       INF_ERR_UNSUPPORTED, "rope_scaling type 'ntk-by-parts' is not supported", NULL);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"rope_scaling\": "
                       "{\"rope_type\": \"llama3\", \"factor\": 8.0}, " MINIMAL_KEYS "}",
                       INF_ERR_FORMAT, "original_max_position_embeddings", NULL);
    model_config c;
    inf_err err = {0, ""};
    assert_int_equal(load_config_text(f->path,
                                      "{\"architectures\": [\"LlamaForCausalLM\"], \"rope_scaling\": "
                                      "{\"rope_type\": \"default\"}, " MINIMAL_KEYS "}", &c, &err), INF_OK);
    assert_int_equal(mdesc_features(&c.desc), 0);
    assert_int_equal(load_config_text(f->path,
                                      "{\"architectures\": [\"LlamaForCausalLM\"], \"rope_scaling\": "
                                      "{\"type\": \"linear\", \"factor\": 2.0}, " MINIMAL_KEYS "}", &c, &err),
                     INF_OK);
    assert_int_equal(c.desc.rope[0].kind, MD_ROPE_LINEAR);
}

/* hidden_act other than silu is refused, naming it. */
static void test_model_config_hidden_act_refused(void **state)
{
    tdir *f = *state;
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_act\": \"gelu\", " MINIMAL_KEYS "}",
                       INF_ERR_UNSUPPORTED, "hidden_act 'gelu'", NULL);
}

/* mlp_bias true is refused by key; attention_bias true is the q, k, v and
 * o biases. */
static void test_model_config_bias_refused(void **state)
{
    tdir *f = *state;
    model_config c;
    inf_err err = {0, ""};
    assert_int_equal(load_config_text(f->path, "{\"architectures\": [\"LlamaForCausalLM\"], "
                                      "\"attention_bias\": true, " MINIMAL_KEYS "}", &c, &err), INF_OK);
    assert_true(c.desc.bias_qkv && c.desc.bias_o);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"mlp_bias\": true, " MINIMAL_KEYS "}",
                       INF_ERR_UNSUPPORTED, "mlp_bias", NULL);
    assert_int_equal(load_config_text(f->path,
                                      "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, "
                                      "\"mlp_bias\": false, " MINIMAL_KEYS "}", &c, &err), INF_OK);
}

/* Values of the wrong JSON type are format errors naming the key. */
static void test_model_config_wrong_type(void **state)
{
    tdir *f = *state;
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": \"64\", "
                       "\"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                       "\"vocab_size\": 100}",
                       INF_ERR_FORMAT, "'hidden_size'", NULL);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"tie_word_embeddings\": 1, " MINIMAL_KEYS "}",
                       INF_ERR_FORMAT, "'tie_word_embeddings'", NULL);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"rope_theta\": \"1e4\", " MINIMAL_KEYS "}",
                       INF_ERR_FORMAT, "'rope_theta'", NULL);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"num_key_value_heads\": 2.5, " MINIMAL_KEYS
                       "}", INF_ERR_FORMAT, "'num_key_value_heads'", NULL);
    expect_config_fail(f->path, "{\"architectures\": \"LlamaForCausalLM\", " MINIMAL_KEYS "}", INF_ERR_FORMAT,
                       "'architectures'", NULL);
    expect_config_fail(f->path, "{\"architectures\": [\"LlamaForCausalLM\"], ", INF_ERR_FORMAT,
                       "not valid JSON", NULL);
}

/* Missing required keys and inconsistent sizes are format errors. */
static void test_model_config_bad_sizes(void **state)
{
    tdir *f = *state;
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
                       "\"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4}",
                       INF_ERR_FORMAT, "missing required key 'vocab_size'", NULL);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 0, "
                       "\"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                       "\"vocab_size\": 100}",
                       INF_ERR_FORMAT, "'hidden_size' must be positive", NULL);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"num_key_value_heads\": 3, " MINIMAL_KEYS "}",
                       INF_ERR_FORMAT, "num_key_value_heads (3)", NULL);
    expect_config_fail(f->path,
                       "{\"architectures\": [\"LlamaForCausalLM\"], \"head_dim\": 15, " MINIMAL_KEYS "}",
                       INF_ERR_FORMAT, "head_dim (15)", NULL);
}

/* ---- model_load ---- */

/* A tied tiny model loads: config values, shapes, lm_head aliasing the
 * embedding, and per-token weight bytes counting the embedding once. */
static void test_model_load_tied_ok(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    write_tiny(f->path, &t);
    model *m = NULL;
    inf_err err = {0, ""};
    int rc = model_load(f->path, &m, &err);
    if (rc)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, INF_OK);
    assert_int_equal(m->cfg.hidden_size, 16);
    assert_int_equal(m->cfg.max_position_embeddings, 128);
    assert_true(m->cfg.rope_theta == 500000.0);
    assert_true(m->cfg.rms_norm_eps == 1e-5);
    assert_int_equal(m->cfg.tie_word_embeddings, 1);
    assert_int_equal(m->cfg.bos_token_id, 1);
    assert_int_equal(m->cfg.n_eos, 1);
    assert_int_equal(m->cfg.eos_token_ids[0], 2);
    assert_string_equal(m->dir, f->path);
    assert_int_equal(m->embed.rows, 32);
    assert_int_equal(m->embed.cols, 16);
    assert_int_equal(m->embed.dtype, INF_F32);
    assert_string_equal(m->embed.name, "model.embed_tokens.weight");
    assert_ptr_equal(m->lm_head.data, m->embed.data);
    assert_int_equal(m->norm.rows, 1);
    assert_int_equal(m->norm.cols, 16);
    for (int i = 0; i < 2; i++) {
        const model_layer *l = &m->layers[i];
        assert_int_equal(l->attn_norm.rows, 1);
        assert_int_equal(l->attn_norm.cols, 16);
        assert_int_equal(l->w_gate.rows, 24);
        assert_int_equal(l->w_down.rows, 16);
        assert_int_equal(l->w_down.cols, 24);
        assert_non_null(l->wq.data);
        assert_non_null(strstr(l->w_up.name, "mlp.up_proj.weight"));
    }
    /* the data is the writer's ramp, read in place */
    float v;
    memcpy(&v, m->embed.data, 4);
    assert_true(v == 0.0f / 97.0f - 0.5f);
    size_t layer = 2 * 16 * 4 + (16 * 16 + 8 * 16 * 2 + 16 * 16) * 4 + 3 * 24 * 16 * 4;
    assert_int_equal(model_weight_bytes(m), 2 * layer + 16 * 4 + 32 * 16 * 4);
    model_destroy(m);
}

/* An untied model binds its own lm_head; the embedding is not counted in
 * per-token bytes. */
static void test_model_load_untied_ok(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.tied = 0;
    t.lm_head = 1;
    write_tiny(f->path, &t);
    model *m = NULL;
    inf_err err = {0, ""};
    assert_int_equal(model_load(f->path, &m, &err), INF_OK);
    assert_ptr_not_equal(m->lm_head.data, m->embed.data);
    assert_string_equal(m->lm_head.name, "lm_head.weight");
    assert_int_equal(m->lm_head.rows, 32);
    assert_int_equal(m->lm_head.cols, 16);
    size_t layer = 2 * 16 * 4 + (16 * 16 + 8 * 16 * 2 + 16 * 16) * 4 + 3 * 24 * 16 * 4;
    assert_int_equal(model_weight_bytes(m), 2 * layer + 16 * 4 + 32 * 16 * 4);
    model_destroy(m);
}

/* Tied in config but lm_head.weight present: the checkpoint's lm_head is used. */
static void test_model_load_tied_with_lm_head(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.lm_head = 1;
    write_tiny(f->path, &t);
    model *m = NULL;
    inf_err err = {0, ""};
    assert_int_equal(model_load(f->path, &m, &err), INF_OK);
    assert_ptr_not_equal(m->lm_head.data, m->embed.data);
    assert_string_equal(m->lm_head.name, "lm_head.weight");
    model_destroy(m);
}

/* Untied with no lm_head.weight is an error naming the file and the tensor. */
static void test_model_load_untied_missing_lm_head(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.tied = 0;
    write_tiny(f->path, &t);
    expect_load_fail(f->path, INF_ERR_FORMAT, "model.safetensors: missing tensor 'lm_head.weight'",
                     "tie_word_embeddings");
}

/* GQA with head_dim * heads != hidden: q/k/v/o shapes follow heads, kv
 * heads and head_dim. */
static void test_model_load_gqa_shapes(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.H = 8;
    t.KV = 2;
    t.hd = 6;
    write_tiny(f->path, &t);
    model *m = NULL;
    inf_err err = {0, ""};
    int rc = model_load(f->path, &m, &err);
    if (rc)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, INF_OK);
    assert_int_equal(m->cfg.n_heads, 8);
    assert_int_equal(m->cfg.n_kv_heads, 2);
    assert_int_equal(m->cfg.head_dim, 6);
    const model_layer *l = &m->layers[1];
    assert_int_equal(l->wq.rows, 48);
    assert_int_equal(l->wq.cols, 16);
    assert_int_equal(l->wk.rows, 12);
    assert_int_equal(l->wv.rows, 12);
    assert_int_equal(l->wv.cols, 16);
    assert_int_equal(l->wo.rows, 16);
    assert_int_equal(l->wo.cols, 48);
    model_destroy(m);
}

/* generation_config.json adds its eos ids to config.json's and supplies bos
 * only when config.json has none. */
static void test_model_load_generation_config_eos(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    write_tiny(f->path, &t);
    write_text(f->path, "generation_config.json", "{\"bos_token_id\": 5, \"eos_token_id\": [2, 7, 9]}");
    model *m = NULL;
    inf_err err = {0, ""};
    assert_int_equal(model_load(f->path, &m, &err), INF_OK);
    assert_int_equal(m->cfg.bos_token_id, 1);
    assert_int_equal(m->cfg.n_eos, 3);
    assert_int_equal(m->cfg.eos_token_ids[0], 2);
    assert_int_equal(m->cfg.eos_token_ids[1], 7);
    assert_int_equal(m->cfg.eos_token_ids[2], 9);
    model_destroy(m);

    /* a config.json without bos takes generation_config's */
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16, \"intermediate_size\": 24, "
             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
             "\"vocab_size\": 32, \"tie_word_embeddings\": true}");
    write_text(f->path, "config.json", cfg);
    assert_int_equal(model_load(f->path, &m, &err), INF_OK);
    assert_int_equal(m->cfg.bos_token_id, 5);
    assert_int_equal(m->cfg.n_eos, 3);
    model_destroy(m);

    write_text(f->path, "generation_config.json", "{\"eos_token_id\": \"2\"}");
    expect_load_fail(f->path, INF_ERR_FORMAT, "generation_config.json", "eos_token_id");
}

/* Mixed dtypes across tensors load; bytes follow each tensor's dtype. */
static void test_model_load_mixed_dtypes(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.bf16 = "model.layers.0.self_attn.q_proj.weight";
    t.f16 = "model.layers.1.mlp.down_proj.weight";
    write_tiny(f->path, &t);
    model *m = NULL;
    inf_err err = {0, ""};
    assert_int_equal(model_load(f->path, &m, &err), INF_OK);
    assert_int_equal(m->layers[0].wq.dtype, INF_BF16);
    assert_int_equal(m->layers[1].w_down.dtype, INF_F16);
    assert_int_equal(m->layers[1].wq.dtype, INF_F32);
    size_t layer = 2 * 16 * 4 + (16 * 16 + 8 * 16 * 2 + 16 * 16) * 4 + 3 * 24 * 16 * 4;
    size_t want = 2 * layer + 16 * 4 + 32 * 16 * 4 - 16 * 16 * 2 - 16 * 24 * 2;
    assert_int_equal(model_weight_bytes(m), want);
    size_t sum = 0;
    for (int i = 0; i < 2; i++) {
        const model_layer *l = &m->layers[i];
        sum += tbytes(&l->attn_norm) + tbytes(&l->wq) + tbytes(&l->wk) + tbytes(&l->wv) + tbytes(&l->wo) +
               tbytes(&l->ffn_norm) + tbytes(&l->w_gate) + tbytes(&l->w_up) + tbytes(&l->w_down);
    }
    assert_int_equal(sum + tbytes(&m->norm) + tbytes(&m->lm_head), want);
    model_destroy(m);
}

/* safetensors does not align tensor data: a BF16 norm of 15 values shifts
 * every F32 tensor on one side of it 2 bytes off 4 (which side depends on
 * the header's length). The model binds aligned copies of misaligned
 * tensors (the kernels load elements as their type; UBSan flags a
 * misaligned float load) holding the file's bytes, and aligned ones in
 * place. */
static void test_model_load_misaligned_copied(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.D = 15;
    t.bf16 = "model.layers.0.input_layernorm.weight";
    write_tiny(f->path, &t);
    model *m = NULL;
    inf_err err = {0, ""};
    assert_int_equal(model_load(f->path, &m, &err), INF_OK);
    const model_tensor *ts[2 + 9 * 2];
    int n = 0, copied = 0;
    ts[n++] = &m->embed;
    ts[n++] = &m->norm;
    for (int l = 0; l < 2; l++) {
        model_layer *y = &m->layers[l];
        const model_tensor *lt[] = {&y->attn_norm, &y->wq, &y->wk, &y->wv, &y->wo,
                                    &y->ffn_norm, &y->w_gate, &y->w_up, &y->w_down};
        for (int i = 0; i < 9; i++)
            ts[n++] = lt[i];
    }
    for (int i = 0; i < n; i++) {
        const st_tensor *s = st_find(m->st, ts[i]->name);
        assert_non_null(s);
        size_t es = inf_dtype_size(ts[i]->dtype);
        assert_int_equal((uintptr_t)ts[i]->data % es, 0);
        if ((uintptr_t)s->data % es) {
            assert_ptr_not_equal(ts[i]->data, s->data);
            assert_memory_equal(ts[i]->data, s->data, s->nbytes);
            copied++;
        } else {
            assert_ptr_equal(ts[i]->data, s->data);
        }
    }
    assert_true(copied > 0); /* the file did shift some */
    model_destroy(m);
}

/* A sharded checkpoint loads through its index. */
static void test_model_load_sharded_ok(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.shards = 2;
    t.tied = 0;
    t.lm_head = 1;
    write_tiny(f->path, &t);
    model *m = NULL;
    inf_err err = {0, ""};
    int rc = model_load(f->path, &m, &err);
    if (rc)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, INF_OK);
    assert_int_equal(st_count(m->st), 3 + 9 * 2);
    assert_string_equal(m->lm_head.name, "lm_head.weight");
    model_destroy(m);
}

/* A tensor missing from a sharded checkpoint names the index and the tensor. */
static void test_model_load_sharded_missing_tensor(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.shards = 2;
    t.omit = "model.layers.1.self_attn.o_proj.weight";
    write_tiny(f->path, &t);
    expect_load_fail(f->path, INF_ERR_FORMAT, "model.safetensors.index.json (2 shards)",
                     "missing tensor 'model.layers.1.self_attn.o_proj.weight'");
}

/* No config.json: I/O error naming it. */
static void test_model_load_missing_config(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    write_tiny(f->path, &t);
    char path[700];
    pjoin(path, sizeof path, f->path, "config.json");
    remove(path);
    expect_load_fail(f->path, INF_ERR_IO, path, NULL);
}

/* config.json but no weights: I/O error naming the directory and the files. */
static void test_model_load_missing_weights(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    write_config(f->path, &t);
    expect_load_fail(f->path, INF_ERR_IO, f->path, "model.safetensors");
}

/* An unsupported architecture stops the load before the weights. */
static void test_model_load_unsupported_arch(void **state)
{
    tdir *f = *state;
    write_text(f->path, "config.json",
               "{\"architectures\": [\"GPTNeoXForCausalLM\"], \"model_type\": \"gpt_neox\", " MINIMAL_KEYS "}");
    expect_load_fail(f->path, INF_ERR_UNSUPPORTED, "config.json: architecture 'GPTNeoXForCausalLM'", NULL);
}

/* A missing layer tensor: the message names the file and the tensor. */
static void test_model_load_missing_tensor(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.omit = "model.layers.1.mlp.up_proj.weight";
    write_tiny(f->path, &t);
    char want[700];
    snprintf(want, sizeof want, "%s/model.safetensors: missing tensor 'model.layers.1.mlp.up_proj.weight'", f->path);
    expect_load_fail(f->path, INF_ERR_FORMAT, want, NULL);
}

/* A tensor of the wrong shape: names the tensor, both shapes and the keys. */
static void test_model_load_wrong_shape(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.bad = "model.layers.0.self_attn.k_proj.weight";
    write_tiny(f->path, &t);
    expect_load_fail(f->path, INF_ERR_FORMAT,
                     "model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' has shape [9, 16]",
                     "expected [8, 16] (num_key_value_heads*head_dim, hidden_size)");
    t.bad = "model.norm.weight";
    write_tiny(f->path, &t);
    expect_load_fail(f->path, INF_ERR_FORMAT, "tensor 'model.norm.weight' has shape [17]",
                     "expected [16] (hidden_size)");
}

/* An integer tensor bound as a weight is refused, naming tensor and dtype. */
static void test_model_load_unsupported_dtype(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    t.i64 = "model.layers.1.mlp.down_proj.weight";
    write_tiny(f->path, &t);
    expect_load_fail(f->path, INF_ERR_UNSUPPORTED,
                     "model.safetensors: tensor 'model.layers.1.mlp.down_proj.weight' has dtype I64", NULL);
}

/* A corrupt safetensors header surfaces st_'s message through model_load. */
static void test_model_load_corrupt_weights(void **state)
{
    tdir *f = *state;
    tiny t = tiny_default();
    write_config(f->path, &t);
    write_text(f->path, "model.safetensors", "\x05");
    expect_load_fail(f->path, INF_ERR_FORMAT, "model.safetensors", "1 bytes");
}

/* model_destroy(NULL) is a no-op; model_weight_bytes(NULL) is 0. */
static void test_model_destroy_null_safe(void **state)
{
    (void)state;
    model_destroy(NULL);
    assert_int_equal(model_weight_bytes(NULL), 0);
}

/* ---- real models (../shared/models relative to the repository root) ---- */

/* The repository root: the first directory up from the test binary holding
 * engine/model.h, else the working directory. */
static void repo_root(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *d = dirname(exe);
        while (strcmp(d, "/") != 0 && strcmp(d, ".") != 0) {
            char probe[PATH_MAX + 32];
            snprintf(probe, sizeof probe, "%s/engine/model.h", d);
            if (access(probe, R_OK) == 0) {
                snprintf(out, cap, "%s", d);
                return;
            }
            d = dirname(d);
        }
    }
    snprintf(out, cap, ".");
}

/* Loads ../shared/models/name, or returns NULL having said why it skips. */
static model *load_shared(const char *name)
{
    char root[PATH_MAX], dir[PATH_MAX + 64];
    repo_root(root, sizeof root);
    snprintf(dir, sizeof dir, "%s/../shared/models/%s", root, name);
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        printf("SKIPPED: %s is absent (real-model checks need ../shared/models)\n", dir);
        return NULL;
    }
    model *m = NULL;
    inf_err err = {0, ""};
    int rc = model_load(dir, &m, &err);
    if (rc)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, INF_OK);
    return m;
}

/* stories260K: hidden 64, 5 layers, 8 heads, 4 KV heads, vocab 512, tied. */
static void test_model_load_real_stories260k(void **state)
{
    (void)state;
    model *m = load_shared("stories260K");
    if (!m) {
        skip();
        return;
    }
    const model_config *c = &m->cfg;
    assert_string_equal(c->arch, "LlamaForCausalLM");
    assert_int_equal(c->hidden_size, 64);
    assert_int_equal(c->intermediate_size, 172);
    assert_int_equal(c->n_layers, 5);
    assert_int_equal(c->n_heads, 8);
    assert_int_equal(c->n_kv_heads, 4);
    assert_int_equal(c->head_dim, 8);
    assert_int_equal(c->vocab_size, 512);
    assert_int_equal(c->max_position_embeddings, 512);
    assert_true(c->rms_norm_eps == 1e-5);
    assert_int_equal(c->tie_word_embeddings, 1);
    assert_int_equal(c->bos_token_id, 1);
    assert_int_equal(c->n_eos, 1);
    assert_int_equal(c->eos_token_ids[0], 2);
    assert_int_equal(m->embed.rows, 512);
    assert_int_equal(m->embed.cols, 64);
    assert_int_equal(m->embed.dtype, INF_F32);
    assert_ptr_equal(m->lm_head.data, m->embed.data);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(m->layers[i].wq.rows, 64);
        assert_int_equal(m->layers[i].wk.rows, 32);
        assert_int_equal(m->layers[i].wv.rows, 32);
        assert_int_equal(m->layers[i].wo.cols, 64);
        assert_int_equal(m->layers[i].w_gate.rows, 172);
        assert_int_equal(m->layers[i].w_down.cols, 172);
    }
    size_t layer = (2 * 64 + 64 * 64 * 2 + 32 * 64 * 2 + 3 * 172 * 64) * 4;
    assert_int_equal(model_weight_bytes(m), 5 * layer + (64 + 512 * 64) * 4);
    model_destroy(m);
}

/* babyllama-105: vocab 105, head_dim 16 (hidden 128, 8 heads, 4 KV heads). */
static void test_model_load_real_babyllama(void **state)
{
    (void)state;
    model *m = load_shared("babyllama-105");
    if (!m) {
        skip();
        return;
    }
    assert_int_equal(m->cfg.vocab_size, 105);
    assert_int_equal(m->cfg.head_dim, 16);
    assert_int_equal(m->cfg.hidden_size, 128);
    assert_int_equal(m->cfg.n_heads, 8);
    assert_int_equal(m->cfg.n_kv_heads, 4);
    assert_int_equal(m->cfg.intermediate_size, 352);
    assert_int_equal(m->embed.rows, 105);
    assert_int_equal(m->layers[4].wk.rows, 64);
    assert_int_equal(m->layers[4].wq.rows, 128);
    assert_int_equal(m->layers[4].w_up.rows, 352);
    assert_ptr_equal(m->lm_head.data, m->embed.data);
    model_destroy(m);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, tdir_setup, tdir_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_model_config_defaults_minimal),
        T(test_model_config_model_type_mistral),
        T(test_model_config_eos_list),
        T(test_model_config_unsupported_arch),
        T(test_model_config_rope_scaling_refused),
        T(test_model_config_hidden_act_refused),
        T(test_model_config_bias_refused),
        T(test_model_config_wrong_type),
        T(test_model_config_bad_sizes),
        T(test_model_load_tied_ok),
        T(test_model_load_untied_ok),
        T(test_model_load_tied_with_lm_head),
        T(test_model_load_untied_missing_lm_head),
        T(test_model_load_gqa_shapes),
        T(test_model_load_generation_config_eos),
        T(test_model_load_misaligned_copied),
        T(test_model_load_mixed_dtypes),
        T(test_model_load_sharded_ok),
        T(test_model_load_sharded_missing_tensor),
        T(test_model_load_missing_config),
        T(test_model_load_missing_weights),
        T(test_model_load_unsupported_arch),
        T(test_model_load_missing_tensor),
        T(test_model_load_wrong_shape),
        T(test_model_load_unsupported_dtype),
        T(test_model_load_corrupt_weights),
        cmocka_unit_test(test_model_destroy_null_safe),
        cmocka_unit_test(test_model_load_real_stories260k),
        cmocka_unit_test(test_model_load_real_babyllama),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
