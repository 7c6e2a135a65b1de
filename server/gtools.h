/* gtools_: a chat choice's generated text turned into what the response
 * carries: content, reasoning_content (--reasoning-parser) and tool calls
 * (tool_choice named or "required", which the grammar made JSON, or "auto"
 * through --tool-call-parser). Whole for a response, delta by delta for a
 * stream, where a call's id and name come first and its arguments follow in
 * pieces, as OpenAI streams them. Loop thread; one per choice. */
#ifndef INFERD_GTOOLS_H
#define INFERD_GTOOLS_H

#include "server/oai.h"

typedef struct gtools gtools;

/* tool_parser: a tcall_kind or -1; reasoning_parser: an rsn_kind or -1
 * (not applied to a grammar-constrained request: its grammar leaves no room
 * for a reasoning part).
 * *out is NULL (and 0 returned) when the request needs none of it. */
int gtools_create(const oai_request *r, int tool_parser, int reasoning_parser,
                  const char *id_prefix, gtools **out);
void gtools_destroy(gtools *t); /* NULL-safe */

/* Feeds the next text (final: the output ended) and rewrites oc's text,
 * reasoning, calls and content_null for this response or chunk; what oc
 * points to lives in t until the next call. Returns 0, or -1 when out of
 * memory. */
int gtools_feed(gtools *t, const char *text, size_t len, int final, oai_choice *oc);

/* Whether its parsers read the text with special tokens kept (a tool-call
 * parser on "auto": the markers of harmony, mistral and llama3_json are
 * special tokens, which the client's text drops): feed that text, the
 * engine's eng_out.stext (eng_params.parse_special). */
int gtools_special(const gtools *t);

/* Calls made so far (any: finish_reason "tool_calls"). */
int gtools_calls(const gtools *t);

#endif
