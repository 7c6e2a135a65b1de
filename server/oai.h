/* oai_: the OpenAI wire format. Parses and validates request bodies into
 * plain C structs (no JSON leaves this module) and encodes responses, stream
 * chunks and error objects exactly as OpenAI and vLLM shape them. Pure
 * functions over memory: no I/O, no engine, no globals. */
#ifndef INFERD_OAI_H
#define INFERD_OAI_H

#include <stddef.h>
#include <stdint.h>

typedef enum oai_kind { OAI_COMPLETION = 0, OAI_CHAT = 1 } oai_kind;

/* One completions prompt: text, or token ids (exactly one is set). */
typedef struct oai_prompt {
    char *text;     /* NUL-terminated UTF-8, or NULL  */
    int32_t *ids;   /* or token ids                   */
    int n_ids;
} oai_prompt;

/* One chat message; list-of-parts content is flattened (text parts joined
 * with "\n"; non-text parts are a 400). The message as sent (tool_calls,
 * tool_call_id, name, the parts) is in oai_request.messages_json for a
 * Jinja chat template. */
typedef struct oai_message {
    char *role;     /* "system" (also for "developer"), "user", "assistant",
                       "tool" (others are a 400)                          */
    char *content;  /* NUL-terminated UTF-8 (empty allowed)             */
} oai_message;

/* A function the model may call (chat "tools"). */
typedef struct oai_tool {
    char *name;
    char *parameters;  /* its JSON Schema as compact JSON text           */
} oai_tool;

enum { OAI_TOOL_NONE = 0, OAI_TOOL_AUTO, OAI_TOOL_REQUIRED, OAI_TOOL_NAMED };

/* Everything a request asks for, validated. Absent optional fields hold
 * the documented defaults after oai_parse. */
typedef struct oai_request {
    oai_kind kind;
    char *model;                 /* NULL when absent (means the served model)   */
    oai_prompt *prompts;         /* completions: 1..max_prompts                 */
    int n_prompts;
    oai_message *messages;       /* chat: >= 1                                  */
    int n_messages;
    int add_generation_prompt;   /* chat; default 1                             */
    int continue_final_message;  /* chat (vLLM); default 0; not with the above  */
    char *messages_json;         /* chat: "messages" as sent (JSON text)        */
    char *tools_json;            /* chat: "tools" (JSON list text) or NULL      */
    char *documents_json;        /* chat: "documents" (JSON list text) or NULL  */
    char *chat_template_kwargs_json; /* chat (vLLM): JSON object text or NULL   */
    int stream;                  /* default 0                                   */
    int include_usage;           /* stream_options.include_usage; default 0     */
    int max_tokens;              /* max_tokens or max_completion_tokens; -1 when
                                    absent (the caller applies vLLM's default:
                                    16 for completions, the rest of the context
                                    for chat)                                   */
    int min_tokens;              /* default 0; <= max_tokens when both given    */
    int n;                       /* choices per prompt; default 1               */
    float temperature;           /* default 1.0                                 */
    float top_p;                 /* default 1.0                                 */
    int top_k;                   /* default -1 (off); -1 or >= 1                */
    float min_p;                 /* default 0                                   */
    float presence_penalty;      /* default 0, [-2, 2]                          */
    float frequency_penalty;     /* default 0, [-2, 2]                          */
    float repetition_penalty;    /* default 1, > 0                              */
    int has_seed;
    int64_t seed;
    int logprobs;                /* completions: "logprobs": N (0..max); chat:
                                    "logprobs": true gives top_logprobs (0..max);
                                    -1 when not asked                           */
    int echo;                    /* completions; default 0                      */
    int prompt_logprobs;         /* vLLM: alternatives per prompt token
                                    (0..max_logprobs); -1 when not asked       */
    char **stop;                 /* stop strings (a string or a list), may be 0 */
    int n_stop;
    int32_t *stop_token_ids;     /* vLLM extension                              */
    int n_stop_token_ids;
    int32_t *bias_ids;           /* logit_bias: token id -> bias in [-100, 100] */
    float *bias_values;
    int n_bias;
    int ignore_eos;              /* vLLM extension; default 0                   */
    int skip_special_tokens;     /* vLLM's (default 1): special tokens left out  */
    char *user;                  /* OpenAI's end-user id; accepted, ignored     */
    char *cache_salt;            /* vLLM extension (prefix cache isolation)     */
    int speculative;             /* inferd extension: false opts out; default 1 */
    char *grammar;               /* GBNF the output must match, compiled from
                                    response_format, structured_outputs or
                                    guided_* (oai_gram.c), or from tool_choice
                                    required/named; NULL: none                 */
    oai_tool *tools;             /* chat "tools" (functions only)               */
    int n_tools;
    int tool_choice;             /* OAI_TOOL_*: default AUTO with tools when
                                    "auto" is enabled, else NONE (the tools are
                                    still rendered by the template). REQUIRED: the output is a JSON list
                                    of {"name", "parameters"}; NAMED: it is the
                                    function's arguments (both by grammar)      */
    char *tool_name;             /* NAMED: which function                       */
    int parallel_tool_calls;     /* default 1; 0: REQUIRED makes one call       */
} oai_request;

/* Limits that come from server flags. */
typedef struct oai_limits {
    int max_n;           /* default 16                  */
    int max_logprobs;    /* default 20                  */
    int max_prompts;     /* completions batch; default 64 */
    int max_stop;        /* default 16 stop strings     */
    int auto_tools;      /* tool_choice "auto" allowed (--enable-auto-tool-choice
                            with --tool-call-parser); default 0 */
    int vocab_size;      /* prompt_logprobs -1 asks this many (vLLM: the whole
                            vocabulary), checked against max_logprobs; 0:
                            unknown, -1 refused all the same */
} oai_limits;

oai_limits oai_limits_default(void);

/* An OpenAI error: HTTP status, type ("invalid_request_error",
 * "authentication_error", "not_found_error", ...), the offending field or
 * "", and a one-line message. */
typedef struct oai_error {
    int status;
    const char *type;
    char param[64];
    char message[512];
    const char *code;    /* NULL or e.g. "model_not_found" */
} oai_error;

/* Fills err (NULL-safe) and returns its status. */
int oai_fail(oai_error *err, int status, const char *type, const char *param,
             const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Parses and validates a body. On failure returns the HTTP status (400 for
 * malformed JSON, wrong types, missing prompt/messages, values out of range;
 * 500 only when out of memory) with err filled, and leaves out empty; 0 on
 * success. The body must be UTF-8 JSON per RFC 8259 (cJSON's leniencies,
 * such as 01 or raw control characters in strings, are a 400); a JSON null
 * reads as an absent field. Unknown fields are ignored. Context-dependent
 * checks (prompt + max_tokens against the model's context, token ids
 * against the vocabulary, the model name) are the caller's. */
int oai_parse(oai_kind kind, const char *body, size_t len, const oai_limits *lim,
              oai_request *out, oai_error *err);

void oai_request_free(oai_request *r); /* frees members; r itself is the caller's */

/* ---- encoding ----------------------------------------------------------- */

/* One alternative of a logprobs entry. token is the piece's decoded text
 * (bytes, may be partial UTF-8: JSON-escaped safely, with "bytes" on chat). */
typedef struct oai_top {
    const char *token;
    size_t token_len;
    float logprob;
    int32_t id;              /* its token id (prompt_logprobs' keys)           */
} oai_top;

/* Logprobs for one output (or echoed prompt) token. */
typedef struct oai_token_lp {
    const char *token;
    size_t token_len;
    float logprob;           /* NAN for a first prompt token (JSON null)       */
    const oai_top *top;      /* n_top alternatives, most likely first          */
    int n_top;
    int text_offset;         /* completions: offset of the token in the text   */
    int32_t id;              /* prompt_logprobs: the token's id and rank       */
    int rank;
} oai_token_lp;

/* A tool call in a response, or a piece of one in a chunk (chat). */
typedef struct oai_tool_call {
    int index;
    const char *id;          /* NULL in a chunk after the call's first     */
    const char *name;        /* likewise                                   */
    const char *args;        /* the arguments' JSON text (or a piece)      */
    size_t args_len;
} oai_tool_call;

/* One choice's content: the whole text (response) or this delta (chunk). */
typedef struct oai_choice {
    int index;
    const char *text;
    size_t text_len;
    const char *finish_reason; /* "stop", "length" or NULL (chunk mid-stream)  */
    const oai_token_lp *lps;   /* logprobs for the tokens in this text/delta   */
    int n_lps;
    int want_logprobs;         /* emit a logprobs object even when n_lps == 0   */
    /* vLLM's prompt_logprobs (want_prompt_logprobs): null for the first prompt
     * token, then plps[0..n_plps) for the others; chat writes choice 0's at
     * the response's top level, as vLLM */
    const oai_token_lp *plps;
    int n_plps;
    int want_prompt_logprobs;
    /* finish details (vLLM): the stop string or token id that ended it */
    const char *stop_reason_str;
    int stop_reason_id;        /* -1 when none                                 */
    /* chat only: reasoning_content (NULL: none), tool calls, and whether
     * message.content is null (a response of tool calls alone) */
    const char *reasoning;
    size_t reasoning_len;
    const oai_tool_call *calls;
    int n_calls;
    int content_null;
} oai_choice;

typedef struct oai_usage {
    int prompt_tokens;
    int completion_tokens;
    int cached_tokens;         /* usage.prompt_tokens_details.cached_tokens     */
} oai_usage;

/* Identity of a response: "cmpl-..." / "chatcmpl-..." id, creation time
 * (unix seconds), model id as served. */
typedef struct oai_meta {
    oai_kind kind;
    const char *id;
    long created;
    const char *model;
    int usage_null;   /* streaming with include_usage: chunks that carry no
                         usage say "usage": null (as OpenAI); default 0 omits
                         the key                                          */
} oai_meta;

/* Every string below (token text, stop strings, ids, messages) may hold any
 * bytes: bytes that are not valid UTF-8 are written as U+FFFD, so the output
 * is always valid UTF-8 JSON; chat "bytes" arrays carry the raw bytes.
 * logprobs: NAN is written as null, -inf as -9999.0 (as vLLM). stop_reason
 * is written only when finish_reason is "stop": stop_reason_str, else
 * stop_reason_id when >= 0, else null. All results are malloc'd (free());
 * NULL when out of memory or given NULL. */

/* The whole non-streaming response body (malloc'd, NUL-terminated):
 * object "text_completion" or "chat.completion", choices, usage. */
char *oai_response_json(const oai_meta *m, const oai_choice *choices, int n,
                        const oai_usage *usage);

/* One streaming chunk, as the bytes "data: {...}\n\n" (malloc'd): object
 * "text_completion" or "chat.completion.chunk". For chat, role_first != 0
 * makes the delta carry "role":"assistant" (the first chunk of a choice).
 * usage != NULL with c == NULL makes the final usage chunk (choices: []). */
char *oai_chunk_sse(const oai_meta *m, const oai_choice *c, int role_first,
                    const oai_usage *usage);

/* "data: [DONE]\n\n" */
const char *oai_sse_done(void);

/* The error body {"error":{"message","type","param","code"}} (malloc'd). */
char *oai_error_json(const oai_error *err);

/* GET /v1/models body for one served model (malloc'd). */
char *oai_models_json(const char *model_id, long created, int max_model_len);

/* ---- /tokenize and /detokenize (vLLM's) ----------------------------------- */

/* POST /tokenize: {"prompt": "...", "add_special_tokens": true}, or a chat
 * body with "messages" (validated as oai_parse validates a chat request). */
typedef struct oai_tokenize {
    char *prompt;              /* the text to encode, or NULL: chat below   */
    int add_special_tokens;    /* default 1                                 */
    oai_request chat;          /* prompt NULL: the chat request             */
} oai_tokenize;

/* Returns 0, or the status with err filled (out then holds nothing). */
int oai_parse_tokenize(const char *body, size_t len, const oai_limits *lim, oai_tokenize *out,
                       oai_error *err);
void oai_tokenize_free(oai_tokenize *t);

/* POST /detokenize: {"tokens": [ids]}; the vocabulary range is the caller's. */
typedef struct oai_detokenize {
    int32_t *tokens;
    int n_tokens;
} oai_detokenize;

int oai_parse_detokenize(const char *body, size_t len, oai_detokenize *out, oai_error *err);
void oai_detokenize_free(oai_detokenize *d);

/* {"count": n, "max_model_len": N, "tokens": [...]} (malloc'd). */
char *oai_tokenize_json(const int32_t *ids, int n, int max_model_len);

/* {"prompt": text} (malloc'd); text may hold any bytes, as above. */
char *oai_detokenize_json(const char *text, size_t len);

/* ---- POST /v1/responses (OpenAI's Responses API, stateless) ---------------- */

/* A Responses body as the equivalent chat request: instructions as a system
 * message, input (a string, or a list of items: {"role", "content"}
 * messages whose content is a string or input_text/output_text parts,
 * function_call items as an assistant turn's tool_calls, function_call_output
 * items as tool messages), max_output_tokens as max_tokens, text.format as
 * response_format, tools [{"type": "function", "name", "parameters", ...}]
 * and tool_choice ({"type": "function", "name"} or a string) as chat's;
 * temperature, top_p, stream, model, seed, stop, parallel_tool_calls as
 * chat's. store true and previous_response_id are a 400. Errors name the
 * Responses fields. Returns 0 or the status with err filled. */
int oai_parse_responses(const char *body, size_t len, const oai_limits *lim, oai_request *out,
                        oai_error *err);

/* Chat's field names in err as a Responses body spells them
 * (max_tokens -> max_output_tokens, messages -> input, response_format ->
 * text.format). */
void oai_resp_rename_error(oai_error *err);

/* The Response object for a whole chat choice: its text as one assistant
 * message (also when empty and there are no calls), then a function_call
 * item {"id", "call_id", "name", "arguments"} per tool call. finish_reason
 * "length" makes it "incomplete" (max_output_tokens). m->id is the
 * response id. malloc'd, NULL when out of memory. */
char *oai_resp_json(const oai_meta *m, const oai_choice *c, const oai_usage *u);

/* A Responses stream: its sequence numbers and the output items opened so
 * far (the message when text first comes, a function_call per call). */
typedef struct oai_resp_item oai_resp_item;
typedef struct oai_resp_stream {
    int seq;                  /* the next sequence_number                   */
    oai_resp_item *items;     /* in output_index order                      */
    int n_items, cap;
    int msg;                  /* the message's output_index, -1: none yet   */
} oai_resp_stream;

void oai_resp_stream_init(oai_resp_stream *s);
void oai_resp_stream_free(oai_resp_stream *s);

/* Stream events ("event: T\ndata: {...}\n\n", malloc'd; NULL when out of
 * memory). Start: response.created, response.in_progress. Delta (a chat
 * chunk's choice: text and tool-call pieces): output_item.added (and
 * content_part.added for the message) as an item opens, then
 * response.output_text.delta or response.function_call_arguments.delta;
 * "" when there is nothing to say. End: per item output_text.done and
 * content_part.done, or function_call_arguments.done, then
 * output_item.done; then response.completed (or response.incomplete). Fail
 * (mid-stream): an "error" event {code, message, param}, then
 * response.failed with the items so far. */
char *oai_resp_start_sse(const oai_meta *m, oai_resp_stream *s);
char *oai_resp_delta_sse(const oai_meta *m, oai_resp_stream *s, const oai_choice *c);
char *oai_resp_end_sse(const oai_meta *m, oai_resp_stream *s, const char *finish,
                       const oai_usage *u);
char *oai_resp_fail_sse(const oai_meta *m, oai_resp_stream *s, const oai_error *e);

#endif
