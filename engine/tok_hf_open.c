/* tok_hf_open: builds a tok from tokenizer.json: the BPE model
 * (tok_hf_model.c), the stages (tok_hf_load.c), the added tokens, the
 * post-processor and the generic vocabulary table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tok_hf.h"
#include "tok_int.h"

static int ld_id(const hf_load *L, const cJSON *v, const char *path, int32_t *id)
{
    /* the range first: casting a double outside it is undefined */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= HF_MAX_ID) ||
        v->valuedouble != (double)(int32_t)v->valuedouble)
        return hf_ld_fail(L, INF_ERR_FORMAT, path, "must be a token id in [0, %d]", HF_MAX_ID);
    *id = (int32_t)v->valuedouble;
    return INF_OK;
}

/* ---- added tokens ------------------------------------------------------------------ */

static int ld_added(const hf_load *L, const cJSON *root, hf_impl *h, int32_t *max_id)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!arr || cJSON_IsNull(arr))
        return INF_OK;
    if (!cJSON_IsArray(arr))
        return hf_ld_fail(L, INF_ERR_FORMAT, "added_tokens", "must be an array");
    int n = cJSON_GetArraySize(arr);
    h->added = calloc(n ? (size_t)n : 1, sizeof *h->added);
    if (!h->added || hf_trie_create(&h->raw_trie) || hf_trie_create(&h->norm_trie))
        return hf_ld_nomem(L);
    inf_buf norm = {0};
    int rc = INF_OK, i = 0;
    for (const cJSON *a = arr->child; a && !rc; a = a->next, i++) {
        char p[64], q[80];
        hf_added *ad = &h->added[h->n_added];
        const char *content;
        snprintf(p, sizeof p, "added_tokens[%d]", i);
        if (!cJSON_IsObject(a)) {
            rc = hf_ld_fail(L, INF_ERR_FORMAT, p, "must be an object");
            break;
        }
        if ((rc = ld_id(L, cJSON_GetObjectItemCaseSensitive(a, "id"),
                        hf_ld_sub(q, sizeof q, p, "id", 0), &ad->id)) ||
            (rc = hf_ld_str(L, a, "content", p, &content)))
            break;
        if (!content) {
            rc = hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(q, sizeof q, p, "content", 0), "is missing");
            break;
        }
        if ((rc = hf_ld_bool(L, a, "single_word", p, &ad->single_word)) ||
            (rc = hf_ld_bool(L, a, "lstrip", p, &ad->lstrip)) ||
            (rc = hf_ld_bool(L, a, "rstrip", p, &ad->rstrip)) ||
            (rc = hf_ld_bool(L, a, "normalized", p, &ad->normalized)) ||
            (rc = hf_ld_bool(L, a, "special", p, &ad->special)))
            break;
        ad->len = strlen(content);
        if (!(ad->content = hf_dup(content, ad->len))) {
            rc = hf_ld_nomem(L);
            break;
        }
        if (ad->id > *max_id)
            *max_id = ad->id;
        /* Normalized ones match the normalized text: their content too. */
        const char *key = ad->content;
        size_t klen = ad->len;
        if (ad->normalized && h->norm) {
            if (hf_norm_apply(h->norm, ad->content, ad->len, &norm)) {
                rc = hf_ld_fail(L, INF_ERR_FORMAT, p, "its content does not normalize");
                break;
            }
            key = norm.p ? norm.p : "";
            klen = norm.len;
        }
        /* Text is split on added tokens as valid UTF-8 (invalid bytes are
         * U+FFFD by then): content that is not could only match inside a
         * character, and cut it in two, so it is never matched (its id
         * still decodes). */
        if (hf_utf8_valid(key, klen) &&
            hf_trie_add(ad->normalized ? h->norm_trie : h->raw_trie, key, klen, h->n_added))
            rc = hf_ld_nomem(L);
        h->n_added++;
    }
    free(norm.p);
    return rc;
}

/* ---- the post-processor ---------------------------------------------------------------- */

static int ids_append(int32_t **v, int *n, const int32_t *add, int k)
{
    int32_t *p = realloc(*v, (size_t)(*n + k + 1) * sizeof *p);
    if (!p)
        return INF_ERR_NOMEM;
    if (k)
        memcpy(p + *n, add, (size_t)k * sizeof *p);
    *v = p;
    *n += k;
    return INF_OK;
}

/* TemplateProcessing's "single": special tokens before and after $A. */
static int ld_template(const hf_load *L, const cJSON *o, const char *path, int32_t **pre,
                       int *n_pre, int32_t **post, int *n_post)
{
    char p[256], q[300];
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(o, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(o, "special_tokens");
    if (!cJSON_IsArray(single))
        return hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, "single", 0),
                          "must be an array");
    int seen_seq = 0, i = 0;
    for (const cJSON *it = single->child; it; it = it->next, i++) {
        hf_ld_sub(q, sizeof q, hf_ld_sub(p, sizeof p, path, "single", 0), NULL, i);
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        if (cJSON_IsObject(seq)) {
            seen_seq = 1;
            continue;
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
        if (!cJSON_IsString(name))
            return hf_ld_fail(L, INF_ERR_FORMAT, q, "must be {\"Sequence\"} or {\"SpecialToken\"}");
        const cJSON *def = cJSON_GetObjectItemCaseSensitive(specials, name->valuestring);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids");
        if (!cJSON_IsArray(ids))
            return hf_ld_fail(L, INF_ERR_FORMAT, q, "special token \"%.100s\" has no ids in special_tokens",
                              name->valuestring);
        for (const cJSON *x = ids->child; x; x = x->next) {
            int32_t id;
            int rc = ld_id(L, x, q, &id);
            if (!rc && ids_append(seen_seq ? post : pre, seen_seq ? n_post : n_pre, &id, 1))
                rc = hf_ld_nomem(L);
            if (rc)
                return rc;
        }
    }
    return INF_OK;
}

static int ld_post(const hf_load *L, const cJSON *o, const char *path, hf_impl *h)
{
    if (!o || cJSON_IsNull(o))
        return INF_OK;
    const char *type;
    char p[256], q[300];
    int rc = hf_ld_str(L, o, "type", path, &type);
    if (rc)
        return rc;
    if (!cJSON_IsObject(o) || !type)
        return hf_ld_fail(L, INF_ERR_FORMAT, path, "must be an object with a type");
    if (strcmp(type, "ByteLevel") == 0)
        return INF_OK; /* offsets only */
    if (strcmp(type, "TemplateProcessing") == 0)
        return ld_template(L, o, path, &h->pre_ids, &h->n_pre_ids, &h->post_ids, &h->n_post_ids);
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        const char *keys[2] = {"cls", "sep"};
        for (int k = 0; k < 2; k++) {
            const cJSON *pair = cJSON_GetObjectItemCaseSensitive(o, keys[k]);
            int32_t id;
            hf_ld_sub(p, sizeof p, path, keys[k], 0);
            if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2)
                return hf_ld_fail(L, INF_ERR_FORMAT, p, "must be [token, id]");
            if ((rc = ld_id(L, cJSON_GetArrayItem(pair, 1), p, &id)))
                return rc;
            if (ids_append(k ? &h->post_ids : &h->pre_ids, k ? &h->n_post_ids : &h->n_pre_ids,
                           &id, 1))
                return hf_ld_nomem(L);
        }
        return INF_OK;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "processors");
        if (!cJSON_IsArray(arr))
            return hf_ld_fail(L, INF_ERR_FORMAT, hf_ld_sub(p, sizeof p, path, "processors", 0),
                              "must be an array");
        /* Each wraps the result of the one before: its ids go outside. */
        int i = 0;
        for (const cJSON *it = arr->child; it; it = it->next, i++) {
            hf_impl inner = {0};
            rc = ld_post(L, it, hf_ld_sub(q, sizeof q, hf_ld_sub(p, sizeof p, path, "processors", 0),
                                          NULL, i), &inner);
            if (!rc && (ids_append(&inner.pre_ids, &inner.n_pre_ids, h->pre_ids, h->n_pre_ids) ||
                        ids_append(&h->post_ids, &h->n_post_ids, inner.post_ids, inner.n_post_ids)))
                rc = hf_ld_nomem(L);
            if (!rc) {
                free(h->pre_ids);
                h->pre_ids = inner.pre_ids;
                h->n_pre_ids = inner.n_pre_ids;
                inner.pre_ids = NULL;
            }
            free(inner.pre_ids);
            free(inner.post_ids);
            if (rc)
                return rc;
        }
        return INF_OK;
    }
    return hf_ld_fail(L, INF_ERR_UNSUPPORTED, hf_ld_sub(p, sizeof p, path, "type", 0),
                      "unknown post-processor type \"%s\"", type);
}

/* ---- the generic table -------------------------------------------------------------- */

/* What a model token stands for on its own: the decoder's per-token steps
 * (byte-level characters to bytes, literal replacements, Metaspace's
 * marker as a space) applied to it alone. */
static void token_bytes(const hf_dec *d, inf_buf *s, inf_buf *tmp)
{
    if (!d)
        return;
    if (d->kind == HF_D_SEQ) {
        for (int i = 0; i < d->n_sub; i++)
            token_bytes(&d->sub[i], s, tmp);
        return;
    }
    tmp->len = 0;
    if (d->kind == HF_D_BYTELEVEL) {
        for (size_t j = 0; j < s->len;) {
            int32_t cp;
            j += hf_utf8_next(s->p + j, s->len - j, &cp);
            int b = hf_char_byte(cp);
            if (b < 0)
                return; /* not byte-level text: kept as it is */
            char c = (char)b;
            inf_buf_put(tmp, &c, 1);
        }
    } else if ((d->kind == HF_D_REPLACE && !d->pat.is_re) || d->kind == HF_D_METASPACE) {
        const char *from = d->kind == HF_D_REPLACE ? d->pat.lit : d->str;
        size_t fl = d->kind == HF_D_REPLACE ? d->pat.lit_len : d->str_len;
        const char *to = d->kind == HF_D_REPLACE ? d->str : " ";
        size_t tl = d->kind == HF_D_REPLACE ? d->str_len : 1;
        for (size_t j = 0; j < s->len;) {
            if (fl && s->len - j >= fl && memcmp(s->p + j, from, fl) == 0) {
                inf_buf_put(tmp, to, tl);
                j += fl;
            } else {
                inf_buf_put(tmp, s->p + j++, 1);
            }
        }
    } else {
        return;
    }
    inf_buf t = *s;
    *s = *tmp;
    *tmp = t;
}

static int hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int fill_table(const hf_load *L, const cJSON *root, const hf_impl *h, tok *t)
{
    int byte_fallback = 0;
    hf_ld_bool(L, cJSON_GetObjectItemCaseSensitive(root, "model"), "byte_fallback", "model",
               &byte_fallback);
    inf_buf s = {0}, tmp = {0};
    int rc = INF_OK;
    for (size_t e = 0; e < hf_vocab_count(h->vocab) && !rc; e++) {
        const char *p;
        size_t n;
        int32_t id = hf_vocab_at(h->vocab, e, &p, &n);
        if (t->piece[id])
            continue; /* two strings for one id: the first names it */
        if (byte_fallback && n == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>' &&
            hex(p[3]) >= 0 && hex(p[4]) >= 0) {
            char b = (char)(hex(p[3]) * 16 + hex(p[4]));
            rc = tok__set(t, id, p, n, &b, 1, TOK_F_BYTE, L->err);
            continue;
        }
        s.len = 0;
        inf_buf_put(&s, p, n);
        token_bytes(h->dec, &s, &tmp);
        if (s.oom || tmp.oom)
            rc = hf_ld_nomem(L);
        else
            rc = tok__set(t, id, p, n, s.p ? s.p : "", s.len, 0, L->err);
    }
    for (int i = 0; i < h->n_added && !rc; i++) {
        const hf_added *a = &h->added[i];
        rc = tok__set(t, a->id, a->content, a->len, a->content, a->len,
                      a->special ? TOK_F_SPECIAL : 0, L->err);
    }
    free(s.p);
    free(tmp.p);
    return rc;
}

/* The id of tokenizer_config.json's bos_token / eos_token (a string or
 * {"content": ...}), -1 when absent or unknown. */
static int32_t config_token(const hf_impl *h, const cJSON *config, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, key);
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v))
        return -1;
    size_t n = strlen(v->valuestring);
    for (int i = 0; i < h->n_added; i++)
        if (h->added[i].len == n && memcmp(h->added[i].content, v->valuestring, n) == 0)
            return h->added[i].id;
    return hf_vocab_get(h->vocab, v->valuestring, n);
}

int tok_hf_open(const char *json, size_t len, const char *path, const cJSON *config, tok **out,
                inf_err *err)
{
    *out = NULL;
    hf_load L = {path, err};
    cJSON *root = NULL;
    hf_big big = {0};
    int rc = hf_load_root(&L, json, len, &root, &big);
    if (rc)
        return rc;
    hf_impl *h = calloc(1, sizeof *h);
    tok *t = NULL;
    int32_t max_id = -1;
    rc = h ? INF_OK : hf_ld_nomem(&L);
    if (!rc)
        rc = hf_load_stages(&L, root, h); /* the normalizer first: added tokens use it */
    if (!rc)
        rc = hf_load_model(&L, root, &big, h, &max_id);
    if (!rc)
        rc = ld_added(&L, root, h, &max_id);
    if (!rc)
        rc = ld_post(&L, cJSON_GetObjectItemCaseSensitive(root, "post_processor"),
                     "post_processor", h);
    if (!rc && max_id < 0)
        rc = hf_ld_fail(&L, INF_ERR_FORMAT, "model.vocab", "is empty");
    /* Ids are dense in every real vocabulary; a sparse one would make the
     * table as large as its largest id. */
    size_t entries = rc ? 0 : hf_vocab_count(h->vocab) + (size_t)h->n_added;
    if (!rc && (size_t)max_id >= 2 * entries + 1024)
        rc = hf_ld_fail(&L, INF_ERR_FORMAT, "model.vocab",
                        "token id %d for %zu tokens: ids must be dense", (int)max_id, entries);
    if (!rc)
        rc = tok__new(max_id + 1, &t, err);
    if (!rc)
        rc = fill_table(&L, root, h, t);
    cJSON_Delete(root);
    if (rc) {
        tok__free(t);
        hf_impl_destroy(h);
        return rc;
    }
    hf_tok_attach(t, h);
    t->add_bos = t->add_eos = 0; /* the post-processor's, unless the config says */
    t->bos = config_token(h, config, "bos_token");
    t->eos = config_token(h, config, "eos_token");
    if (t->bos < 0 && h->n_pre_ids)
        t->bos = h->pre_ids[0];
    if (t->eos < 0 && h->n_post_ids)
        t->eos = h->post_ids[h->n_post_ids - 1];
    *out = t;
    return INF_OK;
}
