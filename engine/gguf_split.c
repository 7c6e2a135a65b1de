/* gguf_open_model: a GGUF model in one file or split in several (gguf.h). */
#include "gguf.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* More would be a file per few tensors of the largest models; a hostile
 * count fails at its first missing file anyway. */
#define GGUF_MAX_SPLITS 9999

/* A split key as a non-negative integer, or -1 when absent or not one. */
static long long split_key(const gguf_file *g, const char *key)
{
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->type == GGUF_V_STRING || kv->type == GGUF_V_ARRAY ||
        kv->type == GGUF_V_F32 || kv->type == GGUF_V_F64 || kv->type == GGUF_V_BOOL)
        return -1;
    return kv->inum >= 0 ? (long long)kv->inum : -1;
}

/* File i (from 0) of n beside the first, whose path's first prefix bytes
 * are the name before -00001-of-NNNNN.gguf. */
static int open_shard(const gguf_file *g, size_t prefix, int i, int n, gguf_file **out,
                      inf_err *err)
{
    const char *path = gguf_path(g);
    size_t len = prefix + 32;
    char *p = malloc(len);
    if (!p)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
    snprintf(p, len, "%.*s-%05d-of-%05d.gguf", (int)prefix, path, i + 1, n);
    int rc = gguf_open(p, out, err);
    if (rc == INF_ERR_IO)
        rc = inf_fail(err, INF_ERR_IO, "%s: split %d of %d is missing: cannot open %s", path,
                      i + 1, n, p);
    if (!rc) {
        long long no = split_key(*out, "split.no"), cnt = split_key(*out, "split.count");
        if (no != i || (cnt != -1 && cnt != n)) {
            char says[64];
            if (no < 0)
                snprintf(says, sizeof says, "has no split.no");
            else
                snprintf(says, sizeof says, "says it is split %lld of %lld", no + 1,
                         cnt < 0 ? (long long)n : cnt);
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: %s, but is named as split %d of %d", p, says,
                          i + 1, n);
            gguf_close(*out);
            *out = NULL;
        }
    }
    free(p);
    return rc;
}

int gguf_split_name(const char *path, int *no, int *count, size_t *prefix)
{
    const size_t tail = strlen("-00001-of-00002.gguf");
    size_t n = strlen(path);
    if (n <= tail)
        return 0;
    const char *s = path + n - tail;
    if (s[0] != '-' || memcmp(s + 6, "-of-", 4) || strcasecmp(s + 15, ".gguf"))
        return 0;
    for (int k = 0; k < 5; k++)
        if (!isdigit((unsigned char)s[1 + k]) || !isdigit((unsigned char)s[10 + k]))
            return 0;
    *no = atoi(s + 1);
    *count = atoi(s + 10);
    *prefix = n - tail;
    return *no >= 1 && *no <= *count;
}

int gguf_open_model(const char *path, gguf_file **out, inf_err *err)
{
    gguf_file *g = NULL;
    int rc = gguf_open(path, &g, err);
    if (rc)
        return rc;
    *out = NULL;
    long long n = split_key(g, "split.count");
    if (!gguf_find_kv(g, "split.count") || n == 0 || n == 1) { /* one file, as llama.cpp */
        *out = g;
        return INF_OK;
    }
    long long no = split_key(g, "split.no");
    int first, count;
    size_t prefix = 0;
    int named = gguf_split_name(path, &first, &count, &prefix) && first == 1 && count == n;
    if (n < 1 || n > GGUF_MAX_SPLITS)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: split.count is not a number of files from 1 to "
                      "%d", path, GGUF_MAX_SPLITS);
    else if (no != 0)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: is split %lld of %lld (split.no %lld); load the "
                      "model from its first file, NAME-00001-of-%05lld.gguf", path, no + 1, n, no,
                      n);
    else if (!named)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: is the first of %lld split files, but its name "
                      "does not end in -00001-of-%05lld.gguf, so the others cannot be found "
                      "(llama.cpp's names: NAME-00001-of-%05lld.gguf, ...)", path, n, n, n);
    for (int i = 1; !rc && i < n; i++) {
        gguf_file *s = NULL;
        if (!(rc = open_shard(g, prefix, i, (int)n, &s, err)) && (rc = gguf_adopt(g, s, err)))
            gguf_close(s);
    }
    long long want = split_key(g, "split.tensors.count");
    if (!rc && gguf_find_kv(g, "split.tensors.count") && want != gguf_tensor_count(g))
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: split.tensors.count says %lld tensors, the %lld "
                      "files hold %d", path, want, n, gguf_tensor_count(g));
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return INF_OK;
}
