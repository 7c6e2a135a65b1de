/* st_: safetensors reader. A file is an 8-byte little-endian header length N,
 * N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}}, then the
 * data region the offsets point into. Files are mapped read-only; tensors point
 * into the mapping. Every error is one line naming the file (and tensor). */
#include "st.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The safetensors format caps the header at 100 MB; a bigger length means a
 * corrupt or foreign file, and we would not want to parse it anyway. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)
/* JSON numbers are doubles: integers above 2^53 are not exact. */
#define ST_MAX_JSON_INT ((double)((uint64_t)1 << 53))
/* An index file is a few hundred KB even for the largest checkpoints. */
#define ST_MAX_INDEX ((long)64 << 20)

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
} st_file;

struct st_set {
    st_file *files;
    int n_files;
    st_tensor *tensors;        /* sorted by name once every file is parsed */
    int n_tensors;
    int cap_tensors;
    size_t data_bytes;
};

typedef struct st_dtype_info {
    const char *name;
    inf_dtype dtype;
    size_t size;
} st_dtype_info;

/* Every dtype the format defines: the ones we do not compute in still have a
 * known size, so their offsets are checked like any other. */
static const st_dtype_info st_dtypes[] = {
    {"F32", INF_F32, 4},           {"F16", INF_F16, 2},
    {"BF16", INF_BF16, 2},         {"F64", INF_DTYPE_NONE, 8},
    {"I64", INF_DTYPE_NONE, 8},    {"I32", INF_DTYPE_NONE, 4},
    {"I16", INF_DTYPE_NONE, 2},    {"I8", INF_DTYPE_NONE, 1},
    {"U8", INF_DTYPE_NONE, 1},     {"BOOL", INF_DTYPE_NONE, 1},
    {"F8_E4M3", INF_DTYPE_NONE, 1}, {"F8_E5M2", INF_DTYPE_NONE, 1},
    {"U16", INF_DTYPE_NONE, 2},    {"U32", INF_DTYPE_NONE, 4},
    {"U64", INF_DTYPE_NONE, 8},
};

static const st_dtype_info *st__dtype(const char *name)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, name) == 0)
            return &st_dtypes[i];
    return NULL;
}


static st_set *st__new(void)
{
    return calloc(1, sizeof(st_set));
}

/* Maps path as the set's next file. */
static int st__map(st_set *s, const char *path, inf_err *err)
{
    st_file *files = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *files);
    if (!files)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
    s->files = files;
    st_file *f = &files[s->n_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
    s->n_files++; /* from here st_destroy owns f, mapped or not */

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return inf_fail(err, INF_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    int rc;
    if (fstat(fd, &sb) != 0) {
        rc = inf_fail(err, INF_ERR_IO, "%s: cannot stat (%s)", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = inf_fail(err, INF_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    /* Checked before mmap, which refuses a zero length. */
    if (sb.st_size < 8) {
        rc = inf_fail(err, INF_ERR_FORMAT,
                      "%s: file is %lld bytes, shorter than the 8-byte header length",
                      path, (long long)sb.st_size);
        goto done;
    }
    void *map = inf_map_weights(fd, (size_t)sb.st_size);
    if (map == MAP_FAILED) {
        rc = inf_fail(err, INF_ERR_IO, "%s: cannot map (%s)", path, strerror(errno));
        goto done;
    }
    f->map = map;
    f->size = (size_t)sb.st_size;
    rc = INF_OK;
done:
    close(fd);
    return rc;
}

/* A JSON number that is a non-negative integer exactly representable. */
static int st__json_u64(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= ST_MAX_JSON_INT) || d != (double)(uint64_t)d)
        return 0;
    *out = (uint64_t)d;
    return 1;
}

static int st__push(st_set *s, const st_tensor *t)
{
    if (s->n_tensors == s->cap_tensors) {
        int cap = s->cap_tensors ? 2 * s->cap_tensors : 64;
        st_tensor *n = realloc(s->tensors, (size_t)cap * sizeof *n);
        if (!n)
            return INF_ERR_NOMEM;
        s->tensors = n;
        s->cap_tensors = cap;
    }
    s->tensors[s->n_tensors++] = *t;
    return INF_OK;
}

/* "[2, 3]" */
static void st__shape_str(const st_tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* Validates one header entry and appends it to s. */
static int st__entry(st_set *s, const st_file *f, const cJSON *e,
                     const unsigned char *data, size_t data_size, inf_err *err)
{
    const char *path = f->path, *name = e->string;
    if (!cJSON_IsObject(e))
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' is not a JSON object", path, name);

    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(jd))
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' has no dtype string", path, name);
    const st_dtype_info *dt = st__dtype(jd->valuestring);
    if (!dt)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%s'",
                        path, name, jd->valuestring);

    st_tensor t;
    memset(&t, 0, sizeof t);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(js))
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' has no shape array", path, name);
    int ndim = cJSON_GetArraySize(js);
    if (ndim > ST_MAX_DIMS)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions (at most %d)",
                        path, name, ndim, ST_MAX_DIMS);
    /* Elements times element size, refusing overflow: a huge shape must fail
     * the size check, not wrap around into a small one. */
    uint64_t bytes = dt->size;
    int overflow = 0, zero = 0;
    const cJSON *d;
    int k = 0;
    cJSON_ArrayForEach(d, js) {
        uint64_t n;
        if (!st__json_u64(d, &n))
            return inf_fail(err, INF_ERR_FORMAT,
                            "%s: tensor '%s' shape[%d] is not a non-negative integer", path, name, k);
        t.shape[k++] = (int64_t)n;
        if (n == 0)
            zero = 1;
        else if (bytes > UINT64_MAX / n)
            overflow = 1;
        else
            bytes *= n;
    }
    t.ndim = ndim;
    if (zero) { /* any zero dimension empties the tensor, however big the rest */
        bytes = 0;
        overflow = 0;
    }

    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    uint64_t begin, end;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 ||
        !st__json_u64(cJSON_GetArrayItem(jo, 0), &begin) ||
        !st__json_u64(cJSON_GetArrayItem(jo, 1), &end))
        return inf_fail(err, INF_ERR_FORMAT,
                        "%s: tensor '%s' data_offsets is not a pair of non-negative integers",
                        path, name);
    if (begin > end)
        return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' data_offsets [%llu, %llu] end before they begin",
                        path, name, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return inf_fail(err, INF_ERR_FORMAT,
                        "%s: tensor '%s' data_offsets [%llu, %llu] exceed the data region (%zu bytes)",
                        path, name, (unsigned long long)begin, (unsigned long long)end, data_size);
    if (overflow || end - begin != bytes) {
        char shape[ST_MAX_DIMS * 24 + 3];
        st__shape_str(&t, shape, sizeof shape);
        return inf_fail(err, INF_ERR_FORMAT,
                        "%s: tensor '%s' data_offsets [%llu, %llu] hold %llu bytes, but %s %s needs %s%llu",
                        path, name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)(end - begin), dt->name, shape,
                        overflow ? "more than " : "", (unsigned long long)bytes);
    }

    t.dtype = dt->dtype;
    t.dtype_name = dt->name;
    t.data = data + begin;
    t.nbytes = (size_t)(end - begin);
    t.file = f->path;
    t.name = strdup(name);
    if (!t.name || st__push(s, &t) != INF_OK) {
        free((char *)t.name);
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
    }
    return INF_OK;
}

static int st__cmp_data(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    uintptr_t px = (uintptr_t)x->data, py = (uintptr_t)y->data;
    return px < py ? -1 : px > py;
}

/* Tensors [first, n) all come from one file: no two may share a byte. */
static int st__check_overlap(const st_set *s, int first, const unsigned char *data,
                             const char *path, inf_err *err)
{
    int n = s->n_tensors - first;
    if (n < 2)
        return INF_OK;
    const st_tensor **by = malloc((size_t)n * sizeof *by);
    if (!by)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < n; i++)
        by[i] = &s->tensors[first + i];
    qsort(by, (size_t)n, sizeof *by, st__cmp_data);
    int rc = INF_OK;
    const st_tensor *prev = NULL;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = by[i];
        if (t->nbytes == 0) /* empty tensors hold no bytes to share */
            continue;
        if (prev && (const unsigned char *)t->data < (const unsigned char *)prev->data + prev->nbytes) {
            size_t pb = (size_t)((const unsigned char *)prev->data - data);
            size_t tb = (size_t)((const unsigned char *)t->data - data);
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] overlap",
                          path, prev->name, pb, pb + prev->nbytes, t->name, tb, tb + t->nbytes);
            break;
        }
        prev = t;
    }
    free(by);
    return rc;
}

/* Maps path and appends its tensors to s. */
static int st__add_file(st_set *s, const char *path, inf_err *err)
{
    int rc = st__map(s, path, err);
    if (rc)
        return rc;
    const st_file *f = &s->files[s->n_files - 1];
    const unsigned char *base = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | base[i];
    if (n > f->size - 8)
        return inf_fail(err, INF_ERR_FORMAT, "%s: header length %llu exceeds the file (%zu bytes)",
                        f->path, (unsigned long long)n, f->size);
    if (n > ST_MAX_HEADER)
        return inf_fail(err, INF_ERR_FORMAT, "%s: header length %llu is over the format's 100 MB limit",
                        f->path, (unsigned long long)n);

    /* Parse a NUL-terminated copy: the parser then cannot read past the
     * header even if the header ends exactly at the end of the mapping. */
    char *text = malloc((size_t)n + 1);
    if (!text)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", f->path);
    memcpy(text, base + 8, (size_t)n);
    text[n] = '\0';
    cJSON *root = cJSON_ParseWithLength(text, (size_t)n);
    free(text);
    if (!root)
        return inf_fail(err, INF_ERR_FORMAT, "%s: header is not valid JSON", f->path);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return inf_fail(err, INF_ERR_FORMAT, "%s: header is not a JSON object", f->path);
    }

    const unsigned char *data = base + 8 + n;
    size_t data_size = f->size - 8 - (size_t)n;
    int first = s->n_tensors;
    const cJSON *e;
    rc = INF_OK;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0)
            continue;
        rc = st__entry(s, f, e, data, data_size, err);
        if (rc)
            break;
    }
    cJSON_Delete(root);
    if (rc)
        return rc;
    return st__check_overlap(s, first, data, f->path, err);
}

static int st__cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

/* Sorts for st_find's binary search; a name twice (a JSON key repeated, or
 * one tensor in two shards) is ambiguous, so it is refused. */
static int st__finish(st_set *s, inf_err *err)
{
    if (s->n_tensors > 1) /* qsort's array may not be NULL, even empty */
        qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, st__cmp_name);
    s->data_bytes = 0;
    for (int i = 0; i < s->n_tensors; i++) {
        const st_tensor *t = &s->tensors[i];
        if (i > 0 && strcmp(t[-1].name, t->name) == 0) {
            if (strcmp(t[-1].file, t->file) == 0)
                return inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' appears twice", t->file, t->name);
            return inf_fail(err, INF_ERR_FORMAT, "tensor '%s' is in both %s and %s",
                            t->name, t[-1].file, t->file);
        }
        s->data_bytes += t->nbytes;
    }
    return INF_OK;
}

int st_open_file(const char *path, st_set **out, inf_err *err)
{
    *out = NULL;
    st_set *s = st__new();
    if (!s)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
    int rc = st__add_file(s, path, err);
    if (!rc)
        rc = st__finish(s, err);
    if (rc) {
        st_destroy(s);
        return rc;
    }
    *out = s;
    return INF_OK;
}

/* Shard file names the weight_map uses, each once, in first-seen order. */
static int st__shards(const cJSON *map, const char ***out, int *n_out)
{
    int cap = cJSON_GetArraySize(map), n = 0;
    const char **names = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *names);
    if (!names)
        return INF_ERR_NOMEM;
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        int seen = 0;
        for (int i = n - 1; i >= 0 && !seen; i--) /* shards run in order: look back first */
            seen = strcmp(names[i], e->valuestring) == 0;
        if (!seen)
            names[n++] = e->valuestring;
    }
    *out = names;
    *n_out = n;
    return INF_OK;
}

static int st__open_index(const char *dir, const char *index, st_set **out, inf_err *err)
{
    char *text = NULL, *path = NULL;
    const char **shards = NULL;
    const char **shard_path = NULL;
    int n_shards = 0;
    cJSON *root = NULL;
    st_set *s = NULL;
    int rc = inf_read_file(index, ST_MAX_INDEX, &text, NULL, NULL, err);
    if (rc)
        goto fail;
    root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: not a JSON object", index);
        goto fail;
    }
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map) || cJSON_GetArraySize(map) == 0) {
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: no weight_map object with tensors in it", index);
        goto fail;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || e->valuestring[0] == '\0') {
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: weight_map entry '%s' is not a file name", index, e->string);
            goto fail;
        }
        /* shards live in the checkpoint's directory (or below it): an index
         * must not make us map /etc/... or ../../anything */
        const char *v = e->valuestring;
        if (v[0] == '/' || !strcmp(v, "..") || !strncmp(v, "../", 3) || strstr(v, "/../") ||
            (strlen(v) >= 3 && !strcmp(v + strlen(v) - 3, "/.."))) {
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: weight_map entry '%s' names '%s', outside "
                          "the checkpoint's directory", index, e->string, v);
            goto fail;
        }
    }
    if (st__shards(map, &shards, &n_shards) != INF_OK ||
        !(shard_path = calloc((size_t)n_shards, sizeof *shard_path)) || !(s = st__new())) {
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", index);
        goto fail;
    }
    for (int i = 0; i < n_shards; i++) {
        path = inf_path_join(dir, shards[i]);
        if (!path) {
            rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", index);
            goto fail;
        }
        inf_err inner = {0, ""};
        rc = st__add_file(s, path, &inner);
        if (rc) {
            /* Say where the shard's name came from: the index, not the user. */
            rc = inf_fail(err, rc, "%s (a shard named in %s)", inner.msg, index);
            goto fail;
        }
        shard_path[i] = s->files[s->n_files - 1].path;
        free(path);
        path = NULL;
    }
    rc = st__finish(s, err);
    if (rc)
        goto fail;
    /* Every tensor the index promises must be in the shard it names. */
    cJSON_ArrayForEach(e, map) {
        int k = 0;
        while (strcmp(shards[k], e->valuestring) != 0)
            k++;
        const st_tensor *t = st_find(s, e->string);
        if (!t) {
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' is not in shard '%s'",
                          index, e->string, shards[k]);
            goto fail;
        }
        if (t->file != shard_path[k]) {
            rc = inf_fail(err, INF_ERR_FORMAT, "%s: tensor '%s' is in %s, not in shard '%s'",
                          index, e->string, t->file, shards[k]);
            goto fail;
        }
    }
    *out = s;
    s = NULL;
fail:
    st_destroy(s);
    free(path);
    free(shard_path);
    free(shards);
    cJSON_Delete(root);
    free(text);
    return rc;
}

int st_open_dir(const char *dir, st_set **out, inf_err *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return inf_fail(err, INF_ERR_IO, "%s: cannot open checkpoint directory (%s)", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return inf_fail(err, INF_ERR_IO, "%s: not a checkpoint directory", dir);
    char *index = inf_path_join(dir, "model.safetensors.index.json");
    char *single = inf_path_join(dir, "model.safetensors");
    int rc;
    if (!index || !single) {
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", dir);
    } else if (stat(index, &sb) == 0 || errno != ENOENT) {
        rc = st__open_index(dir, index, out, err);
    } else if (stat(single, &sb) == 0 || errno != ENOENT) {
        rc = st_open_file(single, out, err);
    } else {
        rc = inf_fail(err, INF_ERR_IO,
                      "%s: no weights: neither model.safetensors.index.json nor model.safetensors is there",
                      dir);
    }
    free(index);
    free(single);
    return rc;
}

const st_tensor *st_find(const st_set *s, const char *name)
{
    if (!s || s->n_tensors == 0)
        return NULL;
    st_tensor key = {.name = name};
    return bsearch(&key, s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, st__cmp_name);
}

int st_count(const st_set *s)
{
    return s ? s->n_tensors : 0;
}

const st_tensor *st_get(const st_set *s, int i)
{
    if (!s || i < 0 || i >= s->n_tensors)
        return NULL;
    return &s->tensors[i];
}

size_t st_data_bytes(const st_set *s)
{
    return s ? s->data_bytes : 0;
}

void st_destroy(st_set *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_tensors; i++)
        free((char *)s->tensors[i].name);
    free(s->tensors);
    for (int i = 0; i < s->n_files; i++) {
        if (s->files[i].map)
            munmap(s->files[i].map, s->files[i].size);
        free(s->files[i].path);
    }
    free(s->files);
    free(s);
}
