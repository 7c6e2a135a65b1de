/* json_esc_: the one JSON string escaper, for API responses (server/oai)
 * and JSON log lines (engine/log). Valid UTF-8 is kept, each maximal
 * invalid subpart becomes one U+FFFD (as Python's errors="replace" and the
 * WHATWG decoder), '"' and '\\' are escaped, and so is every control
 * character, NUL included, so any bytes make one line of valid JSON. */
#ifndef INFERD_JSON_ESC_H
#define INFERD_JSON_ESC_H

#include <stddef.h>

#include "common.h"

/* Bytes to consume at s[0..n) (n >= 1): a whole valid character (*ok = 1),
 * or the maximal invalid subpart (*ok = 0). */
size_t json_esc_utf8_next(const unsigned char *s, size_t n, int *ok);

/* s[0..n) as a quoted JSON string appended to b. */
void json_esc_put(inf_buf *b, const char *s, size_t n);

/* The NUL-terminated s as JSON string contents (no quotes) written into
 * buf[at..cap), never cutting an escape or a character in two; returns the
 * new end (the text stops where it would not fit). */
size_t json_esc_into(char *buf, size_t cap, size_t at, const char *s);

#endif
