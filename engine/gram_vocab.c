/* The vocabulary as a byte trie in preorder, and the mask walk over it: a
 * subtree whose prefix the grammar refuses is skipped whole. */
#include <stdlib.h>
#include <string.h>

#include "gram_int.h"

typedef struct sort_ctx {
    const gram_vocab *v;
} sort_ctx;

static int cmp_tok(const void *x, const void *y, void *ctx)
{
    const gram_vocab *v = ((const sort_ctx *)ctx)->v;
    int a = *(const int *)x, b = *(const int *)y;
    int la = v->len[a], lb = v->len[b];
    int c = memcmp(v->bytes[a], v->bytes[b], (size_t)(la < lb ? la : lb));
    if (c)
        return c;
    if (la != lb)
        return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

int gram_vocab_create(int n, const char *const *bytes, const int *len, gram_vocab **out,
                      inf_err *err)
{
    *out = NULL;
    if (n <= 0 || !bytes || !len)
        return inf_fail(err, INF_ERR_INVALID, "gram_vocab_create: empty vocabulary");
    gram_vocab *v = calloc(1, sizeof *v);
    int *order = malloc(sizeof(int) * (size_t)n);
    int32_t *path = NULL;
    if (!v || !order)
        goto nomem;
    v->n = n;
    v->bytes = calloc((size_t)n, sizeof *v->bytes);
    v->len = calloc((size_t)n, sizeof *v->len);
    v->next_same = malloc(sizeof(int32_t) * (size_t)n);
    if (!v->bytes || !v->len || !v->next_same)
        goto nomem;
    size_t total = 0;
    int max_len = 0;
    for (int i = 0; i < n; i++) {
        if (len[i] < 0 || len[i] > 65535 || (len[i] && !bytes[i])) {
            gram_vocab_destroy(v);
            free(order);
            return inf_fail(err, INF_ERR_INVALID, "gram_vocab_create: token %d has a bad length", i);
        }
        v->len[i] = len[i];
        v->bytes[i] = malloc((size_t)len[i] + 1);
        if (!v->bytes[i])
            goto nomem;
        if (len[i])
            memcpy(v->bytes[i], bytes[i], (size_t)len[i]);
        v->next_same[i] = -1;
        order[i] = i;
        total += (size_t)len[i];
        if (len[i] > max_len)
            max_len = len[i];
    }
    v->max_depth = max_len;
    sort_ctx ctx = {v};
    qsort_r(order, (size_t)n, sizeof *order, cmp_tok, &ctx);
    /* At most one node per byte of every token. */
    v->byte = malloc(total + 1);
    v->depth = malloc(sizeof(uint16_t) * (total + 1));
    v->end = malloc(sizeof(int32_t) * (total + 1));
    v->tok = malloc(sizeof(int32_t) * (total + 1));
    path = malloc(sizeof(int32_t) * ((size_t)max_len + 1));
    if (!v->byte || !v->depth || !v->end || !v->tok || !path)
        goto nomem;
    int depth = 0, prev = -1;
    int32_t nn = 0;
    for (int k = 0; k < n; k++) {
        int t = order[k], lt = v->len[t];
        if (!lt)
            continue;
        int common = 0;
        if (prev >= 0) {
            int lp = v->len[prev];
            while (common < lp && common < lt && v->bytes[prev][common] == v->bytes[t][common])
                common++;
        }
        if (prev >= 0 && common == lt && lt == v->len[prev]) { /* same bytes */
            int32_t at = path[lt - 1];
            int32_t *link = &v->tok[at];
            while (*link >= 0)
                link = &v->next_same[*link];
            *link = t;
            prev = t;
            continue;
        }
        while (depth > common) /* close the nodes not shared */
            v->end[path[--depth]] = nn;
        for (int d = common; d < lt; d++) {
            v->byte[nn] = (uint8_t)v->bytes[t][d];
            v->depth[nn] = (uint16_t)(d + 1);
            v->tok[nn] = -1;
            path[depth++] = nn++;
        }
        v->tok[path[lt - 1]] = t;
        prev = t;
    }
    while (depth > 0)
        v->end[path[--depth]] = nn;
    v->n_nodes = nn;
    free(path);
    free(order);
    *out = v;
    return INF_OK;
nomem:
    free(path);
    free(order);
    gram_vocab_destroy(v);
    return inf_fail(err, INF_ERR_NOMEM, "gram_vocab_create: out of memory");
}

void gram_vocab_destroy(gram_vocab *v)
{
    if (!v)
        return;
    if (v->bytes)
        for (int i = 0; i < v->n; i++)
            free(v->bytes[i]);
    free(v->bytes);
    free(v->len);
    free(v->next_same);
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->tok);
    free(v);
}

int gram_vocab_size(const gram_vocab *v)
{
    return v->n;
}

int gram__walk(gram_auto *a, gram__pos p, uint32_t *words)
{
    const gram_vocab *v = gram__vocab(a);
    memset(words, 0, sizeof(uint32_t) * (((size_t)v->n + 31) / 32));
    int count = 0;
    if (p.sid < 0)
        return 0;
    if (gram__state_open(a, p.sid)) {
        gram__pos *st = malloc(sizeof *st * ((size_t)v->max_depth + 1));
        if (!st)
            return -1;
        st[0] = p;
        for (int32_t i = 0; i < v->n_nodes;) {
            gram__pos q = gram__step_byte(a, st[v->depth[i] - 1], v->byte[i]);
            if (q.sid < 0) {
                i = v->end[i];
                continue;
            }
            st[v->depth[i]] = q;
            for (int32_t t = v->tok[i]; t >= 0; t = v->next_same[t]) {
                words[t >> 5] |= 1u << (t & 31);
                count++;
            }
            i++;
        }
        free(st);
    }
    if (!p.need && gram__state_accepts(a, p.sid)) {
        int n_eos;
        const int32_t *eos = gram__eos(a, &n_eos);
        for (int i = 0; i < n_eos; i++) {
            int32_t t = eos[i];
            if (t >= 0 && t < v->n && !(words[t >> 5] >> (t & 31) & 1)) {
                words[t >> 5] |= 1u << (t & 31);
                count++;
            }
        }
    }
    return count;
}
