/* Shared basics for every inferd module: error codes and messages, dtypes. */
#ifndef INFERD_COMMON_H
#define INFERD_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* The release without git; engine/version.h says what a build is. */
#define INFERD_VERSION "0.1.0"

/* Error codes: 0 is success, negative values are failures. */
enum {
    INF_OK = 0,
    INF_ERR_IO = -1,          /* a file is missing or unreadable            */
    INF_ERR_FORMAT = -2,      /* a file's contents are malformed            */
    INF_ERR_UNSUPPORTED = -3, /* well-formed, but not something we handle   */
    INF_ERR_NOMEM = -4,       /* an allocation failed                       */
    INF_ERR_INVALID = -5,     /* a caller passed a bad argument             */
    INF_ERR_NOSPACE = -6,     /* a pool is full right now (not fatal)       */
};

/* A failure's code and its one-line message, filled in by the callee so the
 * caller can report it. */
typedef struct inf_err {
    int code;
    char msg[512];
} inf_err;

/* Records code and a printf-style message in e (e may be NULL); returns code
 * so callers can write `return inf_fail(err, INF_ERR_IO, "...")`. */
int inf_fail(inf_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Element types of weights. INF_DTYPE_NONE marks a type we do not compute in. */
typedef enum inf_dtype {
    INF_DTYPE_NONE = -1,
    INF_F32 = 0,
    INF_F16 = 1,
    INF_BF16 = 2,
} inf_dtype;

size_t inf_dtype_size(inf_dtype t);      /* bytes per element; 0 for NONE */
const char *inf_dtype_name(inf_dtype t); /* "f32", "f16", "bf16", "none"  */

/* Exact conversions of single elements (used by reference paths and tests). */
float inf_bf16_to_f32(uint16_t h);
float inf_f16_to_f32(uint16_t h);
uint16_t inf_f32_to_bf16(float f); /* round to nearest even */
uint16_t inf_f32_to_f16(float f);  /* round to nearest even */

/* A growing NUL-terminated byte buffer. Start from {0}; oom sticks, so
 * callers check once at the end; p belongs to the caller (free it). */
typedef struct inf_buf {
    char *p;
    size_t len, cap;
    int oom;
} inf_buf;

void inf_buf_put(inf_buf *b, const char *s, size_t n);
void inf_buf_printf(inf_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Decodes the UTF-8 character at s[0:n] (n >= 1): its byte length, and its
 * code point in *cp; a byte that starts no valid character is length 1 with
 * *cp = 0xFFFFFFFF (so callers step over it and it matches no class). */
size_t inf_utf8_decode(const unsigned char *s, size_t n, unsigned *cp);

/* dir + "/" + name, without doubling a trailing slash; NULL when out of
 * memory. The caller frees it. */
char *inf_path_join(const char *dir, const char *name);

/* Reads a whole file into a malloc'd NUL-terminated buffer; *len (may be
 * NULL) gets its size. A file over max_bytes (0: no limit) is
 * INF_ERR_FORMAT. A file that does not exist is INF_ERR_IO, and when missing
 * is not NULL *missing is set and no message is written (the caller may
 * treat absence as normal). Messages name the path. */
int inf_read_file(const char *path, size_t max_bytes, char **out, size_t *len, int *missing,
                  inf_err *err);

/* Maps len bytes of fd read-only (MAP_PRIVATE) for weights read whole on
 * every step; MAP_FAILED (errno set) on failure. It asks for transparent
 * huge pages: a file not yet in the page cache is then read into 2 MiB
 * folios and mapped by 2 MiB entries, which spares the first pass over the
 * weights a fault per 4 KiB and every pass a TLB miss per 4 KiB (docs/engine.md). */
void *inf_map_weights(int fd, size_t len);

/* n bytes for weights (a conversion at load, a backend's packed copy),
 * freed by free(), not zeroed: 64-byte aligned, and from 2 MiB up 2 MiB
 * aligned and hinted to transparent huge pages, so a first touch faults
 * once per 2 MiB, not per 4 KiB (a third to a half of a quantized
 * checkpoint's load on these VMs), and streams over them miss the TLB once
 * per 2 MiB. NULL when out of memory. */
void *inf_alloc_big(size_t n);

/* Monotonic clock in seconds. */
double inf_now(void);

#endif
