/* gram_src: where grammars come from besides GBNF written by hand. Each
 * function writes GBNF text (malloc'd, NUL-terminated, the caller frees it)
 * whose start rule is `root`, for gram_parse. Every error names the part of
 * the input it is about (a JSON pointer such as "#/properties/age", a
 * regex offset), so the server can return it in a 400.
 *
 * What each accepts is documented in docs/structured-outputs.md; in short:
 * - JSON Schema: type (and type lists), enum, const, properties, required,
 *   additionalProperties (false/true/schema; absent means none are
 *   generated, as llama.cpp does), items, prefixItems, minItems, maxItems,
 *   anyOf, oneOf (generated as its anyOf: exact where no document can match
 *   two branches; strict refuses a oneOf not proven so), allOf of object
 *   schemas, $ref into
 *   the same document ($defs, definitions, any JSON pointer; recursion
 *   allowed), minLength/maxLength, pattern, format (date, time, date-time,
 *   uuid, ipv4), integer minimum/maximum/exclusiveMinimum/exclusiveMaximum,
 *   number bounds that are whole numbers. Annotations (title, description,
 *   default, examples, $schema, $id, $comment) are ignored. strict != 0
 *   (OpenAI's strict mode) refuses every other keyword; otherwise they are
 *   ignored, as llama.cpp and vLLM do, and the output then matches the schema
 *   without them.
 * - Regex: literals and escapes, `.`, classes, \d \w \s and negations,
 *   groups (capturing, (?:), named), `|`, * + ? {m} {m,} {m,n} (lazy and
 *   possessive forms generate the same language), ^ and $ at the ends.
 *   The pattern is first compiled by PCRE2 so a syntax error reads as PCRE2
 *   reports it. Backreferences, lookaround, \b, \p and inline flags are
 *   refused.
 * The generated JSON is compact (no newlines), with at most one space after
 * ',' and ':' (both json.dumps styles), numbers without leading zeros and at
 * most 16 integer and 16 fraction digits. */
#ifndef INFERD_GRAM_SRC_H
#define INFERD_GRAM_SRC_H

#include "common.h"

/* A JSON Schema (JSON text of len bytes) -> GBNF. */
int gram_src_json_schema(const char *schema, size_t len, int strict, char **gbnf,
                         inf_err *err);

/* Any JSON object (response_format json_object). */
int gram_src_json_object(char **gbnf, inf_err *err);

/* A regex that must match the whole output -> GBNF. */
int gram_src_regex(const char *re, size_t len, char **gbnf, inf_err *err);

/* One of n strings exactly (guided_choice). n >= 1. */
int gram_src_choice(const char *const *choices, int n, char **gbnf, inf_err *err);

/* Internals shared by the converters (gram_regex.c, gram_json.c). */
#include <stdint.h>
/* Whether n bytes are valid UTF-8 (no overlongs, surrogates, or values
 * past U+10FFFF). */
int gram_src__utf8_ok(const char *s, size_t n);
/* A GBNF string literal of n bytes of UTF-8, quoted and escaped. */
void gram_src__lit(inf_buf *b, const char *s, size_t n);
/* One code point as it may appear inside a GBNF literal or class. */
void gram_src__cp(inf_buf *b, uint32_t cp);
/* Appends rules for a regex to b: `name ::= ...` and helpers `name-N`.
 * json_string != 0: the regex describes a JSON string's decoded contents
 * and matches anywhere unless anchored (JSON Schema's `pattern`), and the
 * rule generates its JSON-escaped form without the quotes. Errors name the
 * pattern's offset. */
int gram_src__regex_rules(inf_buf *b, const char *name, const char *re, size_t len,
                          int json_string, inf_err *err);

#endif
