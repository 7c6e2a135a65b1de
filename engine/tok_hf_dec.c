/* tok_hf_dec: the decoders of tokenizer.json, each a pass over the list of
 * token strings as tokenizers' decode_chain is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

#define PIECE(s, i) ((s)->buf.p + (s)->v[i].off)

/* Bytes of each token mapped back from the byte-level alphabet (a token with
 * a character outside it keeps its own bytes), then one lossy UTF-8 string. */
static int dec_bytelevel(const hf_splits *in, hf_splits *out)
{
    inf_buf b = {0};
    for (size_t i = 0; i < in->n; i++) {
        const char *t = PIECE(in, i);
        size_t n = in->v[i].len, start = b.len, j = 0;
        while (j < n) {
            int32_t cp;
            j += hf_utf8_next(t + j, n - j, &cp);
            int byte = hf_char_byte(cp);
            if (byte < 0)
                break;
            char c = (char)byte;
            inf_buf_put(&b, &c, 1);
        }
        if (j < n) {
            b.len = start;
            inf_buf_put(&b, t, n);
        }
    }
    char *clean = NULL;
    size_t clean_len = 0;
    int rc = b.oom ? INF_ERR_NOMEM : hf_utf8_sanitize(b.p ? b.p : "", b.len, &clean, &clean_len);
    if (!rc)
        hf_splits_add(out, clean ? clean : b.p, clean ? clean_len : b.len, 0);
    free(clean);
    free(b.p);
    return rc;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Flushes a run of <0xNN> bytes: itself when valid UTF-8, else one U+FFFD
 * per byte (tokenizers' ByteFallback). */
static void flush_bytes(inf_buf *run, hf_splits *out)
{
    if (!run->len)
        return;
    char *clean = NULL;
    size_t clean_len = 0;
    if (hf_utf8_sanitize(run->p, run->len, &clean, &clean_len)) {
        out->oom = 1;
    } else if (!clean) {
        hf_splits_add(out, run->p, run->len, 0);
    } else {
        for (size_t i = 0; i < run->len; i++)
            hf_splits_add(out, "\xEF\xBF\xBD", 3, 0);
    }
    free(clean);
    run->len = 0;
}

static int dec_bytefallback(const hf_splits *in, hf_splits *out)
{
    inf_buf run = {0};
    for (size_t i = 0; i < in->n; i++) {
        const char *t = PIECE(in, i);
        size_t n = in->v[i].len;
        int hi = n == 6 ? hex_digit(t[3]) : -1, lo = n == 6 ? hex_digit(t[4]) : -1;
        if (n == 6 && memcmp(t, "<0x", 3) == 0 && t[5] == '>' && hi >= 0 && lo >= 0) {
            char c = (char)(hi * 16 + lo);
            inf_buf_put(&run, &c, 1);
            continue;
        }
        flush_bytes(&run, out);
        hf_splits_add(out, t, n, 0);
    }
    flush_bytes(&run, out);
    int rc = run.oom ? INF_ERR_NOMEM : INF_OK;
    free(run.p);
    return rc;
}

static int dec_fuse(const hf_splits *in, hf_splits *out)
{
    hf_splits_add(out, in->buf.p, in->buf.len, 0); /* pieces are back to back */
    return INF_OK;
}

static int dec_strip(const hf_dec *d, const hf_splits *in, hf_splits *out)
{
    for (size_t i = 0; i < in->n; i++) {
        const char *t = PIECE(in, i);
        size_t a = 0, b = in->v[i].len, k = d->str_len;
        for (int j = 0; j < d->start && b - a >= k && memcmp(t + a, d->str, k) == 0; j++)
            a += k;
        for (int j = 0; j < d->stop && b - a >= k && memcmp(t + b - k, d->str, k) == 0; j++)
            b -= k;
        hf_splits_add(out, t + a, b - a, 0);
    }
    return INF_OK;
}

typedef struct repl_ctx {
    const char *s;
    size_t last;
    inf_buf *out;
    const hf_dec *d;
} repl_ctx;

static void repl_cb(void *ctx, size_t st, size_t en)
{
    repl_ctx *c = ctx;
    inf_buf_put(c->out, c->s + c->last, st - c->last);
    inf_buf_put(c->out, c->d->str, c->d->str_len);
    c->last = en;
}

static int dec_replace(const hf_dec *d, const hf_splits *in, hf_splits *out)
{
    inf_buf b = {0};
    int rc = INF_OK;
    for (size_t i = 0; i < in->n && !rc; i++) {
        b.len = 0;
        repl_ctx c = {PIECE(in, i), 0, &b, d};
        rc = hf_find(&d->pat, c.s, in->v[i].len, repl_cb, &c);
        inf_buf_put(&b, c.s + c.last, in->v[i].len - c.last);
        hf_splits_add(out, b.p, b.len, 0);
    }
    rc = rc ? rc : b.oom ? INF_ERR_NOMEM : INF_OK;
    free(b.p);
    return rc;
}

/* Metaspace: the replacement character is a space, except in the first
 * token where (unless prepend_scheme is "never") it goes. */
static int dec_metaspace(const hf_dec *d, const hf_splits *in, hf_splits *out)
{
    inf_buf b = {0};
    for (size_t i = 0; i < in->n; i++) {
        b.len = 0;
        const char *t = PIECE(in, i);
        size_t n = in->v[i].len;
        for (size_t j = 0; j < n;) {
            if (n - j >= d->str_len && memcmp(t + j, d->str, d->str_len) == 0) {
                if (!(i == 0 && d->prepend != HF_PREPEND_NEVER))
                    inf_buf_put(&b, " ", 1);
                j += d->str_len;
            } else {
                inf_buf_put(&b, t + j, 1);
                j++;
            }
        }
        hf_splits_add(out, b.p, b.len, 0);
    }
    int rc = b.oom ? INF_ERR_NOMEM : INF_OK;
    free(b.p);
    return rc;
}

int hf_dec_apply(const hf_dec *d, hf_splits *s, hf_splits *tmp)
{
    if (d->kind == HF_D_SEQ) {
        for (int i = 0; i < d->n_sub; i++) {
            int rc = hf_dec_apply(&d->sub[i], s, tmp);
            if (rc)
                return rc;
        }
        return INF_OK;
    }
    hf_splits_clear(tmp);
    int rc = INF_ERR_INVALID;
    switch (d->kind) {
    case HF_D_BYTELEVEL: rc = dec_bytelevel(s, tmp); break;
    case HF_D_BYTEFALLBACK: rc = dec_bytefallback(s, tmp); break;
    case HF_D_FUSE: rc = dec_fuse(s, tmp); break;
    case HF_D_STRIP: rc = dec_strip(d, s, tmp); break;
    case HF_D_REPLACE: rc = dec_replace(d, s, tmp); break;
    case HF_D_METASPACE: rc = dec_metaspace(d, s, tmp); break;
    case HF_D_SEQ: break;
    }
    if (!rc && tmp->oom)
        rc = INF_ERR_NOMEM;
    hf_splits t = *s;
    *s = *tmp;
    *tmp = t;
    return rc;
}

void hf_dec_free(hf_dec *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->n_sub; i++)
        hf_dec_free(&d->sub[i]);
    free(d->sub);
    hf_re_free(&d->pat.re);
    free(d->pat.lit);
    free(d->str);
}
