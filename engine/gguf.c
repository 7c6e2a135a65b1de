/* gguf_: the GGUF container, read defensively (gguf.h). */
#include "gguf.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Far above any real model, far below what would overflow the sizes below. */
#define GGUF_MAX_COUNT ((uint64_t)1 << 24)
#define GGUF_MAX_STR ((uint64_t)1 << 30)

struct gguf_file {
    char *path;
    const uint8_t *base;
    size_t len;
    int mapped;                 /* base is our mapping                         */
    uint32_t version;
    int n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    size_t data_bytes;
    gguf_file **shards;         /* a split model's other files (gguf_adopt)   */
    int n_shards;
};

/* A cursor over the file; every read checks the bytes are there. */
typedef struct rd {
    const uint8_t *p;
    size_t len, off;
    const char *label;
    inf_err *err;
} rd;

static int rd_fail(rd *r, const char *what)
{
    return inf_fail(r->err, INF_ERR_FORMAT, "%s: %s at byte %zu", r->label, what, r->off);
}

static int rd_bytes(rd *r, size_t n, const uint8_t **out, const char *what)
{
    if (n > r->len - r->off)
        return rd_fail(r, what);
    *out = r->p + r->off;
    r->off += n;
    return INF_OK;
}

static int rd_u32(rd *r, uint32_t *v, const char *what)
{
    const uint8_t *b = NULL;
    int rc = rd_bytes(r, 4, &b, what);
    if (!rc)
        *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return rc;
}

static int rd_u64(rd *r, uint64_t *v, const char *what)
{
    uint32_t lo, hi;
    int rc = rd_u32(r, &lo, what);
    if (!rc && !(rc = rd_u32(r, &hi, what)))
        *v = (uint64_t)hi << 32 | lo;
    return rc;
}

static int rd_str(rd *r, const char **s, uint64_t *n, const char *what)
{
    int rc = rd_u64(r, n, what);
    if (rc)
        return rc;
    if (*n > GGUF_MAX_STR || *n > r->len - r->off)
        return rd_fail(r, what);
    const uint8_t *b = NULL;
    rc = rd_bytes(r, (size_t)*n, &b, what);
    *s = (const char *)b;
    return rc;
}

static size_t vtype_size(uint32_t t)
{
    switch (t) {
    case GGUF_V_U8: case GGUF_V_I8: case GGUF_V_BOOL: return 1;
    case GGUF_V_U16: case GGUF_V_I16: return 2;
    case GGUF_V_U32: case GGUF_V_I32: case GGUF_V_F32: return 4;
    case GGUF_V_U64: case GGUF_V_I64: case GGUF_V_F64: return 8;
    default: return 0;
    }
}

/* A scalar's value as numbers. */
static void scalar_num(gguf_kv *kv)
{
    const uint8_t *b = kv->data;
    uint64_t u = 0;
    size_t n = vtype_size(kv->type);
    for (size_t i = 0; i < n; i++)
        u |= (uint64_t)b[i] << (8 * i);
    switch (kv->type) {
    case GGUF_V_I8: kv->inum = (int8_t)u; break;
    case GGUF_V_I16: kv->inum = (int16_t)u; break;
    case GGUF_V_I32: kv->inum = (int32_t)u; break;
    case GGUF_V_I64: kv->inum = (int64_t)u; break;
    case GGUF_V_F32: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        kv->num = f;
        kv->inum = f >= -9.2e18 && f <= 9.2e18 ? (int64_t)f : 0;
        return;
    }
    case GGUF_V_F64: {
        double d;
        memcpy(&d, &u, 8);
        kv->num = d;
        kv->inum = d >= -9.2e18 && d <= 9.2e18 ? (int64_t)d : 0;
        return;
    }
    default: kv->inum = u > INT64_MAX ? INT64_MAX : (int64_t)u; break;
    }
    kv->num = (double)kv->inum;
}

/* n bytes of s as a NUL-terminated copy (freed by gguf_close), or NULL. */
static char *keep_name(const char *s, uint64_t n, rd *r)
{
    char *d = malloc((size_t)n + 1);
    if (!d) {
        inf_fail(r->err, INF_ERR_NOMEM, "%s: out of memory", r->label);
        return NULL;
    }
    memcpy(d, s, (size_t)n);
    d[n] = 0;
    return d;
}

static int read_kv(rd *r, gguf_kv *kv)
{
    const char *s;
    uint64_t n;
    uint32_t t;
    int rc;
    if ((rc = rd_str(r, &s, &n, "truncated metadata key")) ||
        (rc = rd_u32(r, &t, "truncated metadata type")))
        return rc;
    if (!(kv->key = keep_name(s, n, r)))
        return INF_ERR_NOMEM;
    kv->type = (gguf_vtype)t;
    if (t == GGUF_V_STRING)
        return rd_str(r, &kv->str, &kv->str_len, "truncated metadata string");
    if (t == GGUF_V_ARRAY) {
        uint32_t et;
        if ((rc = rd_u32(r, &et, "truncated array type")) ||
            (rc = rd_u64(r, &kv->n, "truncated array length")))
            return rc;
        kv->elem = (gguf_vtype)et;
        kv->data = r->p + r->off;
        if (et == GGUF_V_STRING) {
            if (kv->n > r->len - r->off) /* each string takes at least 8 bytes */
                return rd_fail(r, "array longer than the file");
            for (uint64_t i = 0; i < kv->n; i++)
                if ((rc = rd_str(r, &s, &n, "truncated string in an array")))
                    return rc;
            return INF_OK;
        }
        size_t es = vtype_size(et);
        if (!es)
            return inf_fail(r->err, INF_ERR_FORMAT, "%s: metadata '%s' is an array of unknown "
                            "type %u", r->label, kv->key, et);
        if (kv->n > (r->len - r->off) / es)
            return rd_fail(r, "array longer than the file");
        const uint8_t *b = NULL;
        return rd_bytes(r, (size_t)kv->n * es, &b, "truncated array");
    }
    size_t es = vtype_size(t);
    if (!es)
        return inf_fail(r->err, INF_ERR_FORMAT, "%s: metadata '%s' has unknown type %u",
                        r->label, kv->key, t);
    const uint8_t *b = NULL;
    if ((rc = rd_bytes(r, es, &b, "truncated metadata value")))
        return rc;
    kv->data = b;
    scalar_num(kv);
    return INF_OK;
}

static const struct { uint32_t type; int block; size_t bytes; const char *name; } types[] = {
    {GGUF_F32, 1, 4, "F32"},       {GGUF_F16, 1, 2, "F16"},     {GGUF_BF16, 1, 2, "BF16"},
    {GGUF_Q4_0, 32, 18, "Q4_0"},   {GGUF_Q8_0, 32, 34, "Q8_0"}, {GGUF_Q4_K, 256, 144, "Q4_K"},
    {GGUF_Q5_K, 256, 176, "Q5_K"}, {GGUF_Q6_K, 256, 210, "Q6_K"}, {GGUF_Q4_1, 32, 20, "Q4_1"},
    {GGUF_Q5_0, 32, 22, "Q5_0"},   {GGUF_Q5_1, 32, 24, "Q5_1"}, {GGUF_Q2_K, 256, 84, "Q2_K"},
    {GGUF_Q3_K, 256, 110, "Q3_K"}, {GGUF_IQ4_NL, 32, 18, "IQ4_NL"},
    {GGUF_IQ4_XS, 256, 136, "IQ4_XS"},
};

/* ggml's names of the types we do not read, for messages. */
static const char *const other_types[] = {
    [9] = "Q8_1", [15] = "Q8_K", [16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S",
    [21] = "IQ3_S", [22] = "IQ2_S", [24] = "I8",
    [25] = "I16", [26] = "I32", [27] = "I64", [28] = "F64", [29] = "IQ1_M", [34] = "TQ1_0",
    [35] = "TQ2_0", [39] = "MXFP4",
};

int gguf_type_block(uint32_t type, size_t *block_bytes)
{
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].type == type) {
            *block_bytes = types[i].bytes;
            return types[i].block;
        }
    *block_bytes = 0;
    return 0;
}

const char *gguf_type_name(uint32_t type)
{
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].type == type)
            return types[i].name;
    if (type < sizeof other_types / sizeof other_types[0])
        return other_types[type];
    return NULL;
}

static int read_tensor(rd *r, gguf_tensor *t)
{
    const char *s;
    uint64_t n;
    uint32_t nd;
    int rc;
    if ((rc = rd_str(r, &s, &n, "truncated tensor name")) ||
        (rc = rd_u32(r, &nd, "truncated tensor dimensions")))
        return rc;
    if (!(t->name = keep_name(s, n, r)))
        return INF_ERR_NOMEM;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return inf_fail(r->err, INF_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (1 to %d)",
                        r->label, t->name, nd, GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t total = 1;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) {
        uint64_t d = 1;
        if (i < t->n_dims && (rc = rd_u64(r, &d, "truncated tensor shape")))
            return rc;
        /* every dimension and their product stay below 2^62 */
        if (d == 0 || d > ((uint64_t)1 << 62) / total)
            return inf_fail(r->err, INF_ERR_FORMAT, "%s: tensor '%s' has an empty or absurd "
                            "shape", r->label, t->name);
        t->ne[i] = (int64_t)d;
        total *= d;
    }
    uint64_t off;
    if ((rc = rd_u32(r, &t->type, "truncated tensor type")) ||
        (rc = rd_u64(r, &off, "truncated tensor offset")))
        return rc;
    size_t bb;
    int block = gguf_type_block(t->type, &bb);
    const char *nm = gguf_type_name(t->type);
    if (nm) {
        t->type_name = nm;
    } else {
        snprintf(t->type_buf, sizeof t->type_buf, "type %u", t->type);
        t->type_name = t->type_buf;
    }
    t->known = block > 0;
    if (!t->known)
        return INF_OK;
    if (t->ne[0] % block)
        return inf_fail(r->err, INF_ERR_FORMAT, "%s: tensor '%s' (%s) has rows of %lld, not a "
                        "multiple of its block of %d", r->label, t->name, t->type_name,
                        (long long)t->ne[0], block);
    t->nbytes = (size_t)(total / (uint64_t)block * bb); /* total < 2^62, bb <= 210 / 256 */
    t->data = (const void *)(uintptr_t)off; /* resolved once the data start is known */
    return INF_OK;
}

static int cmp_off(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    uintptr_t p = (uintptr_t)x->data, q = (uintptr_t)y->data;
    return p < q ? -1 : p > q;
}

/* Data start, offsets inside the file, aligned, and not overlapping. */
static int place_tensors(gguf_file *g, rd *r)
{
    uint64_t align = 32;
    const gguf_kv *a = gguf_find_kv(g, "general.alignment");
    if (a) {
        if (a->type != GGUF_V_U32 || a->inum == 0 || (a->inum & (a->inum - 1)) ||
            a->inum > 1 << 20)
            return inf_fail(r->err, INF_ERR_FORMAT, "%s: general.alignment must be a power "
                            "of two (u32)", r->label);
        align = (uint64_t)a->inum;
    }
    uint64_t start = (r->off + align - 1) / align * align;
    if (start > r->len && g->n_tensors)
        return inf_fail(r->err, INF_ERR_FORMAT, "%s: truncated before the tensor data", r->label);
    const gguf_tensor **by = malloc(sizeof *by * (size_t)(g->n_tensors ? g->n_tensors : 1));
    if (!by)
        return inf_fail(r->err, INF_ERR_NOMEM, "%s: out of memory", r->label);
    int n = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        if (!t->known)
            continue;
        uint64_t off = (uint64_t)(uintptr_t)t->data;
        if (off % align || off > r->len - start || t->nbytes > r->len - start - off) {
            free(by);
            return inf_fail(r->err, INF_ERR_FORMAT, "%s: tensor '%s' at offset %llu (%zu "
                            "bytes) is %s", r->label, t->name, (unsigned long long)off,
                            t->nbytes, off % align ? "not aligned" : "outside the file");
        }
        by[n++] = t;
    }
    qsort(by, (size_t)n, sizeof *by, cmp_off);
    for (int i = 0; i + 1 < n; i++)
        if ((uint64_t)(uintptr_t)by[i]->data + by[i]->nbytes > (uint64_t)(uintptr_t)by[i + 1]->data) {
            int rc = inf_fail(r->err, INF_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap",
                              r->label, by[i]->name, by[i + 1]->name);
            free(by);
            return rc;
        }
    free(by);
    for (int i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        if (t->known) {
            t->data = g->base + start + (uint64_t)(uintptr_t)t->data;
            g->data_bytes += t->nbytes;
        }
    }
    return INF_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Two tensors or two keys with one name would make lookups ambiguous. */
static int check_unique(const gguf_file *g, rd *r)
{
    int n = g->n_kv > g->n_tensors ? g->n_kv : g->n_tensors, rc = INF_OK;
    const char **v = malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v)
        return inf_fail(r->err, INF_ERR_NOMEM, "%s: out of memory", r->label);
    for (int pass = 0; pass < 2 && !rc; pass++) {
        int m = pass ? g->n_tensors : g->n_kv;
        for (int i = 0; i < m; i++)
            v[i] = pass ? g->tensors[i].name : g->kv[i].key;
        qsort(v, (size_t)m, sizeof *v, cmp_name);
        for (int i = 0; i + 1 < m && !rc; i++)
            if (!strcmp(v[i], v[i + 1]))
                rc = inf_fail(r->err, INF_ERR_FORMAT, "%s: %s '%s' appears twice", r->label,
                              pass ? "tensor" : "metadata key", v[i]);
    }
    free(v);
    return rc;
}

static int parse(gguf_file *g, inf_err *err)
{
    rd r = {.p = g->base, .len = g->len, .label = g->path, .err = err};
    const uint8_t *magic;
    uint64_t nt, nkv;
    int rc;
    if (g->len < 4 || memcmp(g->base, "GGUF", 4))
        return inf_fail(err, INF_ERR_FORMAT, "%s: not a GGUF file (no GGUF magic)", g->path);
    if ((rc = rd_bytes(&r, 4, &magic, "truncated header")) ||
        (rc = rd_u32(&r, &g->version, "truncated header")))
        return rc;
    if (g->version != 2 && g->version != 3)
        return inf_fail(err, INF_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (2 and "
                        "3 are)", g->path, g->version);
    if ((rc = rd_u64(&r, &nt, "truncated header")) || (rc = rd_u64(&r, &nkv, "truncated header")))
        return rc;
    /* each tensor info takes at least 24 bytes, each key-value 12 */
    if (nt > GGUF_MAX_COUNT || nkv > GGUF_MAX_COUNT || nt * 24 + nkv * 12 > g->len)
        return inf_fail(err, INF_ERR_FORMAT, "%s: %llu tensors and %llu metadata keys do not "
                        "fit in %zu bytes", g->path, (unsigned long long)nt,
                        (unsigned long long)nkv, g->len);
    g->n_tensors = (int)nt;
    g->n_kv = (int)nkv;
    g->kv = calloc((size_t)nkv + 1, sizeof *g->kv);
    g->tensors = calloc((size_t)nt + 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", g->path);
    for (int i = 0; i < g->n_kv; i++)
        if ((rc = read_kv(&r, &g->kv[i])))
            return rc;
    for (int i = 0; i < g->n_tensors; i++)
        if ((rc = read_tensor(&r, &g->tensors[i])))
            return rc;
    if ((rc = check_unique(g, &r)))
        return rc;
    return place_tensors(g, &r);
}

static int open_common(gguf_file *g, gguf_file **out, inf_err *err)
{
    int rc = parse(g, err);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return INF_OK;
}

int gguf_open_mem(const void *buf, size_t len, const char *label, gguf_file **out,
                  inf_err *err)
{
    *out = NULL;
    gguf_file *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(label ? label : "gguf"))) {
        free(g);
        return inf_fail(err, INF_ERR_NOMEM, "gguf: out of memory");
    }
    g->base = buf;
    g->len = len;
    return open_common(g, out, err);
}

int gguf_sniff(const char *path)
{
    struct stat sb;
    char magic[4];
    if (stat(path, &sb) || !S_ISREG(sb.st_mode))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int ok = read(fd, magic, 4) == 4 && memcmp(magic, "GGUF", 4) == 0;
    close(fd);
    return ok;
}

int gguf_open(const char *path, gguf_file **out, inf_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return inf_fail(err, INF_ERR_IO, "%s: cannot open", path);
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return inf_fail(err, INF_ERR_IO, "%s: not a regular file", path);
    }
    gguf_file *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        close(fd);
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
    }
    g->len = (size_t)sb.st_size;
    if (g->len) {
        void *p = inf_map_weights(fd, g->len);
        if (p == MAP_FAILED) {
            close(fd);
            gguf_close(g);
            return inf_fail(err, INF_ERR_IO, "%s: cannot map", path);
        }
        g->base = p;
        g->mapped = 1;
    }
    close(fd);
    return open_common(g, out, err);
}

int gguf_adopt(gguf_file *g, gguf_file *shard, inf_err *err)
{
    gguf_file **sh = realloc(g->shards, sizeof *sh * (size_t)(g->n_shards + 1));
    if (!sh)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", g->path);
    g->shards = sh;
    if ((uint64_t)g->n_tensors + (uint64_t)shard->n_tensors > GGUF_MAX_COUNT)
        return inf_fail(err, INF_ERR_FORMAT, "%s: too many tensors with %s", g->path, shard->path);
    gguf_tensor *t = realloc(g->tensors, sizeof *t * (size_t)(g->n_tensors + shard->n_tensors + 1));
    if (!t)
        return inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", g->path);
    g->tensors = t;
    for (int i = 0; i < shard->n_tensors; i++) /* names and data stay the shard's */
        g->tensors[g->n_tensors + i] = shard->tensors[i];
    /* an unknown type's name is in its own record, which moved */
    for (int i = 0; i < g->n_tensors + shard->n_tensors; i++)
        if (!gguf_type_name(g->tensors[i].type))
            g->tensors[i].type_name = g->tensors[i].type_buf;
    int n0 = g->n_tensors;
    g->n_tensors += shard->n_tensors;
    g->shards[g->n_shards++] = shard;
    /* the names now g's to free, and to check: a tensor in two files is
     * as ambiguous as one named twice in one */
    shard->n_tensors = 0;
    g->data_bytes += shard->data_bytes;
    rd r = {.label = g->path, .err = err};
    int rc = check_unique(g, &r);
    if (rc) { /* give the shard back its names so that closing frees them once */
        shard->n_tensors = g->n_tensors - n0;
        g->n_tensors = n0;
        g->n_shards--;
    }
    return rc;
}

void gguf_close(gguf_file *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_shards; i++)
        gguf_close(g->shards[i]);
    free(g->shards);
    if (g->mapped)
        munmap((void *)g->base, g->len);
    for (int i = 0; g->kv && i < g->n_kv; i++)
        free((char *)g->kv[i].key);
    for (int i = 0; g->tensors && i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->path);
    free(g);
}

const char *gguf_path(const gguf_file *g) { return g->path; }
uint32_t gguf_version(const gguf_file *g) { return g->version; }
int gguf_kv_count(const gguf_file *g) { return g->n_kv; }
const gguf_kv *gguf_kv_at(const gguf_file *g, int i) { return &g->kv[i]; }
int gguf_tensor_count(const gguf_file *g) { return g->n_tensors; }
const gguf_tensor *gguf_tensor_at(const gguf_file *g, int i) { return &g->tensors[i]; }
size_t gguf_data_bytes(const gguf_file *g) { return g->data_bytes; }

const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key)
{
    for (int i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name)
{
    for (int i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}
