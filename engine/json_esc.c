#include "json_esc.h"

#include <stdio.h>
#include <string.h>

size_t json_esc_utf8_next(const unsigned char *s, size_t n, int *ok)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t len, i;

    *ok = 1;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80; /* no overlongs        */
        hi = c == 0xED ? 0x9F : 0xBF; /* no UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF; /* nothing above U+10FFFF */
    } else {
        *ok = 0;
        return 1;
    }
    for (i = 1; i < len; i++) {
        unsigned b = i < n ? s[i] : 0;
        int good = i == 1 ? (b >= lo && b <= hi) : (b & 0xC0) == 0x80;
        if (i >= n || !good) {
            *ok = 0;
            return i;
        }
    }
    return len;
}

/* The escaped form of the character at s[0..n) (n >= 1) in out (at most 6
 * bytes, or the character itself, at most 4); *used: input bytes taken.
 * Returns out's length. The single rule both writers below follow. */
static size_t esc_one(const unsigned char *s, size_t n, char out[8], size_t *used)
{
    unsigned char c = s[0];
    *used = 1;
    if (c == '"' || c == '\\') {
        out[0] = '\\';
        out[1] = (char)c;
        return 2;
    }
    if (c < 0x20) {
        static const char short_esc[] = {['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't',
                                         ['\b'] = 'b', ['\f'] = 'f'};
        if (c < sizeof short_esc && short_esc[c]) {
            out[0] = '\\';
            out[1] = short_esc[c];
            return 2;
        }
        snprintf(out, 8, "\\u%04x", c);
        return 6;
    }
    int ok;
    size_t k = json_esc_utf8_next(s, n, &ok);
    *used = k;
    if (!ok) {
        memcpy(out, "\xEF\xBF\xBD", 3);
        return 3;
    }
    memcpy(out, s, k);
    return k;
}

void json_esc_put(inf_buf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: plain ASCII bytes not yet copied */

    inf_buf_put(b, "\"", 1);
    while (i < n) {
        if (u[i] >= 0x20 && u[i] < 0x80 && u[i] != '"' && u[i] != '\\') {
            run++;
            i++;
            continue;
        }
        if (run)
            inf_buf_put(b, s + i - run, run);
        run = 0;
        char e[8];
        size_t used, k = esc_one(u + i, n - i, e, &used);
        inf_buf_put(b, e, k);
        i += used;
    }
    if (run)
        inf_buf_put(b, s + i - run, run);
    inf_buf_put(b, "\"", 1);
}

size_t json_esc_into(char *buf, size_t cap, size_t at, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = s ? strlen(s) : 0, i = 0;

    while (i < n) {
        char e[8];
        size_t used, k = esc_one(u + i, n - i, e, &used);
        if (at + k >= cap) /* room for the NUL too */
            break;
        memcpy(buf + at, e, k);
        at += k;
        i += used;
    }
    if (at < cap)
        buf[at] = '\0';
    return at;
}
