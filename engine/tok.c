/* tok: the generic tokenizer layer. Picks the implementation (tokenizer.json
 * first, as Hugging Face's fast tokenizers do, else tokenizer.model), owns the
 * vocabulary table (id -> piece, id -> bytes, special flags) and the BOS/EOS
 * policy, and range-checks every id before an implementation sees it. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "gguf.h"
#include "tok_gguf.h"
#include "tok_int.h"

int tok__new(int vocab, tok **out, inf_err *err)
{
    *out = NULL;
    if (vocab <= 0 || vocab > (1 << 24))
        return inf_fail(err, INF_ERR_FORMAT, "tok: vocabulary of %d tokens", vocab);
    tok *t = calloc(1, sizeof *t);
    if (!t)
        return inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    t->vocab = vocab;
    t->bos = t->eos = -1;
    t->add_bos = 1;
    t->piece = calloc((size_t)vocab, sizeof *t->piece);
    t->bytes = calloc((size_t)vocab, sizeof *t->bytes);
    t->n_bytes = calloc((size_t)vocab, sizeof *t->n_bytes);
    t->flags = calloc((size_t)vocab, 1);
    t->blob_cap = 1024;
    t->blob = malloc(t->blob_cap);
    if (!t->piece || !t->bytes || !t->n_bytes || !t->flags || !t->blob) {
        tok__free(t);
        return inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    }
    t->blob[0] = '\0'; /* offset 0: the empty string every unset token has */
    t->blob_len = 1;
    *out = t;
    return INF_OK;
}

/* Appends s[0:n] and a NUL to the blob; *off receives its offset. */
static int tok__blob_put(tok *t, const char *s, size_t n, uint32_t *off, inf_err *err)
{
    if (n == 0) {
        *off = 0;
        return INF_OK;
    }
    if (t->blob_len + n + 1 > UINT32_MAX)
        return inf_fail(err, INF_ERR_FORMAT, "tok: vocabulary text over 4 GB");
    if (t->blob_len + n + 1 > t->blob_cap) {
        size_t c = t->blob_cap * 2;
        while (c < t->blob_len + n + 1)
            c *= 2;
        char *p = realloc(t->blob, c);
        if (!p)
            return inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
        t->blob = p;
        t->blob_cap = c;
    }
    memcpy(t->blob + t->blob_len, s, n);
    t->blob[t->blob_len + n] = '\0';
    *off = (uint32_t)t->blob_len;
    t->blob_len += n + 1;
    return INF_OK;
}

int tok__set(tok *t, int32_t id, const char *piece, size_t piece_len, const char *bytes,
             size_t n_bytes, unsigned flags, inf_err *err)
{
    if (id < 0 || id >= t->vocab)
        return inf_fail(err, INF_ERR_FORMAT, "tok: token id %d out of range", (int)id);
    int rc = tok__blob_put(t, piece, piece_len, &t->piece[id], err);
    if (!rc && bytes == piece && n_bytes == piece_len)
        t->bytes[id] = t->piece[id];
    else if (!rc)
        rc = tok__blob_put(t, bytes, n_bytes, &t->bytes[id], err);
    if (rc)
        return rc;
    t->n_bytes[id] = (uint32_t)n_bytes;
    t->flags[id] = (uint8_t)flags;
    return INF_OK;
}

void tok__free(tok *t)
{
    if (!t)
        return;
    if (t->ops && t->ops->destroy)
        t->ops->destroy(t->impl);
    free(t->piece);
    free(t->bytes);
    free(t->n_bytes);
    free(t->flags);
    free(t->blob);
    free(t);
}

void tok_destroy(tok *t)
{
    tok__free(t);
}

/* ------------------------------------------------------------- loading */

/* One boolean of tokenizer_config.json: absent or null leaves *v. */
static int tok__json_bool(const cJSON *root, const char *key, int *v, const char *path,
                          inf_err *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it))
        return INF_OK;
    if (!cJSON_IsBool(it))
        return inf_fail(err, INF_ERR_FORMAT, "tok: %s: %s must be true or false", path, key);
    *v = cJSON_IsTrue(it);
    return INF_OK;
}

/* Reads and parses DIR/tokenizer_config.json into *root (NULL when absent). */
static int tok__read_config(const char *dir, cJSON **root, char **path, inf_err *err)
{
    *root = NULL;
    *path = inf_path_join(dir, "tokenizer_config.json");
    if (!*path)
        return inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    char *json = NULL;
    size_t len = 0;
    int missing = 0;
    int rc = inf_read_file(*path, 0, &json, &len, &missing, err);
    if (missing)
        return INF_OK;
    if (rc)
        return rc;
    *root = cJSON_ParseWithLength(json, len);
    free(json);
    if (!*root || !cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        return inf_fail(err, INF_ERR_FORMAT, "tok: %s is not a JSON object", *path);
    }
    return INF_OK;
}

/* Opens DIR/tokenizer.json if it exists (*found set), else leaves *out. */
static int tok__open_hf(const char *dir, const cJSON *config, tok **out, int *found,
                        inf_err *err)
{
    char *path = inf_path_join(dir, "tokenizer.json");
    if (!path)
        return inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
    char *json = NULL;
    size_t len = 0;
    int missing = 0;
    int rc = inf_read_file(path, 0, &json, &len, &missing, err);
    *found = !missing;
    if (!rc)
        rc = tok_hf_open(json, len, path, config, out, err);
    else if (missing)
        rc = INF_OK;
    free(json);
    free(path);
    return rc;
}

static int tok__open_spm(const char *path, tok **out, inf_err *err)
{
    char *blob = NULL;
    size_t len = 0;
    int rc = inf_read_file(path, 0, &blob, &len, NULL, err);
    if (!rc)
        rc = tok_spm_open(blob, len, path, out, err);
    free(blob);
    return rc;
}

int tok_create(const char *dir, tok **out, inf_err *err)
{
    if (!dir || !out)
        return inf_fail(err, INF_ERR_INVALID, "tok_create: NULL argument");
    *out = NULL;
    if (gguf_sniff(dir)) /* a GGUF file: the tokenizer in its metadata */
        return tok_gguf_create(dir, out, err);
    cJSON *config = NULL;
    char *cfg_path = NULL, *spm = NULL;
    tok *t = NULL;
    int found = 0;
    int rc = tok__read_config(dir, &config, &cfg_path, err);
    if (!rc)
        rc = tok__open_hf(dir, config, &t, &found, err);
    if (!rc && !found) {
        if (!(spm = inf_path_join(dir, "tokenizer.model")))
            rc = inf_fail(err, INF_ERR_NOMEM, "tok: out of memory");
        else
            rc = tok__open_spm(spm, &t, err);
    }
    /* tokenizer_config.json's flags, where given, override the defaults
     * (SentencePiece: BOS, no EOS, as Llama's; tokenizer.json: its
     * post-processor's, see tok_hf.c). */
    if (!rc && config)
        rc = tok__json_bool(config, "add_bos_token", &t->add_bos, cfg_path, err);
    if (!rc && config)
        rc = tok__json_bool(config, "add_eos_token", &t->add_eos, cfg_path, err);
    cJSON_Delete(config);
    free(cfg_path);
    free(spm);
    if (rc) {
        tok__free(t);
        return rc;
    }
    *out = t;
    return INF_OK;
}

int tok_create_file(const char *spm_path, int add_bos, int add_eos, tok **out, inf_err *err)
{
    if (!spm_path || !out)
        return inf_fail(err, INF_ERR_INVALID, "tok_create_file: NULL argument");
    *out = NULL;
    int rc = tok__open_spm(spm_path, out, err);
    if (rc)
        return rc;
    (*out)->add_bos = add_bos != 0;
    (*out)->add_eos = add_eos != 0;
    return INF_OK;
}

/* ------------------------------------------------------------ queries */

int tok_vocab_size(const tok *t)
{
    return t->vocab;
}

int tok_bos_id(const tok *t)
{
    return t->bos;
}

int tok_eos_id(const tok *t)
{
    return t->eos;
}

int tok_adds_bos(const tok *t)
{
    return t->add_bos && t->bos >= 0;
}

const char *tok_kind(const tok *t)
{
    return t->kind;
}

const char *tok_piece(const tok *t, int32_t id)
{
    if (id < 0 || id >= t->vocab)
        return NULL;
    return t->blob + t->piece[id];
}

const char *tok_token_bytes(const tok *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->n_bytes[id];
    return t->blob + t->bytes[id];
}

int tok_is_special(const tok *t, int32_t id)
{
    return id >= 0 && id < t->vocab && (t->flags[id] & TOK_F_SPECIAL);
}

/* ------------------------------------------------------- encode, decode */

/* The generic policy: BOS first and EOS last as add_bos/add_eos say; after
 * a post-processor, only where it did not already put them there. */
static int tok__add_special(const tok *t, int32_t **ids, size_t *n, inf_err *err)
{
    int post = t->ops->post != NULL;
    int bos = t->add_bos && t->bos >= 0 && !(post && *n > 0 && (*ids)[0] == t->bos);
    int eos = t->add_eos && t->eos >= 0 && !(post && *n > 0 && (*ids)[*n - 1] == t->eos);
    if (!bos && !eos)
        return INF_OK;
    int32_t *o = malloc((*n + 2) * sizeof *o);
    if (!o)
        return inf_fail(err, INF_ERR_NOMEM, "tok_encode: out of memory");
    size_t k = 0;
    if (bos)
        o[k++] = t->bos;
    if (*n)
        memcpy(o + k, *ids, *n * sizeof *o);
    k += *n;
    if (eos)
        o[k++] = t->eos;
    free(*ids);
    *ids = o;
    *n = k;
    return INF_OK;
}

int tok_encode_ex(const tok *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                  int *n, inf_err *err)
{
    if (!t || !ids || !n || (!text && len))
        return inf_fail(err, INF_ERR_INVALID, "tok_encode: NULL argument");
    *ids = NULL;
    *n = 0;
    if (len > INT_MAX / 2)
        return inf_fail(err, INF_ERR_INVALID, "tok_encode: text of %zu bytes is too long", len);
    int32_t *v = NULL;
    size_t k = 0;
    int rc = t->ops->encode(t, text ? text : "", len, (int)flags, &v, &k, err);
    if (!rc && (flags & TOK_ADD_SPECIAL)) {
        if (t->ops->post)
            rc = t->ops->post(t, &v, &k, err);
        if (!rc)
            rc = tok__add_special(t, &v, &k, err);
    }
    if (!rc && k > INT_MAX)
        rc = inf_fail(err, INF_ERR_INVALID, "tok_encode: too many tokens");
    if (rc) {
        free(v);
        return rc;
    }
    if (!v && !(v = malloc(sizeof *v)))
        return inf_fail(err, INF_ERR_NOMEM, "tok_encode: out of memory");
    *ids = v;
    *n = (int)k;
    return INF_OK;
}

int tok_encode(const tok *t, const char *text, size_t len, int add_special, int32_t **ids,
               int *n, inf_err *err)
{
    return tok_encode_ex(t, text, len, add_special ? TOK_ADD_SPECIAL : 0, ids, n, err);
}

int tok_decode(const tok *t, const int32_t *ids, int n, char **text, size_t *len, inf_err *err)
{
    return tok_decode_ex(t, ids, n, 0, text, len, err);
}

int tok_decode_ex(const tok *t, const int32_t *ids, int n, unsigned flags, char **text,
                  size_t *len, inf_err *err)
{
    if (!t || !text || n < 0 || (!ids && n))
        return inf_fail(err, INF_ERR_INVALID, "tok_decode: bad argument");
    *text = NULL;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->vocab)
            return inf_fail(err, INF_ERR_INVALID,
                            "tok_decode: token id %d (position %d) is out of range [0, %d)",
                            (int)ids[i], i, t->vocab);
    size_t l = 0;
    int rc = t->ops->decode(t, ids, (size_t)n, (flags & TOK_KEEP_SPECIAL) != 0, text, &l, err);
    if (!rc && len)
        *len = l;
    return rc;
}
