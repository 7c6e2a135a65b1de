/* api_: the OpenAI-compatible endpoints on top of srv_ (transport), oai_
 * (wire format) and eng_ (the engine thread). Routes, authentication, the
 * checks that need the model (context length, vocabulary), and the
 * generation call that turns engine output into responses and SSE chunks. */
#ifndef INFERD_API_H
#define INFERD_API_H

#include "engine/eng.h"
#include "engine/model.h"
#include "engine/tmpl.h"
#include "engine/tok.h"
#include "server/cors.h"
#include "server/gcall.h"
#include "server/oai.h"
#include "server/srv.h"

typedef struct api_config {
    const char *model_id;      /* as served: --served-model-name or --model   */
    const char *const *api_keys; /* --api-key values (none: see api_key_file) */
    int n_api_keys;
    const char *api_key_file;  /* one key per line, read again by api_reload  */
    cors_config cors;          /* off unless cors.allowed_origins is given    */
    int max_model_len;
    int max_waiting;           /* requests queued before 503                  */
    oai_limits limits;
    int tool_parser;           /* tcall_kind, or -1 (limits.auto_tools says
                                  whether "auto" tool choice is on)           */
    int reasoning_parser;      /* rsn_kind, or -1                             */
} api_config;

typedef struct api api;

int api_create(const api_config *cfg, api **out, inf_err *err);
void api_destroy(api *a); /* after the server and the engine are gone */

/* Reads the API key file again (on SIGHUP; loop thread). On error the keys
 * in force stay, and err says why. */
int api_reload(api *a, inf_err *err);

/* The srv_handler: pass `a` as the app pointer. */
void api_handle(void *a, srv_conn *c, const char *method, const char *path, const char *body,
                size_t len);

/* Offline (run-batch): one POST body for path (/v1/completions,
 * /v1/chat/completions or /v1/responses) run as api_handle runs it, without
 * HTTP or authentication: the same validation, prompt and engine requests,
 * answered by gcall_poll with the body the server would send. wake(user)
 * runs on the engine thread as the call's requests finish. Returns 0 with
 * *call set, or the HTTP status the server would answer with err filled
 * (404 for another path). One thread at a time, as the loop thread is. */
int api_submit(api *a, const char *path, const char *body, size_t len, void (*wake)(void *user),
               void *user, gcall **call, oai_error *err);

/* Binds the server (for srv_wake) before it runs. */
void api_set_server(api *a, srv *s);

/* Called on the loop thread once the model is loaded: from then on
 * generation endpoints work and /health says 200. The api borrows them. */
void api_set_ready(api *a, const model *m, const tok *tk, const tmpl *t, eng *e,
                   met_registry *met, int max_model_len);

#endif
