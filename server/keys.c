#include "server/keys.h"

#include <stdlib.h>
#include <string.h>

typedef struct key_list {
    char **v;
    int n;
} key_list;

struct keys {
    key_list fixed;     /* from --api-key                      */
    key_list loaded;    /* from the file, replaced on reload   */
    char *file;
};

static void list_free(key_list *l)
{
    for (int i = 0; i < l->n; i++) {
        /* keys do not linger in freed memory */
        explicit_bzero(l->v[i], strlen(l->v[i]));
        free(l->v[i]);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static int list_add(key_list *l, const char *s, size_t len)
{
    char **nv = realloc(l->v, sizeof *nv * (size_t)(l->n + 1));
    if (!nv)
        return INF_ERR_NOMEM;
    l->v = nv;
    char *c = malloc(len + 1);
    if (!c)
        return INF_ERR_NOMEM;
    memcpy(c, s, len);
    c[len] = '\0';
    l->v[l->n++] = c;
    return INF_OK;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* The file's keys into a fresh list; an empty one is an error (a key file
 * truncated by mistake must not turn authentication off, nor lock everyone
 * out silently). */
static int load_file(const char *path, key_list *out, inf_err *err)
{
    char *text = NULL;
    size_t len = 0;
    inf_err e = {0};
    if (inf_read_file(path, 16u << 20, &text, &len, NULL, &e))
        return inf_fail(err, INF_ERR_INVALID, "--api-key-file: %s", e.msg);
    key_list l = {0};
    int rc = INF_OK;
    for (size_t i = 0; i < len && !rc;) {
        size_t end = i;
        while (end < len && text[end] != '\n')
            end++;
        size_t a = i, b = end;
        while (a < b && is_space(text[a]))
            a++;
        while (b > a && is_space(text[b - 1]))
            b--;
        if (b > a && text[a] != '#')
            rc = list_add(&l, text + a, b - a);
        i = end + 1;
    }
    explicit_bzero(text, len);
    free(text);
    if (rc) {
        list_free(&l);
        return inf_fail(err, rc, "--api-key-file %s: out of memory", path);
    }
    if (l.n == 0)
        return inf_fail(err, INF_ERR_FORMAT, "--api-key-file %s: no key in it (one per line)",
                        path);
    *out = l;
    return INF_OK;
}

int keys_create(const char *const *keys_in, int n, const char *file, keys **out, inf_err *err)
{
    *out = NULL;
    int any = file && *file;
    for (int i = 0; i < n; i++)
        any |= keys_in[i] && *keys_in[i];
    if (!any)
        return INF_OK;
    keys *k = calloc(1, sizeof *k);
    if (!k)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    int rc = INF_OK;
    for (int i = 0; i < n && !rc; i++)
        if (keys_in[i] && *keys_in[i])
            rc = list_add(&k->fixed, keys_in[i], strlen(keys_in[i]));
    if (rc)
        inf_fail(err, rc, "out of memory");
    if (!rc && file && *file && !(k->file = strdup(file)))
        rc = inf_fail(err, INF_ERR_NOMEM, "out of memory");
    if (!rc && k->file)
        rc = load_file(k->file, &k->loaded, err);
    if (rc) {
        keys_destroy(k);
        return rc;
    }
    *out = k;
    return INF_OK;
}

void keys_destroy(keys *k)
{
    if (!k)
        return;
    list_free(&k->fixed);
    list_free(&k->loaded);
    free(k->file);
    free(k);
}

int keys_reload(keys *k, int *n_out, inf_err *err)
{
    if (k && k->file) {
        key_list l;
        int rc = load_file(k->file, &l, err);
        if (rc)
            return rc;
        list_free(&k->loaded);
        k->loaded = l;
    }
    if (n_out)
        *n_out = k ? k->fixed.n + k->loaded.n : 0;
    return INF_OK;
}

int keys_equal(const char *a, size_t la, const char *b, size_t lb)
{
    /* every byte of a is looked at whatever b holds; b is read cyclically
     * so a shorter b costs the same */
    unsigned char d = la != lb;
    for (size_t i = 0; i < la; i++)
        d |= (unsigned char)(a[i] ^ (lb ? b[i % lb] : 0));
    /* keep the compiler from turning this into an early-exit memcmp */
    volatile unsigned char r = d;
    return r == 0;
}

static int any_equal(const key_list *l, const char *s, size_t len)
{
    int ok = 0;
    for (int i = 0; i < l->n; i++) /* no early exit: all keys are compared */
        ok |= keys_equal(s, len, l->v[i], strlen(l->v[i]));
    return ok;
}

int keys_check(const keys *k, const char *authorization)
{
    if (!k)
        return 1;
    if (!authorization || strncmp(authorization, "Bearer ", 7) != 0)
        return 0;
    const char *s = authorization + 7;
    size_t len = strlen(s);
    int ok = any_equal(&k->fixed, s, len);
    ok |= any_equal(&k->loaded, s, len);
    return ok;
}
