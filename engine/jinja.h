/* jinja_: a Jinja2 interpreter for chat templates.
 *
 * Renders templates byte for byte as Python's Jinja2 3.1 does with the
 * environment Hugging Face's apply_chat_template builds: an
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
 * loopcontrols extension (break, continue), the {% generation %} tag, the
 * default Undefined, the globals raise_exception and strftime_now, and
 * tojson as json.dumps(x, ensure_ascii=False, indent=, separators=,
 * sort_keys=). Values come in as JSON (cJSON): objects are dicts in their
 * order, arrays lists, numbers int when integral in the text, else float.
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

/* Whether the template loops over a message's content (for x in
 * message['content'] / message.content): vLLM's test for whether it takes
 * content as a list of parts ("openai") or as a string. */
int jinja_iterates_content(const jinja_tmpl *t);

#endif
