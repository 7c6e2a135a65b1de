/* log_: one line per event on stderr (journald and docker logs collect it):
 * time, level, component, request id when there is one, message. Text for
 * people or JSON for log pipelines (--log-format). Thread-safe: each line is
 * written whole. Never given API keys; prompt text only when the operator
 * asked for it. */
#ifndef INFERD_LOG_H
#define INFERD_LOG_H

#include <stdio.h>

#include "common.h"

typedef enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 } log_level;
typedef enum log_format { LOG_TEXT = 0, LOG_JSON = 1 } log_format;

typedef struct log_config {
    log_format format;
    log_level min_level;   /* lines below it are dropped                    */
    FILE *out;             /* default stderr                                */
} log_config;

log_config log_config_default(void);

typedef struct logger logger;

int log_create(const log_config *cfg, logger **out, inf_err *err);
void log_destroy(logger *l); /* NULL-safe */

/* One event. request_id may be NULL. l may be NULL (the line goes to
 * stderr as text, info and above): components work before the logger
 * exists. */
void log_msg(logger *l, log_level lv, const char *component, const char *request_id,
             const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The access log's record of one HTTP request. */
typedef struct log_access_rec {
    const char *method, *path;
    int status;
    const char *request_id;  /* NULL for non-generation requests            */
    int tokens_in, tokens_out;
    double seconds;
    const char *client;      /* peer address, may be NULL                  */
} log_access_rec;

void log_access(logger *l, const log_access_rec *r);

/* Whether l writes JSON (callers then avoid pretty terminal output). */
int log_is_json(const logger *l);

#endif
