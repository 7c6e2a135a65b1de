/* The bodies of vLLM's POST /tokenize and POST /detokenize, parsed and
 * validated apart from the tokenizer (which the caller runs), so that they
 * can be tested and fuzzed alone. Errors are OpenAI error objects (400). */
#ifndef INFERD_OAI_TOKENIZE_H
#define INFERD_OAI_TOKENIZE_H

#include <stdint.h>

#include "server/oai.h"

typedef struct oai_tokenize_req {
    char *prompt;             /* {"prompt": "..."}: malloc'd, or NULL         */
    int add_special_tokens;   /* default 1                                     */
    int chat;                 /* {"messages": [...]}: 1, and chat_req is set   */
    oai_request chat_req;     /* as oai_parse(OAI_CHAT) fills it              */
} oai_tokenize_req;

/* {"prompt": string, "add_special_tokens": bool} or {"messages": [...],
 * ...} (validated as a chat request is). 0, or the HTTP status with err
 * filled (and out empty). */
int oai_tokenize_parse(const char *body, size_t len, const oai_limits *lim,
                       oai_tokenize_req *out, oai_error *err);
void oai_tokenize_free(oai_tokenize_req *r); /* members only */

/* {"tokens": [ids]}: every id an integer in [0, vocab). *ids is malloc'd
 * (NULL when there are none). 0, or the HTTP status with err filled. */
int oai_detokenize_parse(const char *body, size_t len, int vocab, int32_t **ids, int *n,
                         oai_error *err);

#endif
