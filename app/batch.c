#include "app/batch.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Requests in flight at once: enough to keep every engine slot busy, well
 * under the server's default --max-waiting (1024). */
#define BATCH_INFLIGHT 256

/* One input line and, once run, its result. */
typedef struct line {
    char *custom_id;
    char *url;          /* the server path, e.g. /v1/completions       */
    char *body;         /* compact JSON text                           */
    char *error;        /* set: the line was not run (why)             */
    long status;
    char *resp;         /* the response body                           */
    size_t resp_len;
    CURL *k;
    struct curl_slist *hdrs;
} line;

static void usage(FILE *f)
{
    fprintf(f, "usage: inferd run-batch -i IN.jsonl -o OUT.jsonl --model DIR [server options]\n\n"
               "Runs OpenAI batch-file requests (/v1/completions, /v1/chat/completions) through\n"
               "the engine with continuous batching and writes OpenAI's batch output format in\n"
               "input order. Server options are those of `inferd serve` (--host and --port are\n"
               "chosen by run-batch: it serves on a free loopback port while it runs).\n");
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
                                     strcmp(u->valuestring, "/v1/chat/completions")))
        l->error = strdup("url must be \"/v1/completions\" or \"/v1/chat/completions\"");
    else if (!cJSON_IsObject(b))
        l->error = strdup("body must be a JSON object");
    else {
        l->url = strdup(u->valuestring);
        l->body = cJSON_PrintUnformatted(b);
    }
    cJSON_Delete(j);
}

static size_t on_data(char *p, size_t sz, size_t n, void *user)
{
    line *l = user;
    char *q = realloc(l->resp, l->resp_len + sz * n + 1);
    if (!q)
        return 0;
    memcpy(q + l->resp_len, p, sz * n);
    l->resp_len += sz * n;
    q[l->resp_len] = 0;
    l->resp = q;
    return sz * n;
}

/* The key the server will want (--api-key, else INFERD_API_KEY), or NULL. */
static const char *api_key(int argc, char **argv)
{
    const char *key = getenv("INFERD_API_KEY");
    for (int i = 0; i < argc; i++) {
        if ((!strcmp(argv[i], "--api-key") || !strcmp(argv[i], "--api_key")) && i + 1 < argc)
            key = argv[++i];
        else if (!strncmp(argv[i], "--api-key=", 10) || !strncmp(argv[i], "--api_key=", 10))
            key = argv[i] + 10;
    }
    return key && *key ? key : NULL;
}

static CURL *post(int port, const char *key, line *l)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, l->url);
    CURL *k = curl_easy_init();
    if (!k)
        return NULL;
    l->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    if (key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
        l->hdrs = curl_slist_append(l->hdrs, auth);
    }
    curl_easy_setopt(k, CURLOPT_URL, url);
    curl_easy_setopt(k, CURLOPT_HTTPHEADER, l->hdrs);
    curl_easy_setopt(k, CURLOPT_POSTFIELDS, l->body);
    curl_easy_setopt(k, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(k, CURLOPT_WRITEDATA, l);
    curl_easy_setopt(k, CURLOPT_PRIVATE, l);
    curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
    return k;
}

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    int port = -1;
    if (s >= 0 && !bind(s, (struct sockaddr *)&a, sizeof a) &&
        !getsockname(s, (struct sockaddr *)&a, &n))
        port = ntohs(a.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

/* Starts `inferd serve ARGS --host 127.0.0.1 --port PORT`; its stdout goes
 * to our stderr so that nothing but results is ours. */
static pid_t spawn_server(int argc, char **argv, int port)
{
    char **av = calloc((size_t)argc + 8, sizeof *av);
    char p[16];
    if (!av)
        return -1;
    snprintf(p, sizeof p, "%d", port);
    int n = 0;
    av[n++] = "inferd";
    av[n++] = "serve";
    for (int i = 0; i < argc; i++)
        av[n++] = argv[i];
    av[n++] = "--host", av[n++] = "127.0.0.1", av[n++] = "--port", av[n++] = p;
    av[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive run-batch */
        dup2(2, 1);
        execv("/proc/self/exe", av);
        fprintf(stderr, "run-batch: cannot start the server: %s\n", strerror(errno));
        _exit(127);
    }
    free(av);
    return pid;
}

/* Waits for /health 200; 0 when ready, -1 when the server exited first. */
static int wait_ready(pid_t pid, int port)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/health", port);
    CURL *k = curl_easy_init();
    if (!k)
        return -1;
    curl_easy_setopt(k, CURLOPT_URL, url);
    curl_easy_setopt(k, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(k, CURLOPT_TIMEOUT, 2L);
    curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            curl_easy_cleanup(k);
            return -1;
        }
        long code = 0;
        if (curl_easy_perform(k) == CURLE_OK &&
            curl_easy_getinfo(k, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200)
            break;
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    curl_easy_cleanup(k);
    return 0;
}

/* Runs every runnable line, BATCH_INFLIGHT at a time; a progress line on
 * stderr as they finish. */
static void run_all(line *ls, int n, int port, const char *key)
{
    CURLM *m = curl_multi_init();
    int next = 0, running = 0, done = 0, todo = 0;
    for (int i = 0; i < n; i++)
        todo += !ls[i].error;
    while (done < todo) {
        while (running < BATCH_INFLIGHT && next < n) {
            line *l = &ls[next++];
            if (l->error)
                continue;
            if (!(l->k = post(port, key, l))) {
                l->error = strdup("out of memory");
                todo--;
                continue;
            }
            curl_multi_add_handle(m, l->k);
            running++;
        }
        int still;
        curl_multi_perform(m, &still);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            line *l;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&l);
            if (msg->data.result != CURLE_OK)
                l->error = strdup(curl_easy_strerror(msg->data.result));
            else
                curl_easy_getinfo(l->k, CURLINFO_RESPONSE_CODE, &l->status);
            curl_multi_remove_handle(m, l->k);
            curl_easy_cleanup(l->k);
            l->k = NULL;
            running--;
            done++;
            if (done == todo || done % 16 == 0)
                fprintf(stderr, "run-batch: %d/%d requests done\n", done, todo);
        }
        if (done < todo)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    curl_multi_cleanup(m);
}

/* One output line (OpenAI's batch output): a run line has a response with
 * the server's status and body; a line that could not be run has an error
 * {"code", "message"} and a null response. */
static int write_line(FILE *f, const line *l, int index)
{
    cJSON *o = cJSON_CreateObject();
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
        cJSON *r = cJSON_AddObjectToObject(o, "response");
        cJSON *body = l->resp ? cJSON_Parse(l->resp) : NULL;
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(body, "id");
        cJSON_AddNumberToObject(r, "status_code", (double)l->status);
        cJSON_AddStringToObject(r, "request_id", cJSON_IsString(rid) ? rid->valuestring : id);
        if (body)
            cJSON_AddItemToObject(r, "body", body);
        else
            cJSON_AddNullToObject(r, "body");
        cJSON_AddNullToObject(o, "error");
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    int ok = s && fprintf(f, "%s\n", s) > 0;
    free(s);
    return ok ? 0 : -1;
}

static int read_lines(const char *path, line **out, int *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "run-batch: %s: %s\n", path, strerror(errno));
        return -1;
    }
    line *ls = NULL;
    int n = 0, cap = 0;
    char *buf = NULL;
    size_t bcap = 0;
    ssize_t len;
    while ((len = getline(&buf, &bcap, f)) >= 0) {
        if (strspn(buf, " \t\r\n") == (size_t)len)
            continue; /* blank lines are not requests */
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            line *q = realloc(ls, (size_t)cap * sizeof *q);
            if (!q)
                break;
            ls = q;
        }
        memset(&ls[n], 0, sizeof ls[n]);
        parse_line(buf, &ls[n++]);
    }
    free(buf);
    fclose(f);
    *out = ls;
    *n_out = n;
    return 0;
}

int batch_main(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int n_rest = 0;
    if (!rest)
        return 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(rest);
            return 0;
        }
        if ((!strcmp(a, "-i") || !strcmp(a, "--input-file")) && i + 1 < argc)
            in = argv[++i];
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output-file")) && i + 1 < argc)
            out = argv[++i];
        else
            rest[n_rest++] = argv[i];
    }
    if (!in || !out) {
        usage(stderr);
        free(rest);
        return 2;
    }
    line *ls = NULL;
    int n = 0, rc = 1;
    if (read_lines(in, &ls, &n)) {
        free(rest);
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int port = free_port();
    pid_t pid = port > 0 ? spawn_server(n_rest, rest, port) : -1;
    if (pid < 0 || wait_ready(pid, port)) {
        fprintf(stderr, "run-batch: the server did not start (its messages are above)\n");
        if (pid > 0)
            waitpid(pid, NULL, 0);
        goto done;
    }
    run_all(ls, n, port, api_key(n_rest, rest));
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "run-batch: %s: %s\n", out, strerror(errno));
        goto done;
    }
    rc = 0;
    for (int i = 0; i < n; i++)
        if (write_line(f, &ls[i], i))
            rc = 1;
    if (fclose(f) || rc) {
        fprintf(stderr, "run-batch: writing %s failed\n", out);
        rc = 1;
    }
done:
    for (int i = 0; i < n; i++) {
        free(ls[i].custom_id), free(ls[i].url), free(ls[i].body);
        free(ls[i].error), free(ls[i].resp);
        curl_slist_free_all(ls[i].hdrs);
    }
    free(ls);
    free(rest);
    curl_global_cleanup();
    return rc;
}
