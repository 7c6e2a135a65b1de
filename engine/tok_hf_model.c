/* tok_hf_model: the root of tokenizer.json and its BPE model. The file is
 * checked by a reader that builds no tree (tok_hf_json.c); model.vocab and
 * model.merges (33 MB for Gemma 3) are read from their text straight into
 * the tables, sized once from the counts of the check; the small sections
 * the stages read become a cJSON tree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tok_hf.h"

/* ---- the root, and the sections read without a tree -------------------------- */


static int js_syntax(const hf_load *L, const hf_js *j, const char *json)
{
    return inf_fail(L->err, INF_ERR_FORMAT, "tok: %s: not a JSON object (%s at byte %zu)",
                    L->file, j->msg ? j->msg : "syntax error", (size_t)(j->p - json));
}

/* The value at the cursor, checked, as a cJSON tree added to obj. */
static int js_member(const hf_load *L, hf_js *j, const char *json, cJSON *obj, const char *key)
{
    hf_js_ws(j);
    const char *s = j->p;
    if (hf_js_skip(j, NULL))
        return js_syntax(L, j, json);
    cJSON *v = cJSON_ParseWithLength(s, (size_t)(j->p - s));
    if (!v)
        return hf_ld_nomem(L); /* what hf_js accepts, cJSON does */
    cJSON_AddItemToObject(obj, key, v);
    return INF_OK;
}

/* A section left as text: its span and size (the first of its name wins,
 * as cJSON's lookup does). */
static int js_big(const hf_load *L, hf_js *j, const char *json, const char **p, size_t *len,
                  size_t *count)
{
    hf_js_ws(j);
    const char *s = j->p;
    if (hf_js_skip(j, count))
        return js_syntax(L, j, json);
    if (!*p) {
        *p = s;
        *len = (size_t)(j->p - s);
    }
    return INF_OK;
}

static int ld_root_model(const hf_load *L, hf_js *j, const char *json, cJSON *root, hf_big *big,
                         inf_buf *key)
{
    cJSON *m = cJSON_CreateObject();
    if (!m)
        return hf_ld_nomem(L);
    cJSON_AddItemToObject(root, "model", m);
    j->p++; /* '{' */
    int st = 0, k, rc = INF_OK;
    while (!rc && (k = hf_js_next(j, &st, '}', key)) == 1) {
        if (strcmp(key->p, "vocab") == 0)
            rc = js_big(L, j, json, &big->vocab, &big->vocab_len, &big->n_vocab);
        else if (strcmp(key->p, "merges") == 0)
            rc = js_big(L, j, json, &big->merges, &big->merges_len, &big->n_merges);
        else
            rc = js_member(L, j, json, m, key->p);
    }
    return rc ? rc : k < 0 ? js_syntax(L, j, json) : INF_OK;
}

/* The file as a cJSON tree of everything but model.vocab and model.merges
 * (the small sections the stages read), with those two as checked text. */
int hf_load_root(const hf_load *L, const char *json, size_t len, cJSON **root, hf_big *big)
{
    hf_js j = {json, json ? json + len : NULL, NULL};
    inf_buf key = {0};
    cJSON *r = cJSON_CreateObject();
    int rc = r ? INF_OK : hf_ld_nomem(L), st = 0, k = 0;
    if (!rc && hf_js_expect(&j, '{'))
        rc = js_syntax(L, &j, json);
    while (!rc && (k = hf_js_next(&j, &st, '}', &key)) == 1) {
        if (strcmp(key.p, "model") == 0 && !cJSON_GetObjectItemCaseSensitive(r, "model") &&
            hf_js_peek(&j) == '{')
            rc = ld_root_model(L, &j, json, r, big, &key);
        else
            rc = js_member(L, &j, json, r, key.p);
    }
    if (!rc && k < 0)
        rc = js_syntax(L, &j, json);
    if (!rc && hf_js_peek(&j) >= 0) {
        j.msg = "text after the object";
        rc = js_syntax(L, &j, json);
    }
    if (!rc && key.oom)
        rc = hf_ld_nomem(L);
    free(key.p);
    if (rc) {
        cJSON_Delete(r);
        return rc;
    }
    *root = r;
    return INF_OK;
}

/* ---- the model --------------------------------------------------------------------- */

/* A token id at the cursor; path names it in a message (with key's name
 * when key is not NULL), built only then: this runs per vocabulary entry. */
static int ld_id_num(const hf_load *L, hf_js *j, const char *path, const inf_buf *key, int32_t *id)
{
    long long v = -1;
    int is_int = 0, c = hf_js_peek(j);
    *id = -1;
    if (c == '-' || (c >= '0' && c <= '9')) {
        if (!hf_js_num(j, &v, &is_int) && is_int && v >= 0 && v <= HF_MAX_ID) {
            *id = (int32_t)v;
            return INF_OK;
        }
    }
    char p[300];
    if (key)
        snprintf(p, sizeof p, "%s[\"%.200s\"]", path, key->p);
    return hf_ld_fail(L, INF_ERR_FORMAT, key ? p : path, "must be a token id in [0, %d]",
                      HF_MAX_ID);
}

static int ld_vocab(const hf_load *L, const hf_big *big, hf_impl *h, int32_t *max_id)
{
    hf_js j = {big->vocab, big->vocab ? big->vocab + big->vocab_len : NULL, NULL};
    if (!big->vocab || hf_js_peek(&j) != '{')
        return hf_ld_fail(L, INF_ERR_FORMAT, "model.vocab", "must be an object");
    if (hf_vocab_create(big->n_vocab, big->vocab_len, &h->vocab))
        return hf_ld_nomem(L);
    j.p++;
    inf_buf key = {0};
    int st = 0, k, rc = INF_OK;
    while (!rc && (k = hf_js_next(&j, &st, '}', &key)) == 1) {
        int32_t id;
        if ((rc = ld_id_num(L, &j, "model.vocab", &key, &id)))
            break;
        if (hf_vocab_put(h->vocab, key.p, key.len, id) < 0)
            rc = hf_ld_nomem(L);
        else if (id > *max_id)
            *max_id = id;
    }
    if (!rc && (k < 0 || key.oom)) /* checked once already: only memory can fail */
        rc = hf_ld_nomem(L);
    free(key.p);
    return rc;
}

static const char *merge_path(char *buf, uint32_t rank)
{
    snprintf(buf, 64, "model.merges[%u]", rank);
    return buf;
}

/* A merge as "a b" or ["a", "b"], read into a (a's bytes then b's): *al
 * the length of a. */
static int ld_merge_pair(const hf_load *L, hf_js *j, uint32_t rank, inf_buf *a, inf_buf *b,
                         size_t *al)
{
    char path[64];
    int c = hf_js_peek(j);
    if (c == '"') {
        if (hf_js_str(j, a))
            return hf_ld_nomem(L);
        const char *sp = memchr(a->p, ' ', a->len);
        if (!sp || memchr(sp + 1, ' ', a->len - (size_t)(sp + 1 - a->p)))
            return hf_ld_fail(L, INF_ERR_FORMAT, merge_path(path, rank),
                              "a merge must be two tokens, \"a b\"");
        *al = (size_t)(sp - a->p);
        memmove(a->p + *al, sp + 1, a->len - *al - 1);
        a->len--;
        return INF_OK;
    }
    int st = 0;
    if (c == '[' && (j->p++, hf_js_next(j, &st, ']', NULL) == 1) && hf_js_peek(j) == '"' &&
        !hf_js_str(j, a) && hf_js_next(j, &st, ']', NULL) == 1 && hf_js_peek(j) == '"' &&
        !hf_js_str(j, b) && hf_js_next(j, &st, ']', NULL) == 0) {
        *al = a->len;
        inf_buf_put(a, b->p, b->len);
        return a->oom || b->oom ? hf_ld_nomem(L) : INF_OK;
    }
    return hf_ld_fail(L, INF_ERR_FORMAT, merge_path(path, rank),
                      "a merge must be \"a b\" or [\"a\", \"b\"]");
}

/* Merges are read in batches whose lookups are hashed and prefetched
 * first: three lookups and an insert per merge, each a cache miss on
 * Gemma's 515k merges, are most of a cold load. */
#define HF_MERGE_BATCH 32

typedef struct hf_mq {
    size_t off, al, bl;     /* a at buf[off], b right after it */
    uint32_t ha, hb, hm;    /* hashes of a, b and a+b */
    int32_t ia, ib, im;
} hf_mq;

static int merge_batch(const hf_load *L, hf_impl *h, const inf_buf *buf, hf_mq *q, int n,
                       uint32_t rank0)
{
    for (int i = 0; i < n; i++) {
        const char *s = buf->p + q[i].off;
        q[i].ha = hf_vocab_hash(s, q[i].al);
        q[i].hb = hf_vocab_hash(s + q[i].al, q[i].bl);
        q[i].hm = hf_vocab_hash(s, q[i].al + q[i].bl);
        hf_vocab_prefetch(h->vocab, q[i].ha);
        hf_vocab_prefetch(h->vocab, q[i].hb);
        hf_vocab_prefetch(h->vocab, q[i].hm);
    }
    for (int i = 0; i < n; i++) {
        const char *s = buf->p + q[i].off;
        size_t al = q[i].al, bl = q[i].bl;
        q[i].ia = hf_vocab_get_hashed(h->vocab, s, al, q[i].ha);
        q[i].ib = hf_vocab_get_hashed(h->vocab, s + al, bl, q[i].hb);
        q[i].im = hf_vocab_get_hashed(h->vocab, s, al + bl, q[i].hm);
        if (q[i].ia < 0 || q[i].ib < 0 || q[i].im < 0) {
            char p[64];
            return hf_ld_fail(L, INF_ERR_FORMAT, merge_path(p, rank0 + (uint32_t)i),
                              "\"%.*s\" is not in model.vocab",
                              (int)(q[i].ia < 0 ? al : q[i].ib < 0 ? bl : al + bl > 200 ? 200 : al + bl),
                              q[i].ia < 0 || q[i].ib >= 0 ? s : s + al);
        }
        hf_bpe_prefetch_merge(h->bpe, q[i].ia, q[i].ib);
    }
    for (int i = 0; i < n; i++)
        if (hf_bpe_add_merge(h->bpe, q[i].ia, q[i].ib, q[i].im, rank0 + (uint32_t)i))
            return hf_ld_nomem(L);
    return INF_OK;
}

static int ld_merges(const hf_load *L, const hf_big *big, hf_impl *h, const hf_bpe_config *c)
{
    hf_js j = {big->merges, big->merges ? big->merges + big->merges_len : NULL, NULL};
    if (big->merges && hf_js_peek(&j) != '[' && hf_js_peek(&j) != 'n')
        return hf_ld_fail(L, INF_ERR_FORMAT, "model.merges", "must be an array");
    int has = big->merges && hf_js_peek(&j) == '[';
    if (hf_bpe_create(c, has ? big->n_merges : 0, &h->bpe))
        return hf_ld_nomem(L);
    if (!has)
        return INF_OK;
    j.p++;
    inf_buf a = {0}, b = {0}, buf = {0};
    hf_mq q[HF_MERGE_BATCH];
    int rc = INF_OK, st = 0, k = 1, n = 0;
    uint32_t rank = 0;
    while (!rc && k == 1) {
        if ((k = hf_js_next(&j, &st, ']', NULL)) == 1) {
            size_t al = 0;
            if ((rc = ld_merge_pair(L, &j, rank + (uint32_t)n, &a, &b, &al)))
                break;
            q[n++] = (hf_mq){.off = buf.len, .al = al, .bl = a.len - al};
            inf_buf_put(&buf, a.p, a.len);
            if (buf.oom) {
                rc = hf_ld_nomem(L);
                break;
            }
        }
        if (n == HF_MERGE_BATCH || (k != 1 && n)) {
            rc = merge_batch(L, h, &buf, q, n, rank);
            rank += (uint32_t)n;
            n = 0;
            buf.len = 0;
        }
    }
    if (!rc && k < 0)
        rc = hf_ld_nomem(L);
    free(a.p);
    free(b.p);
    free(buf.p);
    return rc;
}

int hf_load_model(const hf_load *L, const cJSON *root, const hf_big *big, hf_impl *h,
                    int32_t *max_id)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model))
        return hf_ld_fail(L, INF_ERR_FORMAT, "model", "must be an object");
    const char *type, *unk, *prefix, *suffix;
    int rc = hf_ld_str(L, model, "type", "model", &type);
    if (rc)
        return rc;
    if (type && strcmp(type, "BPE") != 0)
        return hf_ld_fail(L, INF_ERR_UNSUPPORTED, "model.type",
                          "unknown model type \"%s\" (inferd reads BPE)", type);
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (drop && !cJSON_IsNull(drop) && !(cJSON_IsNumber(drop) && drop->valuedouble == 0))
        return hf_ld_fail(L, INF_ERR_UNSUPPORTED, "model.dropout",
                          "BPE dropout is for training; inferd needs null");
    if ((rc = hf_ld_str(L, model, "continuing_subword_prefix", "model", &prefix)) ||
        (rc = hf_ld_str(L, model, "end_of_word_suffix", "model", &suffix)) ||
        (rc = hf_ld_str(L, model, "unk_token", "model", &unk)))
        return rc;
    if ((prefix && *prefix) || (suffix && *suffix))
        return hf_ld_fail(L, INF_ERR_UNSUPPORTED, prefix && *prefix ? "model.continuing_subword_prefix"
                                                                     : "model.end_of_word_suffix",
                          "must be null or empty");
    if ((rc = ld_vocab(L, big, h, max_id)))
        return rc;
    hf_bpe_config c = {.vocab = h->vocab, .unk = -1};
    if ((rc = hf_ld_bool(L, model, "fuse_unk", "model", &c.fuse_unk)) ||
        (rc = hf_ld_bool(L, model, "byte_fallback", "model", &c.byte_fallback)) ||
        (rc = hf_ld_bool(L, model, "ignore_merges", "model", &c.ignore_merges)))
        return rc;
    if (unk && (c.unk = hf_vocab_get(h->vocab, unk, strlen(unk))) < 0)
        return hf_ld_fail(L, INF_ERR_FORMAT, "model.unk_token", "\"%.200s\" is not in model.vocab",
                          unk);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        c.byte_ids[b] = c.byte_fallback ? hf_vocab_get(h->vocab, name, 6) : -1;
    }
    return ld_merges(L, big, h, &c);
}
