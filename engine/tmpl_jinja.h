/* tmpl_jx: a model's own Jinja chat template, with the inputs set up as
 * vLLM hands them to Hugging Face's apply_chat_template. Private to the
 * tmpl module (tmpl.c owns one per Jinja-backed tmpl). */
#ifndef INFERD_TMPL_JINJA_H
#define INFERD_TMPL_JINJA_H

#include <cJSON.h>

#include "common.h"
#include "tmpl.h"

typedef struct tmpl_jx tmpl_jx;

/* Parses src (and tools_src, the "tool_use" entry of a template list, or
 * NULL). config is the tokenizer_config.json object (may be NULL): its
 * special tokens (bos_token, eos_token, unk_token, sep_token, pad_token,
 * cls_token, mask_token, additional_special_tokens) become variables, as
 * in HF's special_tokens_map. from names the source in messages ("...
 * tokenizer_config.json: line 3: ..."). A syntax error is INF_ERR_FORMAT. */
int tmpl_jx_create(const char *src, const char *tools_src, const cJSON *config, const char *from,
                   tmpl_jx **out, inf_err *err);
void tmpl_jx_destroy(tmpl_jx *j);

/* The special token string a tokenizer_config names (NULL if none). */
const char *tmpl_jx_token(const tmpl_jx *j, const char *key);

/* Renders a chat: *text malloc'd (caller frees), *len its length.
 * Errors: INF_ERR_INVALID with the template's message (raise_exception's
 * verbatim) or the inputs' problem; INF_ERR_NOMEM. */
int tmpl_jx_render(const tmpl_jx *j, const tmpl_chat *chat, char **text, size_t *len,
                   inf_err *err);

#endif
