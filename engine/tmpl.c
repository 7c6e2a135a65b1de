/* tmpl: built-in chat templates (see tmpl.h).
 *
 * Each renderer below mirrors one reference Jinja template, quoted above it
 * as tokenizer_config.json holds it ("\n" in a quote is a newline in the
 * template, "\\n" the two characters Jinja reads as an escape). Hugging Face
 * renders with trim_blocks and lstrip_blocks, so the newline after a block
 * tag ({% ... %}) is dropped and the one after an expression ({{ ... }}) is
 * kept. Python's str.strip() and Jinja's trim remove Unicode whitespace
 * (str.isspace) at both ends: tmpl__strip_since does the same. */
#include "tmpl.h"
#include "tmpl_jinja.h"
#include "gguf.h"
#include "tok_gguf.h"

#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct tmpl {
    tmpl_kind kind;
    tmpl_origin origin;
    char *bos_text; /* the model's bos_token, or the kind's default          */
    char *eos_text; /* the model's eos_token, or the kind's default          */
    int add_bos;    /* plain: begin with BOS (tokenizer_config add_bos_token) */
    char *source;   /* the Jinja source, or NULL                             */
    tmpl_jx *jx;    /* TMPL_JINJA: the parsed template and its inputs' setup */
    int split_bos, split_eos; /* TMPL_JINJA: the model names these tokens    */
};

/* Per kind: name, the reference model's special tokens, a description. */
static const struct {
    const char *name, *bos, *eos, *describe;
} TMPL_KINDS[] = {
    [TMPL_PLAIN] = {"plain", "<s>", "</s>",
                    "plain: BOS, then the messages' contents joined by \"\\n\" "
                    "(roles dropped, no generation prompt)"},
    [TMPL_LLAMA2] = {"llama-2", "<s>", "</s>",
                     "llama-2: <s>[INST] <<SYS>>\\n{system}\\n<</SYS>>\\n\\n{user} [/INST] "
                     "{assistant} </s><s>[INST] {user} [/INST]"},
    [TMPL_MISTRAL] = {"mistral", "<s>", "</s>",
                      "mistral: <s> [INST] {system}\\n\\n{user} [/INST] {assistant}</s> "
                      "[INST] {user} [/INST]"},
    [TMPL_CHATML] = {"chatml", "<s>", "</s>",
                     "chatml: <|im_start|>{role}\\n{content}<|im_end|>\\n per message, "
                     "then <|im_start|>assistant\\n"},
    [TMPL_ZEPHYR] = {"zephyr", "<s>", "</s>",
                     "zephyr: <|{role}|>\\n{content}</s>\\n per message, then <|assistant|>\\n"},
    [TMPL_LLAMA3] = {"llama-3", "<|begin_of_text|>", "<|end_of_text|>",
                     "llama-3: <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>"
                     "\\n\\n{content}<|eot_id|> per message, then the assistant's header"},
    [TMPL_JINJA] = {"jinja", "<s>", "</s>",
                    "jinja: the Jinja chat template, rendered as Hugging Face's "
                    "apply_chat_template renders it"},
};
#define TMPL_N_KINDS ((int)(sizeof TMPL_KINDS / sizeof TMPL_KINDS[0]))
#define TMPL_NAMES "llama-2, mistral, chatml, zephyr, llama-3, plain"

/* ------------------------------------------------------------- tmpl_out */

void tmpl_out_init(tmpl_out *o)
{
    memset(o, 0, sizeof *o);
}

void tmpl_out_free(tmpl_out *o)
{
    free(o->segs);
    free(o->text);
    tmpl_out_init(o);
}

static int tmpl__nomem(inf_err *err)
{
    return inf_fail(err, INF_ERR_NOMEM, "chat template: out of memory");
}

/* Makes room for one more segment. */
static int tmpl__seg_room(tmpl_out *o, inf_err *err)
{
    if (o->n < o->cap)
        return INF_OK;
    int cap = o->cap ? 2 * o->cap : 16;
    tmpl_seg *s = realloc(o->segs, (size_t)cap * sizeof *s);
    if (!s)
        return tmpl__nomem(err);
    o->segs = s;
    o->cap = cap;
    return INF_OK;
}

/* Makes room for n more bytes of text and its NUL. */
static int tmpl__text_room(tmpl_out *o, size_t n, inf_err *err)
{
    if (o->len + n + 1 <= o->text_cap)
        return INF_OK;
    size_t cap = o->text_cap ? o->text_cap : 256;
    while (cap < o->len + n + 1)
        cap *= 2;
    char *t = realloc(o->text, cap);
    if (!t)
        return tmpl__nomem(err);
    o->text = t;
    o->text_cap = cap;
    return INF_OK;
}

/* Appends n bytes of text, joining a text segment that ends the list. */
static int tmpl__text(tmpl_out *o, const char *s, size_t n, inf_err *err)
{
    if (n == 0)
        return INF_OK;
    if (tmpl__text_room(o, n, err))
        return INF_ERR_NOMEM;
    if (o->n == 0 || o->segs[o->n - 1].kind != TMPL_SEG_TEXT) {
        if (tmpl__seg_room(o, err))
            return INF_ERR_NOMEM;
        o->segs[o->n++] = (tmpl_seg){TMPL_SEG_TEXT, o->len, 0};
    }
    memcpy(o->text + o->len, s, n);
    o->len += n;
    o->text[o->len] = 0;
    o->segs[o->n - 1].len += n;
    return INF_OK;
}

static int tmpl__str(tmpl_out *o, const char *s, inf_err *err)
{
    return tmpl__text(o, s ? s : "", s ? strlen(s) : 0, err);
}

static int tmpl__marker(tmpl_out *o, tmpl_seg_kind kind, inf_err *err)
{
    if (tmpl__seg_room(o, err))
        return INF_ERR_NOMEM;
    o->segs[o->n++] = (tmpl_seg){kind, o->len, 0};
    return INF_OK;
}

/* ----------------------------------------------------------- whitespace */

/* Python's str.isspace for one code point. */
static int tmpl__is_space(unsigned cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
           cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* str.strip() on the text appended since mark (all of it in the last
 * segment): drops leading and trailing whitespace characters. */
static void tmpl__strip_since(tmpl_out *o, size_t mark)
{
    if (mark == o->len)
        return;
    const unsigned char *s = (const unsigned char *)o->text;
    size_t b = mark, e = o->len;
    while (b < e) {
        unsigned cp;
        size_t l = inf_utf8_decode(s + b, e - b, &cp);
        if (!tmpl__is_space(cp))
            break;
        b += l;
    }
    while (e > b) {
        size_t st = e - 1;
        while (st > b && (s[st] & 0xC0) == 0x80 && e - st < 4)
            st--;
        unsigned cp;
        if (inf_utf8_decode(s + st, e - st, &cp) != e - st || !tmpl__is_space(cp))
            break;
        e = st;
    }
    memmove(o->text + mark, o->text + b, e - b);
    size_t cut = (o->len - mark) - (e - b);
    o->len -= cut;
    o->text[o->len] = 0;
    tmpl_seg *last = &o->segs[o->n - 1];
    last->len -= cut;
    if (last->len == 0)
        o->n--;
}

/* ------------------------------------------------------------ renderers */

static int tmpl__is(const char *role, const char *name)
{
    return strcmp(role, name) == 0;
}

static const char *tmpl__content(const tmpl_msg *m)
{
    return m->content ? m->content : "";
}

/* meta-llama/Llama-2-7b-chat-hf:
 * "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}
 *  {% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}
 *  {% set system_message = false %}{% endif %}{% for message in loop_messages %}
 *  {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation
 *  roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0
 *  and system_message != false %}{% set content = '<<SYS>>\\n' + system_message +
 *  '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}
 *  {% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() +
 *  ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' +
 *  eos_token }}{% endif %}{% endfor %}"
 * (one line in the file). A non-user message at an odd place that is not
 * the assistant's (a second system message) renders nothing, as there. */
static int tmpl__llama2(const tmpl_msg *m, int n, tmpl_out *o, inf_err *err)
{
    int first = tmpl__is(m[0].role, "system");
    int rc = INF_OK;
    for (int i = first; i < n && !rc; i++) {
        int idx = i - first, user = tmpl__is(m[i].role, "user");
        if (user != (idx % 2 == 0))
            return inf_fail(err, INF_ERR_INVALID,
                            "Conversation roles must alternate user/assistant/user/assistant/... "
                            "(llama-2 chat template, after an optional first system message): "
                            "message %d has role \"%s\"", i, m[i].role);
        if (user) {
            size_t mark;
            if ((rc = tmpl__marker(o, TMPL_SEG_BOS, err)) || (rc = tmpl__str(o, "[INST] ", err)))
                break;
            mark = o->len;
            if (idx == 0 && first &&
                ((rc = tmpl__str(o, "<<SYS>>\n", err)) ||
                 (rc = tmpl__str(o, tmpl__content(&m[0]), err)) ||
                 (rc = tmpl__str(o, "\n<</SYS>>\n\n", err))))
                break;
            if ((rc = tmpl__str(o, tmpl__content(&m[i]), err)))
                break;
            tmpl__strip_since(o, mark);
            rc = tmpl__str(o, " [/INST]", err);
        } else if (tmpl__is(m[i].role, "assistant")) {
            size_t mark;
            if ((rc = tmpl__str(o, " ", err)))
                break;
            mark = o->len;
            if ((rc = tmpl__str(o, tmpl__content(&m[i]), err)))
                break;
            tmpl__strip_since(o, mark);
            if (!(rc = tmpl__str(o, " ", err)))
                rc = tmpl__marker(o, TMPL_SEG_EOS, err);
        }
    }
    return rc;
}

/* mistralai/Mistral-7B-Instruct-v0.2 (Mistral's updated "v1" template; the
 * same in v0.1):
 * "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}
 *  \n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}
 *  \n{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if
 *  (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n        {{- raise_exception('After the
 *  optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
 *  \n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n        {%- if loop.first and
 *  system_message is defined %}\n            {{- ' [INST] ' + system_message + '\\n\\n' +
 *  message['content'] + ' [/INST]' }}\n        {%- else %}\n            {{- ' [INST] ' +
 *  message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif message['role'] ==
 *  'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n        {{-
 *  raise_exception('Only user and assistant roles are supported, with the exception of an initial
 *  optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n"
 * Its older template (no system message, "[INST] " with no space before
 * it, no space before the answer) is recognised as this one: Mistral
 * replaced it with this, which matches how mistral-common tokenizes. */
static int tmpl__mistral(const tmpl_msg *m, int n, tmpl_out *o, inf_err *err)
{
    int first = tmpl__is(m[0].role, "system");
    int rc = tmpl__marker(o, TMPL_SEG_BOS, err);
    for (int i = first; i < n && !rc; i++) {
        int idx = i - first, user = tmpl__is(m[i].role, "user");
        if (user != (idx % 2 == 0))
            return inf_fail(err, INF_ERR_INVALID,
                            "After the optional system message, conversation roles must alternate "
                            "user/assistant/user/assistant/... (mistral chat template): message %d "
                            "has role \"%s\"", i, m[i].role);
        if (user) {
            if ((rc = tmpl__str(o, " [INST] ", err)))
                break;
            if (idx == 0 && first &&
                ((rc = tmpl__str(o, tmpl__content(&m[0]), err)) || (rc = tmpl__str(o, "\n\n", err))))
                break;
            if (!(rc = tmpl__str(o, tmpl__content(&m[i]), err)))
                rc = tmpl__str(o, " [/INST]", err);
        } else if (tmpl__is(m[i].role, "assistant")) {
            if (!(rc = tmpl__str(o, " ", err)) && !(rc = tmpl__str(o, tmpl__content(&m[i]), err)))
                rc = tmpl__marker(o, TMPL_SEG_EOS, err);
        } else {
            return inf_fail(err, INF_ERR_INVALID,
                            "Only user and assistant roles are supported, with the exception of an "
                            "initial optional system message! (mistral chat template): message %d "
                            "has role \"%s\"", i, m[i].role);
        }
    }
    return rc;
}

/* teknium/OpenHermes-2.5-Mistral-7B:
 * "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] +
 *  '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}
 *  {% endif %}" */
static int tmpl__chatml(const tmpl_msg *m, int n, int gen, tmpl_out *o, inf_err *err)
{
    int rc = INF_OK;
    for (int i = 0; i < n && !rc; i++)
        if (!(rc = tmpl__str(o, "<|im_start|>", err)) && !(rc = tmpl__str(o, m[i].role, err)) &&
            !(rc = tmpl__str(o, "\n", err)) && !(rc = tmpl__str(o, tmpl__content(&m[i]), err)))
            rc = tmpl__str(o, "<|im_end|>\n", err);
    if (!rc && gen)
        rc = tmpl__str(o, "<|im_start|>assistant\n", err);
    return rc;
}

/* HuggingFaceH4/zephyr-7b-beta (and TinyLlama/TinyLlama-1.1B-Chat-v1.0):
 * "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' +
 *  message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' +
 *  message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{
 *  '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and
 *  add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
 * Other roles render nothing. */
static int tmpl__zephyr(const tmpl_msg *m, int n, int gen, tmpl_out *o, inf_err *err)
{
    int rc = INF_OK;
    for (int i = 0; i < n && !rc; i++) {
        const char *head = tmpl__is(m[i].role, "user")        ? "<|user|>\n"
                           : tmpl__is(m[i].role, "system")    ? "<|system|>\n"
                           : tmpl__is(m[i].role, "assistant") ? "<|assistant|>\n"
                                                              : NULL;
        if (head && !(rc = tmpl__str(o, head, err)) &&
            !(rc = tmpl__str(o, tmpl__content(&m[i]), err)) &&
            !(rc = tmpl__marker(o, TMPL_SEG_EOS, err)))
            rc = tmpl__str(o, "\n", err);
        if (!rc && i == n - 1 && gen)
            rc = tmpl__str(o, "<|assistant|>\n", err);
    }
    return rc;
}

/* meta-llama/Meta-Llama-3-8B-Instruct:
 * "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content =
 *  '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim +
 *  '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}
 *  {{ content }}{% endfor %}{% if add_generation_prompt %}{{
 *  '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}" */
static int tmpl__llama3(const tmpl_msg *m, int n, int gen, tmpl_out *o, inf_err *err)
{
    int rc = INF_OK;
    for (int i = 0; i < n && !rc; i++) {
        size_t mark;
        if ((i == 0 && (rc = tmpl__marker(o, TMPL_SEG_BOS, err))) ||
            (rc = tmpl__str(o, "<|start_header_id|>", err)) || (rc = tmpl__str(o, m[i].role, err)) ||
            (rc = tmpl__str(o, "<|end_header_id|>\n\n", err)))
            break;
        mark = o->len;
        if ((rc = tmpl__str(o, tmpl__content(&m[i]), err)))
            break;
        tmpl__strip_since(o, mark);
        rc = tmpl__str(o, "<|eot_id|>", err);
    }
    if (!rc && gen)
        rc = tmpl__str(o, "<|start_header_id|>assistant<|end_header_id|>\n\n", err);
    return rc;
}

/* The default: BOS (when the tokenizer adds one to prompts), then the
 * contents joined by "\n". */
static int tmpl__plain(const tmpl *t, const tmpl_msg *m, int n, tmpl_out *o, inf_err *err)
{
    int rc = t->add_bos ? tmpl__marker(o, TMPL_SEG_BOS, err) : INF_OK;
    for (int i = 0; i < n && !rc; i++)
        if (!(i > 0 && (rc = tmpl__str(o, "\n", err))))
            rc = tmpl__str(o, tmpl__content(&m[i]), err);
    return rc;
}

static int tmpl__jinja_msgs(const tmpl *t, const tmpl_msg *msgs, int n, int gen, tmpl_out *out,
                            inf_err *err);

int tmpl_render(const tmpl *t, const tmpl_msg *msgs, int n, int add_generation_prompt,
                tmpl_out *out, inf_err *err)
{
    if (!t || !out || n < 0 || (n > 0 && !msgs))
        return inf_fail(err, INF_ERR_INVALID, "tmpl_render: bad argument");
    out->n = 0;
    out->len = 0;
    if (tmpl__text_room(out, 0, err))
        return INF_ERR_NOMEM;
    out->text[0] = 0;
    if (n == 0)
        return inf_fail(err, INF_ERR_INVALID, "chat template: messages must not be empty");
    for (int i = 0; i < n; i++)
        if (!msgs[i].role)
            return inf_fail(err, INF_ERR_INVALID, "chat template: message %d has no role", i);
    int gen = add_generation_prompt != 0, rc;
    if (t->kind == TMPL_JINJA)
        return tmpl__jinja_msgs(t, msgs, n, gen, out, err);
    switch (t->kind) {
    case TMPL_LLAMA2: rc = tmpl__llama2(msgs, n, out, err); break;
    case TMPL_MISTRAL: rc = tmpl__mistral(msgs, n, out, err); break;
    case TMPL_CHATML: rc = tmpl__chatml(msgs, n, gen, out, err); break;
    case TMPL_ZEPHYR: rc = tmpl__zephyr(msgs, n, gen, out, err); break;
    case TMPL_LLAMA3: rc = tmpl__llama3(msgs, n, gen, out, err); break;
    case TMPL_PLAIN: rc = tmpl__plain(t, msgs, n, out, err); break;
    default: rc = inf_fail(err, INF_ERR_INVALID, "tmpl_render: bad template kind");
    }
    if (rc) {
        out->n = 0;
        out->len = 0;
        out->text[0] = 0;
    }
    return rc;
}

/* --------------------------------------------------------------- Jinja */

/* Appends text[0:n] to out, the model's bos/eos token strings as markers. */
static int tmpl__split(const tmpl *t, const char *text, size_t n, tmpl_out *o, inf_err *err)
{
    size_t nb = t->split_bos ? strlen(t->bos_text) : 0, ne = t->split_eos ? strlen(t->eos_text) : 0;
    size_t run = 0, i = 0;
    while (i < n) {
        /* the next place either token could start */
        const char *pb = nb ? memchr(text + i, t->bos_text[0], n - i) : NULL;
        const char *pe = ne ? memchr(text + i, t->eos_text[0], n - i) : NULL;
        const char *p = pb && (!pe || pb < pe) ? pb : pe;
        if (!p)
            break;
        i = (size_t)(p - text);
        tmpl_seg_kind k = TMPL_SEG_TEXT;
        size_t l = 0;
        if (nb && n - i >= nb && memcmp(text + i, t->bos_text, nb) == 0)
            k = TMPL_SEG_BOS, l = nb;
        else if (ne && n - i >= ne && memcmp(text + i, t->eos_text, ne) == 0)
            k = TMPL_SEG_EOS, l = ne;
        if (k == TMPL_SEG_TEXT) {
            i++;
            continue;
        }
        if (tmpl__text(o, text + run, i - run, err) || tmpl__marker(o, k, err))
            return INF_ERR_NOMEM;
        i += l;
        run = i;
    }
    return tmpl__text(o, text + run, n - run, err);
}

static void tmpl__clear(tmpl_out *out)
{
    out->n = 0;
    out->len = 0;
    if (out->text)
        out->text[0] = 0;
}

int tmpl_render_chat(const tmpl *t, const tmpl_chat *chat, tmpl_out *out, inf_err *err)
{
    if (!t || !chat || !out)
        return inf_fail(err, INF_ERR_INVALID, "tmpl_render_chat: NULL argument");
    tmpl__clear(out);
    if (tmpl__text_room(out, 0, err))
        return INF_ERR_NOMEM;
    out->text[0] = 0;
    if (t->kind == TMPL_JINJA) {
        char *text;
        size_t len;
        int rc = tmpl_jx_render(t->jx, chat, &text, &len, err);
        if (rc == INF_OK)
            rc = tmpl__split(t, text, len, out, err);
        free(text);
        if (rc)
            tmpl__clear(out);
        return rc;
    }
    /* a built-in: roles and contents (text parts joined by "\n") */
    if (chat->continue_final_message)
        return inf_fail(err, INF_ERR_INVALID,
                        "continue_final_message needs a Jinja chat template (the %s template is "
                        "built in)", TMPL_KINDS[t->kind].name);
    cJSON *msgs = chat->messages_json ? cJSON_Parse(chat->messages_json) : NULL;
    if (!cJSON_IsArray(msgs)) {
        cJSON_Delete(msgs);
        return inf_fail(err, INF_ERR_INVALID, "chat template: messages must be a list");
    }
    int n = cJSON_GetArraySize(msgs), rc = INF_OK, i = 0;
    tmpl_msg *m = calloc((size_t)(n ? n : 1), sizeof *m);
    char **owned = calloc((size_t)(n ? n : 1), sizeof *owned);
    const cJSON *it;
    if (!m || !owned)
        rc = tmpl__nomem(err);
    cJSON_ArrayForEach(it, msgs) {
        if (rc)
            break;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        m[i].role = cJSON_IsString(role) ? role->valuestring : NULL;
        if (cJSON_IsString(c)) {
            m[i].content = c->valuestring;
        } else if (cJSON_IsArray(c)) {
            inf_buf b = {0};
            const cJSON *p;
            int first = 1;
            inf_buf_put(&b, "", 0);
            cJSON_ArrayForEach(p, c) {
                const cJSON *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
                if (!cJSON_IsString(tx))
                    continue;
                if (!first)
                    inf_buf_put(&b, "\n", 1);
                first = 0;
                inf_buf_put(&b, tx->valuestring, strlen(tx->valuestring));
            }
            if (b.oom)
                rc = tmpl__nomem(err);
            m[i].content = owned[i] = b.p;
        }
        i++;
    }
    if (!rc)
        rc = tmpl_render(t, m, n, chat->add_generation_prompt, out, err);
    for (int k = 0; owned && k < n; k++)
        free(owned[k]);
    free(owned);
    free(m);
    cJSON_Delete(msgs);
    return rc;
}

/* tmpl_render's messages through a Jinja template. */
static int tmpl__jinja_msgs(const tmpl *t, const tmpl_msg *msgs, int n, int gen, tmpl_out *out,
                            inf_err *err)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, m);
        cJSON_AddStringToObject(m, "role", msgs[i].role);
        cJSON_AddStringToObject(m, "content", msgs[i].content ? msgs[i].content : "");
    }
    char *json = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (!json)
        return tmpl__nomem(err);
    tmpl_chat chat = {.messages_json = json, .add_generation_prompt = gen};
    int rc = tmpl_render_chat(t, &chat, out, err);
    free(json);
    return rc;
}

/* ----------------------------------------------------------- detection */

static int tmpl__has(const char *s, const char *marker)
{
    return strstr(s, marker) != NULL;
}

tmpl_kind tmpl_detect(const char *src)
{
    if (!src)
        return TMPL_NONE;
    if (tmpl__has(src, "<|start_header_id|>") && tmpl__has(src, "<|end_header_id|>") &&
        tmpl__has(src, "<|eot_id|>"))
        /* Llama 3.1 and later open every prompt with a dated system turn. */
        return tmpl__has(src, "Cutting Knowledge") ? TMPL_NONE : TMPL_LLAMA3;
    if (tmpl__has(src, "<|im_start|>") && tmpl__has(src, "<|im_end|>"))
        /* Qwen's variants inject a default system prompt or tool text. */
        return tmpl__has(src, "You are") || tmpl__has(src, "tools") ? TMPL_NONE : TMPL_CHATML;
    if (tmpl__has(src, "<|user|>") && tmpl__has(src, "<|assistant|>"))
        /* Phi-3 ends turns with <|end|>, not the EOS token. */
        return tmpl__has(src, "eos_token") && !tmpl__has(src, "<|end|>") ? TMPL_ZEPHYR : TMPL_NONE;
    if (tmpl__has(src, "[INST]") && tmpl__has(src, " [/INST]")) {
        if (tmpl__has(src, "<<SYS>>"))
            return TMPL_LLAMA2;
        /* Mistral v0.3 and later: control-token spacing and tool blocks. */
        return tmpl__has(src, "[AVAILABLE_TOOLS]") || tmpl__has(src, "[TOOL_CALLS]") ? TMPL_NONE
                                                                                    : TMPL_MISTRAL;
    }
    return TMPL_NONE;
}

const char *tmpl_kind_name(tmpl_kind k)
{
    return (int)k >= 0 && (int)k < TMPL_N_KINDS ? TMPL_KINDS[k].name : NULL;
}

/* ------------------------------------------------------------ lifecycle */

/* A new tmpl; bos/eos/source NULL take the kind's defaults / none. */
static int tmpl__new(tmpl_kind kind, tmpl_origin origin, const char *bos, const char *eos,
                     int add_bos, const char *source, tmpl **out, inf_err *err)
{
    tmpl *t = calloc(1, sizeof *t);
    if (!t)
        return tmpl__nomem(err);
    t->kind = kind;
    t->origin = origin;
    t->add_bos = add_bos;
    t->bos_text = strdup(bos ? bos : TMPL_KINDS[kind].bos);
    t->eos_text = strdup(eos ? eos : TMPL_KINDS[kind].eos);
    t->source = source ? strdup(source) : NULL;
    if (!t->bos_text || !t->eos_text || (source && !t->source)) {
        tmpl_destroy(t);
        return tmpl__nomem(err);
    }
    *out = t;
    return INF_OK;
}

static tmpl_kind tmpl__lookup(const char *name)
{
    for (int k = 0; k < TMPL_JINJA; k++) /* the built-ins */
        if (strcmp(name, TMPL_KINDS[k].name) == 0)
            return (tmpl_kind)k;
    return TMPL_NONE;
}

int tmpl_by_name(const char *name, tmpl **out, inf_err *err)
{
    if (!name || !out)
        return inf_fail(err, INF_ERR_INVALID, "tmpl_by_name: NULL argument");
    *out = NULL;
    tmpl_kind k = tmpl__lookup(name);
    if (k == TMPL_NONE)
        return inf_fail(err, INF_ERR_INVALID, "unknown chat template \"%s\"; known: " TMPL_NAMES,
                        name);
    return tmpl__new(k, TMPL_FROM_NAME, NULL, NULL, 1, NULL, out, err);
}

void tmpl_destroy(tmpl *t)
{
    if (!t)
        return;
    free(t->bos_text);
    free(t->eos_text);
    free(t->source);
    tmpl_jx_destroy(t->jx);
    free(t);
}

tmpl_kind tmpl_get_kind(const tmpl *t)
{
    return t->kind;
}

const char *tmpl_name(const tmpl *t)
{
    return TMPL_KINDS[t->kind].name;
}

tmpl_origin tmpl_get_origin(const tmpl *t)
{
    return t->origin;
}

const char *tmpl_describe(const tmpl *t)
{
    return TMPL_KINDS[t->kind].describe;
}

const char *tmpl_source(const tmpl *t)
{
    return t->source;
}

/* -------------------------------------------------------------- config */

/* bos_token / eos_token: a string, {"content": string} (AddedToken), null or
 * absent (*out = NULL). Points into root. */
static int tmpl__token(const cJSON *root, const char *key, const char **out, const char *path,
                       inf_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v))
        return INF_OK;
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v))
        return inf_fail(err, INF_ERR_FORMAT,
                        "%s: %s must be a string or an object with a \"content\" string", path, key);
    *out = v->valuestring;
    return INF_OK;
}

/* The chat_template: a string, or the "default" (and "tool_use") entries
 * of a list of {"name", "template"}; *src = NULL when absent or null,
 * *no_default set when a list has no "default" entry. Points into root. */
static int tmpl__template(const cJSON *root, const char **src, const char **tools_src,
                          int *no_default, const char *path, inf_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    *src = *tools_src = NULL;
    *no_default = 0;
    if (!v || cJSON_IsNull(v))
        return INF_OK;
    if (cJSON_IsString(v)) {
        *src = v->valuestring;
        return INF_OK;
    }
    if (!cJSON_IsArray(v))
        return inf_fail(err, INF_ERR_FORMAT,
                        "%s: chat_template must be a string or a list of {\"name\", \"template\"}",
                        path);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(it, "template");
        if (!cJSON_IsObject(it) || !cJSON_IsString(name) || !cJSON_IsString(text))
            return inf_fail(err, INF_ERR_FORMAT,
                            "%s: each chat_template entry must be {\"name\": string, "
                            "\"template\": string}", path);
        if (strcmp(name->valuestring, "default") == 0 && !*src)
            *src = text->valuestring;
        if (strcmp(name->valuestring, "tool_use") == 0 && !*tools_src)
            *tools_src = text->valuestring;
    }
    *no_default = *src == NULL;
    return INF_OK;
}

/* add_bos_token: true/false, null or absent (keeps *v). */
static int tmpl__add_bos(const cJSON *root, int *v, const char *path, inf_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "add_bos_token");
    if (!it || cJSON_IsNull(it))
        return INF_OK;
    if (!cJSON_IsBool(it))
        return inf_fail(err, INF_ERR_FORMAT, "%s: add_bos_token must be true or false", path);
    *v = cJSON_IsTrue(it);
    return INF_OK;
}

static const char *tmpl__base(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static void tmpl__note(char *note, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void tmpl__note(char *note, size_t cap, const char *fmt, ...)
{
    if (!note || !cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note, cap, fmt, ap);
    va_end(ap);
}

#define TMPL_PLAIN_NOTE "using the plain default (BOS, then the messages' contents joined by \"\\n\")"

/* A Jinja tmpl from src (and tools_src), the model's tokens from root. */
static int tmpl__jinja(const char *src, const char *tools_src, const cJSON *root,
                       const char *from, tmpl_origin origin, tmpl **out, inf_err *err)
{
    tmpl_jx *jx;
    int rc = tmpl_jx_create(src, tools_src, root, from, &jx, err);
    if (rc)
        return rc;
    const char *bos = tmpl_jx_token(jx, "bos_token"), *eos = tmpl_jx_token(jx, "eos_token");
    if ((rc = tmpl__new(TMPL_JINJA, origin, bos, eos, 0, src, out, err))) {
        tmpl_jx_destroy(jx);
        return rc;
    }
    (*out)->jx = jx;
    (*out)->split_bos = bos && bos[0];
    (*out)->split_eos = eos && eos[0];
    return INF_OK;
}

/* --chat-template that is not a built-in's name: a file, or the template
 * itself when it holds a tag. *src is malloc'd; *is_file says which. */
static int tmpl__override_src(const char *override, char **src, int *is_file, inf_err *err)
{
    struct stat st;
    *src = NULL;
    *is_file = stat(override, &st) == 0 && S_ISREG(st.st_mode);
    if (*is_file)
        return inf_read_file(override, 16u << 20, src, NULL, NULL, err);
    if (strstr(override, "{{") || strstr(override, "{%")) {
        *src = strdup(override);
        return *src ? INF_OK : tmpl__nomem(err);
    }
    return inf_fail(err, INF_ERR_INVALID,
                    "--chat-template \"%.200s\" is not a built-in template (" TMPL_NAMES "), "
                    "a readable file or a Jinja template", override);
}

int tmpl_from_config(const char *path, const char *override, tmpl **out, char *note,
                     size_t note_len, inf_err *err)
{
    if (!path || !out)
        return inf_fail(err, INF_ERR_INVALID, "tmpl_from_config: NULL argument");
    *out = NULL;
    if (note && note_len)
        note[0] = 0;
    tmpl_kind forced = override ? tmpl__lookup(override) : TMPL_NONE;
    char *ov_src = NULL;
    int ov_file = 0;
    if (override && forced == TMPL_NONE &&
        tmpl__override_src(override, &ov_src, &ov_file, err))
        return err ? err->code : INF_ERR_INVALID;

    struct stat st;
    if (stat(path, &st) != 0) {
        free(ov_src);
        return inf_fail(err, INF_ERR_IO, "chat template: cannot open %s: %s", path,
                        strerror(errno));
    }
    int is_dir = S_ISDIR(st.st_mode);
    char *cfg_path = is_dir ? inf_path_join(path, "tokenizer_config.json") : strdup(path);
    char *jinja_path = inf_path_join(path, "chat_template.jinja");
    char *json = NULL, *jinja = NULL;
    cJSON *root = NULL;
    int rc = INF_ERR_NOMEM, missing = 0;
    if (!cfg_path || !jinja_path) {
        tmpl__nomem(err);
        goto done;
    }

    const char *bos = NULL, *eos = NULL, *src = NULL, *tools_src = NULL;
    const char *from = tmpl__base(cfg_path);
    int add_bos = 1, no_default = 0;
    if (!is_dir && gguf_sniff(path)) { /* a GGUF file: its metadata says it */
        if ((rc = tok_gguf_config(path, &root, err)))
            goto done;
        from = "the GGUF file's metadata";
    } else {
        rc = inf_read_file(cfg_path, 0, &json, NULL, &missing, err);
        if (rc && !missing)
            goto done;
    }
    if (json && !(root = cJSON_Parse(json))) {
        rc = inf_fail(err, INF_ERR_FORMAT, "chat template: %s is not a JSON object", cfg_path);
        goto done;
    }
    if (root) {
        if (!cJSON_IsObject(root)) {
            rc = inf_fail(err, INF_ERR_FORMAT, "chat template: %s is not a JSON object", cfg_path);
            goto done;
        }
        if ((rc = tmpl__token(root, "bos_token", &bos, cfg_path, err)) ||
            (rc = tmpl__token(root, "eos_token", &eos, cfg_path, err)) ||
            (rc = tmpl__add_bos(root, &add_bos, cfg_path, err)) ||
            (rc = tmpl__template(root, &src, &tools_src, &no_default, cfg_path, err)))
            goto done;
    }
    if (is_dir && !src && !no_default) {
        rc = inf_read_file(jinja_path, 16u << 20, &jinja, NULL, &missing, err);
        if (rc && !missing)
            goto done;
        if (jinja) {
            src = jinja;
            from = tmpl__base(jinja_path);
        }
    }

    if (forced != TMPL_NONE) {
        tmpl__note(note, note_len, "chat template: %s (built in, chosen by name)",
                   TMPL_KINDS[forced].name);
        rc = tmpl__new(forced, TMPL_FROM_NAME, bos, eos, add_bos, NULL, out, err);
    } else if (ov_src) {
        rc = tmpl__jinja(ov_src, NULL, root, ov_file ? override : "--chat-template",
                         TMPL_FROM_OVERRIDE, out, err);
        tmpl__note(note, note_len, "chat template: Jinja from --chat-template %s",
                   ov_file ? override : "(inline)");
    } else if (src) {
        rc = tmpl__jinja(src, tools_src, root, from, TMPL_FROM_MODEL, out, err);
        tmpl__note(note, note_len, "chat template: the model's own (Jinja, from %s%s)", from,
                   tools_src ? "; its \"tool_use\" template for requests with tools" : "");
    } else if (no_default) {
        tmpl__note(note, note_len, "chat_template list in %s has no \"default\" entry; "
                   TMPL_PLAIN_NOTE, from);
        rc = tmpl__new(TMPL_PLAIN, TMPL_FROM_FALLBACK, bos, eos, add_bos, NULL, out, err);
    } else {
        tmpl__note(note, note_len, "no chat template in %s; " TMPL_PLAIN_NOTE,
                   root ? from : "the model (no tokenizer_config.json)");
        rc = tmpl__new(TMPL_PLAIN, TMPL_FROM_DEFAULT, bos, eos, add_bos, NULL, out, err);
    }
done:
    cJSON_Delete(root);
    free(json);
    free(jinja);
    free(cfg_path);
    free(jinja_path);
    free(ov_src);
    return rc;
}

/* -------------------------------------------------------------- output */

int tmpl_out_string(const tmpl *t, const tmpl_out *o, char **s, size_t *len, inf_err *err)
{
    if (!t || !o || !s)
        return inf_fail(err, INF_ERR_INVALID, "tmpl_out_string: NULL argument");
    size_t nb = strlen(t->bos_text), ne = strlen(t->eos_text), total = 0;
    for (int i = 0; i < o->n; i++)
        total += o->segs[i].kind == TMPL_SEG_TEXT ? o->segs[i].len
                 : o->segs[i].kind == TMPL_SEG_BOS ? nb : ne;
    char *buf = malloc(total + 1), *p = buf;
    if (!buf)
        return tmpl__nomem(err);
    for (int i = 0; i < o->n; i++) {
        const tmpl_seg *g = &o->segs[i];
        const char *src = g->kind == TMPL_SEG_TEXT ? o->text + g->off
                          : g->kind == TMPL_SEG_BOS ? t->bos_text : t->eos_text;
        size_t n = g->kind == TMPL_SEG_TEXT ? g->len : g->kind == TMPL_SEG_BOS ? nb : ne;
        memcpy(p, src, n);
        p += n;
    }
    *p = 0;
    *s = buf;
    if (len)
        *len = total;
    return INF_OK;
}

/* Appends ids[0:n] to the growing *all. */
static int tmpl__append_ids(int32_t **all, int *n_all, int *cap, const int32_t *ids, int n,
                            inf_err *err)
{
    if (*n_all + n > *cap) {
        int c = *cap ? *cap : 64;
        while (c < *n_all + n)
            c *= 2;
        int32_t *p = realloc(*all, (size_t)c * sizeof *p);
        if (!p)
            return tmpl__nomem(err);
        *all = p;
        *cap = c;
    }
    memcpy(*all + *n_all, ids, (size_t)n * sizeof *ids);
    *n_all += n;
    return INF_OK;
}

int tmpl_tokens(const tmpl *t, const tmpl_out *o, const tok *tk, int32_t **ids, int *n,
                inf_err *err)
{
    if (!t || !o || !tk || !ids || !n)
        return inf_fail(err, INF_ERR_INVALID, "tmpl_tokens: NULL argument");
    int32_t *all = NULL;
    int n_all = 0, cap = 0, rc = INF_OK;
    for (int i = 0; i < o->n && !rc; i++) {
        const tmpl_seg *g = &o->segs[i];
        if (g->kind != TMPL_SEG_TEXT) {
            int32_t id = g->kind == TMPL_SEG_BOS ? tok_bos_id(tk) : tok_eos_id(tk);
            if (id >= 0)
                rc = tmpl__append_ids(&all, &n_all, &cap, &id, 1, err);
            continue;
        }
        /* Text follows a marker unless it is first (adjacent text is one
         * segment); the tokenizer knows what that means for its spaces.
         * plain's only marker is the BOS a completion prompt gets, which is
         * not text the prompt continues (its tokens equal the completion's). */
        int32_t *part = NULL;
        int n_part = 0;
        if (g->len == 0)
            continue;
        unsigned fl = i > 0 && t->kind != TMPL_PLAIN ? TOK_AFTER_SPECIAL : 0;
        rc = tok_encode_ex(tk, o->text + g->off, g->len, fl, &part, &n_part, err);
        if (!rc)
            rc = tmpl__append_ids(&all, &n_all, &cap, part, n_part, err);
        free(part);
    }
    if (rc) {
        free(all);
        return rc;
    }
    *ids = all;
    *n = n_all;
    return INF_OK;
}
