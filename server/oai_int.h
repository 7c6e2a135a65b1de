/* oai_ internals shared by its files (not a public API):
 *   oai_json.c    the strict JSON check of a body, then cJSON's tree
 *   oai_val.c     errors and typed field readers ("<param> must be ...")
 *   oai_req.c     completions and chat bodies: the fields, oai_parse
 *   oai_prompt.c  prompts and chat messages
 *   oai_tok.c     /tokenize and /detokenize bodies
 *   oai_gram.c    response_format, structured_outputs, guided_*: grammars
 *   oai_tools.c   tools and tool_choice
 *   oai_enc.c     response bodies and stream chunks
 * Every string a response carries goes through json_esc (engine/json_esc.h). */
#ifndef INFERD_OAI_INT_H
#define INFERD_OAI_INT_H

#include <cJSON.h>

#include "server/oai.h"

#define OAI_INVALID "invalid_request_error"

/* body[0..len) as a JSON object: UTF-8 and RFC 8259 grammar checked before
 * cJSON reads it. 0 with *root set (the caller deletes it), or the status
 * with err filled. */
int oai__parse_body(const char *body, size_t len, cJSON **root, oai_error *err);

/* The error type OpenAI's clients expect for a status when none is given. */
const char *oai__default_type(int status);

/* "null", "boolean", ... for messages. */
const char *oai__json_type(const cJSON *v);

/* A client's string quoted for a message: JSON-escaped (so the message
 * stays one line) and cut after 40 bytes. */
void oai__echo_str(const char *s, char *buf, size_t n);

/* v for a message: integers as integers, others as the shortest %g text
 * that reads back as v. */
void oai__fmt_double(double v, char *buf, size_t n);

/* A member by exact name; absent and JSON null read the same (every
 * optional field accepts null, as the SDKs send it). */
const cJSON *oai__get(const cJSON *o, const char *key);

int oai__bad_type(oai_error *err, const char *param, const char *want, const cJSON *v);
int oai__no_memory(oai_error *err);

/* A range of accepted values; interval says whether messages show both
 * bounds ("in (0, 1]") or the lower one ("at least 1"). */
typedef struct oai__span {
    double lo, hi;
    int lo_open, hi_open, interval;
} oai__span;

int oai__in_span(double v, const char *param, oai__span s, oai_error *err);

/* Optional fields: absent (or null) leaves *out untouched and returns 0;
 * the wrong type or a value out of s returns 400 with err filled. */
int oai__want_num(const cJSON *v, const char *param, oai__span s, double *out,
                  oai_error *err);
/* An integer in s (within int64); 16.0 counts as 16, 16.5 does not. */
int oai__want_int(const cJSON *v, const char *param, oai__span s, int64_t *out,
                  oai_error *err);
int oai__want_int32(const cJSON *v, const char *param, oai__span s, int *out, oai_error *err);
int oai__want_bool(const cJSON *v, const char *param, int *out, oai_error *err);
int oai__want_str(const cJSON *v, const char *param, char **out, oai_error *err);
/* A token id (required): a non-negative integer that fits int32; the
 * vocabulary range is the caller's. what names the list in messages. */
int oai__want_id(const cJSON *v, const char *param, const char *what, int32_t *out,
                 oai_error *err);

/* Completions' "prompt" and chat's "messages" into r. */
int oai__parse_prompt(const cJSON *o, const oai_limits *lim, oai_request *r, oai_error *err);
int oai__parse_messages(const cJSON *o, oai_request *r, oai_error *err);
int oai__parse_template_inputs(const cJSON *o, oai_request *r, oai_error *err);

/* response_format, structured_outputs and guided_* into r->grammar. */
int oai__parse_grammar(const cJSON *root, oai_request *r, oai_error *err);
/* A JSON Schema's text into r->grammar (a 400 naming param when it cannot
 * be compiled). */
int oai__grammar_from_schema(oai_request *r, const char *schema, const char *param,
                             oai_error *err);

/* Chat's tools, tool_choice and parallel_tool_calls into r (after
 * oai__parse_grammar: required and named choices set r->grammar). */
int oai__parse_tools(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *err);

/* Fills r with the defaults of a kind of request. */
void oai__request_init(oai_request *r, oai_kind kind);

/* Any bytes as a JSON string item (a raw item holding the escaped text);
 * NULL when out of memory. */
cJSON *oai__str_item(const char *s, size_t n);

#endif
