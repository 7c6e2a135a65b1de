/* srv_: the HTTP transport. libuv owns the event loop; libmicrohttpd runs
 * from it (its epoll fd under a uv_poll_t, its timeout under a uv_timer_t).
 * srv_ reads whole request bodies within limits and hands each request to
 * the application's handler, which replies at once or starts an async call.
 * Async calls never block the loop: a connection waiting for the engine is
 * suspended, and srv_wake (any thread) resumes it through uv_async_send. */
#ifndef INFERD_SRV_H
#define INFERD_SRV_H

#include <stddef.h>

#include "engine/common.h"
#include "engine/log.h"
#include "server/tls.h"

typedef struct srv srv;
typedef struct srv_conn srv_conn;

typedef struct srv_config {
    const char *host;          /* listen address (default 127.0.0.1)         */
    int port;                  /* default 8000; 0 picks a free port          */
    size_t max_body;           /* bytes; larger bodies get 413               */
    int max_connections;       /* concurrent connections                     */
    int timeout_s;             /* idle seconds while reading a request       */
    int request_timeout_s;     /* a whole request (headers and body) must
                                  arrive within this; 0: no limit           */
    int grace_s;               /* on SIGTERM: seconds in-flight calls get     */
    logger *log;               /* may be NULL                                 */
    int access_log;            /* one line per request                        */
    void (*on_shutdown)(void *user); /* when SIGTERM/SIGINT or srv_stop starts
                                        the drain (loop thread); may be NULL   */
    void (*on_reload)(void *user);   /* on SIGHUP (loop thread); NULL: SIGHUP
                                        keeps its default action           */
    void *user;
    tls_config tls;            /* HTTPS when a key and certificate are given */
} srv_config;

srv_config srv_config_default(void);

/* An async call: the application's object behind a suspended or streaming
 * connection. All callbacks run on the loop thread. */
typedef struct srv_call_ops {
    /* Streaming: copy up to max bytes of response body into buf; return the
     * count, 0 when nothing is ready yet (srv suspends until srv_wake), or
     * -1 at the end of the stream. */
    long (*read)(void *call, char *buf, size_t max);
    /* Non-streaming: called after srv_wake; return 1 with the reply filled
     * (srv takes body) when the call is complete, 0 to keep waiting. */
    int (*done)(void *call, int *status, char **body, size_t *len);
    /* The connection is over (finished, failed or the client went away):
     * the call must stop its work and release itself. Called exactly once. */
    void (*closed)(void *call, int client_gone);
} srv_call_ops;

/* The application: called once per request with the complete body.
 * It must answer with exactly one of srv_reply, srv_stream, srv_wait. */
typedef void (*srv_handler)(void *app, srv_conn *c, const char *method, const char *path,
                            const char *body, size_t len);

int srv_create(const srv_config *cfg, srv_handler handler, void *app, srv **out,
               inf_err *err);
void srv_destroy(srv *s); /* NULL-safe; after srv_run returned */

/* The port actually bound (useful with port 0). */
int srv_port(const srv *s);

/* Whether it speaks HTTPS. */
int srv_is_tls(const srv *s);

/* Runs the loop until SIGTERM/SIGINT (or srv_stop): then stops accepting,
 * gives in-flight calls up to grace_s seconds, closes the rest (their calls
 * see closed()), and returns 0. */
int srv_run(srv *s);

/* Asks srv_run to shut down as on SIGTERM. Any thread. */
void srv_stop(srv *s);

/* Calls fn(user) on the loop thread soon. Any thread. Used for work that
 * must happen on the loop (e.g. "the model is loaded"). */
void srv_post(srv *s, void (*fn)(void *user), void *user);

/* ---- answering a request (loop thread, inside the handler) --------------- */

/* Request header value or NULL. */
const char *srv_header(srv_conn *c, const char *name);

/* Adds a header to every response of this request (e.g. CORS), whether
 * srv_reply, srv_stream or srv itself answers. At most 8. */
void srv_conn_add_header(srv_conn *c, const char *name, const char *value);

/* Replies now; srv takes ownership of body (malloc'd). extra_header may be
 * NULL or "Name: value". */
void srv_reply(srv_conn *c, int status, const char *content_type, char *body, size_t len,
               const char *extra_header);

/* Starts a text/event-stream response driven by ops->read. */
void srv_stream(srv_conn *c, const srv_call_ops *ops, void *call);

/* Suspends the connection until the call is done (ops->done). */
void srv_wait(srv_conn *c, const srv_call_ops *ops, void *call);

/* Resumes c's call: its read or done runs again soon. Any thread; safe to
 * call after the connection closed (then it does nothing). */
void srv_wake(srv *s, srv_conn *c);

/* What the access log says of a generation request: its id and token
 * counts (loop thread; may be called again as counts grow). */
void srv_conn_set_request(srv_conn *c, const char *request_id, int tokens_in, int tokens_out);

/* Reference counting for srv_wake from other threads: a call that may be
 * woken after it told srv it is closed must hold a reference. */
void srv_conn_ref(srv_conn *c);
void srv_conn_unref(srv_conn *c);

#endif
