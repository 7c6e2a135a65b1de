/* Chat templates: every built-in rendered against the strings the reference
 * Jinja templates give, role-alternation errors, recognising real
 * chat_template strings, loading from tokenizer_config.json, and turning a
 * rendered prompt into token ids.
 *
 * The expected strings are what the templates quoted in engine/tmpl.c
 * render under Hugging Face's settings (jinja2 3.1, trim_blocks and
 * lstrip_blocks, bos_token "<s>" / eos_token "</s>", Llama 3's
 * "<|begin_of_text|>"): checked with jinja2 when written.
 *
 * Token tests use the fixture $INFERD_TEST_FIXTURES/tiny (made by `make
 * unit`) and, where present, ../shared's Llama 2 tokenizer; they say
 * "skipped: ..." when those are absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <cJSON.h>

#include "engine/tmpl.h"
#include "engine/tok.h"
#include "tests/tdir.h"

#define LLAMA_MODEL "../shared/tokenizers/llama2-32000/tokenizer.model"

/* ---------------------------------------------------- real chat templates */

/* meta-llama/Llama-2-7b-chat-hf */
static const char LLAMA2_CHAT[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 "
    "and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}"
    "{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + "
    "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}";

/* mistralai/Mistral-7B-Instruct-v0.2, its current template */
static const char MISTRAL_V02[] =
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] "
    "%}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = "
    "messages %}\n{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if "
    "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n        {{- raise_exception('After "
    "the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' "
    "%}\n        {%- if loop.first and system_message is defined %}\n            {{- ' [INST] ' + "
    "system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n          "
    "  {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif "
    "message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- "
    "else %}\n        {{- raise_exception('Only user and assistant roles are supported, with the "
    "exception of an initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n";

/* mistralai/Mistral-7B-Instruct-v0.2 and Mixtral-8x7B-Instruct-v0.1, the
 * original template (no system message) */
static const char MISTRAL_OLD[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] "
    "' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are "
    "supported!') }}{% endif %}{% endfor %}";

/* teknium/OpenHermes-2.5-Mistral-7B (ChatML) */
static const char CHATML_OPENHERMES[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}";

/* HuggingFaceH4/zephyr-7b-beta (also TinyLlama-1.1B-Chat-v1.0's) */
static const char ZEPHYR_BETA[] =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
    "'<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
    "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

/* meta-llama/Meta-Llama-3-8B-Instruct */
static const char LLAMA3_INSTRUCT[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ "
    "content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

/* Templates that must not be taken for a built-in. */

/* google/gemma-7b-it */
static const char GEMMA_IT[] =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% "
    "set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' "
    "+ role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if "
    "add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

/* microsoft/Phi-3-mini-4k-instruct: <|user|> like zephyr, but <|end|> */
static const char PHI3_MINI[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + "
    "'\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif "
    "(message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% "
    "endfor %}";

/* Qwen/Qwen1.5-7B-Chat: ChatML plus a default system prompt */
static const char QWEN15_CHAT[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/* meta-llama/Llama-3.1-8B-Instruct, its opening (the rest adds tools) */
static const char LLAMA31_HEAD[] =
    "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n"
    "{%- endif %}\n{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message "
    "= true %}\n{%- endif %}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 "
    "Jul 2024\" %}\n{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + "
    "\"\\n\\n\" }}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n";

/* mistralai/Mistral-7B-Instruct-v0.3, an excerpt: tool blocks */
static const char MISTRAL_V03_PART[] =
    "{%- if message[\"role\"] == \"user\" %}\n        {%- if tools is not none and (message == "
    "user_messages[-1]) %}\n            {{- \"[AVAILABLE_TOOLS] [\" }}\n ... {{- \"[INST] \" + "
    "message[\"content\"] + \"[/INST]\" }}\n    {%- elif message.tool_calls is defined %}\n        "
    "{{- \"[TOOL_CALLS] [\" }}";

/* ---------------------------------------------------------------- helpers */

static tmpl *by_name(const char *name)
{
    tmpl *t = NULL;
    inf_err e = {0};
    int rc = tmpl_by_name(name, &t, &e);
    if (rc)
        print_message("tmpl_by_name(%s): %s\n", name, e.msg);
    assert_int_equal(rc, INF_OK);
    return t;
}

/* Renders and returns the prompt as one string (caller frees). */
static char *render_str(const tmpl *t, const tmpl_msg *m, int n, int gen)
{
    tmpl_out o;
    tmpl_out_init(&o);
    inf_err e = {0};
    int rc = tmpl_render(t, m, n, gen, &o, &e);
    if (rc)
        print_message("tmpl_render: %s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    char *s = NULL;
    size_t len = 0;
    assert_int_equal(tmpl_out_string(t, &o, &s, &len, &e), INF_OK);
    assert_int_equal(len, strlen(s));
    tmpl_out_free(&o);
    return s;
}

static void expect_render(const char *name, const tmpl_msg *m, int n, int gen, const char *want)
{
    tmpl *t = by_name(name);
    char *s = render_str(t, m, n, gen);
    assert_string_equal(s, want);
    free(s);
    tmpl_destroy(t);
}

/* Renders a chat that the template rejects: INF_ERR_INVALID whose message
 * contains want. */
static void expect_error(const char *name, const tmpl_msg *m, int n, const char *want)
{
    tmpl *t = by_name(name);
    tmpl_out o;
    tmpl_out_init(&o);
    inf_err e = {0};
    assert_int_equal(tmpl_render(t, m, n, 1, &o, &e), INF_ERR_INVALID);
    if (!strstr(e.msg, want))
        print_message("message: %s\n", e.msg);
    assert_non_null(strstr(e.msg, want));
    assert_int_equal(o.n, 0);
    tmpl_out_free(&o);
    tmpl_destroy(t);
}

/* The conversation llama.cpp's template tests use: system, three user
 * turns, an answer with spaces around it. */
static const tmpl_msg FULL[] = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};
#define N_FULL 6

/* No system message; spaces and a newline at the ends of contents. */
static const tmpl_msg NOSYS[] = {
    {"user", " Hi\n"},
    {"assistant", " Hello! "},
    {"user", "Bye"},
};

/* Unicode whitespace, which str.strip() and Jinja's trim remove. */
static const tmpl_msg WS[] = {
    {"system", ""},
    {"user", "\u3000 \t\u00a0"},
    {"assistant", "\u2003x\u2003"},
};

/* ------------------------------------------------------------- rendering */

/* Llama 2: <<SYS>> inside the first [INST], contents stripped, BOS before
 * every user turn, " </s>" after every answer; no generation prompt, so the
 * flag changes nothing. */
static void test_tmpl_render_llama2(void **state)
{
    (void)state;
    const char *full =
        "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there "
        "</s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]";
    expect_render("llama-2", FULL, N_FULL, 0, full);
    expect_render("llama-2", FULL, N_FULL, 1, full);
    expect_render("llama-2", NOSYS, 3, 1, "<s>[INST] Hi [/INST] Hello! </s><s>[INST] Bye [/INST]");
    /* strip() runs over the whole first turn, so the newlines after
     * <</SYS>> go when the user's content is only whitespace. */
    expect_render("llama-2", WS, 3, 1, "<s>[INST] <<SYS>>\n\n<</SYS>> [/INST] x </s>");
    /* A system message anywhere but first renders nothing, as the
     * template's if/elif does. */
    const tmpl_msg odd[] = {{"user", "a"}, {"system", "b"}, {"user", "c"}};
    expect_render("llama-2", odd, 3, 1, "<s>[INST] a [/INST]<s>[INST] c [/INST]");
    /* Only a system message: the template renders nothing at all. */
    expect_render("llama-2", FULL, 1, 1, "");
}

/* Mistral (updated v1 template): " [INST] " with the system message and a
 * blank line before the first user turn, " " before answers, no strip. */
static void test_tmpl_render_mistral(void **state)
{
    (void)state;
    const char *full =
        "<s> [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you "
        "[/INST]    I am an assistant   </s> [INST] Another question [/INST]";
    expect_render("mistral", FULL, N_FULL, 0, full);
    expect_render("mistral", FULL, N_FULL, 1, full);
    expect_render("mistral", NOSYS, 3, 0, "<s> [INST]  Hi\n [/INST]  Hello! </s> [INST] Bye [/INST]");
    expect_render("mistral", WS, 3, 0,
                  "<s> [INST] \n\n\u3000 \t\u00a0 [/INST] \u2003x\u2003</s>");
    expect_render("mistral", FULL, 1, 1, "<s>");
}

/* ChatML: every message as <|im_start|>role\ncontent<|im_end|>\n, any role,
 * no BOS; the generation prompt opens the assistant's turn. */
static void test_tmpl_render_chatml(void **state)
{
    (void)state;
    const char *full =
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello"
        "<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you"
        "<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\n"
        "Another question<|im_end|>\n";
    expect_render("chatml", FULL, N_FULL, 0, full);
    char want[1024];
    snprintf(want, sizeof want, "%s<|im_start|>assistant\n", full);
    expect_render("chatml", FULL, N_FULL, 1, want);
    const tmpl_msg tool[] = {{"user", "a"}, {"tool", "b"}};
    expect_render("chatml", tool, 2, 1,
                  "<|im_start|>user\na<|im_end|>\n<|im_start|>tool\nb<|im_end|>\n"
                  "<|im_start|>assistant\n");
}

/* Zephyr: <|role|>\ncontent</s>\n for system/user/assistant (others
 * dropped); the generation prompt is <|assistant|>\n. */
static void test_tmpl_render_zephyr(void **state)
{
    (void)state;
    const char *full =
        "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi "
        "there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   </s>\n"
        "<|user|>\nAnother question</s>\n";
    expect_render("zephyr", FULL, N_FULL, 0, full);
    char want[1024];
    snprintf(want, sizeof want, "%s<|assistant|>\n", full);
    expect_render("zephyr", FULL, N_FULL, 1, want);
    expect_render("zephyr", NOSYS, 3, 1,
                  "<|user|>\n Hi\n</s>\n<|assistant|>\n Hello! </s>\n<|user|>\nBye</s>\n"
                  "<|assistant|>\n");
    const tmpl_msg tool[] = {{"user", "a"}, {"tool", "b"}};
    expect_render("zephyr", tool, 2, 1, "<|user|>\na</s>\n<|assistant|>\n");
}

/* Llama 3: BOS once, a header per message, contents trimmed, <|eot_id|>;
 * the generation prompt is the assistant's header. */
static void test_tmpl_render_llama3(void **state)
{
    (void)state;
    const char *full =
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
        "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>"
        "user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant"
        "<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>"
        "\n\nAnother question<|eot_id|>";
    expect_render("llama-3", FULL, N_FULL, 0, full);
    char want[1024];
    snprintf(want, sizeof want, "%s<|start_header_id|>assistant<|end_header_id|>\n\n", full);
    expect_render("llama-3", FULL, N_FULL, 1, want);
    expect_render("llama-3", WS, 3, 0,
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|><|start_header_id|>"
                  "assistant<|end_header_id|>\n\nx<|eot_id|>");
}

/* plain: BOS, then the contents joined by "\n"; roles and the generation
 * prompt change nothing. */
static void test_tmpl_render_plain(void **state)
{
    (void)state;
    const tmpl_msg one[] = {{"user", "Once upon a time"}};
    expect_render("plain", one, 1, 1, "<s>Once upon a time");
    expect_render("plain", NOSYS, 3, 0, "<s> Hi\n\n Hello! \nBye");
    expect_render("plain", NOSYS, 3, 1, "<s> Hi\n\n Hello! \nBye");
    const tmpl_msg null_content[] = {{"user", NULL}, {"assistant", "x"}};
    expect_render("plain", null_content, 2, 0, "<s>\nx");
}

/* Segments: BOS/EOS are markers, adjacent text is one segment, no empty
 * text segments. */
static void test_tmpl_render_segments(void **state)
{
    (void)state;
    tmpl *t = by_name("llama-2");
    tmpl_out o;
    tmpl_out_init(&o);
    inf_err e = {0};
    assert_int_equal(tmpl_render(t, FULL, N_FULL, 1, &o, &e), INF_OK);
    const tmpl_seg_kind want[] = {TMPL_SEG_BOS, TMPL_SEG_TEXT, TMPL_SEG_EOS, TMPL_SEG_BOS,
                                  TMPL_SEG_TEXT, TMPL_SEG_EOS, TMPL_SEG_BOS, TMPL_SEG_TEXT};
    assert_int_equal(o.n, 8);
    for (int i = 0; i < o.n; i++)
        assert_int_equal(o.segs[i].kind, want[i]);
    assert_int_equal(o.segs[7].len, strlen("[INST] Another question [/INST]"));
    assert_memory_equal(o.text + o.segs[7].off, "[INST] Another question [/INST]", o.segs[7].len);
    tmpl_destroy(t);

    /* chatml: all text, one segment; the storage is reused. */
    t = by_name("chatml");
    assert_int_equal(tmpl_render(t, FULL, 2, 1, &o, &e), INF_OK);
    assert_int_equal(o.n, 1);
    assert_int_equal(o.segs[0].kind, TMPL_SEG_TEXT);
    assert_int_equal(o.segs[0].off, 0);
    assert_int_equal(o.segs[0].len, o.len);
    assert_string_equal(o.text, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
                                "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
    tmpl_destroy(t);

    /* llama-2 with an answer that strips to nothing: " " then " </s>". */
    t = by_name("llama-2");
    const tmpl_msg blank[] = {{"user", "q"}, {"assistant", " \n "}};
    assert_int_equal(tmpl_render(t, blank, 2, 0, &o, &e), INF_OK);
    for (int i = 0; i < o.n; i++)
        assert_true(o.segs[i].kind != TMPL_SEG_TEXT || o.segs[i].len > 0);
    char *s = NULL;
    assert_int_equal(tmpl_out_string(t, &o, &s, NULL, &e), INF_OK);
    assert_string_equal(s, "<s>[INST] q [/INST]  </s>");
    free(s);

    /* Nothing rendered (only a system message): no segments, text "". */
    tmpl_out_free(&o);
    assert_int_equal(tmpl_render(t, FULL, 1, 1, &o, &e), INF_OK);
    assert_int_equal(o.n, 0);
    assert_string_equal(o.text, "");
    tmpl_out_free(&o);
    assert_null(o.segs);
    tmpl_destroy(t);
}

/* ---------------------------------------------------------------- errors */

/* Llama 2 and Mistral raise where roles do not alternate user/assistant
 * after an optional first system message: INF_ERR_INVALID (a 400). */
static void test_tmpl_render_alternation_errors(void **state)
{
    (void)state;
    const tmpl_msg two_users[] = {{"user", "a"}, {"user", "b"}};
    const tmpl_msg starts_assistant[] = {{"assistant", "a"}, {"user", "b"}};
    const tmpl_msg sys_then_assistant[] = {{"system", "s"}, {"assistant", "a"}};
    const tmpl_msg late_system[] = {{"user", "a"}, {"system", "b"}, {"user", "c"}};
    const tmpl_msg tool[] = {{"user", "a"}, {"tool", "b"}};
    expect_error("llama-2", two_users, 2, "roles must alternate user/assistant");
    expect_error("llama-2", two_users, 2, "message 1 has role \"user\"");
    expect_error("llama-2", starts_assistant, 2, "roles must alternate");
    expect_error("llama-2", sys_then_assistant, 2, "roles must alternate");
    expect_error("mistral", two_users, 2, "roles must alternate user/assistant");
    expect_error("mistral", starts_assistant, 2, "message 0 has role \"assistant\"");
    expect_error("mistral", late_system, 3, "Only user and assistant roles are supported");
    expect_error("mistral", tool, 2, "message 1 has role \"tool\"");
    /* The others accept any order. */
    expect_render("chatml", two_users, 2, 0,
                  "<|im_start|>user\na<|im_end|>\n<|im_start|>user\nb<|im_end|>\n");
}

/* No messages, or a message without a role, is INF_ERR_INVALID for every
 * template. */
static void test_tmpl_render_bad_input(void **state)
{
    (void)state;
    const char *names[] = {"llama-2", "mistral", "chatml", "zephyr", "llama-3", "plain"};
    const tmpl_msg no_role[] = {{"user", "a"}, {NULL, "b"}};
    for (int i = 0; i < 6; i++) {
        expect_error(names[i], FULL, 0, "messages must not be empty");
        expect_error(names[i], no_role, 2, "message 1 has no role");
    }
}

/* ------------------------------------------------------------- detection */

/* The real templates are recognised; look-alikes that render differently
 * are not. */
static void test_tmpl_detect_real_templates(void **state)
{
    (void)state;
    assert_int_equal(tmpl_detect(LLAMA2_CHAT), TMPL_LLAMA2);
    assert_int_equal(tmpl_detect(MISTRAL_V02), TMPL_MISTRAL);
    assert_int_equal(tmpl_detect(MISTRAL_OLD), TMPL_MISTRAL);
    assert_int_equal(tmpl_detect(CHATML_OPENHERMES), TMPL_CHATML);
    assert_int_equal(tmpl_detect(ZEPHYR_BETA), TMPL_ZEPHYR);
    assert_int_equal(tmpl_detect(LLAMA3_INSTRUCT), TMPL_LLAMA3);
    assert_int_equal(tmpl_detect(GEMMA_IT), TMPL_NONE);
    assert_int_equal(tmpl_detect(PHI3_MINI), TMPL_NONE);
    assert_int_equal(tmpl_detect(QWEN15_CHAT), TMPL_NONE);
    assert_int_equal(tmpl_detect(LLAMA31_HEAD), TMPL_NONE);
    assert_int_equal(tmpl_detect(MISTRAL_V03_PART), TMPL_NONE);
    assert_int_equal(tmpl_detect(""), TMPL_NONE);
    assert_int_equal(tmpl_detect(NULL), TMPL_NONE);
}

/* Names: each built-in by name; an unknown name lists the known ones. */
static void test_tmpl_by_name(void **state)
{
    (void)state;
    const char *names[] = {"plain", "llama-2", "mistral", "chatml", "zephyr", "llama-3"};
    for (int k = 0; k < 6; k++) {
        tmpl *t = by_name(names[k]);
        assert_int_equal(tmpl_get_kind(t), (tmpl_kind)k);
        assert_string_equal(tmpl_name(t), names[k]);
        assert_string_equal(tmpl_kind_name((tmpl_kind)k), names[k]);
        assert_int_equal(tmpl_get_origin(t), TMPL_FROM_NAME);
        assert_non_null(strstr(tmpl_describe(t), names[k]));
        assert_null(strchr(tmpl_describe(t), '\n'));
        assert_null(tmpl_source(t));
        tmpl_destroy(t);
    }
    assert_null(tmpl_kind_name(TMPL_NONE));
    tmpl *t = (tmpl *)1;
    inf_err e = {0};
    assert_int_equal(tmpl_by_name("llama2-chat", &t, &e), INF_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(e.msg, "llama2-chat"));
    for (int k = 0; k < 6; k++)
        assert_non_null(strstr(e.msg, names[k]));
    tmpl_destroy(NULL);
}

/* ----------------------------------------------------- tokenizer_config */

typedef tdir cfg_dir; /* tests/tdir.h */

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[4352];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static void make_dir(cfg_dir *d) { assert_int_equal(tdir_make(d, "test_tmpl"), 0); }

static void remove_dir(cfg_dir *d) { tdir_remove(d); }

/* Writes tokenizer_config.json from a cJSON object (consumed). */
static void write_config(const cfg_dir *d, cJSON *root)
{
    char *s = cJSON_Print(root);
    assert_non_null(s);
    write_file(d->path, "tokenizer_config.json", s);
    free(s);
    cJSON_Delete(root);
}

/* Loads and checks the kind and origin; the note is in note. */
static tmpl *load(const char *path, const char *override, tmpl_kind kind, tmpl_origin origin,
                  char *note, size_t cap)
{
    tmpl *t = NULL;
    inf_err e = {0};
    int rc = tmpl_from_config(path, override, &t, note, cap, &e);
    if (rc)
        print_message("tmpl_from_config: %s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    assert_int_equal(tmpl_get_kind(t), kind);
    assert_int_equal(tmpl_get_origin(t), origin);
    assert_null(strchr(note, '\n'));
    return t;
}

/* A string chat_template is the model's Jinja template; bos_token /
 * eos_token given as AddedToken objects or strings are its variables and
 * become markers. Llama 2's renders what the llama-2 built-in renders. */
static void test_tmpl_config_string_template(void **state)
{
    (void)state;
    cfg_dir d;
    make_dir(&d);
    cJSON *root = cJSON_CreateObject();
    cJSON *bos = cJSON_AddObjectToObject(root, "bos_token");
    cJSON_AddStringToObject(bos, "__type", "AddedToken");
    cJSON_AddStringToObject(bos, "content", "<BOS>");
    cJSON_AddBoolToObject(bos, "lstrip", 0);
    cJSON_AddStringToObject(root, "eos_token", "<EOS>");
    cJSON_AddStringToObject(root, "chat_template", LLAMA2_CHAT);
    write_config(&d, root);

    char note[256];
    tmpl *t = load(d.path, NULL, TMPL_JINJA, TMPL_FROM_MODEL, note, sizeof note);
    assert_string_equal(note, "chat template: the model's own (Jinja, from tokenizer_config.json)");
    assert_string_equal(tmpl_source(t), LLAMA2_CHAT);
    char *s = render_str(t, FULL + 1, 2, 1);
    assert_string_equal(s, "<BOS>[INST] Hello [/INST] Hi there <EOS>");
    free(s);
    /* the token strings became markers: BOS, text, EOS */
    tmpl_out o;
    tmpl_out_init(&o);
    inf_err e = {0};
    assert_int_equal(tmpl_render(t, FULL + 1, 2, 1, &o, &e), INF_OK);
    assert_int_equal(o.n, 3);
    assert_int_equal(o.segs[0].kind, TMPL_SEG_BOS);
    assert_int_equal(o.segs[1].kind, TMPL_SEG_TEXT);
    assert_int_equal(o.segs[2].kind, TMPL_SEG_EOS);
    /* the template's raise_exception is the error */
    const tmpl_msg two_users[] = {{"user", "a"}, {"user", "b"}};
    assert_int_equal(tmpl_render(t, two_users, 2, 1, &o, &e), INF_ERR_INVALID);
    assert_string_equal(e.msg, "Conversation roles must alternate user/assistant/user/assistant/...");
    tmpl_out_free(&o);
    tmpl_destroy(t);

    /* The file's own path works as well as the directory. */
    char path[4352];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", d.path);
    t = load(path, NULL, TMPL_JINJA, TMPL_FROM_MODEL, note, sizeof note);
    tmpl_destroy(t);
    remove_dir(&d);
}

/* A list of named templates: "default" is used, "tool_use" for a request
 * with tools; a list without "default" falls back to plain and says why. */
static void test_tmpl_config_template_list(void **state)
{
    (void)state;
    cfg_dir d;
    make_dir(&d);
    cJSON *root = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(root, "chat_template");
    cJSON *tool = cJSON_CreateObject();
    cJSON_AddStringToObject(tool, "name", "tool_use");
    cJSON_AddStringToObject(tool, "template", CHATML_OPENHERMES);
    cJSON_AddItemToArray(list, tool);
    cJSON *def = cJSON_CreateObject();
    cJSON_AddStringToObject(def, "name", "default");
    cJSON_AddStringToObject(def, "template", LLAMA3_INSTRUCT);
    cJSON_AddItemToArray(list, def);
    cJSON_AddStringToObject(root, "bos_token", "<|begin_of_text|>");
    write_config(&d, root);

    char note[256];
    tmpl *t = load(d.path, NULL, TMPL_JINJA, TMPL_FROM_MODEL, note, sizeof note);
    assert_non_null(strstr(note, "the model's own (Jinja, from tokenizer_config.json"));
    assert_non_null(strstr(note, "tool_use"));
    assert_string_equal(tmpl_source(t), LLAMA3_INSTRUCT);
    tmpl_out o;
    tmpl_out_init(&o);
    inf_err e = {0};
    tmpl_chat chat = {.messages_json = "[{\"role\": \"user\", \"content\": \"x\"}]",
                      .add_generation_prompt = 1};
    assert_int_equal(tmpl_render_chat(t, &chat, &o, &e), INF_OK);
    assert_non_null(strstr(o.text, "<|start_header_id|>user"));
    chat.tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]";
    assert_int_equal(tmpl_render_chat(t, &chat, &o, &e), INF_OK);
    assert_string_equal(o.text, "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
    tmpl_out_free(&o);
    tmpl_destroy(t);

    root = cJSON_CreateObject();
    list = cJSON_AddArrayToObject(root, "chat_template");
    tool = cJSON_CreateObject();
    cJSON_AddStringToObject(tool, "name", "tool_use");
    cJSON_AddStringToObject(tool, "template", CHATML_OPENHERMES);
    cJSON_AddItemToArray(list, tool);
    write_config(&d, root);
    t = load(d.path, NULL, TMPL_PLAIN, TMPL_FROM_FALLBACK, note, sizeof note);
    assert_non_null(strstr(note, "no \"default\" entry"));
    assert_non_null(strstr(note, "plain default"));
    tmpl_destroy(t);
    remove_dir(&d);
}

/* No chat_template: plain, with a note saying so; add_bos_token false
 * drops its BOS. No tokenizer_config.json at all: plain too. */
static void test_tmpl_config_no_template(void **state)
{
    (void)state;
    cfg_dir d;
    make_dir(&d);
    char note[256];
    tmpl *t = load(d.path, NULL, TMPL_PLAIN, TMPL_FROM_DEFAULT, note, sizeof note);
    assert_non_null(strstr(note, "no tokenizer_config.json"));
    tmpl_destroy(t);

    write_file(d.path, "tokenizer_config.json",
               "{\"add_bos_token\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}");
    t = load(d.path, NULL, TMPL_PLAIN, TMPL_FROM_DEFAULT, note, sizeof note);
    assert_string_equal(note, "no chat template in tokenizer_config.json; using the plain default "
                              "(BOS, then the messages' contents joined by \"\\n\")");
    assert_null(tmpl_source(t));
    const tmpl_msg one[] = {{"user", "Once upon a time"}};
    char *s = render_str(t, one, 1, 1);
    assert_string_equal(s, "<s>Once upon a time");
    free(s);
    tmpl_destroy(t);

    write_file(d.path, "tokenizer_config.json", "{\"add_bos_token\": false, \"chat_template\": null}");
    t = load(d.path, NULL, TMPL_PLAIN, TMPL_FROM_DEFAULT, note, sizeof note);
    s = render_str(t, one, 1, 1);
    assert_string_equal(s, "Once upon a time");
    free(s);
    tmpl_destroy(t);
    remove_dir(&d);
}

/* A template none of the built-ins matches (Gemma's) renders as itself;
 * one with a syntax error fails to load, naming the file and the line. */
static void test_tmpl_config_unrecognised(void **state)
{
    (void)state;
    cfg_dir d;
    make_dir(&d);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "chat_template", GEMMA_IT);
    cJSON_AddStringToObject(root, "bos_token", "<bos>");
    write_config(&d, root);
    char note[512];
    tmpl *t = load(d.path, NULL, TMPL_JINJA, TMPL_FROM_MODEL, note, sizeof note);
    assert_string_equal(tmpl_source(t), GEMMA_IT);
    const tmpl_msg one[] = {{"user", " Hi "}};
    char *s = render_str(t, one, 1, 1);
    assert_string_equal(s, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    free(s);
    tmpl_destroy(t);

    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "chat_template", "{% for m in messages %}\n{{ m.content }\n");
    write_config(&d, root);
    inf_err e = {0};
    t = (tmpl *)1;
    assert_int_equal(tmpl_from_config(d.path, NULL, &t, note, sizeof note, &e), INF_ERR_FORMAT);
    assert_null(t);
    assert_non_null(strstr(e.msg, "tokenizer_config.json: line 2"));
    remove_dir(&d);
}

/* chat_template.jinja beside a tokenizer_config.json without a template. */
static void test_tmpl_config_jinja_file(void **state)
{
    (void)state;
    cfg_dir d;
    make_dir(&d);
    write_file(d.path, "tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
    write_file(d.path, "chat_template.jinja", ZEPHYR_BETA);
    char note[256];
    tmpl *t = load(d.path, NULL, TMPL_JINJA, TMPL_FROM_MODEL, note, sizeof note);
    assert_string_equal(note, "chat template: the model's own (Jinja, from chat_template.jinja)");
    const tmpl_msg one[] = {{"user", "x"}};
    char *s = render_str(t, one, 1, 1);
    assert_string_equal(s, "<|user|>\nx</s>\n<|assistant|>\n");
    free(s);
    tmpl_destroy(t);
    remove_dir(&d);
}

/* An override name wins over the model's template (whose special tokens
 * still apply), so do a Jinja file and an inline template (vLLM's
 * --chat-template); anything else is INF_ERR_INVALID listing the names. */
static void test_tmpl_config_override(void **state)
{
    (void)state;
    cfg_dir d;
    make_dir(&d);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "chat_template", LLAMA2_CHAT);
    cJSON_AddStringToObject(root, "eos_token", "<END>");
    write_config(&d, root);
    char note[256];
    tmpl *t = load(d.path, "zephyr", TMPL_ZEPHYR, TMPL_FROM_NAME, note, sizeof note);
    assert_string_equal(note, "chat template: zephyr (built in, chosen by name)");
    const tmpl_msg one[] = {{"user", "x"}};
    char *s = render_str(t, one, 1, 1);
    assert_string_equal(s, "<|user|>\nx<END>\n<|assistant|>\n");
    free(s);
    tmpl_destroy(t);

    t = load(d.path, "{{ messages[0].content ~ eos_token }}", TMPL_JINJA, TMPL_FROM_OVERRIDE, note,
             sizeof note);
    assert_string_equal(note, "chat template: Jinja from --chat-template (inline)");
    s = render_str(t, one, 1, 1);
    assert_string_equal(s, "x<END>");
    free(s);
    tmpl_destroy(t);
    char file[4352];
    snprintf(file, sizeof file, "%s/other.json", d.path);
    write_file(d.path, "other.json", "[{{ messages | length }}]");
    t = load(d.path, file, TMPL_JINJA, TMPL_FROM_OVERRIDE, note, sizeof note);
    s = render_str(t, one, 1, 1);
    assert_string_equal(s, "[1]");
    free(s);
    tmpl_destroy(t);

    t = (tmpl *)1;
    inf_err e = {0};
    assert_int_equal(tmpl_from_config(d.path, "vicuna", &t, note, sizeof note, &e),
                     INF_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(e.msg, "\"vicuna\""));
    assert_non_null(strstr(e.msg, "llama-2, mistral, chatml, zephyr, llama-3, plain"));
    remove_dir(&d);
}

/* Renders chat through an inline Jinja template; returns the text (or the
 * error message), *rc the result. */
static char *chat_str(const char *src, const tmpl_chat *chat, int *rc)
{
    cfg_dir d;
    make_dir(&d);
    write_file(d.path, "tokenizer_config.json", "{\"bos_token\": \"<s>\"}");
    tmpl *t = NULL;
    inf_err e = {0};
    char note[256];
    assert_int_equal(tmpl_from_config(d.path, src, &t, note, sizeof note, &e), INF_OK);
    tmpl_out o;
    tmpl_out_init(&o);
    *rc = tmpl_render_chat(t, chat, &o, &e);
    char *s = NULL;
    if (*rc == INF_OK)
        assert_int_equal(tmpl_out_string(t, &o, &s, NULL, &e), INF_OK);
    else
        s = strdup(e.msg);
    tmpl_out_free(&o);
    tmpl_destroy(t);
    remove_dir(&d);
    return s;
}

/* The inputs as vLLM prepares them: tool_calls arguments parsed from JSON,
 * tool_call_id kept, text parts joined for a template that takes strings
 * and kept as parts for one that loops over them, tools None when absent,
 * chat_template_kwargs as variables (not replacing messages), and
 * continue_final_message cutting after the last message's text. */
static void test_tmpl_chat_inputs(void **state)
{
    (void)state;
    int rc;
    tmpl_chat chat = {
        .messages_json = "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
                         "\"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": "
                         "\"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", "
                         "\"type\": \"function\", \"function\": {\"name\": \"w\", "
                         "\"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": "
                         "\"tool\", \"tool_call_id\": \"c1\", \"content\": \"sun\"}]",
        .kwargs_json = "{\"enable_thinking\": false, \"messages\": \"ignored\"}",
        .add_generation_prompt = 1,
    };
    char *s = chat_str("{% for m in messages %}{{ m.role }}:{{ m.content }}{% if m.tool_calls %}"
                       "{{ m.tool_calls[0].function.arguments.city }}{% endif %}{% if "
                       "m.tool_call_id %}#{{ m.tool_call_id }}{% endif %};{% endfor %}{{ tools "
                       "is none }}{{ enable_thinking }}{{ add_generation_prompt }}",
                       &chat, &rc);
    assert_int_equal(rc, INF_OK);
    assert_string_equal(s, "user:a\nb;assistant:Paris;tool:sun#c1;TrueFalseTrue");
    free(s);

    s = chat_str("{% for m in messages %}{% for p in m.content %}[{{ p.type }}:{{ p.text }}]"
                 "{% endfor %};{% endfor %}", &chat, &rc);
    assert_int_equal(rc, INF_OK);
    assert_string_equal(s, "[text:a][text:b];;[text:sun];");
    free(s);

    tmpl_chat cont = {
        .messages_json = "[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": "
                         "\"assistant\", \"content\": \"Once upon \"}]",
        .continue_final_message = 1,
    };
    s = chat_str("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>"
                 "{% endfor %}", &cont, &rc);
    assert_int_equal(rc, INF_OK);
    assert_string_equal(s, "<user>x</user><assistant>Once upon");
    free(s);

    tmpl_chat bad = {.messages_json = "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
                                      "{\"name\": \"f\", \"arguments\": \"{nope\"}}]}]"};
    s = chat_str("{{ messages }}", &bad, &rc);
    assert_int_equal(rc, INF_ERR_INVALID);
    assert_non_null(strstr(s, "arguments is not valid JSON"));
    free(s);

    /* numbers as json.loads reads them (1.0 a float, the last duplicate
     * key) in arguments and tools; checked with Python's json and jinja2 */
    tmpl_chat nums = {
        .messages_json = "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
                         "{\"name\": \"f\", \"arguments\": \"{\\\"t\\\": 1.0, \\\"n\\\": 2, "
                         "\\\"t\\\": 0.5e1}\"}}]}]",
        .tools_json = "[{\"default\": 1.0, \"max\": 10, \"default\": 2.50}]",
    };
    s = chat_str("{{ messages[0].tool_calls[0].function.arguments | tojson }} {{ tools }}", &nums,
                 &rc);
    assert_int_equal(rc, INF_OK);
    assert_string_equal(s, "{\"t\": 5.0, \"n\": 2} [{'default': 2.5, 'max': 10}]");
    free(s);
}

/* Malformed files are INF_ERR_FORMAT naming the field; a missing path is
 * INF_ERR_IO. */
static void test_tmpl_config_errors(void **state)
{
    (void)state;
    cfg_dir d;
    make_dir(&d);
    const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"chat_template\": ", "not a JSON object"},
        {"[1, 2]", "not a JSON object"},
        {"{\"chat_template\": 3}", "chat_template must be"},
        {"{\"chat_template\": [{\"name\": \"default\"}]}", "chat_template entry"},
        {"{\"bos_token\": 1}", "bos_token must be"},
        {"{\"eos_token\": {\"lstrip\": true}}", "eos_token must be"},
        {"{\"add_bos_token\": \"yes\"}", "add_bos_token"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(d.path, "tokenizer_config.json", cases[i].json);
        tmpl *t = (tmpl *)1;
        inf_err e = {0};
        assert_int_equal(tmpl_from_config(d.path, NULL, &t, NULL, 0, &e), INF_ERR_FORMAT);
        assert_null(t);
        if (!strstr(e.msg, cases[i].want))
            print_message("%s -> %s\n", cases[i].json, e.msg);
        assert_non_null(strstr(e.msg, cases[i].want));
    }
    char path[4352];
    snprintf(path, sizeof path, "%s/missing", d.path);
    tmpl *t = (tmpl *)1;
    inf_err e = {0};
    assert_int_equal(tmpl_from_config(path, NULL, &t, NULL, 0, &e), INF_ERR_IO);
    assert_null(t);
    assert_non_null(strstr(e.msg, path));
    remove_dir(&d);
}

/* ---------------------------------------------------------------- tokens */

static int file_exists(const char *path)
{
    return access(path, R_OK) == 0;
}

/* The fixture tokenizer, or a skip saying it is absent. */
static tok *open_fixture(void)
{
    const char *f = getenv("INFERD_TEST_FIXTURES");
    char dir[4096], model[4200];
    if (f) {
        snprintf(dir, sizeof dir, "%s/tiny", f);
        snprintf(model, sizeof model, "%s/tokenizer.model", dir);
    }
    if (!f || !file_exists(model)) {
        print_message("skipped: $INFERD_TEST_FIXTURES/tiny/tokenizer.model not present "
                      "(INFERD_TEST_FIXTURES=%s; `make unit` makes it)\n", f ? f : "unset");
        skip();
    }
    tok *t = NULL;
    inf_err e = {0};
    int rc = tok_create(dir, &t, &e);
    if (rc)
        print_message("tok_create: %s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    return t;
}

/* ids of a rendered chat. */
static int32_t *chat_ids(const tmpl *t, const tok *tk, const tmpl_msg *m, int n, int gen,
                         int *n_ids)
{
    tmpl_out o;
    tmpl_out_init(&o);
    inf_err e = {0};
    assert_int_equal(tmpl_render(t, m, n, gen, &o, &e), INF_OK);
    int32_t *ids = NULL;
    int rc = tmpl_tokens(t, &o, tk, &ids, n_ids, &e);
    if (rc)
        print_message("tmpl_tokens: %s\n", e.msg);
    assert_int_equal(rc, INF_OK);
    tmpl_out_free(&o);
    return ids;
}

/* A growing list of expected ids. */
typedef struct ids_buf {
    int32_t v[4096];
    int n;
} ids_buf;

static void push_id(ids_buf *b, int32_t id)
{
    assert_true(b->n < 4096);
    b->v[b->n++] = id;
}

static void push_text(ids_buf *b, const tok *tk, const char *text)
{
    int32_t *ids = NULL;
    int n = 0;
    inf_err e = {0};
    assert_int_equal(tok_encode(tk, text, strlen(text), 0, &ids, &n, &e), INF_OK);
    for (int i = 0; i < n; i++)
        push_id(b, ids[i]);
    free(ids);
}

static void expect_ids(const int32_t *got, int n_got, const ids_buf *want)
{
    assert_int_equal(n_got, want->n);
    if (n_got)
        assert_memory_equal(got, want->v, (size_t)n_got * sizeof *got);
}

/* plain, one user message: the same tokens as the completion prompt. */
static void test_tmpl_tokens_plain_equals_completion(void **state)
{
    (void)state;
    tok *tk = open_fixture();
    tmpl *t = by_name("plain");
    const char *texts[] = {"Once upon a time", " leading space", "two\nlines", ""};
    for (int i = 0; i < 4; i++) {
        const tmpl_msg one[] = {{"user", texts[i]}};
        int n = 0, n_want = 0;
        int32_t *got = chat_ids(t, tk, one, 1, 1, &n);
        int32_t *want = NULL;
        inf_err e = {0};
        assert_int_equal(tok_encode(tk, texts[i], strlen(texts[i]), 1, &want, &n_want, &e),
                         INF_OK);
        assert_int_equal(n, n_want);
        assert_memory_equal(got, want, (size_t)n * sizeof *got);
        free(got);
        free(want);
    }
    /* Several messages: the completion prompt of their joined contents. */
    int n = 0, n_want = 0;
    int32_t *got = chat_ids(t, tk, NOSYS, 3, 1, &n), *want = NULL;
    inf_err e = {0};
    const char *joined = " Hi\n\n Hello! \nBye";
    assert_int_equal(tok_encode(tk, joined, strlen(joined), 1, &want, &n_want, &e), INF_OK);
    assert_int_equal(n, n_want);
    assert_memory_equal(got, want, (size_t)n * sizeof *got);
    free(got);
    free(want);
    tmpl_destroy(t);
    tok_destroy(tk);
}

/* Markers become the tokenizer's BOS/EOS ids, text segments are encoded
 * one by one without specials; text after a marker is encoded as following
 * a special token, so mistral's " [INST]" after <s> has one word start. */
static void test_tmpl_tokens_markers(void **state)
{
    (void)state;
    tok *tk = open_fixture();
    int bos = tok_bos_id(tk), eos = tok_eos_id(tk), n = 0;
    assert_true(bos >= 0 && eos >= 0);
    const tmpl_msg chat[] = {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};

    tmpl *t = by_name("llama-2");
    ids_buf want = {.n = 0};
    push_id(&want, bos);
    push_text(&want, tk, "[INST] Hi [/INST] Hello ");
    push_id(&want, eos);
    push_id(&want, bos);
    push_text(&want, tk, "[INST] Bye [/INST]");
    int32_t *got = chat_ids(t, tk, chat, 3, 1, &n);
    expect_ids(got, n, &want);
    free(got);
    tmpl_destroy(t);

    t = by_name("mistral");
    want.n = 0;
    push_id(&want, bos);
    push_text(&want, tk, "[INST] Hi [/INST] Hello");
    push_id(&want, eos);
    push_text(&want, tk, "[INST] Bye [/INST]");
    got = chat_ids(t, tk, chat, 3, 1, &n);
    expect_ids(got, n, &want);
    free(got);
    tmpl_destroy(t);

    t = by_name("zephyr");
    want.n = 0;
    push_text(&want, tk, "<|user|>\nHi");
    push_id(&want, eos);
    push_text(&want, tk, "\n<|assistant|>\nHello");
    push_id(&want, eos);
    push_text(&want, tk, "\n<|user|>\nBye");
    push_id(&want, eos);
    push_text(&want, tk, "\n<|assistant|>\n");
    got = chat_ids(t, tk, chat, 3, 1, &n);
    expect_ids(got, n, &want);
    free(got);
    tmpl_destroy(t);

    t = by_name("chatml");
    want.n = 0;
    push_text(&want, tk, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
                         "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    got = chat_ids(t, tk, chat, 3, 1, &n);
    expect_ids(got, n, &want);
    free(got);
    tmpl_destroy(t);
    tok_destroy(tk);
}

/* Meta's Llama 2 tokenizer: the llama-2 prompt gives the ids Meta's
 * reference code gives, and mistral's " [INST]" after <s> is "▁[" with no
 * extra "▁" piece. */
static void test_tmpl_tokens_llama2_tokenizer(void **state)
{
    (void)state;
    if (!file_exists(LLAMA_MODEL)) {
        print_message("skipped: " LLAMA_MODEL " not present\n");
        skip();
    }
    tok *tk = NULL;
    inf_err e = {0};
    assert_int_equal(tok_create_file(LLAMA_MODEL, 1, 0, &tk, &e), INF_OK);
    const tmpl_msg one[] = {{"user", "Hi"}};
    int n = 0;
    tmpl *t = by_name("llama-2");
    int32_t *got = chat_ids(t, tk, one, 1, 1, &n);
    const int32_t want[] = {1, 518, 25580, 29962, 6324, 518, 29914, 25580, 29962};
    assert_int_equal(n, 9);
    assert_memory_equal(got, want, sizeof want);
    free(got);
    tmpl_destroy(t);

    t = by_name("mistral");
    got = chat_ids(t, tk, one, 1, 1, &n);
    assert_int_equal(n, 9);
    assert_memory_equal(got, want, sizeof want);
    assert_string_equal(tok_piece(tk, got[1]), "\xE2\x96\x81[");
    free(got);
    tmpl_destroy(t);
    tok_destroy(tk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tmpl_render_llama2),
        cmocka_unit_test(test_tmpl_render_mistral),
        cmocka_unit_test(test_tmpl_render_chatml),
        cmocka_unit_test(test_tmpl_render_zephyr),
        cmocka_unit_test(test_tmpl_render_llama3),
        cmocka_unit_test(test_tmpl_render_plain),
        cmocka_unit_test(test_tmpl_render_segments),
        cmocka_unit_test(test_tmpl_render_alternation_errors),
        cmocka_unit_test(test_tmpl_render_bad_input),
        cmocka_unit_test(test_tmpl_detect_real_templates),
        cmocka_unit_test(test_tmpl_by_name),
        cmocka_unit_test(test_tmpl_config_string_template),
        cmocka_unit_test(test_tmpl_config_template_list),
        cmocka_unit_test(test_tmpl_config_no_template),
        cmocka_unit_test(test_tmpl_config_unrecognised),
        cmocka_unit_test(test_tmpl_config_jinja_file),
        cmocka_unit_test(test_tmpl_config_override),
        cmocka_unit_test(test_tmpl_chat_inputs),
        cmocka_unit_test(test_tmpl_config_errors),
        cmocka_unit_test(test_tmpl_tokens_plain_equals_completion),
        cmocka_unit_test(test_tmpl_tokens_markers),
        cmocka_unit_test(test_tmpl_tokens_llama2_tokenizer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
