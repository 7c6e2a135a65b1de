#include "server/srv.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

enum { C_READING, C_REPLIED, C_STREAM, C_WAIT };

struct srv_conn {
    atomic_int refs;
    srv *s;
    struct MHD_Connection *mc;
    char *body;
    size_t len, cap;
    int too_big;
    int state;
    const srv_call_ops *ops;
    void *call;
    int suspended;           /* loop thread only                          */
    int client_gone;         /* loop thread only                          */
    int closed;              /* under s->mu                               */
    int in_ready;            /* under s->mu                               */
    srv_conn *ready_next;    /* under s->mu                               */
    srv_conn *prev, *next;   /* s->live list, loop thread only            */
    uv_poll_t poll;          /* watches for the client leaving while
                                suspended (MHD cannot see it then)        */
    int poll_init;
    char *headers[8];        /* "Name: value" lines for every response    */
    int n_headers;
    /* for the access log */
    char method[16], path[192], client[64], request_id[64];
    int status, tokens_in, tokens_out;
    double t0;
};

/* One TCP connection (it may carry several requests): the deadline for
 * receiving the request it is reading. MHD's own timeout is an idle timeout,
 * which a client trickling a byte at a time never trips. */
typedef struct sock_ctx {
    srv *s;
    struct MHD_Connection *mc;
    uv_timer_t deadline;
} sock_ctx;

typedef struct post_item {
    void (*fn)(void *);
    void *user;
    struct post_item *next;
} post_item;

struct srv {
    srv_config cfg;
    srv_handler handler;
    void *app;
    struct MHD_Daemon *d;
    tls *tls;                /* NULL: plain HTTP                          */
    int port;
    uv_loop_t loop;
    uv_poll_t mhd_poll;
    uv_timer_t mhd_timer;
    uv_async_t wake;
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t grace;
    pthread_mutex_t mu;
    srv_conn *ready;         /* under mu                                  */
    post_item *posts;        /* under mu                                  */
    int stop_req;            /* under mu                                  */
    int loop_gone;           /* under mu: the async handle is closed        */
    srv_conn *live;          /* connections MHD still holds               */
    int stopping;
    uint64_t stop_at;        /* uv_now() when shutdown began              */
};

srv_config srv_config_default(void)
{
    srv_config c = {.host = "127.0.0.1", .port = 8000, .max_body = (size_t)8 << 20,
                    .max_connections = 1024, .timeout_s = 30, .request_timeout_s = 60,
                    .grace_s = 30};
    return c;
}

/* ---- request deadlines ------------------------------------------------------ */

static void on_deadline(uv_timer_t *t)
{
    sock_ctx *sc = t->data;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(sc->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    /* MHD sees the dead socket and closes the connection itself */
    if (ci)
        shutdown(ci->connect_fd, SHUT_RDWR);
    log_msg(sc->s->cfg.log, LOG_INFO, "server", NULL,
            "closed a connection that took over %d s to send its request",
            sc->s->cfg.request_timeout_s);
}

static void arm_deadline(sock_ctx *sc)
{
    if (sc && sc->s->cfg.request_timeout_s > 0)
        uv_timer_start(&sc->deadline, on_deadline, (uint64_t)sc->s->cfg.request_timeout_s * 1000u,
                       0);
}

static void disarm_deadline(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    sock_ctx *sc = ci ? ci->socket_context : NULL;
    if (sc)
        uv_timer_stop(&sc->deadline);
}

static void free_sock_ctx(uv_handle_t *h)
{
    free(h->data);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    srv *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        sock_ctx *sc = calloc(1, sizeof *sc);
        if (!sc)
            return;
        sc->s = s;
        sc->mc = mc;
        uv_timer_init(&s->loop, &sc->deadline);
        sc->deadline.data = sc;
        *socket_context = sc;
        arm_deadline(sc);
    } else if (*socket_context) {
        sock_ctx *sc = *socket_context;
        *socket_context = NULL;
        uv_timer_stop(&sc->deadline);
        uv_close((uv_handle_t *)&sc->deadline, free_sock_ctx);
    }
}

/* ---- connections ----------------------------------------------------------- */

void srv_conn_ref(srv_conn *c) { atomic_fetch_add(&c->refs, 1); }

void srv_conn_unref(srv_conn *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
        for (int i = 0; i < c->n_headers; i++)
            free(c->headers[i]);
        free(c->body);
        free(c);
    }
}

static void on_poll_closed(uv_handle_t *h)
{
    srv_conn_unref(h->data);
}

static void run_mhd(srv *s);

/* The client left while we waited: let MHD find out by resuming. */
static void on_client_event(uv_poll_t *p, int status, int events)
{
    srv_conn *c = p->data;
    (void)status;
    (void)events;
    c->client_gone = 1;
    uv_poll_stop(&c->poll);
    if (c->suspended) {
        c->suspended = 0;
        MHD_resume_connection(c->mc);
        run_mhd(c->s);
    }
}

static void suspend(srv_conn *c)
{
    if (c->suspended)
        return;
    MHD_suspend_connection(c->mc);
    c->suspended = 1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return;
    if (!c->poll_init) {
        if (uv_poll_init(&c->s->loop, &c->poll, ci->connect_fd) != 0)
            return;
        c->poll_init = 1;
        c->poll.data = c;
        srv_conn_ref(c); /* dropped when the poll handle is closed */
    }
    uv_poll_start(&c->poll, UV_DISCONNECT, on_client_event);
}

static void resume(srv_conn *c)
{
    if (!c->suspended)
        return;
    c->suspended = 0;
    if (c->poll_init)
        uv_poll_stop(&c->poll);
    MHD_resume_connection(c->mc);
}

void srv_wake(srv *s, srv_conn *c)
{
    pthread_mutex_lock(&s->mu);
    if (!c->closed && !c->in_ready && !s->loop_gone) {
        c->in_ready = 1;
        srv_conn_ref(c);
        c->ready_next = s->ready;
        s->ready = c;
        uv_async_send(&s->wake); /* under mu: the handle cannot close meanwhile */
    }
    pthread_mutex_unlock(&s->mu);
}

void srv_post(srv *s, void (*fn)(void *user), void *user)
{
    post_item *it = malloc(sizeof *it);
    if (!it)
        return;
    it->fn = fn;
    it->user = user;
    pthread_mutex_lock(&s->mu);
    if (s->loop_gone) {
        pthread_mutex_unlock(&s->mu);
        free(it);
        return;
    }
    it->next = s->posts;
    s->posts = it;
    uv_async_send(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

void srv_stop(srv *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop_req = 1;
    if (!s->loop_gone)
        uv_async_send(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

/* ---- answering ------------------------------------------------------------ */

const char *srv_header(srv_conn *c, const char *name)
{
    return MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, name);
}

void srv_conn_add_header(srv_conn *c, const char *name, const char *value)
{
    if (c->n_headers == (int)(sizeof c->headers / sizeof *c->headers))
        return;
    size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    if (!line)
        return;
    snprintf(line, n, "%s: %s", name, value);
    c->headers[c->n_headers++] = line;
}

static void add_header_line(struct MHD_Response *r, const char *line);

static void add_conn_headers(srv_conn *c, struct MHD_Response *r)
{
    for (int i = 0; i < c->n_headers; i++)
        add_header_line(r, c->headers[i]);
}

static void add_header_line(struct MHD_Response *r, const char *line)
{
    const char *colon = line ? strchr(line, ':') : NULL;
    if (!colon)
        return;
    char name[64];
    size_t n = (size_t)(colon - line);
    if (n >= sizeof name)
        return;
    memcpy(name, line, n);
    name[n] = '\0';
    const char *v = colon + 1;
    while (*v == ' ')
        v++;
    MHD_add_response_header(r, name, v);
}

void srv_conn_set_request(srv_conn *c, const char *request_id, int tokens_in, int tokens_out)
{
    snprintf(c->request_id, sizeof c->request_id, "%s", request_id ? request_id : "");
    c->tokens_in = tokens_in;
    c->tokens_out = tokens_out;
}

void srv_reply(srv_conn *c, int status, const char *content_type, char *body, size_t len,
               const char *extra_header)
{
    c->status = status;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body ? body : "", body ? MHD_RESPMEM_MUST_FREE
                                                                    : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return;
    }
    if (content_type)
        MHD_add_response_header(r, "Content-Type", content_type);
    add_header_line(r, extra_header);
    add_conn_headers(c, r);
    MHD_queue_response(c->mc, (unsigned)status, r);
    MHD_destroy_response(r);
    c->state = C_REPLIED;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    srv_conn *c = cls;
    (void)pos;
    if (c->client_gone)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    long n = c->ops->read(c->call, buf, max);
    if (n > 0)
        return n;
    if (n < 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    suspend(c); /* nothing yet: srv_wake resumes us */
    return 0;
}

void srv_stream(srv_conn *c, const srv_call_ops *ops, void *call)
{
    c->ops = ops;
    c->call = call;
    c->state = C_STREAM;
    c->status = 200;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, c, NULL);
    if (!r)
        return;
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    add_conn_headers(c, r);
    MHD_queue_response(c->mc, 200, r);
    MHD_destroy_response(r);
}

void srv_wait(srv_conn *c, const srv_call_ops *ops, void *call)
{
    c->ops = ops;
    c->call = call;
    c->state = C_WAIT;
    suspend(c);
}

/* ---- libmicrohttpd callbacks (loop thread) --------------------------------- */

static void reply_error(srv_conn *c, int status, const char *type, const char *msg)
{
    char *b = malloc(512);
    if (!b)
        return;
    int n = snprintf(b, 512, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,"
                             "\"code\":null}}", msg, type);
    srv_reply(c, status, "application/json", b, (size_t)n, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    srv *s = cls;
    srv_conn *c = *con_cls;
    (void)version;
    if (!c) { /* headers are in: create the connection's state */
        char why[256];
        if (!tls_peer_ok(s->tls, mc, why, sizeof why)) {
            /* as a handshake that requires a certificate would: no reply */
            log_msg(s->cfg.log, LOG_WARN, "server", NULL, "closed a TLS connection: %s", why);
            return MHD_NO;
        }
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        atomic_init(&c->refs, 1); /* MHD's reference, dropped on completion */
        c->s = s;
        c->mc = mc;
        *con_cls = c;
        c->next = s->live;
        if (s->live)
            s->live->prev = c;
        s->live = c;
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body)
            c->too_big = 1;
        c->t0 = inf_now();
        snprintf(c->method, sizeof c->method, "%s", method);
        snprintf(c->path, sizeof c->path, "%s", url);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, c->client,
                          sizeof c->client);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, c->client,
                          sizeof c->client);
        }
        return MHD_YES;
    }
    if (*upload_size) { /* more body */
        if (!c->too_big && c->len + *upload_size > s->cfg.max_body) {
            c->too_big = 1;
            free(c->body);
            c->body = NULL;
            c->len = c->cap = 0;
        }
        if (!c->too_big) {
            if (c->len + *upload_size + 1 > c->cap) {
                size_t cap = c->cap ? c->cap : 4096;
                while (cap < c->len + *upload_size + 1)
                    cap *= 2;
                char *nb = realloc(c->body, cap);
                if (!nb)
                    return MHD_NO;
                c->body = nb;
                c->cap = cap;
            }
            memcpy(c->body + c->len, upload, *upload_size);
            c->len += *upload_size;
            c->body[c->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (c->state == C_WAIT) { /* resumed: is the call done? */
        if (c->client_gone)
            return MHD_NO;
        int status = 200;
        char *body = NULL;
        size_t len = 0;
        if (c->ops->done(c->call, &status, &body, &len))
            srv_reply(c, status, "application/json", body, len, NULL);
        else
            suspend(c);
        return MHD_YES;
    }
    if (c->state != C_READING)
        return MHD_YES;
    disarm_deadline(mc); /* the request is in: from here the engine's time */
    if (c->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body larger than the limit of %zu bytes",
                 s->cfg.max_body);
        reply_error(c, 413, "invalid_request_error", msg);
        return MHD_YES;
    }
    s->handler(s->app, c, method, url, c->body ? c->body : "", c->len);
    if (c->state == C_READING) /* the handler must answer; be safe */
        reply_error(c, 500, "internal_error", "no response");
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    srv *s = cls;
    srv_conn *c = *con_cls;
    if (!c)
        return;
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    c->closed = 1;
    pthread_mutex_unlock(&s->mu);
    const union MHD_ConnectionInfo *sci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (sci && sci->socket_context) /* the next request on this connection */
        arm_deadline(sci->socket_context);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->ops && c->ops->closed)
        c->ops->closed(c->call, c->client_gone || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK);
    c->ops = NULL;
    if (s->cfg.access_log && c->method[0]) {
        /* 499: the client left before a response (nginx's convention) */
        int status = c->status ? c->status : 499;
        log_access_rec rec = {.method = c->method, .path = c->path, .status = status,
                              .request_id = c->request_id[0] ? c->request_id : NULL,
                              .tokens_in = c->tokens_in, .tokens_out = c->tokens_out,
                              .seconds = inf_now() - c->t0, .client = c->client[0] ? c->client : NULL};
        log_access(s->cfg.log, &rec);
    }
    if (c->poll_init) {
        uv_poll_stop(&c->poll);
        uv_close((uv_handle_t *)&c->poll, on_poll_closed);
    }
    srv_conn_unref(c);
}

/* ---- the loop ----------------------------------------------------------------- */

static void on_mhd_timer(uv_timer_t *t);

/* Lets MHD do its work, then re-arms its timeout. */
static void run_mhd(srv *s)
{
    if (!s->d)
        return;
    MHD_run(s->d);
    MHD_UNSIGNED_LONG_LONG ms = 0;
    if (MHD_get_timeout(s->d, &ms) == MHD_YES)
        uv_timer_start(&s->mhd_timer, on_mhd_timer, ms, 0);
    else
        uv_timer_stop(&s->mhd_timer);
}

static void on_mhd_timer(uv_timer_t *t)
{
    run_mhd(t->data);
}

static void on_mhd_poll(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    run_mhd(p->data);
}

static void begin_shutdown(srv *s);

static void on_wake(uv_async_t *a)
{
    srv *s = a->data;
    pthread_mutex_lock(&s->mu);
    srv_conn *list = s->ready;
    s->ready = NULL;
    post_item *posts = s->posts;
    s->posts = NULL;
    int stop = s->stop_req;
    pthread_mutex_unlock(&s->mu);
    while (posts) {
        post_item *n = posts->next;
        posts->fn(posts->user);
        free(posts);
        posts = n;
    }
    for (srv_conn *c = list, *n; c; c = n) {
        /* read the link before in_ready drops: from then on srv_wake may
         * queue c again, rewriting c->ready_next */
        pthread_mutex_lock(&s->mu);
        n = c->ready_next;
        c->in_ready = 0;
        int closed = c->closed;
        pthread_mutex_unlock(&s->mu);
        if (!closed)
            resume(c);
        srv_conn_unref(c);
    }
    if (stop && !s->stopping)
        begin_shutdown(s);
    run_mhd(s);
}

static void close_handle(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Everything in flight is told to stop; MHD closes the connections. */
static void finish_shutdown(srv *s)
{
    for (srv_conn *c = s->live; c; c = c->next) {
        c->client_gone = 1;
        resume(c);
    }
    for (int i = 0; i < 50 && s->live; i++) {
        run_mhd(s);
        if (s->live)
            uv_run(&s->loop, UV_RUN_NOWAIT);
    }
    for (srv_conn *c = s->live; c; c = c->next)
        resume(c); /* MHD_stop_daemon needs none suspended */
    MHD_stop_daemon(s->d);
    s->d = NULL;
    pthread_mutex_lock(&s->mu);
    s->loop_gone = 1;
    srv_conn *list = s->ready;
    s->ready = NULL;
    pthread_mutex_unlock(&s->mu);
    for (srv_conn *c = list, *n; c; c = n) {
        n = c->ready_next;
        srv_conn_unref(c);
    }
    uv_walk(&s->loop, close_handle, NULL);
}

static int calls_in_flight(const srv *s)
{
    int n = 0;
    for (const srv_conn *c = s->live; c; c = c->next)
        n += c->ops != NULL;
    return n;
}

static void on_grace(uv_timer_t *t)
{
    srv *s = t->data;
    if (calls_in_flight(s) && uv_now(&s->loop) - s->stop_at < (uint64_t)s->cfg.grace_s * 1000u)
        return;
    uv_timer_stop(t);
    finish_shutdown(s);
}

/* Stops accepting; in-flight calls get grace_s seconds (checked every
 * 100 ms: done early when none is left). */
static void begin_shutdown(srv *s)
{
    s->stopping = 1;
    s->stop_at = uv_now(&s->loop);
    log_msg(s->cfg.log, LOG_INFO, "server", NULL,
            "shutting down: %d request(s) in flight, grace %d s", calls_in_flight(s),
            s->cfg.grace_s);
    if (s->cfg.on_shutdown)
        s->cfg.on_shutdown(s->cfg.user);
    MHD_socket ls = MHD_quiesce_daemon(s->d);
    if (ls != MHD_INVALID_SOCKET)
        close(ls);
    uv_signal_stop(&s->sigterm);
    uv_signal_stop(&s->sigint);
    uv_timer_start(&s->grace, on_grace, 100, 100);
}

static void on_signal(uv_signal_t *h, int sig)
{
    srv *s = h->data;
    (void)sig;
    if (!s->stopping)
        begin_shutdown(s);
}

static void on_sighup(uv_signal_t *h, int sig)
{
    srv *s = h->data;
    (void)sig;
    s->cfg.on_reload(s->cfg.user);
}

int srv_run(srv *s)
{
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return 0;
}

int srv_port(const srv *s) { return s->port; }

int srv_is_tls(const srv *s) { return s->tls != NULL; }

int srv_create(const srv_config *cfg, srv_handler handler, void *app, srv **out, inf_err *err)
{
    *out = NULL;
    srv *s = calloc(1, sizeof *s);
    if (!s)
        return inf_fail(err, INF_ERR_NOMEM, "server: out of memory");
    s->cfg = *cfg;
    s->handler = handler;
    s->app = app;
    pthread_mutex_init(&s->mu, NULL);
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    struct sockaddr *addr;
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    if (inet_pton(AF_INET, cfg->host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)cfg->port);
        addr = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, cfg->host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)cfg->port);
        addr = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        free(s);
        return inf_fail(err, INF_ERR_INVALID, "--host %s is not an IPv4 or IPv6 address",
                        cfg->host);
    }
    int rc = tls_create(&cfg->tls, &s->tls, err);
    if (rc) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return rc;
    }
    struct MHD_OptionItem tls_opts[4];
    tls_mhd_options(s->tls, tls_opts, 4);
    flags |= tls_mhd_flags(s->tls);
    uv_loop_init(&s->loop); /* before MHD: connections get loop timers */
    s->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
                            MHD_OPTION_ARRAY, tls_opts,
                            MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
    if (!s->d) {
        uv_loop_close(&s->loop);
        pthread_mutex_destroy(&s->mu);
        int with_tls = s->tls != NULL;
        tls_destroy(s->tls);
        free(s);
        return inf_fail(err, INF_ERR_IO, "cannot listen on %s:%d (in use, or not allowed%s)",
                        cfg->host, cfg->port,
                        with_tls ? ", or the TLS key and certificate do not load: see the "
                                   "libmicrohttpd message above" : "");
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
    uv_poll_init(&s->loop, &s->mhd_poll, di->epoll_fd);
    s->mhd_poll.data = s;
    uv_poll_start(&s->mhd_poll, UV_READABLE, on_mhd_poll);
    uv_timer_init(&s->loop, &s->mhd_timer);
    s->mhd_timer.data = s;
    uv_timer_init(&s->loop, &s->grace);
    s->grace.data = s;
    uv_async_init(&s->loop, &s->wake, on_wake);
    s->wake.data = s;
    uv_signal_init(&s->loop, &s->sigterm);
    s->sigterm.data = s;
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_init(&s->loop, &s->sigint);
    s->sigint.data = s;
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    if (cfg->on_reload) {
        uv_signal_init(&s->loop, &s->sighup);
        s->sighup.data = s;
        uv_signal_start(&s->sighup, on_sighup, SIGHUP);
    }
    run_mhd(s);
    *out = s;
    return INF_OK;
}

void srv_destroy(srv *s)
{
    if (!s)
        return;
    if (s->d)
        MHD_stop_daemon(s->d);
    uv_walk(&s->loop, close_handle, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    while (s->posts) {
        post_item *n = s->posts->next;
        free(s->posts);
        s->posts = n;
    }
    pthread_mutex_destroy(&s->mu);
    tls_destroy(s->tls);
    free(s);
}
