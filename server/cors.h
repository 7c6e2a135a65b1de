/* cors_: Cross-Origin Resource Sharing with vLLM's options (--allowed-origins,
 * --allowed-methods, --allowed-headers, --allow-credentials), answered as
 * Starlette's CORSMiddleware (which vLLM uses) answers. Off unless
 * --allowed-origins is given: without it no CORS header is ever sent.
 * Lists are JSON arrays as vLLM takes them ('["https://a.example"]') or
 * comma-separated; "*" allows any. */
#ifndef INFERD_CORS_H
#define INFERD_CORS_H

#include "engine/common.h"

typedef struct cors_config {
    const char *allowed_origins;  /* NULL or "": CORS off                    */
    const char *allowed_methods;  /* NULL: "*"                               */
    const char *allowed_headers;  /* NULL: "*"                               */
    int allow_credentials;
} cors_config;

typedef struct cors cors;

/* *out is NULL (off) when no origins are given. INF_ERR_INVALID names the
 * option whose list does not parse. */
int cors_create(const cors_config *c, cors **out, inf_err *err);
void cors_destroy(cors *c); /* NULL-safe */

enum { CORS_MAX_HEADERS = 6 };

/* What to do with one request. */
typedef struct cors_result {
    int preflight;      /* 1: answer now with status and body (text/plain) */
    int status;         /* 200, or 400 for a refused preflight               */
    const char *body;   /* static text                                       */
    int n;              /* headers to add to the response                    */
    struct {
        const char *name;
        char value[2048];
    } h[CORS_MAX_HEADERS];
} cors_result;

/* From the request's method and its Origin, Access-Control-Request-Method
 * and Access-Control-Request-Headers headers (each may be NULL). A request
 * without Origin, or from an origin not allowed, gets no header (the browser
 * then refuses the response); OPTIONS with Origin and
 * Access-Control-Request-Method is a preflight. c may be NULL (off). */
void cors_apply(const cors *c, const char *method, const char *origin, const char *req_method,
                const char *req_headers, cors_result *out);

#endif
