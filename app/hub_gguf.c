/* hub_gguf: see hub_gguf.h. */
#include "app/hub_gguf.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "engine/gguf.h"

const char *hub_gguf_tag(const char *id, size_t *repo_len)
{
    const char *c = strchr(id, ':');
    *repo_len = c ? (size_t)(c - id) : strlen(id);
    return c ? c + 1 : NULL;
}

int hub_gguf_name(const char *f)
{
    size_t n = strlen(f);
    return n > 5 && !strcasecmp(f + n - 5, ".gguf") && f[0] != '/' && !strstr(f, "..");
}

static const char *base(const char *f)
{
    const char *s = strrchr(f, '/');
    return s ? s + 1 : f;
}

static int word_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

/* tag in b as a word, any case. */
static int has_word(const char *b, const char *tag)
{
    size_t t = strlen(tag);
    for (const char *p = b; t && *p; p++)
        if (!strncasecmp(p, tag, t) && (p == b || !word_char(p[-1])) && !word_char(p[t]))
            return 1;
    return 0;
}

/* Whether files a and b are parts of one split (or the same whole file). */
static int same_model(const char *a, const char *b)
{
    int ia, ca, ib, cb;
    size_t la, lb;
    int sa = gguf_split_name(a, &ia, &ca, &la), sb = gguf_split_name(b, &ib, &cb, &lb);
    if (!sa || !sb)
        return !sa && !sb && !strcmp(a, b);
    return ca == cb && la == lb && !strncmp(a, b, la);
}

/* The matches' models as "a, b, ..." (the first file of each), in out. */
static void list_models(char *const *files, const int *m, int nm, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0, shown = 0; i < nm && len < cap; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = same_model(files[m[j]], files[m[i]]);
        if (seen)
            continue;
        if (shown++ == 12) {
            snprintf(out + len, cap - len, ", ...");
            return;
        }
        len += (size_t)snprintf(out + len, cap - len, "%s%s", shown > 1 ? ", " : "",
                                base(files[m[i]]));
    }
}

static int matches(const char *f, const char *tag)
{
    size_t t = tag ? strlen(tag) : 0;
    if (t > 5 && !strcasecmp(tag + t - 5, ".gguf"))
        return !strcmp(f, tag) || !strcmp(base(f), tag);
    return has_word(base(f), tag);
}

int hub_gguf_pick(char *const *files, int n, const char *tag, int *pick, int *n_pick,
                  inf_err *err)
{
    *n_pick = 0;
    int *m = malloc(sizeof *m * (size_t)(n > 0 ? n : 1)), nm = 0, all = 0;
    if (!m)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        if (hub_gguf_name(files[i]) && strncasecmp(base(files[i]), "mmproj", 6))
            m[all++] = i;
    const char *want = tag && *tag ? tag : "Q4_K_M";
    for (int i = 0; i < all; i++)
        if (matches(files[m[i]], want))
            m[nm++] = m[i];
    if (!nm && !(tag && *tag)) /* no tag and no Q4_K_M: any one model */
        nm = all;
    char list[1024];
    int rc = INF_OK;
    if (!all)
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "it has no GGUF file (and no config.json with "
                      "safetensors weights)");
    else if (!nm) {
        list_models(files, m, all, list, sizeof list);
        rc = inf_fail(err, INF_ERR_INVALID, "no GGUF file matches the tag '%s'; it has: %s",
                      tag, list);
    }
    for (int i = 1; !rc && i < nm; i++)
        if (!same_model(files[m[0]], files[m[i]])) {
            list_models(files, m, nm, list, sizeof list);
            rc = inf_fail(err, INF_ERR_INVALID, "%s matches more than one GGUF model: %s; name "
                          "one by its tag or file (ORG/NAME:FILE.gguf)",
                          tag && *tag ? tag : "no tag", list);
        }
    int i0, cnt;
    size_t plen;
    if (!rc && gguf_split_name(files[m[0]], &i0, &cnt, &plen)) { /* every part, in order */
        for (int want_i = 1; want_i <= cnt && !rc; want_i++) {
            int at = -1, ii, cc;
            for (int k = 0; k < nm && at < 0; k++)
                if (gguf_split_name(files[m[k]], &ii, &cc, &plen) && ii == want_i)
                    at = m[k];
            if (at < 0)
                rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s is split in %d files but part %d "
                              "is not there", base(files[m[0]]), cnt, want_i);
            else
                pick[(*n_pick)++] = at;
        }
    } else if (!rc) {
        pick[(*n_pick)++] = m[0];
    }
    if (rc)
        *n_pick = 0;
    free(m);
    return rc;
}

/* ---- a snapshot in the cache ------------------------------------------ */

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0; /* follows the snapshot's links to blobs */
}

/* rel (a path under snap) appended to *out when it is a GGUF file there. */
static void add_gguf(const char *snap, const char *rel, char ***out, int *n, int *cap)
{
    char full[8448];
    snprintf(full, sizeof full, "%s/%s", snap, rel);
    if (!hub_gguf_name(rel) || !exists(full))
        return;
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 16;
        char **o = realloc(*out, sizeof *o * (size_t)c);
        if (!o)
            return;
        *out = o;
        *cap = c;
    }
    if (((*out)[*n] = strdup(rel)))
        (*n)++;
}

/* The .gguf paths under snap (its top level and one folder down, as
 * repositories hold them), relative to it; *n of them (hub_files_free). */
static char **local_ggufs(const char *snap, int *n)
{
    char **out = NULL;
    int cap = 0;
    *n = 0;
    DIR *d = opendir(snap);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4608];
        snprintf(sub, sizeof sub, "%s/%s", snap, e->d_name);
        DIR *d2 = opendir(sub);
        struct dirent *e2;
        while (d2 && (e2 = readdir(d2))) {
            char rel[600];
            snprintf(rel, sizeof rel, "%s/%s", e->d_name, e2->d_name);
            if (e2->d_name[0] != '.')
                add_gguf(snap, rel, &out, n, &cap);
        }
        if (d2)
            closedir(d2);
        else
            add_gguf(snap, e->d_name, &out, n, &cap);
    }
    if (d)
        closedir(d);
    return out;
}

char *hub_gguf_cached(const char *snap, const char *tag)
{
    int n = 0, np = 0;
    char **files = local_ggufs(snap, &n), *path = NULL;
    int *pick = malloc(sizeof *pick * (size_t)(n ? n : 1));
    inf_err e = {0};
    if (pick && n && !hub_gguf_pick(files, n, tag, pick, &np, &e)) {
        size_t len = strlen(snap) + strlen(files[pick[0]]) + 2;
        if ((path = malloc(len)))
            snprintf(path, len, "%s/%s", snap, files[pick[0]]);
    }
    free(pick);
    for (int i = 0; i < n; i++)
        free(files[i]);
    free(files);
    return path;
}
