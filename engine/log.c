#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "json_esc.h"

struct logger {
    log_config cfg;
    pthread_mutex_t mu;
};

static const char *level_name[] = {"debug", "info", "warn", "error"};

log_config log_config_default(void)
{
    log_config c = {.format = LOG_TEXT, .min_level = LOG_INFO, .out = NULL};
    return c;
}

int log_create(const log_config *cfg, logger **out, inf_err *err)
{
    logger *l = calloc(1, sizeof *l);
    if (!l)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    l->cfg = *cfg;
    if (!l->cfg.out)
        l->cfg.out = stderr;
    pthread_mutex_init(&l->mu, NULL);
    *out = l;
    return INF_OK;
}

void log_destroy(logger *l)
{
    if (!l)
        return;
    pthread_mutex_destroy(&l->mu);
    free(l);
}

int log_is_json(const logger *l) { return l && l->cfg.format == LOG_JSON; }

static void timestamp(char *buf, size_t n)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + k, n - k, ".%03ldZ", (long)(tv.tv_usec / 1000));
}

static void write_line(logger *l, const char *line, size_t len)
{
    FILE *f = l ? l->cfg.out : stderr;
    if (l)
        pthread_mutex_lock(&l->mu);
    fwrite(line, 1, len, f);
    fflush(f);
    if (l)
        pthread_mutex_unlock(&l->mu);
}

void log_msg(logger *l, log_level lv, const char *component, const char *request_id,
             const char *fmt, ...)
{
    if (lv < (l ? l->cfg.min_level : LOG_INFO)) /* no logger: the default level */
        return;
    char msg[1536], ts[40], line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    timestamp(ts, sizeof ts);
    size_t n;
    if (log_is_json(l)) {
        n = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":\"",
                             ts, level_name[lv]);
        n = json_esc_into(line, sizeof line, n, component);
        if (request_id) {
            n += (size_t)snprintf(line + n, sizeof line - n, "\",\"request_id\":\"");
            n = json_esc_into(line, sizeof line, n, request_id);
        }
        n += (size_t)snprintf(line + n, sizeof line - n, "\",\"msg\":\"");
        n = json_esc_into(line, sizeof line, n, msg);
        n += (size_t)snprintf(line + n, sizeof line - n, "\"}\n");
    } else {
        n = (size_t)snprintf(line, sizeof line, "%s %-5s %s%s%s%s %s\n", ts, level_name[lv],
                             component, request_id ? " [" : "", request_id ? request_id : "",
                             request_id ? "]" : "", msg);
    }
    if (n >= sizeof line) { /* cut long lines but keep them lines */
        n = sizeof line - 1;
        line[n - 1] = '\n';
    }
    write_line(l, line, n);
}

void log_access(logger *l, const log_access_rec *r)
{
    if (l && LOG_INFO < l->cfg.min_level)
        return;
    char ts[40], line[2048];
    timestamp(ts, sizeof ts);
    size_t n;
    if (log_is_json(l)) {
        n = (size_t)snprintf(line, sizeof line,
                             "{\"ts\":\"%s\",\"level\":\"info\",\"component\":\"access\","
                             "\"method\":\"", ts);
        n = json_esc_into(line, sizeof line, n, r->method);
        n += (size_t)snprintf(line + n, sizeof line - n, "\",\"path\":\"");
        n = json_esc_into(line, sizeof line, n, r->path);
        n += (size_t)snprintf(line + n, sizeof line - n, "\",\"status\":%d,\"client\":\"",
                              r->status);
        n = json_esc_into(line, sizeof line, n, r->client ? r->client : "");
        if (r->request_id) {
            n += (size_t)snprintf(line + n, sizeof line - n, "\",\"request_id\":\"");
            n = json_esc_into(line, sizeof line, n, r->request_id);
        }
        n += (size_t)snprintf(line + n, sizeof line - n,
                              "\",\"tokens_in\":%d,\"tokens_out\":%d,\"latency_s\":%.6f}\n",
                              r->tokens_in, r->tokens_out, r->seconds);
    } else {
        n = (size_t)snprintf(line, sizeof line,
                             "%s info  access%s%s%s %s %s %s %d tokens_in=%d tokens_out=%d "
                             "latency=%.6fs\n",
                             ts, r->request_id ? " [" : "", r->request_id ? r->request_id : "",
                             r->request_id ? "]" : "", r->client ? r->client : "-", r->method,
                             r->path, r->status, r->tokens_in, r->tokens_out, r->seconds);
    }
    if (n >= sizeof line) {
        n = sizeof line - 1;
        line[n - 1] = '\n';
    }
    write_line(l, line, n);
}
