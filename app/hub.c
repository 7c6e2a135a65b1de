#include "app/hub.h"


#include <cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/hub_gguf.h"

enum { HUB_RETRIES = 3 };

/* A name the cache may join to a snapshot's path: relative, never climbing
 * out (a listing or an index is the Hub's text, not ours). */
static int in_snapshot(const char *f)
{
    return *f && f[0] != '/' && !strstr(f, "..");
}

/* The files serving reads; anything else in a repository is left there. */
static int wanted(const char *f)
{
    if (!in_snapshot(f))
        return 0;
    static const char *names[] = {"config.json", "generation_config.json", "tokenizer.model",
                                  "tokenizer.json", "tokenizer_config.json",
                                  "special_tokens_map.json", "added_tokens.json",
                                  "chat_template.jinja", "chat_template.json",
                                  "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(f, names[i]))
            return 1;
    size_t n = strlen(f);
    return (!strchr(f, '/') && n > 12 && !strcmp(f + n - 12, ".safetensors")) ||
           hub_gguf_name(f); /* one model of them is fetched (hub_gguf_pick) */
}

/* The files a tokenizer given by id (--tokenizer ORG/NAME) needs. */
static int wanted_tokenizer(const char *f)
{
    static const char *names[] = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                                  "special_tokens_map.json", "added_tokens.json",
                                  "chat_template.jinja", "chat_template.json",
                                  "generation_config.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(f, names[i]))
            return 1;
    return 0;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* A positive number of seconds from the environment, else def. */
static long env_seconds(const char *name, long def)
{
    const char *v = env(name);
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    return v && *end == '\0' && n > 0 ? n : def;
}

void hub_config_from_env(hub_config *c)
{
    memset(c, 0, sizeof *c);
    c->etag_timeout = env_seconds("HF_HUB_ETAG_TIMEOUT", 10);
    c->download_timeout = env_seconds("HF_HUB_DOWNLOAD_TIMEOUT", 10);
    c->endpoint = env("HF_ENDPOINT") ? env("HF_ENDPOINT") : "https://huggingface.co";
    c->revision = "main";
    const char *home = env("HF_HOME");
    if (env("HF_HUB_CACHE")) {
        c->cache = env("HF_HUB_CACHE");
    } else {
        if (home)
            snprintf(c->buf[0], sizeof c->buf[0], "%s/hub", home);
        else
            snprintf(c->buf[0], sizeof c->buf[0], "%s/.cache/huggingface/hub",
                     env("HOME") ? env("HOME") : "/");
        c->cache = c->buf[0];
    }
    const char *off = env("HF_HUB_OFFLINE");
    c->offline = off && strcmp(off, "0") && strcasecmp(off, "false") && strcasecmp(off, "no");
    c->token = env("HF_TOKEN");
    if (!c->token) { /* the file `huggingface-cli login` writes */
        if (env("HF_TOKEN_PATH"))
            snprintf(c->buf[1], sizeof c->buf[1], "%s", env("HF_TOKEN_PATH"));
        else if (home)
            snprintf(c->buf[1], sizeof c->buf[1], "%s/token", home);
        else
            snprintf(c->buf[1], sizeof c->buf[1], "%s/.cache/huggingface/token",
                     env("HOME") ? env("HOME") : "/");
        FILE *f = fopen(c->buf[1], "r");
        if (f) {
            size_t n = fread(c->buf[2], 1, sizeof c->buf[2] - 1, f);
            fclose(f);
            while (n && (c->buf[2][n - 1] == '\n' || c->buf[2][n - 1] == ' '))
                n--;
            c->buf[2][n] = '\0';
            c->token = n ? c->buf[2] : NULL;
        }
    }
}

static int id_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.';
}

/* id past an "hf.co/" or "huggingface.co/" in front (Ollama's form). */
static const char *id_body(const char *id)
{
    static const char *const hosts[] = {"hf.co/", "huggingface.co/"};
    for (size_t i = 0; id && i < sizeof hosts / sizeof *hosts; i++)
        if (!strncmp(id, hosts[i], strlen(hosts[i])))
            return id + strlen(hosts[i]);
    return id;
}

int hub_is_repo_id(const char *s)
{
    struct stat st;
    if (!s || !*s || stat(s, &st) == 0)
        return 0;
    s = id_body(s);
    if (!*s || s[0] == '.' || s[0] == '/' || strstr(s, ".."))
        return 0;
    size_t n;
    const char *tag = hub_gguf_tag(s, &n); /* ORG/NAME:TAG names GGUF files */
    int slashes = 0;
    for (const char *p = s; p < s + n; p++) {
        if (*p == '/')
            slashes++;
        else if (!id_char(*p))
            return 0;
    }
    for (const char *p = tag; p && *p; p++)
        if (!id_char(*p))
            return 0;
    return slashes == 1 && n > 0 && s[n - 1] != '/' && strchr(s, '/')[1] != '.' &&
           (!tag || *tag);
}

static int is_commit(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return 0;
    return n == 40;
}

/* mkdir -p of path's directories (the last component too when all). */
static int mkdirs(const char *path, int all)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) && errno != EEXIST)
                return -1;
            *s = '/';
        }
    return all && mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0; /* follows the snapshot's links to blobs */
}

/* A snapshot serving can use: config.json and every weight file; or, for a
 * tokenizer alone, tokenizer.json or tokenizer.model. */
static int snapshot_complete(const char *snap, int tokenizer_only)
{
    char p[4352];
    if (tokenizer_only) {
        snprintf(p, sizeof p, "%s/tokenizer.json", snap);
        if (exists(p))
            return 1;
        snprintf(p, sizeof p, "%s/tokenizer.model", snap);
        return exists(p);
    }
    snprintf(p, sizeof p, "%s/config.json", snap);
    if (!exists(p))
        return 0;
    snprintf(p, sizeof p, "%s/model.safetensors", snap);
    if (exists(p))
        return 1;
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", snap);
    char *text = NULL;
    size_t len;
    inf_err e = {0};
    cJSON *j = inf_read_file(p, (size_t)64 << 20, &text, &len, NULL, &e) ? NULL
                                                                         : cJSON_Parse(text);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map"), *it;
    int ok = cJSON_IsObject(map);
    cJSON_ArrayForEach(it, map) {
        snprintf(p, sizeof p, "%s/%s", snap, cJSON_IsString(it) ? it->valuestring : "");
        ok = ok && cJSON_IsString(it) && in_snapshot(it->valuestring) && exists(p);
    }
    cJSON_Delete(j);
    return ok;
}

/* ---- HTTP ------------------------------------------------------------------ */

typedef struct http {
    const hub_config *c;
    const char *file;          /* for progress                                */
    long status;
    hub_headers hd;
    long long from;
    FILE *out;                 /* body to a file, or                          */
    char *mem;                 /* to memory                                   */
    size_t mem_len;
} http;

static void header_value(const char *line, size_t n, const char *name, char *dst, size_t cap)
{
    size_t k = strlen(name);
    if (n <= k + 1 || strncasecmp(line, name, k) || line[k] != ':')
        return;
    const char *v = line + k + 1;
    size_t m = n - k - 1;
    while (m && (*v == ' ' || *v == '\t'))
        v++, m--;
    while (m && (v[m - 1] == '\r' || v[m - 1] == '\n' || v[m - 1] == ' '))
        m--;
    if (m >= 2 && v[0] == 'W' && v[1] == '/') /* a weak ETag: the tag is the same */
        v += 2, m -= 2;
    if (m >= 2 && v[0] == '"' && v[m - 1] == '"')
        v++, m -= 2;
    snprintf(dst, cap, "%.*s", (int)m, v);
}

void hub_header_line(hub_headers *h, const char *line, size_t n)
{
    char num[32] = "";
    if (n > 5 && !strncmp(line, "HTTP/", 5)) { /* a new response (after a redirect) */
        h->etag[0] = '\0';
        h->length = -1;
    }
    header_value(line, n, "ETag", h->etag, sizeof h->etag);
    header_value(line, n, "X-Linked-Etag", h->linked_etag, sizeof h->linked_etag);
    header_value(line, n, "X-Repo-Commit", h->commit, sizeof h->commit);
    header_value(line, n, "X-Linked-Size", num, sizeof num);
    if (*num)
        h->linked_size = atoll(num);
    num[0] = '\0';
    header_value(line, n, "Content-Length", num, sizeof num);
    if (*num)
        h->length = atoll(num);
}

static size_t on_header(char *line, size_t size, size_t nitems, void *user)
{
    http *h = user;
    hub_header_line(&h->hd, line, size * nitems);
    return size * nitems;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *user)
{
    http *h = user;
    size_t n = size * nmemb;
    if (h->out)
        return fwrite(p, 1, n, h->out);
    char *m = realloc(h->mem, h->mem_len + n + 1);
    if (!m)
        return 0;
    memcpy(m + h->mem_len, p, n);
    h->mem = m;
    h->mem_len += n;
    m[h->mem_len] = '\0';
    return n;
}

static int on_progress(void *user, curl_off_t total, curl_off_t now, curl_off_t ut, curl_off_t un)
{
    http *h = user;
    (void)ut;
    (void)un;
    if (h->c->progress && h->file)
        h->c->progress(h->c->user, h->file, (size_t)(h->from + now),
                       total > 0 ? (size_t)(h->from + total) : 0);
    return 0;
}

/* One request: head (no body), follow redirects or not; the body to h->out
 * or h->mem, from byte h->from. Returns the curl code; h->status is set. */
static CURLcode request(http *h, const char *url, int head, int follow, char *cerr)
{
    CURL *k = curl_easy_init();
    if (!k)
        return CURLE_OUT_OF_MEMORY;
    struct curl_slist *hdrs = NULL;
    char auth[4200];
    if (h->c->token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", h->c->token);
        hdrs = curl_slist_append(hdrs, auth);
    }
    hdrs = curl_slist_append(hdrs, "User-Agent: inferd/" INFERD_VERSION);
    char range[64];
    curl_easy_setopt(k, CURLOPT_URL, url);
    curl_easy_setopt(k, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(k, CURLOPT_NOBODY, (long)head);
    curl_easy_setopt(k, CURLOPT_FOLLOWLOCATION, (long)follow);
    curl_easy_setopt(k, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(k, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(k, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(k, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(k, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(k, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(k, CURLOPT_XFERINFODATA, h);
    curl_easy_setopt(k, CURLOPT_NOPROGRESS, 0L);
    /* metadata (a HEAD, the API's answer): connect and answer within the
     * ETag timeout, so an unreachable Hub fails fast; a file's bytes: connect
     * within the download timeout, then the stall limit below */
    long t = h->out ? h->c->download_timeout : h->c->etag_timeout;
    curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT, t);
    if (!h->out)
        curl_easy_setopt(k, CURLOPT_TIMEOUT, t);
    curl_easy_setopt(k, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stalled transfer fails */
    curl_easy_setopt(k, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(k, CURLOPT_ERRORBUFFER, cerr);
    if (h->from > 0) {
        snprintf(range, sizeof range, "%lld-", h->from);
        curl_easy_setopt(k, CURLOPT_RANGE, range);
    }
    cerr[0] = '\0';
    CURLcode rc = curl_easy_perform(k);
    curl_easy_getinfo(k, CURLINFO_RESPONSE_CODE, &h->status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(k);
    return rc;
}

/* One line for a failed request. */
static int http_fail(const http *h, CURLcode rc, const char *cerr, const char *repo,
                     const char *what, inf_err *err)
{
    if (rc != CURLE_OK)
        return inf_fail(err, INF_ERR_IO, "%s: cannot reach the Hub (%s) for %s: %s", repo,
                        h->c->endpoint, what, *cerr ? cerr : curl_easy_strerror(rc));
    if (h->status == 401 || h->status == 403)
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "%s: the Hub refused access (%ld): a gated or private model needs "
                        "HF_TOKEN set to a token that was granted access%s",
                        repo, h->status, h->c->token ? " (the token given was refused)" : "");
    if (h->status == 404)
        return inf_fail(err, INF_ERR_INVALID, "%s: %s not found on the Hub (%s)", repo, what,
                        h->c->endpoint);
    return inf_fail(err, INF_ERR_IO, "%s: the Hub answered %ld for %s", repo, h->status, what);
}

/* ---- files ------------------------------------------------------------------ */

static int sha256_file(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    unsigned char buf[1 << 16], d[SHA256_DIGEST_SIZE];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        sha256_update(&ctx, n, buf);
    int bad = ferror(f);
    fclose(f);
    sha256_digest(&ctx, sizeof d, d);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return bad ? -1 : 0;
}

static int is_sha256(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return 0;
    return n == 64;
}

/* snapshots/COMMIT/FILE -> ../../blobs/ETAG (one more ../ per directory in
 * FILE), as huggingface_hub links them. */
static int link_blob(const char *snap, const char *file, const char *etag)
{
    char path[8448], target[4352] = "../../";
    snprintf(path, sizeof path, "%s/%s", snap, file);
    for (const char *p = file; *p; p++)
        if (*p == '/')
            strcat(target, "../");
    snprintf(target + strlen(target), sizeof target - strlen(target), "blobs/%s", etag);
    if (mkdirs(path, 0))
        return -1;
    unlink(path);
    return symlink(target, path);
}

static int fetch_file(const hub_config *c, const char *repo, const char *commit,
                      const char *file, const char *rdir, const char *snap, inf_err *err)
{
    char url[8192], cerr[CURL_ERROR_SIZE], blob[4352], part[4400];
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", c->endpoint, repo, commit, file);
    http h = {.c = c, .file = file, .hd.length = -1};
    CURLcode rc = request(&h, url, 1, 0, cerr); /* the Hub's own headers, before any CDN */
    if (rc != CURLE_OK || (h.status != 200 && (h.status < 300 || h.status > 308)))
        return http_fail(&h, rc, cerr, repo, file, err);
    const char *etag = *h.hd.linked_etag ? h.hd.linked_etag : h.hd.etag;
    if (!*etag || strchr(etag, '/') || strstr(etag, ".."))
        return inf_fail(err, INF_ERR_IO, "%s: the Hub gave no usable ETag for %s", repo, file);
    long long size = h.hd.linked_size > 0 ? h.hd.linked_size : h.hd.length;
    snprintf(blob, sizeof blob, "%s/blobs/%s", rdir, etag);
    if (!exists(blob)) {
        snprintf(part, sizeof part, "%s.incomplete", blob);
        if (mkdirs(part, 0))
            return inf_fail(err, INF_ERR_IO, "%s: cannot make %s: %s", repo, part,
                            strerror(errno));
        int done = 0;
        for (int attempt = 0; attempt < HUB_RETRIES && !done; attempt++) {
            struct stat st;
            http g = {.c = c, .file = file, .hd.length = -1};
            g.from = stat(part, &st) == 0 ? (long long)st.st_size : 0;
            if (size >= 0 && g.from > size)
                g.from = 0;
            g.out = fopen(part, g.from ? "ab" : "wb");
            if (!g.out)
                return inf_fail(err, INF_ERR_IO, "%s: cannot write %s: %s", repo, part,
                                strerror(errno));
            rc = request(&g, url, 0, 1, cerr);
            if (g.from && g.status == 200) { /* the range was ignored: start over */
                fclose(g.out);
                g.out = NULL;
                truncate(part, 0);
                continue;
            }
            if (fclose(g.out) != 0 && rc == CURLE_OK)
                return inf_fail(err, INF_ERR_IO, "%s: cannot write %s", repo, part);
            if (rc == CURLE_OK && (g.status == 200 || g.status == 206)) {
                done = 1;
            } else if (rc == CURLE_OK || attempt + 1 == HUB_RETRIES) {
                if (rc == CURLE_OK && g.status == 416) /* nothing left: it is whole */
                    done = 1;
                else
                    return http_fail(&g, rc, cerr, repo, file, err);
            } /* else a cut transfer: resume from what arrived */
        }
        if (!done)
            return inf_fail(err, INF_ERR_IO, "%s: %s did not arrive whole", repo, file);
        struct stat st;
        if (size >= 0 && (stat(part, &st) || st.st_size != size)) {
            unlink(part);
            return inf_fail(err, INF_ERR_IO, "%s: %s arrived with %lld bytes, the Hub said %lld",
                            repo, file, stat(part, &st) ? 0LL : (long long)st.st_size, size);
        }
        char hex[65];
        if (is_sha256(etag) && (sha256_file(part, hex) || strcmp(hex, etag))) {
            unlink(part);
            return inf_fail(err, INF_ERR_IO, "%s: %s is corrupt: its sha256 is %s, the Hub's is "
                            "%s (removed; run again to fetch it anew)", repo, file, hex, etag);
        }
        if (rename(part, blob))
            return inf_fail(err, INF_ERR_IO, "%s: cannot rename %s: %s", repo, part,
                            strerror(errno));
    }
    if (link_blob(snap, file, etag))
        return inf_fail(err, INF_ERR_IO, "%s: cannot link %s/%s: %s", repo, snap, file,
                        strerror(errno));
    return INF_OK;
}

/* ---- the API's answer ------------------------------------------------------- */

void hub_files_free(char **files, int n)
{
    for (int i = 0; files && i < n; i++)
        free(files[i]);
    free(files);
}

int hub_revision_parse(const char *json, size_t len, char commit[41], char ***files, int *n,
                       inf_err *err)
{
    *files = NULL;
    *n = 0;
    commit[0] = '\0';
    cJSON *j = json ? cJSON_ParseWithLength(json, len) : NULL;
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(j, "sha");
    const cJSON *sib = cJSON_GetObjectItemCaseSensitive(j, "siblings"), *it;
    if (!cJSON_IsString(sha) || !is_commit(sha->valuestring) || !cJSON_IsArray(sib)) {
        cJSON_Delete(j);
        return inf_fail(err, INF_ERR_IO, "the Hub's answer is not what the Hub API gives "
                        "(no commit sha or siblings)");
    }
    memcpy(commit, sha->valuestring, 41);
    int cap = cJSON_GetArraySize(sib), rc = INF_OK;
    char **out = calloc((size_t)cap + 1, sizeof *out);
    if (!out)
        rc = inf_fail(err, INF_ERR_NOMEM, "out of memory");
    cJSON_ArrayForEach(it, sib) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(it, "rfilename");
        if (rc || !cJSON_IsString(f) || !wanted(f->valuestring))
            continue;
        if (!(out[*n] = strdup(f->valuestring)))
            rc = inf_fail(err, INF_ERR_NOMEM, "out of memory");
        else
            (*n)++;
    }
    cJSON_Delete(j);
    if (rc) {
        hub_files_free(out, *n);
        *n = 0;
        return rc;
    }
    *files = out;
    return INF_OK;
}

/* ---- resolving ---------------------------------------------------------- */

static int write_ref(const char *rdir, const char *rev, const char *commit)
{
    char path[4352], tmp[4400];
    snprintf(path, sizeof path, "%s/refs/%s", rdir, rev);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (mkdirs(path, 0))
        return -1;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int bad = fputs(commit, f) < 0;
    bad |= fclose(f) != 0;
    return bad ? -1 : rename(tmp, path);
}

/* The cached snapshot's model for tag: its safetensors when it has them and
 * no tag is given, else its GGUF files' model (hub_gguf_pick), or NULL.
 * Without a tag only Q4_K_M's files answer, since what else the repository
 * has is not known here; offline, any one model cached does. */
static char *cached_model(const char *snap, const char *tag, const hub_config *c)
{
    if (!tag && snapshot_complete(snap, c->tokenizer_only))
        return strdup(snap);
    if (c->tokenizer_only)
        return NULL;
    char *p = hub_gguf_cached(snap, tag ? tag : "Q4_K_M");
    return p || tag || !c->offline ? p : hub_gguf_cached(snap, NULL);
}

int hub_resolve(const hub_config *c, const char *id, char **dir, inf_err *err)
{
    *dir = NULL;
    if (!hub_is_repo_id(id))
        return inf_fail(err, INF_ERR_INVALID, "'%s' is neither a directory nor a Hub id "
                        "(ORG/NAME, or ORG/NAME:TAG for GGUF files)", id);
    id = id_body(id);
    size_t rlen;
    const char *tag = hub_gguf_tag(id, &rlen);
    char repo[512];
    snprintf(repo, sizeof repo, "%.*s", (int)rlen, id);
    if (tag && c->tokenizer_only)
        return inf_fail(err, INF_ERR_INVALID, "%s: a tag names GGUF weights; a tokenizer is "
                        "given as ORG/NAME (a GGUF file carries its own)", id);
    const char *rev = c->revision && *c->revision ? c->revision : "main";
    if (strstr(rev, "..") || rev[0] == '/')
        return inf_fail(err, INF_ERR_INVALID, "--revision '%s' is not a revision", rev);
    char rdir[4096], snap[4352], commit[128] = "", path[8448];
    snprintf(rdir, sizeof rdir, "%s/models--%.*s--%s", c->cache, (int)(strchr(repo, '/') - repo),
             repo, strchr(repo, '/') + 1);
    /* the cache first: a commit, or what the ref names */
    if (is_commit(rev)) {
        snprintf(commit, sizeof commit, "%s", rev);
    } else {
        snprintf(path, sizeof path, "%s/refs/%s", rdir, rev);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(commit, sizeof commit, f))
                commit[0] = '\0';
            fclose(f);
            commit[strcspn(commit, "\r\n ")] = '\0';
        }
    }
    if (*commit) {
        snprintf(snap, sizeof snap, "%s/snapshots/%s", rdir, commit);
        if ((*dir = cached_model(snap, tag, c)))
            return INF_OK;
    }
    if (c->offline)
        return inf_fail(err, INF_ERR_IO, "%s (revision %s) is not in the Hub cache %s and "
                        "HF_HUB_OFFLINE is set", id, rev, c->cache);

    /* the revision's commit and files */
    char url[8192], cerr[CURL_ERROR_SIZE];
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s", c->endpoint, repo, rev);
    http h = {.c = c, .hd.length = -1};
    CURLcode rc = request(&h, url, 0, 1, cerr);
    if (rc != CURLE_OK || h.status != 200) {
        free(h.mem);
        return http_fail(&h, rc, cerr, repo, h.status == 404 ? "the model" : "its file list",
                         err);
    }
    char **files = NULL;
    int n = 0, status = hub_revision_parse(h.mem, h.mem_len, commit, &files, &n, err);
    free(h.mem);
    if (status) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return inf_fail(err, status, "%s: revision %s: %s", repo, rev, why);
    }
    int safetensors = 0, k = 0, np = 0;
    for (int i = 0; i < n; i++)
        safetensors |= !hub_gguf_name(files[i]) && strstr(files[i], ".safetensors") != NULL;
    int gguf = !c->tokenizer_only && (tag || !safetensors);
    int *pick = gguf ? malloc(sizeof *pick * (size_t)(n ? n : 1)) : NULL;
    if (gguf && !pick)
        status = inf_fail(err, INF_ERR_NOMEM, "out of memory");
    else if (gguf && (status = hub_gguf_pick(files, n, tag, pick, &np, err))) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        status = inf_fail(err, status, "%s: revision %s: %s", repo, rev, why);
    }
    if (gguf && !status) { /* the model's files alone, the one to load first */
        char **keep = calloc((size_t)np + 1, sizeof *keep);
        for (int i = 0; keep && i < np; i++) {
            keep[i] = files[pick[i]];
            files[pick[i]] = NULL;
        }
        hub_files_free(files, n);
        files = keep;
        n = keep ? np : 0;
        if (!keep)
            status = inf_fail(err, INF_ERR_NOMEM, "out of memory");
    } else if (!gguf) { /* safetensors (or a tokenizer): the GGUF files are not these */
        for (int i = 0; i < n; i++)
            if (!hub_gguf_name(files[i]) && (!c->tokenizer_only || wanted_tokenizer(files[i])))
                files[k++] = files[i];
            else
                free(files[i]);
        n = k;
    }
    free(pick);
    snprintf(snap, sizeof snap, "%s/snapshots/%s", rdir, commit);
    if (!status && mkdirs(snap, 1))
        status = inf_fail(err, INF_ERR_IO, "%s: cannot make %s: %s", repo, snap, strerror(errno));
    for (int i = 0; i < n && !status; i++) {
        snprintf(path, sizeof path, "%s/%s", snap, files[i]);
        if (!exists(path))
            status = fetch_file(c, repo, commit, files[i], rdir, snap, err);
    }
    if (!status && gguf) {
        size_t len = strlen(snap) + strlen(files[0]) + 2;
        if ((*dir = malloc(len)))
            snprintf(*dir, len, "%s/%s", snap, files[0]);
        else
            status = inf_fail(err, INF_ERR_NOMEM, "out of memory");
    }
    hub_files_free(files, n);
    if (!status && !gguf && !snapshot_complete(snap, c->tokenizer_only))
        status = c->tokenizer_only
                     ? inf_fail(err, INF_ERR_UNSUPPORTED, "%s: revision %s has no "
                                "tokenizer.json or tokenizer.model (%d files fetched)", repo,
                                rev, n)
                     : inf_fail(err, INF_ERR_UNSUPPORTED, "%s: revision %s has no config.json "
                                "and safetensors weights (%d files fetched)", repo, rev, n);
    if (!status && !is_commit(rev) && write_ref(rdir, rev, commit))
        status = inf_fail(err, INF_ERR_IO, "%s: cannot write %s/refs/%s", repo, rdir, rev);
    if (!status && !gguf && !(*dir = strdup(snap)))
        status = inf_fail(err, INF_ERR_NOMEM, "out of memory");
    if (status) {
        free(*dir);
        *dir = NULL;
    }
    return status;
}

int hub_local_path(const hub_config *c, const char *name, const char **path, char **owned,
                   inf_err *err)
{
    *owned = NULL;
    *path = name;
    if (!hub_is_repo_id(name))
        return INF_OK;
    int rc = hub_resolve(c, name, owned, err);
    if (!rc)
        *path = *owned;
    return rc;
}
