/* tcall_: tool calls parsed out of a model's generated text, per model
 * family, as vLLM's --tool-call-parser names them:
 *
 *   hermes, qwen3   <tool_call>{"name": N, "arguments": {...}}</tool_call>
 *                   (any number, with text around them)
 *   llama3_json     output that starts with '{' (after an optional
 *                   <|python_tag|>): {"name": N, "parameters": {...}},
 *                   several separated by ';'
 *   mistral         [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
 *                   or [TOOL_CALLS]N[ARGS]{...} (newer tokenizers)
 *   deepseek_v3     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *                   ```json {...} ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
 *   openai          gpt-oss's harmony channels: analysis -> reasoning,
 *                   final -> content, commentary to=functions.N -> a call
 *
 * The parser is streaming: text is fed as it is detokenized, and events come
 * out as soon as they are certain, the way OpenAI streams them: a call's
 * start (index and name) once the name is complete, then its arguments'
 * JSON text in pieces whose concatenation is the whole arguments text.
 * Text that may still be the start of a marker is held back. Feeding a text
 * at once or one byte at a time gives the same concatenated events. A call
 * whose name never appears is given back as content. Markers must be in the
 * text: decode with special tokens kept when a parser is on. */
#ifndef INFERD_TCALL_H
#define INFERD_TCALL_H

#include <stddef.h>

#include "engine/common.h"

typedef enum tcall_kind {
    TCALL_HERMES,
    TCALL_QWEN3,
    TCALL_LLAMA3_JSON,
    TCALL_MISTRAL,
    TCALL_DEEPSEEK_V3,
    TCALL_OPENAI,
} tcall_kind;

/* "hermes" ... "openai" -> kind; an unknown name is INF_ERR_INVALID with a
 * message listing the known ones. */
int tcall_kind_parse(const char *name, tcall_kind *out, inf_err *err);
const char *tcall_kind_name(tcall_kind k);

typedef enum tcall_ev_type {
    TCALL_EV_CONTENT,    /* text for message.content                       */
    TCALL_EV_REASONING,  /* text for reasoning_content (openai only)       */
    TCALL_EV_CALL,       /* a call starts: index, text = its name          */
    TCALL_EV_ARGS,       /* a piece of call `index`'s arguments JSON text  */
} tcall_ev_type;

typedef struct tcall_event {
    tcall_ev_type type;
    int index;           /* the call's index (CALL and ARGS)               */
    const char *text;    /* not NUL-terminated; valid during the callback  */
    size_t len;
} tcall_event;

typedef void (*tcall_emit)(void *ctx, const tcall_event *ev);

typedef struct tcall tcall;

int tcall_create(tcall_kind kind, tcall **out, inf_err *err);
void tcall_destroy(tcall *p); /* NULL-safe */

/* Feeds generated text; events go to emit. INF_ERR_NOMEM is the only
 * failure. */
int tcall_feed(tcall *p, const char *text, size_t len, tcall_emit emit, void *ctx);

/* End of the output: what is held back comes out (an unfinished call with a
 * name ends with the arguments seen so far; one without a name as content). */
int tcall_finish(tcall *p, tcall_emit emit, void *ctx);

/* Calls started so far (a response with any has finish_reason
 * "tool_calls"). */
int tcall_count(const tcall *p);

/* Whole text at once, for non-streaming responses: content (malloc'd,
 * NUL-terminated, "" when none), reasoning likewise, and n calls with
 * malloc'd names and arguments. Free with tcall_result_free. */
typedef struct tcall_call {
    char *name;
    char *arguments;
} tcall_call;

typedef struct tcall_result {
    char *content;
    char *reasoning;
    tcall_call *calls;
    int n_calls;
} tcall_result;

int tcall_parse_all(tcall_kind kind, const char *text, size_t len, tcall_result *out,
                    inf_err *err);
void tcall_result_free(tcall_result *r);

#endif
