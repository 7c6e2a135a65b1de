/* tmpl_: chat templates: turn a chat's messages into a prompt.
 *
 * A model's own template (chat_template in tokenizer_config.json, a string
 * or a list of named ones, or chat_template.jinja beside it), or one given
 * with --chat-template (a file or the template itself), is rendered by the
 * Jinja interpreter (jinja.h) exactly as vLLM renders it through Hugging
 * Face's apply_chat_template: kind TMPL_JINJA. The common formats are also
 * built in (by name with --chat-template, and plain for a model without a
 * template), each rendering exactly what the Jinja
 * template in the reference model's tokenizer_config.json renders (tmpl.c
 * quotes each one):
 *   llama-2  meta-llama/Llama-2-7b-chat-hf   <s>[INST] <<SYS>>\n..\n<</SYS>>\n\n.. [/INST] .. </s>
 *   mistral  mistralai/Mistral-7B-Instruct-v0.2 (Mistral's updated "v1"
 *            template)                       <s> [INST] sys\n\nuser [/INST] answer</s>
 *   chatml   teknium/OpenHermes-2.5-Mistral-7B <|im_start|>role\n..<|im_end|>\n
 *   zephyr   HuggingFaceH4/zephyr-7b-beta, TinyLlama-1.1B-Chat
 *                                            <|user|>\n..</s>\n<|assistant|>\n
 *   llama-3  meta-llama/Meta-Llama-3-8B-Instruct
 *                                            <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n..<|eot_id|>
 *   plain    the default for a model without a chat template: BOS, then
 *            the messages' contents joined by "\n" (roles dropped, no
 *            generation prompt), so one user message "X" gives the same
 *            tokens as the completion prompt "X".
 * A tmpl is opaque and carries its kind, so a Jinja-backed kind can later
 * slot in behind tmpl_render.
 *
 * A rendered prompt is a list of segments, text and special-token markers,
 * not one string: SentencePiece's Encode does not turn the text "<s>" into
 * the BOS id, so BOS/EOS stay markers until tmpl_tokens. Markers such as
 * <|im_start|> stay text (a tokenizer that has them as user-defined pieces
 * matches them in text). */
#ifndef INFERD_TMPL_H
#define INFERD_TMPL_H

#include "common.h"
#include "tok.h"

typedef struct tmpl tmpl;

typedef enum tmpl_kind {
    TMPL_NONE = -1, /* tmpl_detect: not one we know */
    TMPL_PLAIN = 0,
    TMPL_LLAMA2,
    TMPL_MISTRAL,
    TMPL_CHATML,
    TMPL_ZEPHYR,
    TMPL_LLAMA3,
    TMPL_JINJA,     /* a Jinja template: the model's or --chat-template's */
} tmpl_kind;

/* Where a tmpl_from_config template came from (for the caller's log line). */
typedef enum tmpl_origin {
    TMPL_FROM_NAME,     /* asked for by name (--chat-template)               */
    TMPL_FROM_MODEL,    /* recognised from the model's chat_template         */
    TMPL_FROM_DEFAULT,  /* the model has no chat template: plain             */
    TMPL_FROM_FALLBACK, /* a chat_template list without "default": plain
                           (worth a warning)                               */
    TMPL_FROM_OVERRIDE, /* --chat-template: a Jinja file or inline template */
} tmpl_origin;

/* One chat message. Roles are matched exactly ("system", "user",
 * "assistant"); chatml and llama-3 render any role as given. A NULL content
 * is "". */
typedef struct tmpl_msg {
    const char *role;
    const char *content;
} tmpl_msg;

typedef enum tmpl_seg_kind {
    TMPL_SEG_TEXT,
    TMPL_SEG_BOS,
    TMPL_SEG_EOS,
} tmpl_seg_kind;

typedef struct tmpl_seg {
    tmpl_seg_kind kind;
    size_t off, len; /* TEXT: the bytes text[off : off + len] of the tmpl_out */
} tmpl_seg;

/* A chat as the client sent it, for a Jinja template: the JSON texts of
 * the request's fields (NULL when absent). messages is the list of message
 * objects as sent (roles, content strings or lists of parts, tool_calls,
 * tool_call_id, name, reasoning_content); kwargs is chat_template_kwargs
 * (extra template variables, e.g. {"enable_thinking": false}). A built-in
 * template uses only the roles and the contents (parts joined by "\n"). */
typedef struct tmpl_chat {
    const char *messages_json;
    const char *tools_json;
    const char *documents_json;
    const char *kwargs_json;
    int add_generation_prompt;
    int continue_final_message; /* render without a generation prompt and cut
                                   after the final message's content (HF)  */
} tmpl_chat;

/* A rendered prompt: segments in order; adjacent text is one segment, and
 * no text segment is empty. Zero-initialize (or tmpl_out_init) before first
 * use; tmpl_render reuses its storage, and after it (even on an error) text
 * is a NUL-terminated string. */
typedef struct tmpl_out {
    tmpl_seg *segs;   /* [n]                                               */
    int n, cap;
    char *text;       /* [len + 1] every text segment's bytes, NUL-ended   */
    size_t len, text_cap;
} tmpl_out;

void tmpl_out_init(tmpl_out *o);
void tmpl_out_free(tmpl_out *o); /* frees the storage; o is empty again */

/* Which built-in a model's chat_template (the Jinja source) is, by the
 * markers that characterise it; TMPL_NONE when none fits. Conservative:
 * variants that render differently (Llama 3.1's dated system header, Mistral
 * v0.3's tool blocks, Phi-3's <|end|>, ChatML with a default system prompt
 * or tools) are not recognised. Mistral's older template (no system
 * message) is recognised as mistral. */
tmpl_kind tmpl_detect(const char *chat_template);

/* "llama-2", "mistral", "chatml", "zephyr", "llama-3", "plain", "jinja";
 * NULL for TMPL_NONE or out of range. */
const char *tmpl_kind_name(tmpl_kind k);

/* A built-in by name, with its reference model's special tokens ("<s>",
 * "</s>"; llama-3: "<|begin_of_text|>", "<|end_of_text|>"). An unknown name
 * is INF_ERR_INVALID with a message listing the known ones. */
int tmpl_by_name(const char *name, tmpl **out, inf_err *err);

/* The template for a model. path is the model directory or its
 * tokenizer_config.json. Reads chat_template (a string, or a list of
 * {"name", "template"} objects: "default" is used, and "tool_use" when a
 * request has tools; in a directory whose tokenizer_config.json has none,
 * chat_template.jinja is read) and the special tokens (bos_token /
 * eos_token and the rest: strings or {"content": ...}), add_bos_token (for
 * plain). The model's template is parsed here: a syntax error is
 * INF_ERR_FORMAT naming the file and the line. override (may be NULL) is
 * --chat-template as vLLM takes it: a built-in's name, else a file holding
 * a Jinja template, else (when it holds "{{" or "{%") the template itself.
 * A model without a template gets plain. note (may be NULL) receives one
 * line for the log, e.g. "chat template: the model's own (Jinja, from
 * tokenizer_config.json)". Errors: INF_ERR_INVALID for an override that is
 * none of those, INF_ERR_IO / INF_ERR_FORMAT for an unreadable or
 * malformed file. */
int tmpl_from_config(const char *path, const char *override, tmpl **out,
                     char *note, size_t note_len, inf_err *err);

void tmpl_destroy(tmpl *t); /* NULL-safe */

tmpl_kind tmpl_get_kind(const tmpl *t);
const char *tmpl_name(const tmpl *t);
tmpl_origin tmpl_get_origin(const tmpl *t);

/* One line saying what the template renders, for logs and --help. Static. */
const char *tmpl_describe(const tmpl *t);

/* The Jinja source when the template is one, else NULL. Valid for t's
 * lifetime. */
const char *tmpl_source(const tmpl *t);

/* Renders n messages into out (its previous contents are dropped).
 * add_generation_prompt appends the assistant's turn header where the
 * template has one (chatml, zephyr, llama-3; llama-2, mistral and plain have
 * none). Errors are INF_ERR_INVALID with a message saying what is wrong,
 * where the reference template raises an exception: no messages; llama-2
 * and mistral: roles not alternating user/assistant after an optional first
 * system message; mistral: a role other than user/assistant there.
 * INF_ERR_NOMEM if storage cannot grow. */
int tmpl_render(const tmpl *t, const tmpl_msg *msgs, int n, int add_generation_prompt,
                tmpl_out *out, inf_err *err);

/* Renders a chat with all its fields (tmpl_chat). A Jinja template's text
 * is split at the model's bos_token / eos_token strings into BOS/EOS
 * markers (Hugging Face's tokenizer recognises them in the text), so
 * tmpl_tokens gives the special ids and never adds a second BOS. Errors as
 * tmpl_render; a Jinja template's own errors are INF_ERR_INVALID carrying
 * its message (raise_exception's verbatim). */
int tmpl_render_chat(const tmpl *t, const tmpl_chat *chat, tmpl_out *out, inf_err *err);

/* The rendered prompt as one string, markers spelled as the model's
 * bos_token / eos_token (what the Jinja template would have produced):
 * malloc'd, NUL-terminated (caller frees), *len (may be NULL) its length. */
int tmpl_out_string(const tmpl *t, const tmpl_out *o, char **s, size_t *len, inf_err *err);

/* The rendered prompt as token ids: each text segment through
 * tok_encode(..., add_special = 0), BOS/EOS markers as tok_bos_id /
 * tok_eos_id (left out when the tokenizer has none). A text segment right
 * after a marker is encoded with TOK_AFTER_SPECIAL, so "<s> [INST]" gives
 * <s> "[INST]" with one word start, as Mistral's tokenizer does. *ids is
 * malloc'd (caller frees), *n its length. */
int tmpl_tokens(const tmpl *t, const tmpl_out *o, const tok *tk, int32_t **ids, int *n,
                inf_err *err);

#endif
