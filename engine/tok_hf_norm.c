/* tok_hf_norm: text pieces, UTF-8 and Unicode helpers, regexes (PCRE2) and
 * the normalizers of tokenizer.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tok_hf.h"

/* ---- pieces ---------------------------------------------------------------- */

void hf_splits_clear(hf_splits *s)
{
    s->buf.len = 0;
    s->n = 0;
}

void hf_splits_free(hf_splits *s)
{
    free(s->buf.p);
    free(s->v);
    memset(s, 0, sizeof *s);
}

void hf_splits_add(hf_splits *s, const char *p, size_t len, int first)
{
    if (len == 0)
        return;
    if (s->n == s->cap) {
        size_t c = s->cap ? 2 * s->cap : 16;
        hf_split *v = realloc(s->v, c * sizeof *v);
        if (!v) {
            s->oom = 1;
            return;
        }
        s->v = v;
        s->cap = c;
    }
    size_t off = s->buf.len;
    inf_buf_put(&s->buf, p, len);
    if (s->buf.oom) {
        s->oom = 1;
        return;
    }
    s->v[s->n++] = (hf_split){off, len, first};
}

/* ---- UTF-8 and Unicode ------------------------------------------------------- */

size_t hf_utf8_next(const char *s, size_t n, int32_t *cp)
{
    utf8proc_int32_t c = 0;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &c);
    if (k <= 0) { /* not reached on sanitized text; stay safe */
        *cp = (unsigned char)s[0];
        return 1;
    }
    *cp = c;
    return (size_t)k;
}

size_t hf_utf8_put(int32_t cp, char *out)
{
    return (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
}

/* The length of s[0:n]'s longest valid UTF-8 prefix. */
static size_t utf8_valid_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                              (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0)
            break;
        i += (size_t)k;
    }
    return i;
}

int hf_utf8_valid(const char *s, size_t n)
{
    return utf8_valid_prefix(s, n) == n;
}

int hf_utf8_sanitize(const char *s, size_t n, char **out, size_t *out_len)
{
    *out = NULL;
    size_t i = utf8_valid_prefix(s, n);
    if (i == n)
        return INF_OK;
    inf_buf b = {0};
    inf_buf_put(&b, s, i);
    while (i < n) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                              (utf8proc_ssize_t)(n - i), &c);
        if (k > 0) {
            inf_buf_put(&b, s + i, (size_t)k);
            i += (size_t)k;
            continue;
        }
        /* One U+FFFD per maximal invalid subpart (Unicode's "substitution
         * of maximal subparts", as Python's and the WHATWG decoders, and so
         * a client's text, do). */
        unsigned char c0 = (unsigned char)s[i];
        size_t need = c0 >= 0xC2 && c0 <= 0xDF ? 2 : c0 >= 0xE0 && c0 <= 0xEF ? 3
                      : c0 >= 0xF0 && c0 <= 0xF4 ? 4 : 1;
        unsigned lo = c0 == 0xE0 ? 0xA0 : c0 == 0xF0 ? 0x90 : 0x80;
        unsigned hi = c0 == 0xED ? 0x9F : c0 == 0xF4 ? 0x8F : 0xBF;
        size_t j = i + 1;
        while (j < n && j < i + need) {
            unsigned char cj = (unsigned char)s[j];
            if (j == i + 1 ? (cj < lo || cj > hi) : (cj & 0xC0) != 0x80)
                break;
            j++;
        }
        inf_buf_put(&b, "\xEF\xBF\xBD", 3);
        i = j;
    }
    if (b.oom) {
        free(b.p);
        return INF_ERR_NOMEM;
    }
    *out = b.p;
    *out_len = b.len;
    return INF_OK;
}

int hf_is_white(int32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

int hf_is_numeric(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

int hf_is_alnum(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || hf_is_numeric(c);
}

int hf_is_punct(int32_t c)
{
    if (c < 128)
        return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
               (c >= 123 && c <= 126);
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* ---- regexes ------------------------------------------------------------------ */

/* Oniguruma's \s (White_Space); PCRE2's also takes U+180E. */
#define HF_WS_SET "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}" \
                  "\\x{202F}\\x{205F}\\x{3000}"

/* Rewrites \s and \S for PCRE2; inside a class \S stays (it differs only on
 * U+180E, and no tokenizer writes it there). */
static char *hf_re_rewrite(const char *p, size_t n, size_t *out_len)
{
    inf_buf b = {0};
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            if (e == 's')
                inf_buf_put(&b, in_class ? HF_WS_SET : "[" HF_WS_SET "]",
                            strlen(HF_WS_SET) + (in_class ? 0 : 2));
            else if (e == 'S' && !in_class)
                inf_buf_put(&b, "[^" HF_WS_SET "]", strlen(HF_WS_SET) + 3);
            else
                inf_buf_put(&b, p + i, 2);
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            inf_buf_put(&b, p + i, 1);
            /* A ']' right after '[' or '[^' is a literal. */
            if (i + 1 < n && p[i + 1] == '^')
                inf_buf_put(&b, p + ++i, 1);
            if (i + 1 < n && p[i + 1] == ']')
                inf_buf_put(&b, p + ++i, 1);
            continue;
        }
        if (c == '[' && in_class && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            const char *end = memchr(p + i + 2, ']', n - i - 2);
            if (end) {
                inf_buf_put(&b, p + i, (size_t)(end - (p + i)) + 1);
                i = (size_t)(end - p);
                continue;
            }
        }
        if (c == ']' && in_class)
            in_class = 0;
        inf_buf_put(&b, p + i, 1);
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (!b.p) {
        b.p = malloc(1);
        if (b.p)
            b.p[0] = 0;
    }
    *out_len = b.len;
    return b.p;
}

int hf_re_compile(hf_re *re, const char *pat, size_t len, char *msg, size_t msg_len)
{
    re->code = NULL;
    size_t n = 0;
    char *p = hf_re_rewrite(pat, len, &n);
    if (!p) {
        snprintf(msg, msg_len, "out of memory");
        return INF_ERR_NOMEM;
    }
    int ec = 0;
    PCRE2_SIZE eo = 0;
    re->code = pcre2_compile((PCRE2_SPTR)p, n, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    free(p);
    if (!re->code) {
        PCRE2_UCHAR m[256];
        pcre2_get_error_message(ec, m, sizeof m);
        snprintf(msg, msg_len, "PCRE2 rejects the regex at offset %zu: %s", (size_t)eo,
                 (const char *)m);
        return INF_ERR_FORMAT;
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* interpreted when it fails */
    return INF_OK;
}

void hf_re_free(hf_re *re)
{
    pcre2_code_free(re->code);
    re->code = NULL;
}

int hf_find(const hf_pattern *p, const char *s, size_t n,
            void (*fn)(void *ctx, size_t start, size_t end), void *ctx)
{
    if (!p->is_re) {
        if (p->lit_len == 0)
            return INF_OK;
        size_t i = 0;
        while (i + p->lit_len <= n) {
            const char *m = memmem(s + i, n - i, p->lit, p->lit_len);
            if (!m)
                break;
            size_t st = (size_t)(m - s);
            fn(ctx, st, st + p->lit_len);
            i = st + p->lit_len;
        }
        return INF_OK;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re.code, NULL);
    if (!md)
        return INF_ERR_NOMEM;
    size_t pos = 0;
    int rc = INF_OK;
    while (pos <= n) {
        /* The text was validated (or sanitized) once by the caller: no
         * per-match UTF check, which would make a find-all quadratic. */
        int m = pcre2_match(p->re.code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            rc = m == PCRE2_ERROR_NOMEMORY ? INF_ERR_NOMEM : INF_ERR_FORMAT;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t st = ov[0], en = ov[1];
        if (en < st) /* \K can do this; treat as empty */
            en = st;
        fn(ctx, st, en);
        if (en > st) {
            pos = en;
        } else {
            if (en >= n)
                break;
            int32_t cp;
            pos = en + hf_utf8_next(s + en, n - en, &cp);
        }
    }
    pcre2_match_data_free(md);
    return rc;
}

/* ---- normalizers --------------------------------------------------------------- */

typedef struct hf_repl_ctx {
    const char *s;
    size_t last;
    inf_buf *out;
    const char *with;
    size_t with_len;
} hf_repl_ctx;

static void hf_repl_cb(void *ctx, size_t st, size_t en)
{
    hf_repl_ctx *c = ctx;
    inf_buf_put(c->out, c->s + c->last, st - c->last);
    inf_buf_put(c->out, c->with, c->with_len);
    c->last = en;
}

/* Replaces every match of pat in s[0:n] with `with`, into out (appended). */
static int hf_replace(const hf_pattern *pat, const char *with, size_t with_len, const char *s,
                      size_t n, inf_buf *out)
{
    hf_repl_ctx c = {s, 0, out, with, with_len};
    int rc = hf_find(pat, s, n, hf_repl_cb, &c);
    inf_buf_put(out, s + c.last, n - c.last);
    return rc;
}

static int hf_norm_one(const hf_norm *nm, const char *s, size_t n, inf_buf *out)
{
    out->len = 0;
    switch (nm->kind) {
    case HF_N_NFC:
    case HF_N_NFD:
    case HF_N_NFKC:
    case HF_N_NFKD: {
        int opt = UTF8PROC_STABLE |
                  (nm->kind == HF_N_NFC || nm->kind == HF_N_NFKC ? UTF8PROC_COMPOSE
                                                                 : UTF8PROC_DECOMPOSE) |
                  (nm->kind == HF_N_NFKC || nm->kind == HF_N_NFKD ? UTF8PROC_COMPAT : 0);
        if (n == 0)
            return INF_OK;
        utf8proc_uint8_t *r = NULL;
        utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &r,
                                          (utf8proc_option_t)opt);
        if (k < 0) {
            free(r);
            return k == UTF8PROC_ERROR_NOMEM ? INF_ERR_NOMEM : INF_ERR_FORMAT;
        }
        inf_buf_put(out, (const char *)r, (size_t)k);
        free(r);
        return INF_OK;
    }
    case HF_N_LOWER:
        for (size_t i = 0; i < n;) {
            int32_t cp;
            i += hf_utf8_next(s + i, n - i, &cp);
            char u[4];
            inf_buf_put(out, u, hf_utf8_put(utf8proc_tolower(cp), u));
        }
        return INF_OK;
    case HF_N_REPLACE:
        return hf_replace(&nm->pat, nm->str, nm->str_len, s, n, out);
    case HF_N_PREPEND:
        if (n)
            inf_buf_put(out, nm->str, nm->str_len);
        inf_buf_put(out, s, n);
        return INF_OK;
    case HF_N_STRIP: {
        size_t a = 0, b = n;
        while (nm->left && a < b) {
            int32_t cp;
            size_t k = hf_utf8_next(s + a, b - a, &cp);
            if (!hf_is_white(cp))
                break;
            a += k;
        }
        while (nm->right && b > a) {
            size_t j = b - 1;
            while (j > a && ((unsigned char)s[j] & 0xC0) == 0x80)
                j--;
            int32_t cp;
            hf_utf8_next(s + j, b - j, &cp);
            if (!hf_is_white(cp))
                break;
            b = j;
        }
        inf_buf_put(out, s + a, b - a);
        return INF_OK;
    }
    case HF_N_SEQ:
        break;
    }
    return INF_ERR_INVALID;
}

int hf_norm_apply(const hf_norm *nm, const char *s, size_t n, inf_buf *out)
{
    if (nm->kind != HF_N_SEQ) {
        int rc = hf_norm_one(nm, s, n, out);
        return rc ? rc : out->oom ? INF_ERR_NOMEM : INF_OK;
    }
    out->len = 0;
    inf_buf_put(out, s, n);
    inf_buf tmp = {0};
    int rc = INF_OK;
    for (int i = 0; i < nm->n_sub && !rc && !out->oom; i++) {
        rc = hf_norm_apply(&nm->sub[i], out->p ? out->p : "", out->len, &tmp);
        inf_buf t = *out;
        *out = tmp;
        tmp = t;
    }
    free(tmp.p);
    return rc ? rc : out->oom ? INF_ERR_NOMEM : INF_OK;
}

void hf_norm_free(hf_norm *nm)
{
    if (!nm)
        return;
    for (int i = 0; i < nm->n_sub; i++)
        hf_norm_free(&nm->sub[i]);
    free(nm->sub);
    hf_re_free(&nm->pat.re);
    free(nm->pat.lit);
    free(nm->str);
}
