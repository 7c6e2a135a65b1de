#include "server/cors.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct list {
    char **v;
    int n;
    int any; /* "*" was given */
} list;

struct cors {
    list origins, methods, headers;
    int credentials;
    char methods_text[256];   /* Access-Control-Allow-Methods           */
    char headers_text[1024];  /* Access-Control-Allow-Headers (no "*")  */
};

/* Starlette's ALL_METHODS and SAFELISTED_HEADERS. */
static const char *all_methods[] = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
static const char *safelisted[] = {"Accept", "Accept-Language", "Content-Language",
                                   "Content-Type"};

static void list_free(list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int list_add(list *l, const char *s, size_t len)
{
    while (len && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    if (!len)
        return INF_OK;
    if (len == 1 && *s == '*') {
        l->any = 1;
        return INF_OK;
    }
    char **nv = realloc(l->v, sizeof *nv * (size_t)(l->n + 1));
    if (!nv)
        return INF_ERR_NOMEM;
    l->v = nv;
    if (!(l->v[l->n] = strndup(s, len)))
        return INF_ERR_NOMEM;
    l->n++;
    return INF_OK;
}

/* '["a", "b"]' (vLLM's JSON) or "a, b"; NULL gives "*". */
static int parse_list(const char *opt, const char *text, list *l, inf_err *err)
{
    if (!text)
        return list_add(l, "*", 1);
    const char *p = text;
    while (*p == ' ')
        p++;
    int rc = INF_OK;
    if (*p == '[') {
        cJSON *j = cJSON_Parse(p);
        const cJSON *it;
        if (!cJSON_IsArray(j))
            rc = INF_ERR_INVALID;
        cJSON_ArrayForEach(it, j) {
            if (!cJSON_IsString(it)) {
                rc = INF_ERR_INVALID;
                break;
            }
            if (!rc && (rc = list_add(l, it->valuestring, strlen(it->valuestring))))
                break;
        }
        cJSON_Delete(j);
    } else {
        for (const char *s = p; !rc;) {
            const char *e = strchr(s, ',');
            rc = list_add(l, s, e ? (size_t)(e - s) : strlen(s));
            if (!e)
                break;
            s = e + 1;
        }
    }
    if (rc == INF_ERR_NOMEM)
        return inf_fail(err, rc, "out of memory");
    if (rc)
        return inf_fail(err, rc, "--%s: expected a JSON list of strings (e.g. '[\"*\"]') or "
                                 "comma-separated values, got '%s'", opt, text);
    return INF_OK;
}

static void join(char *out, size_t cap, const char *const *v, int n)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        int w = snprintf(out + len, cap - len, "%s%s", i ? ", " : "", v[i]);
        if (w < 0 || (size_t)w >= cap - len)
            break;
        len += (size_t)w;
    }
}

static int has(const list *l, const char *s, int fold)
{
    for (int i = 0; i < l->n; i++)
        if (fold ? !strcasecmp(l->v[i], s) : !strcmp(l->v[i], s))
            return 1;
    return 0;
}

int cors_create(const cors_config *cfg, cors **out, inf_err *err)
{
    *out = NULL;
    if (!cfg->allowed_origins || !*cfg->allowed_origins)
        return INF_OK;
    cors *c = calloc(1, sizeof *c);
    if (!c)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    c->credentials = cfg->allow_credentials;
    int rc = parse_list("allowed-origins", cfg->allowed_origins, &c->origins, err);
    if (!rc)
        rc = parse_list("allowed-methods", cfg->allowed_methods, &c->methods, err);
    if (!rc)
        rc = parse_list("allowed-headers", cfg->allowed_headers, &c->headers, err);
    if (rc) {
        cors_destroy(c);
        return rc;
    }
    if (!c->origins.any && !c->origins.n) {
        cors_destroy(c);
        return inf_fail(err, INF_ERR_INVALID, "--allowed-origins: the list is empty");
    }
    if (c->methods.any)
        join(c->methods_text, sizeof c->methods_text, all_methods, 7);
    else
        join(c->methods_text, sizeof c->methods_text, (const char *const *)c->methods.v,
             c->methods.n);
    /* the safelisted headers are always allowed, then the configured ones */
    const char *hv[4 + 64];
    int nh = 0;
    for (int i = 0; i < 4; i++)
        hv[nh++] = safelisted[i];
    for (int i = 0; i < c->headers.n && nh < 68; i++)
        if (!has(&(list){(char **)safelisted, 4, 0}, c->headers.v[i], 1))
            hv[nh++] = c->headers.v[i];
    join(c->headers_text, sizeof c->headers_text, hv, nh);
    *out = c;
    return INF_OK;
}

void cors_destroy(cors *c)
{
    if (!c)
        return;
    list_free(&c->origins);
    list_free(&c->methods);
    list_free(&c->headers);
    free(c);
}

static void add(cors_result *r, const char *name, const char *value)
{
    if (r->n == CORS_MAX_HEADERS)
        return;
    r->h[r->n].name = name;
    snprintf(r->h[r->n].value, sizeof r->h[r->n].value, "%s", value);
    r->n++;
}

/* Every comma-separated name of the request's list is allowed. */
static int headers_allowed(const cors *c, const char *req)
{
    if (c->headers.any || !req)
        return 1;
    for (const char *s = req; *s;) {
        while (*s == ' ' || *s == ',')
            s++;
        size_t n = strcspn(s, ",");
        while (n && s[n - 1] == ' ')
            n--;
        if (n) {
            char name[128];
            if (n >= sizeof name)
                return 0;
            memcpy(name, s, n);
            name[n] = '\0';
            int ok = has(&c->headers, name, 1);
            for (int i = 0; i < 4 && !ok; i++)
                ok = !strcasecmp(name, safelisted[i]);
            if (!ok)
                return 0;
        }
        s += strcspn(s, ",");
    }
    return 1;
}

void cors_apply(const cors *c, const char *method, const char *origin, const char *req_method,
                const char *req_headers, cors_result *r)
{
    memset(r, 0, sizeof *r);
    if (!c || !origin)
        return;
    int origin_ok = c->origins.any || has(&c->origins, origin, 0);
    /* echo the origin (and say the answer varies with it) unless any origin
     * may read without credentials: then "*" */
    int explicit_origin = !c->origins.any || c->credentials;
    if (method && !strcmp(method, "OPTIONS") && req_method) {
        r->preflight = 1;
        int method_ok = c->methods.any || has(&c->methods, req_method, 0);
        int hdrs_ok = headers_allowed(c, req_headers) &&
                      (!req_headers || strlen(req_headers) < sizeof r->h[0].value);
        if (!origin_ok || !method_ok || !hdrs_ok) {
            r->status = 400;
            r->body = !origin_ok ? "Disallowed CORS origin"
                      : !method_ok ? "Disallowed CORS method"
                                   : "Disallowed CORS headers";
            return;
        }
        r->status = 200;
        r->body = "OK";
        add(r, "Access-Control-Allow-Origin", explicit_origin ? origin : "*");
        add(r, "Access-Control-Allow-Methods", c->methods_text);
        /* "*" headers: mirror what the browser asks for */
        add(r, "Access-Control-Allow-Headers",
            c->headers.any && req_headers ? req_headers : c->headers_text);
        add(r, "Access-Control-Max-Age", "600");
        if (explicit_origin)
            add(r, "Vary", "Origin");
        if (c->credentials)
            add(r, "Access-Control-Allow-Credentials", "true");
        return;
    }
    if (!origin_ok)
        return;
    add(r, "Access-Control-Allow-Origin", explicit_origin ? origin : "*");
    if (explicit_origin)
        add(r, "Vary", "Origin");
    if (c->credentials)
        add(r, "Access-Control-Allow-Credentials", "true");
}
