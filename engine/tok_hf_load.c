/* tok_hf_load: tokenizer.json (untrusted input) into the stages of tok_hf.h.
 * Every failure names the file and the JSON path of what is wrong, e.g.
 * "tok: DIR/tokenizer.json: pre_tokenizer.pretokenizers[0].type: unknown
 * pre-tokenizer type \"Foo\"". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tok_hf.h"
#include "tok_int.h"

int hf_ld_fail(const hf_load *L, int code, const char *path, const char *fmt, ...)
{
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return inf_fail(L->err, code, "tok: %s: %s: %s", L->file, path, msg);
}

int hf_ld_nomem(const hf_load *L)
{
    return inf_fail(L->err, INF_ERR_NOMEM, "tok: %s: out of memory", L->file);
}

/* path + "." + key (or "[i]" when key is NULL), into buf. */
const char *hf_ld_sub(char *buf, size_t cap, const char *path, const char *key, int i)
{
    char idx[16];
    const char *sep = key ? (*path ? "." : "") : "[", *tail = key ? key : idx;
    if (!key)
        snprintf(idx, sizeof idx, "%d]", i);
    size_t n = 0, parts = 3;
    const char *part[3] = {path, sep, tail};
    for (size_t k = 0; k < parts; k++)
        for (const char *c = part[k]; *c && n + 1 < cap; c++)
            buf[n++] = *c;
    buf[n] = '\0';
    return buf;
}

/* An optional string member: NULL when absent or null; an error otherwise. */
int hf_ld_str(const hf_load *L, const cJSON *o, const char *key, const char *path,
                  const char **out)
{
    char p[256];
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = NULL;
    if (!it || cJSON_IsNull(it))
        return INF_OK;
    if (!cJSON_IsString(it))
        return hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, key, 0), "must be a string");
    *out = it->valuestring;
    return INF_OK;
}

int hf_ld_bool(const hf_load *L, const cJSON *o, const char *key, const char *path, int *v)
{
    char p[256];
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it || cJSON_IsNull(it))
        return INF_OK;
    if (!cJSON_IsBool(it))
        return hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, key, 0), "must be true or false");
    *v = cJSON_IsTrue(it);
    return INF_OK;
}

int hf_ld_int(const hf_load *L, const cJSON *o, const char *key, const char *path, int lo,
                  int hi, int *v)
{
    char p[256];
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it || cJSON_IsNull(it))
        return INF_OK;
    /* the range first: casting a double outside it is undefined */
    if (!cJSON_IsNumber(it) || !(it->valuedouble >= lo && it->valuedouble <= hi) ||
        it->valuedouble != (double)(int)it->valuedouble)
        return hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, key, 0),
                       "must be an integer in [%d, %d]", lo, hi);
    *v = (int)it->valuedouble;
    return INF_OK;
}

char *hf_dup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int ld_type(const hf_load *L, const cJSON *o, const char *path, const char **type)
{
    char p[256];
    if (!cJSON_IsObject(o))
        return hf_ld_fail(L, INF_ERR_FORMAT, path, "must be an object");
    int rc = hf_ld_str(L, o, "type", path, type);
    if (!rc && !*type)
        rc = hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, "type", 0), "is missing");
    return rc;
}

/* {"String": s} or {"Regex": r}. */
static int ld_pattern(const hf_load *L, const cJSON *o, const char *path, hf_pattern *pat)
{
    char p[256];
    hf_ld_sub(p, sizeof p, path, "pattern", 0);
    const cJSON *po = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    if (!cJSON_IsObject(po))
        return hf_ld_fail(L, INF_ERR_FORMAT, p, "must be {\"String\": ...} or {\"Regex\": ...}");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(po, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(po, "Regex");
    if (cJSON_IsString(s)) {
        pat->lit_len = strlen(s->valuestring);
        if (!(pat->lit = hf_dup(s->valuestring, pat->lit_len)))
            return hf_ld_nomem(L);
        return INF_OK;
    }
    if (!cJSON_IsString(r))
        return hf_ld_fail(L, INF_ERR_FORMAT, p, "must be {\"String\": ...} or {\"Regex\": ...}");
    char msg[300];
    int rc = hf_re_compile(&pat->re, r->valuestring, strlen(r->valuestring), msg, sizeof msg);
    if (rc)
        return rc == INF_ERR_NOMEM ? hf_ld_nomem(L) : hf_ld_fail(L, INF_ERR_FORMAT, p, "%s", msg);
    pat->is_re = 1;
    return INF_OK;
}

/* A Sequence's member array `key`: its elements loaded by fn into *v, an
 * array of *n records of size sz (the normalizers, pre-tokenizers and
 * decoders of a Sequence share this walk). */
typedef int (*ld_stage_fn)(const hf_load *L, const cJSON *o, const char *path, void *out);

static int ld_seq(const hf_load *L, const cJSON *o, const char *key, const char *path, size_t sz,
                  ld_stage_fn fn, void **v, int *n)
{
    char p[256], q[256];
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, key);
    hf_ld_sub(p, sizeof p, path, key, 0);
    if (!cJSON_IsArray(arr))
        return hf_ld_fail(L, INF_ERR_FORMAT, p, "must be an array");
    int k = cJSON_GetArraySize(arr), i = 0, rc = INF_OK;
    if (!(*v = calloc(k ? (size_t)k : 1, sz)))
        return hf_ld_nomem(L);
    *n = k;
    for (const cJSON *it = arr->child; it && !rc; it = it->next, i++)
        rc = fn(L, it, hf_ld_sub(q, sizeof q, p, NULL, i), (char *)*v + (size_t)i * sz);
    return rc;
}

static int ld_behavior(const hf_load *L, const cJSON *o, const char *path, hf_behavior *b)
{
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    const char *s;
    char p[256];
    int rc = hf_ld_str(L, o, "behavior", path, &s);
    if (rc || !s)
        return rc;
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0) {
            *b = (hf_behavior)i;
            return INF_OK;
        }
    return hf_ld_fail(L, INF_ERR_UNSUPPORTED, hf_ld_sub(p, sizeof p, path, "behavior", 0),
                   "unknown split behavior \"%s\"", s);
}

/* One UTF-8 character member (Metaspace's replacement, Strip's content). */
static int ld_char(const hf_load *L, const cJSON *o, const char *key, const char *path,
                   char *out, size_t *len)
{
    const char *s;
    char p[256];
    int rc = hf_ld_str(L, o, key, path, &s);
    if (rc || !s)
        return rc;
    size_t n = strlen(s);
    int32_t cp;
    if (n == 0 || n > 4 || hf_utf8_next(s, n, &cp) != n)
        return hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, key, 0),
                       "must be one character");
    memcpy(out, s, n);
    *len = n;
    return INF_OK;
}

/* Metaspace's prepend_scheme, or the older add_prefix_space. */
static int ld_prepend(const hf_load *L, const cJSON *o, const char *path, int *scheme)
{
    const char *s;
    char p[256];
    int aps = 1;
    int rc = hf_ld_bool(L, o, "add_prefix_space", path, &aps);
    *scheme = aps ? HF_PREPEND_ALWAYS : HF_PREPEND_NEVER;
    if (!rc)
        rc = hf_ld_str(L, o, "prepend_scheme", path, &s);
    if (rc || !s)
        return rc;
    if (strcmp(s, "always") == 0)
        *scheme = HF_PREPEND_ALWAYS;
    else if (strcmp(s, "first") == 0)
        *scheme = HF_PREPEND_FIRST;
    else if (strcmp(s, "never") == 0)
        *scheme = HF_PREPEND_NEVER;
    else
        return hf_ld_fail(L, INF_ERR_UNSUPPORTED, hf_ld_sub(p, sizeof p, path, "prepend_scheme", 0),
                       "unknown prepend_scheme \"%s\"", s);
    return INF_OK;
}

/* ---- normalizers, pre-tokenizers, decoders ------------------------------------------ */

/* Each as an ld_stage_fn, for the elements of a Sequence. */
static int ld_norm(const hf_load *L, const cJSON *o, const char *path, hf_norm *nm);
static int ld_pre(const hf_load *L, const cJSON *o, const char *path, hf_pre *pr);
static int ld_dec(const hf_load *L, const cJSON *o, const char *path, hf_dec *d);

static int ld_norm_any(const hf_load *L, const cJSON *o, const char *path, void *out)
{
    return ld_norm(L, o, path, out);
}

static int ld_pre_any(const hf_load *L, const cJSON *o, const char *path, void *out)
{
    return ld_pre(L, o, path, out);
}

static int ld_dec_any(const hf_load *L, const cJSON *o, const char *path, void *out)
{
    return ld_dec(L, o, path, out);
}

static int ld_norm(const hf_load *L, const cJSON *o, const char *path, hf_norm *nm)
{
    const char *type;
    char p[256];
    int rc = ld_type(L, o, path, &type);
    if (rc)
        return rc;
    static const struct { const char *name; hf_norm_kind k; } simple[] = {
        {"NFC", HF_N_NFC}, {"NFD", HF_N_NFD}, {"NFKC", HF_N_NFKC}, {"NFKD", HF_N_NFKD},
        {"Lowercase", HF_N_LOWER}};
    for (size_t i = 0; i < sizeof simple / sizeof *simple; i++)
        if (strcmp(type, simple[i].name) == 0) {
            nm->kind = simple[i].k;
            return INF_OK;
        }
    if (strcmp(type, "Sequence") == 0) {
        nm->kind = HF_N_SEQ;
        return ld_seq(L, o, "normalizers", path, sizeof *nm->sub, ld_norm_any, (void **)&nm->sub,
                      &nm->n_sub);
    }
    if (strcmp(type, "Replace") == 0) {
        const char *content;
        nm->kind = HF_N_REPLACE;
        if ((rc = ld_pattern(L, o, path, &nm->pat)) || (rc = hf_ld_str(L, o, "content", path, &content)))
            return rc;
        if (!content)
            return hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, "content", 0), "is missing");
        nm->str_len = strlen(content);
        return (nm->str = hf_dup(content, nm->str_len)) ? INF_OK : hf_ld_nomem(L);
    }
    if (strcmp(type, "Prepend") == 0) {
        const char *pre;
        nm->kind = HF_N_PREPEND;
        if ((rc = hf_ld_str(L, o, "prepend", path, &pre)))
            return rc;
        if (!pre)
            return hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, "prepend", 0), "is missing");
        nm->str_len = strlen(pre);
        return (nm->str = hf_dup(pre, nm->str_len)) ? INF_OK : hf_ld_nomem(L);
    }
    if (strcmp(type, "Strip") == 0) {
        nm->kind = HF_N_STRIP;
        nm->left = nm->right = 1;
        rc = hf_ld_bool(L, o, "strip_left", path, &nm->left);
        return rc ? rc : hf_ld_bool(L, o, "strip_right", path, &nm->right);
    }
    return hf_ld_fail(L, INF_ERR_UNSUPPORTED, hf_ld_sub(p, sizeof p, path, "type", 0),
                   "unknown normalizer type \"%s\"", type);
}

/* GPT-2's split, used by ByteLevel with use_regex. */
#define HF_GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static int ld_fixed_re(const hf_load *L, const char *path, const char *re, hf_pattern *pat)
{
    char msg[300];
    int rc = hf_re_compile(&pat->re, re, strlen(re), msg, sizeof msg);
    if (rc)
        return rc == INF_ERR_NOMEM ? hf_ld_nomem(L) : hf_ld_fail(L, INF_ERR_FORMAT, path, "%s", msg);
    pat->is_re = 1;
    return INF_OK;
}

static int ld_pre(const hf_load *L, const cJSON *o, const char *path, hf_pre *pr)
{
    const char *type;
    char p[256];
    int rc = ld_type(L, o, path, &type);
    if (rc)
        return rc;
    if (strcmp(type, "Sequence") == 0) {
        pr->kind = HF_P_SEQ;
        return ld_seq(L, o, "pretokenizers", path, sizeof *pr->sub, ld_pre_any, (void **)&pr->sub,
                      &pr->n_sub);
    }
    if (strcmp(type, "Split") == 0) {
        pr->kind = HF_P_SPLIT;
        pr->behavior = HF_B_ISOLATED;
        pr->has_pat = 1;
        if ((rc = ld_pattern(L, o, path, &pr->pat)) || (rc = ld_behavior(L, o, path, &pr->behavior)))
            return rc;
        return hf_ld_bool(L, o, "invert", path, &pr->invert);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        int use_regex = 1;
        pr->kind = HF_P_BYTELEVEL;
        pr->add_prefix_space = 1;
        if ((rc = hf_ld_bool(L, o, "add_prefix_space", path, &pr->add_prefix_space)) ||
            (rc = hf_ld_bool(L, o, "use_regex", path, &use_regex)))
            return rc;
        pr->has_pat = use_regex;
        return use_regex ? ld_fixed_re(L, path, HF_GPT2_RE, &pr->pat) : INF_OK;
    }
    if (strcmp(type, "Metaspace") == 0) {
        pr->kind = HF_P_METASPACE;
        memcpy(pr->repl, "\xE2\x96\x81", 3);
        pr->repl_len = 3;
        pr->split = 1;
        if ((rc = ld_char(L, o, "replacement", path, pr->repl, &pr->repl_len)) ||
            (rc = ld_prepend(L, o, path, &pr->prepend)))
            return rc;
        return hf_ld_bool(L, o, "split", path, &pr->split);
    }
    if (strcmp(type, "Digits") == 0) {
        pr->kind = HF_P_DIGITS;
        return hf_ld_bool(L, o, "individual_digits", path, &pr->individual);
    }
    if (strcmp(type, "Punctuation") == 0) {
        pr->kind = HF_P_PUNCT;
        pr->behavior = HF_B_ISOLATED;
        return ld_behavior(L, o, path, &pr->behavior);
    }
    if (strcmp(type, "Whitespace") == 0) {
        pr->kind = HF_P_WHITESPACE;
        pr->has_pat = 1;
        return ld_fixed_re(L, path, "\\w+|[^\\w\\s]+", &pr->pat);
    }
    if (strcmp(type, "WhitespaceSplit") == 0) {
        pr->kind = HF_P_WSSPLIT;
        return INF_OK;
    }
    return hf_ld_fail(L, INF_ERR_UNSUPPORTED, hf_ld_sub(p, sizeof p, path, "type", 0),
                   "unknown pre-tokenizer type \"%s\"", type);
}

static int ld_dec(const hf_load *L, const cJSON *o, const char *path, hf_dec *d)
{
    const char *type;
    char p[256];
    int rc = ld_type(L, o, path, &type);
    if (rc)
        return rc;
    if (strcmp(type, "Sequence") == 0) {
        d->kind = HF_D_SEQ;
        return ld_seq(L, o, "decoders", path, sizeof *d->sub, ld_dec_any, (void **)&d->sub,
                      &d->n_sub);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        d->kind = HF_D_BYTELEVEL;
        return INF_OK;
    }
    if (strcmp(type, "ByteFallback") == 0) {
        d->kind = HF_D_BYTEFALLBACK;
        return INF_OK;
    }
    if (strcmp(type, "Fuse") == 0) {
        d->kind = HF_D_FUSE;
        return INF_OK;
    }
    char c[8];
    size_t cl = 0;
    if (strcmp(type, "Metaspace") == 0) {
        d->kind = HF_D_METASPACE;
        memcpy(c, "\xE2\x96\x81", 3);
        cl = 3;
        if ((rc = ld_char(L, o, "replacement", path, c, &cl)) ||
            (rc = ld_prepend(L, o, path, &d->prepend)))
            return rc;
        d->str_len = cl;
        return (d->str = hf_dup(c, cl)) ? INF_OK : hf_ld_nomem(L);
    }
    if (strcmp(type, "Strip") == 0) {
        d->kind = HF_D_STRIP;
        if ((rc = ld_char(L, o, "content", path, c, &cl)) ||
            (rc = hf_ld_int(L, o, "start", path, 0, 1 << 20, &d->start)) ||
            (rc = hf_ld_int(L, o, "stop", path, 0, 1 << 20, &d->stop)))
            return rc;
        if (!cl)
            return hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, "content", 0), "is missing");
        d->str_len = cl;
        return (d->str = hf_dup(c, cl)) ? INF_OK : hf_ld_nomem(L);
    }
    if (strcmp(type, "Replace") == 0) {
        const char *content;
        d->kind = HF_D_REPLACE;
        if ((rc = ld_pattern(L, o, path, &d->pat)) || (rc = hf_ld_str(L, o, "content", path, &content)))
            return rc;
        if (!content)
            return hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, "content", 0), "is missing");
        d->str_len = strlen(content);
        return (d->str = hf_dup(content, d->str_len)) ? INF_OK : hf_ld_nomem(L);
    }
    return hf_ld_fail(L, INF_ERR_UNSUPPORTED, hf_ld_sub(p, sizeof p, path, "type", 0),
                   "unknown decoder type \"%s\"", type);
}

/* Optional stage member: NULL/absent gives *out NULL. */
#define LD_STAGE(L, root, key, T, fn, freefn, out)                                            \
    do {                                                                                        \
        const cJSON *o_ = cJSON_GetObjectItemCaseSensitive(root, key);                          \
        if (o_ && !cJSON_IsNull(o_)) {                                                          \
            T *s_ = calloc(1, sizeof *s_);                                                      \
            if (!s_)                                                                            \
                return hf_ld_nomem(L);                                                             \
            int rc_ = fn(L, o_, key, s_);                                                       \
            if (rc_) {                                                                          \
                freefn(s_);                                                                     \
                free(s_);                                                                       \
                return rc_;                                                                     \
            }                                                                                   \
            *(out) = s_;                                                                        \
        }                                                                                       \
    } while (0)

int hf_load_stages(const hf_load *L, const cJSON *root, hf_impl *h)
{
    LD_STAGE(L, root, "normalizer", hf_norm, ld_norm, hf_norm_free, &h->norm);
    LD_STAGE(L, root, "pre_tokenizer", hf_pre, ld_pre, hf_pre_free, &h->pre);
    LD_STAGE(L, root, "decoder", hf_dec, ld_dec, hf_dec_free, &h->dec);
    return INF_OK;
}
