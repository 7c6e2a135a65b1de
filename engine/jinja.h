/* jinja_: a Jinja2 interpreter for chat templates.
 *
 * Renders templates byte for byte as Python's Jinja2 3.1 does with the
 * environment Hugging Face's apply_chat_template builds: an
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
 * loopcontrols extension (break, continue), the {% generation %} tag, the
 * default Undefined, the globals raise_exception and strftime_now, and
 * tojson as json.dumps(x, ensure_ascii=False, indent=, separators=,
 * sort_keys=). Values come in as JSON: through jinja_vars (the JSON text
 * read as Python's json.loads reads it: "1.0" a float, "1" an int, the
 * last of duplicate keys) or as a cJSON tree (jinja_render: cJSON keeps
 * no int/float distinction, so integral numbers are ints).
 *
 * Untrusted templates are bounded: recursion depth, output bytes, working
 * memory and evaluation steps (loop iterations, calls) all have limits, and
 * running past one is an error, never a hang or an abort. Nothing reaches
 * files or the environment. Errors carry the template's line number. */
#ifndef INFERD_JINJA_H
#define INFERD_JINJA_H

#include <stddef.h>
#include <time.h>
#include <cJSON.h>

#include "common.h"

typedef struct jinja_tmpl jinja_tmpl;

typedef struct jinja_opts {
    int max_depth;       /* nested calls, macros and expression depth; 64  */
    size_t max_output;   /* bytes of rendered text (also per capture); 4 MiB */
    size_t max_memory;   /* bytes of working values per render; 64 MiB      */
    long max_steps;      /* loop iterations + calls + outputs; 2,000,000    */
    time_t now;          /* strftime_now's clock; 0: time(NULL)            */
} jinja_opts;

jinja_opts jinja_opts_default(void);

/* Parses src[0:len] (UTF-8). On a syntax error returns INF_ERR_FORMAT with
 * "line N: message" in err. *out is freed with jinja_destroy. */
int jinja_parse(const char *src, size_t len, jinja_tmpl **out, inf_err *err);

void jinja_destroy(jinja_tmpl *t); /* NULL-safe */

/* Renders t with the members of vars (a JSON object, may be NULL) as the
 * template's variables. *out is malloc'd and NUL-terminated (caller frees),
 * *len (may be NULL) its length. A template that raises (raise_exception,
 * an undefined attribute, a type error) or runs past a limit gives
 * INF_ERR_INVALID with "line N: message" (raise_exception's message
 * verbatim); INF_ERR_NOMEM when memory runs out. */
int jinja_render(const jinja_tmpl *t, const cJSON *vars, const jinja_opts *opts, char **out,
                 size_t *len, inf_err *err);

/* ------------------------------------------------ variables from JSON text */

/* The variables of one render, read from request JSON text straight into
 * interpreter values (no cJSON tree in between). Owns its memory; bounded
 * by opts->max_memory. Not shared between threads while being built. */
typedef struct jinja_vars jinja_vars;

int jinja_vars_create(const jinja_opts *opts, jinja_vars **out); /* opts NULL: defaults */
void jinja_vars_destroy(jinja_vars *v);                           /* NULL-safe */

/* Each sets (or replaces) one variable. set_json reads json[0:len] as
 * Python's json.loads does; bad JSON is INF_ERR_INVALID naming the
 * variable and the byte. */
int jinja_vars_set_json(jinja_vars *v, const char *name, const char *json, size_t len,
                        inf_err *err);
int jinja_vars_set_bool(jinja_vars *v, const char *name, int b, inf_err *err);
/* Every member of a JSON object becomes a variable, except the names in
 * skip (NULL-terminated, may be NULL); not an object: INF_ERR_INVALID. */
int jinja_vars_set_members(jinja_vars *v, const char *json, size_t len,
                           const char *const *skip, inf_err *err);

/* "messages" as vLLM (entrypoints/chat_utils.py) hands them to the
 * template: each message keeps role, content, name, reasoning_content,
 * tool_calls (assistant; each function.arguments string read as JSON into
 * a mapping) and tool_call_id (tool). content becomes a string (text parts
 * joined by "\n", null ""), or with openai set (jinja_iterates_content) a
 * list of {"type", "text"} parts. A message without a string role, or
 * arguments that are not JSON, is INF_ERR_INVALID naming the message. */
int jinja_vars_set_messages(jinja_vars *v, const char *json, size_t len, int openai,
                            inf_err *err);

/* The final message's text as Hugging Face's continue_final_message finds
 * it (its content, or the last part with a text); NULL if none. Valid
 * while v lives. */
const char *jinja_vars_final_text(const jinja_vars *v, size_t *len);

/* jinja_render with the variables of vars (NULL: none). */
int jinja_render_vars(const jinja_tmpl *t, const jinja_vars *vars, const jinja_opts *opts,
                      char **out, size_t *len, inf_err *err);

/* Whether the template loops over a message's content (for x in
 * message['content'] / message.content): vLLM's test for whether it takes
 * content as a list of parts ("openai") or as a string. */
int jinja_iterates_content(const jinja_tmpl *t);

#endif
