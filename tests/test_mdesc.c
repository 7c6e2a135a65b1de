/* Unit tests for mdesc_ (the model description): each family's settings and
 * Hugging Face's defaults as config.json gives them, the RoPE frequencies of
 * each scaling kind checked against their defining properties, and the
 * refusals naming the key or setting. The numbers the forward pass makes of
 * these are checked against the numpy reference by tests/ref/check_engine.py. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model.h"

/* Sizes every config below shares: 4 layers, 4 heads of 16 on 2 KV heads. */
#define SIZES                                                                                      \
    "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 4, "                  \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 100"

/* Loads config text; returns the rc, the config in *c, the message in err. */
static int load(const char *text, model_config *c, inf_err *err)
{
    const char *base = getenv("INFERD_TEST_TMP");
    char path[600];
    snprintf(path, sizeof path, "%s/test_mdesc-%d.json", base && *base ? base : "/tmp",
             (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    memset(c, 0x5a, sizeof *c);
    int rc = model_config_load(path, c, err);
    unlink(path);
    return rc;
}

static void load_ok(const char *text, model_config *c)
{
    inf_err err = {0, ""};
    int rc = load(text, c, &err);
    if (rc)
        fail_msg("config refused: %s", err.msg);
}

static void load_fails(const char *text, int code, const char *want)
{
    model_config c;
    inf_err err = {0, ""};
    assert_int_equal(load(text, &c, &err), code);
    if (!strstr(err.msg, want))
        fail_msg("message '%s' lacks '%s'", err.msg, want);
}

/* Llama 2: none of the optional settings; RoPE frequencies theta^(-2i/hd). */
static void test_mdesc_llama_is_the_plain_recipe(void **state)
{
    (void)state;
    model_config c;
    load_ok("{\"architectures\": [\"LlamaForCausalLM\"], \"rope_theta\": 10000.0, " SIZES "}", &c);
    assert_string_equal(c.desc.family, "llama");
    assert_int_equal(mdesc_features(&c.desc), 0);
    assert_int_equal(c.desc.rot_dim, 16);
    for (int i = 0; i < 8; i++)
        assert_true(fabs(c.desc.rope[0].inv_freq[i] - pow(10000.0, -i / 8.0)) < 1e-15);
    assert_int_equal(mdesc_require(&c.desc, 0, "test", NULL), INF_OK);
}

/* Llama 3.1 scaling: wavelengths shorter than orig/high_freq_factor keep
 * their frequency, longer than orig/low_freq_factor are divided by factor,
 * the band between lies between the two. */
static void test_mdesc_llama3_rope(void **state)
{
    (void)state;
    model_config c;
    load_ok(
        "{\"architectures\": [\"LlamaForCausalLM\"], \"rope_theta\": 500000.0, \"rope_scaling\": "
        "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
        "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}, " SIZES "}",
        &c);
    assert_int_equal(c.desc.rope[0].kind, MD_ROPE_LLAMA3);
    assert_int_equal(mdesc_features(&c.desc), 0); /* only the frequencies change */
    int kept = 0, divided = 0, between = 0;
    for (int i = 0; i < 8; i++) {
        double plain = pow(500000.0, -i / 8.0), got = c.desc.rope[0].inv_freq[i];
        double wl = 2 * M_PI / plain;
        if (wl < 64 / 4.0) {
            assert_true(got == plain);
            kept++;
        } else if (wl > 64 / 1.0) {
            assert_true(fabs(got - plain / 8) < 1e-15 * plain);
            divided++;
        } else {
            assert_true(got < plain && got > plain / 8);
            between++;
        }
    }
    assert_true(kept > 0 && divided > 0); /* the shape exercises both ends */
    (void)between;
}

/* Qwen2: q, k, v biases always; the window only with use_sliding_window,
 * and then on the layers from max_window_layers on; YaRN's attention factor
 * 0.1 ln(factor) + 1. */
static void test_mdesc_qwen2(void **state)
{
    (void)state;
    model_config c;
    load_ok("{\"architectures\": [\"Qwen2ForCausalLM\"], \"sliding_window\": 32, "
            "\"use_sliding_window\": false, \"max_window_layers\": 2, " SIZES "}",
            &c);
    assert_true(c.desc.bias_qkv && !c.desc.bias_o);
    assert_int_equal(mdesc_min_window(&c.desc), 0);
    load_ok(
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"sliding_window\": 32, "
        "\"use_sliding_window\": true, \"max_window_layers\": 2, \"rope_scaling\": "
        "{\"type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 64}, " SIZES
        "}",
        &c);
    assert_int_equal(c.desc.local[0] + c.desc.local[1], 0);
    assert_int_equal(c.desc.local[2] + c.desc.local[3], 2);
    assert_int_equal(mdesc_window(&c.desc, 3), 32);
    assert_int_equal(mdesc_window(&c.desc, 0), 0);
    assert_true(fabs(c.desc.rope[0].attn_factor - (0.1 * log(4.0) + 1.0)) < 1e-15);
    /* YaRN interpolates: no frequency above plain, the lowest divided by factor */
    assert_true(c.desc.rope[0].inv_freq[0] == 1.0);
    assert_true(fabs(c.desc.rope[0].inv_freq[7] - pow(c.rope_theta, -7 / 8.0) / 4) < 1e-18);
    unsigned f = mdesc_features(&c.desc);
    assert_true((f & MD_F_BIAS_QKV) && (f & MD_F_WINDOW) && (f & MD_F_ROPE_ATTN));
}

/* Qwen3: QK-norm, and head_dim 128 when the config does not say (HF). */
static void test_mdesc_qwen3(void **state)
{
    (void)state;
    model_config c;
    load_ok("{\"architectures\": [\"Qwen3ForCausalLM\"], " SIZES "}", &c);
    assert_true(c.desc.qk_norm && !c.desc.bias_qkv);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.desc.rot_dim, 128);
    assert_true(c.desc.attn_scale == 1.0 / sqrt(128.0));
}

/* Gemma 2 by HF's defaults: (1 + w) norms, GeGLU, sandwich norms, scale
 * query_pre_attn_scalar^-1/2 = 1/16, soft-caps 50 and 30, even layers local
 * with a 4096 window, sqrt(hidden) embeddings, tied. */
static void test_mdesc_gemma2_defaults(void **state)
{
    (void)state;
    model_config c;
    load_ok("{\"architectures\": [\"Gemma2ForCausalLM\"], \"head_dim\": 16, " SIZES "}", &c);
    const mdesc *d = &c.desc;
    assert_int_equal(d->norm, MD_NORM_RMS_1P);
    assert_int_equal(d->act, MD_ACT_GELU_TANH);
    assert_true(d->sandwich && !d->qk_norm && d->tied && c.tie_word_embeddings);
    assert_true(d->attn_scale == 1.0 / 16.0);
    assert_true(d->attn_softcap == 50.0 && d->logit_softcap == 30.0);
    assert_true(d->embed_scale == 8.0);
    for (int l = 0; l < 4; l++)
        assert_int_equal(mdesc_window(d, l), l % 2 == 0 ? 4096 : 0);
    assert_false(mdesc_features(d) & MD_F_LOCAL_ROPE); /* one RoPE for both kinds */
}

/* Gemma 3: soft-caps off when null; every sixth layer global; local layers
 * with rope_local_base_freq and no scaling, global ones with rope_theta and
 * rope_scaling; layer_types overrides the pattern. */
static void test_mdesc_gemma3_local_global(void **state)
{
    (void)state;
    model_config c;
    load_ok(
        "{\"architectures\": [\"Gemma3ForCausalLM\"], \"head_dim\": 16, \"num_hidden_layers\": 7, "
        "\"attn_logit_softcapping\": null, \"final_logit_softcapping\": null, \"sliding_window\": "
        "512, "
        "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}, "
        "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"vocab_size\": 100}",
        &c);
    const mdesc *d = &c.desc;
    assert_true(d->qk_norm && d->attn_softcap == 0 && d->logit_softcap == 0);
    for (int l = 0; l < 7; l++)
        assert_int_equal(d->local[l], l != 5);
    assert_true(c.rope_theta == 1000000.0);
    assert_int_equal(d->rope[0].kind, MD_ROPE_LINEAR);
    assert_int_equal(d->rope[1].kind, MD_ROPE_DEFAULT);
    assert_true(fabs(d->rope[0].inv_freq[3] - pow(1e6, -3 / 8.0) / 8) < 1e-18);
    assert_true(fabs(d->rope[1].inv_freq[3] - pow(1e4, -3 / 8.0)) < 1e-18);
    assert_true(mdesc_features(d) & MD_F_LOCAL_ROPE);
    load_ok("{\"architectures\": [\"Gemma3ForCausalLM\"], \"head_dim\": 16, \"sliding_window\": 8, "
            "\"layer_types\": [\"full_attention\", \"sliding_attention\", \"full_attention\", "
            "\"full_attention\"], " SIZES "}",
            &c);
    assert_int_equal(c.desc.local[0] + c.desc.local[1] * 2 + c.desc.local[2] + c.desc.local[3], 2);
}

/* Phi-3: fused tensors, partial rotary, LongRoPE with the attention factor
 * from max / original positions and the long factors from the original on;
 * factor lists of the wrong length are refused naming the key. */
static void test_mdesc_phi3_longrope(void **state)
{
    (void)state;
    model_config c;
    load_ok("{\"architectures\": [\"Phi3ForCausalLM\"], \"partial_rotary_factor\": 0.5, "
            "\"max_position_embeddings\": 4096, \"original_max_position_embeddings\": 1024, "
            "\"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1, 1, 2, 2], "
            "\"long_factor\": [2, 3, 4, 5]}, " SIZES "}",
            &c);
    const mdesc *d = &c.desc;
    assert_true(d->fused_qkv);
    assert_int_equal(d->rot_dim, 8);
    assert_int_equal(d->rope[0].long_from, 1024);
    assert_true(fabs(d->rope[0].attn_factor - sqrt(1 + log(4.0) / log(1024.0))) < 1e-15);
    assert_true(fabs(d->rope[0].inv_freq[2] - 1.0 / (2 * pow(10000.0, 4 / 8.0))) < 1e-18);
    assert_true(fabs(d->rope[0].inv_freq_long[3] - 1.0 / (5 * pow(10000.0, 6 / 8.0))) < 1e-18);
    unsigned f = mdesc_features(d);
    assert_true((f & MD_F_PARTIAL_ROTARY) && (f & MD_F_ROPE_LONG) && (f & MD_F_ROPE_ATTN));
    load_fails(
        "{\"architectures\": [\"Phi3ForCausalLM\"], \"original_max_position_embeddings\": 1024, "
        "\"rope_scaling\": {\"type\": \"su\", \"short_factor\": [1, 1], \"long_factor\": [2, "
        "3]}, " SIZES "}",
        INF_ERR_FORMAT, "short_factor");
}

/* Mistral's window covers every layer. */
static void test_mdesc_mistral_window(void **state)
{
    (void)state;
    model_config c;
    load_ok("{\"architectures\": [\"MistralForCausalLM\"], \"sliding_window\": 4096, " SIZES "}",
            &c);
    for (int l = 0; l < 4; l++)
        assert_int_equal(mdesc_window(&c.desc, l), 4096);
    assert_int_equal(mdesc_min_window(&c.desc), 4096);
    assert_int_equal(model_context(&c), c.max_position_embeddings);
}

/* What is not computed is refused by name: an activation, bad layer_types,
 * and a backend's missing setting through mdesc_require. */
static void test_mdesc_refusals(void **state)
{
    (void)state;
    load_fails(
        "{\"architectures\": [\"Gemma2ForCausalLM\"], \"hidden_activation\": \"gelu\", " SIZES "}",
        INF_ERR_UNSUPPORTED, "hidden_activation 'gelu'");
    load_fails(
        "{\"architectures\": [\"Gemma2ForCausalLM\"], \"layer_types\": [\"full_attention\"], " SIZES
        "}",
        INF_ERR_FORMAT, "layer_types");
    load_fails("{\"architectures\": [\"Gemma3ForConditionalGeneration\"], " SIZES "}",
               INF_ERR_UNSUPPORTED, "Gemma3ForConditionalGeneration");
    model_config c;
    load_ok("{\"architectures\": [\"Gemma2ForCausalLM\"], \"head_dim\": 16, " SIZES "}", &c);
    inf_err err = {0, ""};
    assert_int_equal(mdesc_require(&c.desc, MD_F_ALL & ~MD_F_ATTN_SOFTCAP, "cuda", &err),
                     INF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "cuda: gemma2 setting 'attn_logit_softcapping'"));
    assert_int_equal(mdesc_require(&c.desc, MD_F_ALL, "cpu", &err), INF_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mdesc_llama_is_the_plain_recipe),
        cmocka_unit_test(test_mdesc_llama3_rope),
        cmocka_unit_test(test_mdesc_qwen2),
        cmocka_unit_test(test_mdesc_qwen3),
        cmocka_unit_test(test_mdesc_gemma2_defaults),
        cmocka_unit_test(test_mdesc_gemma3_local_global),
        cmocka_unit_test(test_mdesc_phi3_longrope),
        cmocka_unit_test(test_mdesc_mistral_window),
        cmocka_unit_test(test_mdesc_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
