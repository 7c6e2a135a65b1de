/* tok_hf_pre: the pre-tokenizers of tokenizer.json. Each turns every piece
 * into sub-pieces the way the tokenizers library's NormalizedString::split
 * does: the piece is cut into matches and the text between them, `invert`
 * swaps the two, the behaviour merges or drops matches, empty pieces go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_hf.h"

typedef struct hf_seg {
    size_t st, en;
    int m;
} hf_seg;

typedef struct hf_segs {
    hf_seg *v;
    size_t n, cap;
    size_t prev;
    int oom;
} hf_segs;

static void segs_add(hf_segs *s, size_t st, size_t en, int m)
{
    if (s->n == s->cap) {
        size_t c = s->cap ? 2 * s->cap : 32;
        hf_seg *v = realloc(s->v, c * sizeof *v);
        if (!v) {
            s->oom = 1;
            return;
        }
        s->v = v;
        s->cap = c;
    }
    s->v[s->n++] = (hf_seg){st, en, m};
}

static void segs_match_cb(void *ctx, size_t st, size_t en)
{
    hf_segs *s = ctx;
    if (s->prev != st)
        segs_add(s, s->prev, st, 0);
    segs_add(s, st, en, 1);
    s->prev = en;
}

/* The pattern's matches and the text between them, covering s[0:n]. */
static int segs_pattern(hf_segs *s, const hf_pattern *p, const char *t, size_t n)
{
    s->n = 0;
    s->prev = 0;
    int rc = hf_find(p, t, n, segs_match_cb, s);
    if (s->prev != n)
        segs_add(s, s->prev, n, 0);
    return rc ? rc : s->oom ? INF_ERR_NOMEM : INF_OK;
}

/* Every character for which pred holds is a match of its own. */
static int segs_pred(hf_segs *s, int (*pred)(int32_t), const char *t, size_t n)
{
    s->n = 0;
    size_t last = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t k = hf_utf8_next(t + i, n - i, &cp);
        if (pred(cp)) {
            if (last < i)
                segs_add(s, last, i, 0);
            segs_add(s, i, i + k, 1);
            last = i + k;
        }
        i += k;
    }
    if (last < n)
        segs_add(s, last, n, 0);
    return s->oom ? INF_ERR_NOMEM : INF_OK;
}

/* Applies invert and the behaviour to s's segments in place (the Rust
 * folds of NormalizedString::split), then emits the non-empty ones. */
static void segs_emit(hf_segs *s, hf_behavior b, int invert, const char *t, int first,
                      hf_splits *out)
{
    if (invert)
        for (size_t i = 0; i < s->n; i++)
            s->v[i].m = !s->v[i].m;
    size_t k = 0;
    int prev_m = 0;
    switch (b) {
    case HF_B_REMOVED:
        for (size_t i = 0; i < s->n; i++)
            if (!s->v[i].m)
                s->v[k++] = s->v[i];
        break;
    case HF_B_ISOLATED:
        k = s->n;
        break;
    case HF_B_MERGED_PREV:
        for (size_t i = 0; i < s->n; i++) {
            if (s->v[i].m && !prev_m && k > 0)
                s->v[k - 1].en = s->v[i].en;
            else
                s->v[k++] = s->v[i];
            prev_m = s->v[i].m;
        }
        break;
    case HF_B_MERGED_NEXT: /* the same fold from the right */
        k = s->n;
        {
            size_t w = s->n;
            for (size_t i = s->n; i-- > 0;) {
                hf_seg g = s->v[i];
                if (g.m && !prev_m && w < s->n)
                    s->v[w].st = g.st;
                else
                    s->v[--w] = g;
                prev_m = g.m;
            }
            memmove(s->v, s->v + w, (s->n - w) * sizeof *s->v);
            k = s->n - w;
        }
        break;
    case HF_B_CONTIGUOUS:
        for (size_t i = 0; i < s->n; i++) {
            if (s->v[i].m == prev_m && k > 0)
                s->v[k - 1].en = s->v[i].en;
            else
                s->v[k++] = s->v[i];
            prev_m = s->v[i].m;
        }
        break;
    }
    for (size_t i = 0; i < k; i++)
        hf_splits_add(out, t + s->v[i].st, s->v[i].en - s->v[i].st, first && s->v[i].st == 0);
}

/* ---- the byte-level alphabet ---------------------------------------------------- */

/* GPT-2's bytes_to_unicode in closed form: printable bytes stand for
 * themselves; the others (0x00-0x20, 0x7F-0xA0, 0xAD) take 256, 257, ...
 * in byte order. */
int32_t hf_byte_char(unsigned char b)
{
    if (b <= 0x20)
        return 256 + b;
    if (b >= 0x7F && b <= 0xA0)
        return 256 + 33 + (b - 0x7F);
    if (b == 0xAD)
        return 256 + 33 + 34;
    return b;
}

int hf_char_byte(int32_t cp)
{
    if (cp < 0 || cp > 323)
        return -1;
    if (cp >= 256)
        return cp <= 288 ? cp - 256 : cp <= 322 ? cp - 289 + 0x7F : 0xAD;
    return hf_byte_char((unsigned char)cp) == cp ? cp : -1;
}

/* ---- one pre-tokenizer over one piece -------------------------------------------- */

static int is_ws_pred(int32_t c)
{
    return hf_is_white(c);
}

/* Adds s[0:n] with each byte as its character of the byte-level alphabet
 * (all below U+0800: one or two bytes of UTF-8). */
static int bytelevel_add(hf_splits *out, const char *s, size_t n, int first, inf_buf *mapped)
{
    if (n == 0)
        return INF_OK;
    if (mapped->cap < 2 * n + 1) {
        char *p = realloc(mapped->p, 2 * n + 1);
        if (!p)
            return INF_ERR_NOMEM;
        mapped->p = p;
        mapped->cap = 2 * n + 1;
    }
    unsigned char *o = (unsigned char *)mapped->p;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = hf_byte_char((unsigned char)s[i]);
        if (c < 0x80) {
            o[k++] = (unsigned char)c;
        } else {
            o[k++] = (unsigned char)(0xC0 | (c >> 6));
            o[k++] = (unsigned char)(0x80 | (c & 0x3F));
        }
    }
    hf_splits_add(out, mapped->p, k, first);
    return out->oom ? INF_ERR_NOMEM : INF_OK;
}

static int hf_pre_piece(const hf_pre *p, const char *t, size_t n, int first, hf_segs *sg,
                        inf_buf *scratch, inf_buf *mapped, hf_splits *out)
{
    int rc = INF_OK;
    switch (p->kind) {
    case HF_P_SPLIT:
        if (!(rc = segs_pattern(sg, &p->pat, t, n)))
            segs_emit(sg, p->behavior, p->invert, t, first, out);
        return rc;
    case HF_P_DIGITS:
        if (!(rc = segs_pred(sg, hf_is_numeric, t, n)))
            segs_emit(sg, p->individual ? HF_B_ISOLATED : HF_B_CONTIGUOUS, 0, t, first, out);
        return rc;
    case HF_P_PUNCT:
        if (!(rc = segs_pred(sg, hf_is_punct, t, n)))
            segs_emit(sg, p->behavior, 0, t, first, out);
        return rc;
    case HF_P_WHITESPACE: /* keeps \w+|[^\w\s]+, drops the rest */
        if (!(rc = segs_pattern(sg, &p->pat, t, n)))
            segs_emit(sg, HF_B_REMOVED, 1, t, first, out);
        return rc;
    case HF_P_WSSPLIT:
        if (!(rc = segs_pred(sg, is_ws_pred, t, n)))
            segs_emit(sg, HF_B_REMOVED, 0, t, first, out);
        return rc;
    case HF_P_BYTELEVEL: {
        const char *src = t;
        size_t len = n;
        if (p->add_prefix_space && (n == 0 || t[0] != ' ')) {
            scratch->len = 0;
            inf_buf_put(scratch, " ", 1);
            inf_buf_put(scratch, t, n);
            if (scratch->oom)
                return INF_ERR_NOMEM;
            src = scratch->p;
            len = scratch->len;
        }
        if (!p->has_pat)
            return bytelevel_add(out, src, len, first, mapped);
        if ((rc = segs_pattern(sg, &p->pat, src, len)))
            return rc;
        for (size_t i = 0; i < sg->n && !rc; i++)
            rc = bytelevel_add(out, src + sg->v[i].st, sg->v[i].en - sg->v[i].st,
                               first && sg->v[i].st == 0, mapped);
        return rc;
    }
    case HF_P_METASPACE: {
        scratch->len = 0;
        int starts = n >= p->repl_len && memcmp(t, p->repl, p->repl_len) == 0;
        /* The replacement of a leading space counts as starting with it. */
        int lead_space = n > 0 && t[0] == ' ';
        if (!starts && !lead_space &&
            (p->prepend == HF_PREPEND_ALWAYS || (p->prepend == HF_PREPEND_FIRST && first)))
            inf_buf_put(scratch, p->repl, p->repl_len);
        for (size_t i = 0; i < n; i++) {
            if (t[i] == ' ')
                inf_buf_put(scratch, p->repl, p->repl_len);
            else
                inf_buf_put(scratch, t + i, 1);
        }
        if (scratch->oom)
            return INF_ERR_NOMEM;
        if (!p->split) {
            hf_splits_add(out, scratch->p, scratch->len, first);
            return INF_OK;
        }
        hf_pattern lit = {0, (char *)p->repl, p->repl_len, {0}};
        if (!(rc = segs_pattern(sg, &lit, scratch->p, scratch->len)))
            segs_emit(sg, HF_B_MERGED_NEXT, 0, scratch->p, first, out);
        return rc;
    }
    case HF_P_SEQ:
        break;
    }
    return INF_ERR_INVALID;
}

int hf_pre_apply(const hf_pre *p, hf_splits *s, hf_splits *tmp)
{
    if (p->kind == HF_P_SEQ) {
        for (int i = 0; i < p->n_sub; i++) {
            int rc = hf_pre_apply(&p->sub[i], s, tmp);
            if (rc)
                return rc;
        }
        return INF_OK;
    }
    hf_segs sg = {0};
    inf_buf scratch = {0}, mapped = {0};
    hf_splits_clear(tmp);
    int rc = INF_OK;
    for (size_t i = 0; i < s->n && !rc; i++)
        rc = hf_pre_piece(p, s->buf.p + s->v[i].off, s->v[i].len, s->v[i].first, &sg, &scratch,
                          &mapped, tmp);
    free(sg.v);
    free(scratch.p);
    free(mapped.p);
    if (!rc && tmp->oom)
        rc = INF_ERR_NOMEM;
    hf_splits t = *s;
    *s = *tmp;
    *tmp = t;
    return rc;
}

void hf_pre_free(hf_pre *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_sub; i++)
        hf_pre_free(&p->sub[i]);
    free(p->sub);
    hf_re_free(&p->pat.re);
    free(p->pat.lit);
}
