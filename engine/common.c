#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

int inf_fail(inf_err *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return code;
}

size_t inf_dtype_size(inf_dtype t)
{
    switch (t) {
    case INF_F32: return 4;
    case INF_F16:
    case INF_BF16: return 2;
    default: return 0;
    }
}

const char *inf_dtype_name(inf_dtype t)
{
    switch (t) {
    case INF_F32: return "f32";
    case INF_F16: return "f16";
    case INF_BF16: return "bf16";
    default: return "none";
    }
}

float inf_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t inf_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet, keep the sign */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float inf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: value = man * 2^-24, exact in f32 */
            float f = ldexpf((float)man, -24);
            memcpy(&u, &f, sizeof u);
            u |= sign;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t inf_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) { /* below the smallest normal f16: subnormal or 0 */
        float a;
        memcpy(&a, &absu, sizeof a);
        /* scale so the subnormal unit (2^-24) becomes 1, round to nearest even */
        float r = nearbyintf(a * 16777216.0f);
        return (uint16_t)(sign | (uint32_t)r);
    }
    uint32_t exp = ((absu >> 23) - 112u) << 10;
    uint32_t man = (absu >> 13) & 0x3ffu;
    uint32_t h = exp | man;
    uint32_t rest = absu & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

int inf_read_file(const char *path, size_t max_bytes, char **out, size_t *len, int *missing,
                  inf_err *err)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (missing)
        *missing = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (missing && errno == ENOENT) {
            *missing = 1;
            return INF_ERR_IO;
        }
        return inf_fail(err, INF_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    }
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    int rc = INF_OK;
    while (buf) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1)
            break;
        if (max_bytes && n > max_bytes)
            break;
        char *b = realloc(buf, cap * 2);
        if (!b) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = b;
        cap *= 2;
    }
    if (!buf)
        rc = inf_fail(err, INF_ERR_NOMEM, "%s: out of memory", path);
    else if (ferror(f))
        rc = inf_fail(err, INF_ERR_IO, "%s: cannot read (%s)", path, strerror(errno));
    else if (max_bytes && n > max_bytes)
        rc = inf_fail(err, INF_ERR_FORMAT, "%s: larger than %zu bytes", path, max_bytes);
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return INF_OK;
}

double inf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* dir + "/" + name, without doubling a trailing slash; NULL when out of memory. */
char *inf_path_join(const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    size_t nl = strlen(name);
    char *p = malloc(dl + 1 + nl + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, dl);
    p[dl] = '/';
    memcpy(p + dl + 1, name, nl + 1);
    return p;
}

/* Room for n more bytes and the NUL. */
static int buf_reserve(inf_buf *b, size_t n)
{
    if (b->oom)
        return 0;
    if (b->len + n + 1 <= b->cap)
        return 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return 0;
    }
    b->p = p;
    b->cap = cap;
    return 1;
}

void inf_buf_put(inf_buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void inf_buf_printf(inf_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        inf_buf_put(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

size_t inf_utf8_decode(const unsigned char *s, size_t n, unsigned *cp)
{
    size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3
               : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n) {
        *cp = 0xFFFFFFFFu;
        return 1;
    }
    unsigned v = len == 1 ? s[0] : s[0] & (0x7F >> len);
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) {
            *cp = 0xFFFFFFFFu;
            return 1;
        }
        v = v << 6 | (s[k] & 0x3F);
    }
    *cp = v;
    return len;
}

void *inf_alloc_big(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    void *p = NULL;
    if (posix_memalign(&p, n < huge ? 64 : huge, n ? n : 1))
        return NULL;
    if (n < huge)
        return p;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, (n + huge - 1) / huge * huge, MADV_HUGEPAGE); /* a hint, as below */
#endif
    return p;
}

void *inf_map_weights(int fd, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
#ifdef MADV_HUGEPAGE
    if (p != MAP_FAILED)
        (void)madvise(p, len, MADV_HUGEPAGE); /* a hint: refused without THP, harmless */
#endif
    return p;
}
