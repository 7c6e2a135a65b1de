/* gcall_: one /v1/completions, /v1/chat/completions or /v1/responses
 * request in flight: its engine requests (one per prompt and choice), and
 * the conversion of their output into one response or a stream of SSE
 * chunks. Served over a connection (gcall_start), or offline with no
 * connection (gcall_submit, for run-batch). Lives on the loop thread (or
 * the offline caller's), except gcall_on_engine_output (engine thread). */
#ifndef INFERD_GCALL_H
#define INFERD_GCALL_H

#include "engine/eng.h"
#include "server/oai.h"
#include "server/srv.h"

typedef struct gcall_env {
    srv *srv;
    eng *e;
    const model *m;
    const tok *tk;
    const char *model_id;    /* must outlive the call                     */
    int max_model_len;
    int max_waiting;
    uint64_t id_seq;         /* makes the response id                     */
    int tool_parser;         /* --tool-call-parser: a tcall_kind, or -1   */
    int reasoning_parser;    /* --reasoning-parser: an rsn_kind, or -1    */
    int responses;           /* encode as /v1/responses (a chat request, n 1) */
} gcall_env;

/* One prompt, tokenized. echo: completions' echo text (malloc'd) or NULL. */
typedef struct gcall_prompt {
    int32_t *ids;
    int n;
    char *echo;
} gcall_prompt;

/* Validates limits that need the prompt length (max_tokens against the
 * context; logit_bias and stop_token_ids against the vocabulary; the
 * prompt's own ids are the caller's to check), submits the engine requests
 * and answers c: an error reply, a stream, or a wait for the full response.
 * Takes ownership of r and prompts (and their members). */
void gcall_start(const gcall_env *env, srv_conn *c, oai_request *r, gcall_prompt *prompts,
                 int n_prompts);

/* ---- offline calls (run-batch): no connection, the caller polls -------------- */

typedef struct gcall gcall;

/* As gcall_start, without HTTP: validates and submits (a stream is a 400),
 * then wake(user) runs on the engine thread each time one of the call's
 * engine requests finishes. Returns 0 with *out set, or the HTTP status
 * with err filled. Takes ownership of r and prompts in both cases. */
int gcall_submit(const gcall_env *env, oai_request *r, gcall_prompt *prompts, int n_prompts,
                 void (*wake)(void *user), void *user, gcall **out, oai_error *err);

/* Returns 1 with the reply the server would send (status, malloc'd body)
 * once every engine request has finished, else 0. One thread at a time. */
int gcall_poll(gcall *g, int *status, char **body, size_t *len);

/* Ends the call (cancelling what still runs); NULL-safe. */
void gcall_release(gcall *g);

/* An OpenAI error object as the reply, with an extra header line or NULL. */
void gcall_reply_error(srv_conn *c, const oai_error *e, const char *hdr);

/* The engine's notify hook (eng_config.notify; user unused). */
void gcall_on_engine_output(void *user, eng_req *r);

#endif
