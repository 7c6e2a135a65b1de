#include "app/batch.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/serve.h"
#include "engine/common.h"
#include "server/api.h"

/* Calls in flight at once: enough to keep every engine slot busy with a
 * queue behind them, well under the default --max-waiting (1024). */
#define BATCH_INFLIGHT 256

/* One input line and, once run, its result. */
typedef struct line {
    char *custom_id;
    char *url;          /* the endpoint, e.g. /v1/completions          */
    char *body;         /* compact JSON text                           */
    char *error;        /* set: the line was not run (why)             */
    int status;
    char *resp;         /* the response body (the server's bytes)      */
    gcall *call;        /* while in flight                             */
    int woken;          /* under run.mu: an engine request finished    */
    int done;
    int retries;        /* 503s with nothing in flight                 */
    struct run *run;
} line;

typedef struct run {
    const char *in, *out;
    line *ls;
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;        /* under mu: wake-ups not yet looked at         */
    int tty;
    double t0, last_log;
} run;

static void usage(FILE *f)
{
    fprintf(f, "usage: inferd run-batch -i IN.jsonl -o OUT.jsonl (MODEL | --model MODEL) "
               "[options]\n\n"
               "Runs OpenAI batch-file requests (/v1/completions, /v1/chat/completions,\n"
               "/v1/responses) through the engine in this process, with continuous batching,\n"
               "and writes OpenAI's batch output format in input order. Each body is handled\n"
               "exactly as `inferd serve` handles it. `-` reads stdin or writes stdout.\n"
               "The model options are those of `inferd serve --help`. vLLM's run-batch flags\n"
               "--output-tmp-dir, --enable-metrics, --url, --port and --response-role\n"
               "assistant are accepted and change nothing.\n");
}

/* Checks one input line; fills l->error when it cannot be run. */
static void parse_line(const char *text, line *l)
{
    cJSON *j = cJSON_Parse(text);
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(j, "custom_id");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "method");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "url");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "body");
    if (cJSON_IsString(cid))
        l->custom_id = strdup(cid->valuestring);
    if (!cJSON_IsObject(j))
        l->error = strdup("the line is not a JSON object");
    else if (!cJSON_IsString(cid))
        l->error = strdup("custom_id must be a string");
    else if (!cJSON_IsString(m) || strcmp(m->valuestring, "POST"))
        l->error = strdup("method must be \"POST\"");
    else if (!cJSON_IsString(u) || (strcmp(u->valuestring, "/v1/completions") &&
                                     strcmp(u->valuestring, "/v1/chat/completions") &&
                                     strcmp(u->valuestring, "/v1/responses")))
        l->error = strdup("url must be \"/v1/completions\", \"/v1/chat/completions\" or "
                          "\"/v1/responses\"");
    else if (!cJSON_IsObject(b))
        l->error = strdup("body must be a JSON object");
    else {
        l->url = strdup(u->valuestring);
        l->body = cJSON_PrintUnformatted(b);
    }
    cJSON_Delete(j);
}

static int read_lines(const char *path, line **out, int *n_out)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        fprintf(stderr, "run-batch: %s: %s\n", path, strerror(errno));
        return -1;
    }
    line *ls = NULL;
    int n = 0, cap = 0, rc = 0;
    char *buf = NULL;
    size_t bcap = 0;
    ssize_t len;
    while ((len = getline(&buf, &bcap, f)) >= 0) {
        if (strspn(buf, " \t\r\n") == (size_t)len)
            continue; /* blank lines are not requests */
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            line *q = realloc(ls, (size_t)cap * sizeof *q);
            if (!q) {
                fprintf(stderr, "run-batch: out of memory reading %s\n", path);
                rc = -1;
                break;
            }
            ls = q;
        }
        memset(&ls[n], 0, sizeof ls[n]);
        parse_line(buf, &ls[n++]);
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "run-batch: reading %s failed\n", path);
        rc = -1;
    }
    free(buf);
    if (f != stdin)
        fclose(f);
    *out = ls;
    *n_out = n;
    return rc;
}

/* One output line (OpenAI's batch output): a run line has a response with
 * the server's status and body (its bytes as the server sends them); a line
 * that could not be run has an error {"code", "message"} and a null
 * response. */
static int write_line(FILE *f, const line *l, int index)
{
    cJSON *o = cJSON_CreateObject(), *body = NULL;
    char id[32];
    snprintf(id, sizeof id, "batch-req-%d", index);
    cJSON_AddStringToObject(o, "id", id);
    if (l->custom_id)
        cJSON_AddStringToObject(o, "custom_id", l->custom_id);
    else
        cJSON_AddNullToObject(o, "custom_id");
    if (l->error) {
        cJSON_AddNullToObject(o, "response");
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "code", "invalid_request");
        cJSON_AddStringToObject(e, "message", l->error);
    } else {
        body = l->resp ? cJSON_Parse(l->resp) : NULL; /* for its id only */
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(body, "id");
        cJSON *r = cJSON_AddObjectToObject(o, "response");
        cJSON_AddNumberToObject(r, "status_code", l->status);
        cJSON_AddStringToObject(r, "request_id", cJSON_IsString(rid) ? rid->valuestring : id);
        cJSON_AddNullToObject(o, "error");
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    cJSON_Delete(body);
    if (!s)
        return -1;
    int ok;
    if (l->error) {
        ok = fprintf(f, "%s\n", s) > 0;
    } else { /* splice the body in after request_id: ...,"request_id":"..."} */
        char *end = strstr(s, "},\"error\":null}");
        ok = end && fprintf(f, "%.*s,\"body\":%s},\"error\":null}\n", (int)(end - s), s,
                            body && l->resp ? l->resp : "null") > 0;
    }
    free(s);
    return ok ? 0 : -1;
}

/* Engine thread: one of the line's engine requests finished. */
static void on_wake(void *user)
{
    line *l = user;
    run *r = l->run;
    pthread_mutex_lock(&r->mu);
    l->woken = 1;
    r->pending++;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* A bar on a terminal; otherwise a log line every 10 s and at the end. */
static void progress(run *r, int done, int total, int final)
{
    double now = inf_now(), el = now - r->t0;
    if (r->tty) {
        char bar[31];
        int fill = total ? done * 30 / total : 30;
        memset(bar, '#', (size_t)fill);
        memset(bar + fill, '.', (size_t)(30 - fill));
        bar[30] = '\0';
        fprintf(stderr, "\rrun-batch [%s] %d/%d requests, %.0f s%s", bar, done, total, el,
                final ? "\n" : "");
    } else if (final || now - r->last_log >= 10) {
        r->last_log = now;
        fprintf(stderr, "run-batch: %d/%d requests done (%.0f s)\n", done, total, el);
    }
}

/* Submits lines, BATCH_INFLIGHT in flight at once, collects their replies
 * and writes every line in input order as soon as those before it are. */
static int run_all(run *r, api *a, FILE *out)
{
    int next = 0, written = 0, inflight = 0, done = 0, rc = 0;
    while (written < r->n) {
        while (inflight < BATCH_INFLIGHT && next < r->n) {
            line *l = &r->ls[next++];
            if (l->error) {
                l->done = 1;
                done++;
                continue;
            }
            oai_error err = {0};
            int st = api_submit(a, l->url, l->body, strlen(l->body), on_wake, l, &l->call, &err);
            if (st == 503 && (inflight || l->retries++ < 50)) {
                /* the engine's queue is full: again once some finish (or,
                 * with none in flight, once it has counted the queue again) */
                next--;
                if (!inflight)
                    nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
                break;
            }
            if (st) { /* the server's error reply, as a response */
                l->status = st;
                l->resp = oai_error_json(&err);
                l->done = 1;
                done++;
            } else {
                inflight++;
            }
        }
        int any = 0;
        for (; written < r->n && r->ls[written].done; written++, any = 1)
            if (write_line(out, &r->ls[written], written))
                rc = -1;
        if (any)
            progress(r, done, r->n, 0);
        if (written == r->n || rc)
            break;
        pthread_mutex_lock(&r->mu);
        while (!r->pending && inflight) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1; /* the progress clock ticks on */
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
            if (!r->pending) {
                pthread_mutex_unlock(&r->mu);
                progress(r, done, r->n, 0);
                pthread_mutex_lock(&r->mu);
            }
        }
        r->pending = 0;
        pthread_mutex_unlock(&r->mu);
        for (int i = written; i < next; i++) {
            line *l = &r->ls[i];
            pthread_mutex_lock(&r->mu);
            int woken = l->woken;
            l->woken = 0;
            pthread_mutex_unlock(&r->mu);
            if (!l->call || !woken)
                continue;
            char *body = NULL;
            size_t len = 0;
            if (gcall_poll(l->call, &l->status, &body, &len)) {
                l->resp = body;
                gcall_release(l->call);
                l->call = NULL;
                l->done = 1;
                inflight--;
                done++;
            }
        }
    }
    for (int i = 0; i < r->n; i++) { /* a write failed: stop what still runs */
        gcall_release(r->ls[i].call);
        r->ls[i].call = NULL;
    }
    progress(r, done, r->n, 1);
    return rc;
}

static int on_loaded(void *user, api *a)
{
    run *r = user;
    FILE *f = strcmp(r->out, "-") ? fopen(r->out, "w") : stdout;
    if (!f) {
        fprintf(stderr, "run-batch: %s: %s\n", r->out, strerror(errno));
        return 1;
    }
    r->t0 = r->last_log = inf_now();
    int rc = run_all(r, a, f);
    if ((f == stdout ? fflush(f) : fclose(f)) || rc) {
        fprintf(stderr, "run-batch: writing %s failed\n", r->out);
        return 1;
    }
    return 0;
}

/* vLLM's run-batch flags that change nothing here; *skip: their values. */
static int vllm_noop(const char *a, int *skip)
{
    static const char *const with_value[] = {"--output-tmp-dir", "--url", "--port",
                                             "--response-role"};
    *skip = 0;
    if (!strcmp(a, "--enable-metrics") || !strcmp(a, "--enable_metrics"))
        return 1;
    for (size_t i = 0; i < sizeof with_value / sizeof *with_value; i++) {
        size_t n = strlen(with_value[i]);
        char us[32];
        snprintf(us, sizeof us, "%s", with_value[i]);
        for (char *p = us + 2; *p; p++)
            *p = *p == '-' ? '_' : *p;
        if (!strcmp(a, with_value[i]) || !strcmp(a, us))
            return *skip = 1, 1;
        if ((!strncmp(a, with_value[i], n) || !strncmp(a, us, n)) && a[n] == '=')
            return 1;
    }
    return 0;
}

int batch_main(int argc, char **argv)
{
    run r = {0};
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int n_rest = 0;
    if (!rest)
        return 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int skip;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(rest);
            return 0;
        }
        if ((!strcmp(a, "-i") || !strcmp(a, "--input-file") || !strcmp(a, "--input_file")) &&
            i + 1 < argc) {
            r.in = argv[++i];
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--output-file") ||
                    !strcmp(a, "--output_file")) && i + 1 < argc) {
            r.out = argv[++i];
        } else if (vllm_noop(a, &skip)) {
            const char *val = skip ? (i + 1 < argc ? argv[i + 1] : NULL) : strchr(a, '=');
            if (val && !skip)
                val++;
            if (!strncmp(a + 2, "response", 8) && (!val || strcmp(val, "assistant"))) {
                fprintf(stderr, "run-batch: --response-role: only \"assistant\" is supported\n");
                free(rest);
                return 2;
            }
            fprintf(stderr, "run-batch: %s changes nothing here (vLLM's flag, accepted)\n", a);
            i += skip;
        } else {
            rest[n_rest++] = argv[i];
        }
    }
    if (!r.in || !r.out) {
        usage(stderr);
        free(rest);
        return 2;
    }
    if (read_lines(r.in, &r.ls, &r.n)) {
        free(r.ls);
        free(rest);
        return 1;
    }
    for (int i = 0; i < r.n; i++)
        r.ls[i].run = &r;
    r.tty = isatty(STDERR_FILENO);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    int rc = serve_offline(n_rest, rest, on_loaded, &r);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    for (int i = 0; i < r.n; i++) {
        free(r.ls[i].custom_id), free(r.ls[i].url), free(r.ls[i].body);
        free(r.ls[i].error), free(r.ls[i].resp);
    }
    free(r.ls);
    free(rest);
    return rc;
}
