/* gram_check: the grammar engine behind a line protocol, for
 * tests/ref/check_gram.py (which holds the independent reference).
 *
 * Each stdin line is a JSON object naming one grammar source:
 *   {"gbnf": TEXT} | {"schema": SCHEMA, "strict": BOOL} | {"regex": RE}
 *   | {"choice": [STRINGS]} | {"json_object": true}
 * plus what to do with it:
 *   "accept": [STRINGS]       -> "accepted": [BOOL...] (whole-string checks,
 *                                fed to a matcher byte string by byte string)
 *   "walks": N, "seed": S     -> "walks": [STRING or null...]: random walks
 *                                through token masks over a small synthetic
 *                                vocabulary (null: no end within the step cap)
 * Each answer is one JSON line: those fields, or {"error": MESSAGE}. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gram.h"
#include "engine/gram_src.h"

/* The synthetic vocabulary: every printable ASCII byte, some multi-byte
 * JSON fragments, UTF-8 characters whole and split across tokens, then
 * eos. */
static const char *const frags[] = {
    "{\"", "\":", "\": ", "\", \"", "\",\"", "\"}", "true", "false", "null", "12", "0.",
    ", ", "[\"", "\"]", "\n", "\t", "  ", "\\n", "\\\"", "\\u00e9", "é", "\xC3", "\xA9",
    "日本", "\xE6\x97", "\xA5", "😀", "\xF0\x9F", "\x98\x80", "ab", "-1", "e+", "2024-", "T1",
    ":0", "Z", "\x7F",
};

static gram_vocab *make_vocab(int *eos)
{
    int nf = (int)(sizeof frags / sizeof frags[0]), n = 95 + nf + 1;
    const char **b = malloc(sizeof *b * (size_t)n);
    int *len = malloc(sizeof *len * (size_t)n);
    char *ascii = malloc(95);
    for (int i = 0; i < 95; i++) {
        ascii[i] = (char)(0x20 + i);
        b[i] = ascii + i;
        len[i] = 1;
    }
    for (int i = 0; i < nf; i++) {
        b[95 + i] = frags[i];
        len[95 + i] = (int)strlen(frags[i]);
    }
    b[n - 1] = "";
    len[n - 1] = 0;
    *eos = n - 1;
    gram_vocab *v = NULL;
    inf_err e;
    if (gram_vocab_create(n, b, len, &v, &e))
        fprintf(stderr, "gram_check: %s\n", e.msg);
    free(b);
    free(len);
    free(ascii);
    return v;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One walk: draw among allowed tokens, eos favoured more as it goes on,
 * closing characters favoured a little, so most walks end. */
static char *walk(gram_auto *a, const gram_vocab *v, const char *const *bytes,
                  const int *lens, int eos, uint64_t *rng)
{
    int n = gram_vocab_size(v);
    uint32_t *m = malloc(sizeof *m * (size_t)((n + 31) / 32));
    double *w = malloc(sizeof *w * (size_t)n);
    gram_match *gm = NULL;
    gram_match_create(a, &gm, NULL);
    inf_buf out = {0};
    char *res = NULL;
    for (int step = 0; step < 1500; step++) {
        int allowed = gram_match_mask(gm, m);
        if (!allowed)
            break;
        double total = 0;
        for (int t = 0; t < n; t++) {
            w[t] = 0;
            if (!(m[t >> 5] >> (t & 31) & 1))
                continue;
            w[t] = 1;
            if (t == eos)
                w[t] = 5 + step;
            else if (lens[t] && strchr("}]\",", bytes[t][0]))
                w[t] = 1 + step / 10.0;
            total += w[t];
        }
        double u = (double)(rng_next(rng) >> 11) / 9007199254740992.0 * total;
        int pick = -1;
        for (int t = 0; t < n; t++) {
            if (w[t] <= 0)
                continue;
            pick = t;
            if (u < w[t])
                break;
            u -= w[t];
        }
        if (gram_match_accept(gm, pick)) {
            fprintf(stderr, "gram_check: the mask allowed token %d that accept refuses\n", pick);
            abort();
        }
        if (pick == eos) {
            res = out.p ? out.p : strdup("");
            out.p = NULL;
            break;
        }
        inf_buf_put(&out, bytes[pick], (size_t)lens[pick]);
    }
    free(out.p);
    free(m);
    free(w);
    gram_match_destroy(gm);
    return res;
}

static int compile(const cJSON *req, char **gbnf, inf_err *e)
{
    const cJSON *x;
    if ((x = cJSON_GetObjectItemCaseSensitive(req, "gbnf")) && cJSON_IsString(x)) {
        *gbnf = strdup(x->valuestring);
        return 0;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(req, "schema"))) {
        char *s = cJSON_PrintUnformatted(x);
        int rc = gram_src_json_schema(s, strlen(s),
                                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "strict")), gbnf, e);
        free(s);
        return rc;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(req, "regex")) && cJSON_IsString(x))
        return gram_src_regex(x->valuestring, strlen(x->valuestring), gbnf, e);
    if ((x = cJSON_GetObjectItemCaseSensitive(req, "choice")) && cJSON_IsArray(x)) {
        int n = cJSON_GetArraySize(x);
        const char **c = malloc(sizeof *c * (size_t)(n + 1));
        for (int i = 0; i < n; i++)
            c[i] = cJSON_GetArrayItem(x, i)->valuestring;
        int rc = gram_src_choice(c, n, gbnf, e);
        free(c);
        return rc;
    }
    if (cJSON_GetObjectItemCaseSensitive(req, "json_object"))
        return gram_src_json_object(gbnf, e);
    return inf_fail(e, INF_ERR_INVALID, "no grammar source in the request");
}

int main(void)
{
    int eos;
    gram_vocab *v = make_vocab(&eos);
    if (!v)
        return 1;
    int n = gram_vocab_size(v);
    const char **bytes = malloc(sizeof *bytes * (size_t)n);
    int *lens = malloc(sizeof *lens * (size_t)n);
    int nf = (int)(sizeof frags / sizeof frags[0]);
    static char ascii[95];
    for (int i = 0; i < 95; i++) {
        ascii[i] = (char)(0x20 + i);
        bytes[i] = ascii + i;
        lens[i] = 1;
    }
    for (int i = 0; i < nf; i++) {
        bytes[95 + i] = frags[i];
        lens[95 + i] = (int)strlen(frags[i]);
    }
    bytes[eos] = "";
    lens[eos] = 0;
    size_t cap = 0;
    char *line = NULL;
    ssize_t got;
    while ((got = getline(&line, &cap, stdin)) > 0) {
        cJSON *req = cJSON_ParseWithLength(line, (size_t)got), *ans = cJSON_CreateObject();
        char *gbnf = NULL;
        inf_err e = {0};
        gram *g = NULL;
        gram_auto *a = NULL;
        if (!req || compile(req, &gbnf, &e) || gram_parse(gbnf, strlen(gbnf), &g, &e) ||
            gram_auto_create(g, v, &eos, 1, &a, &e)) {
            cJSON_AddStringToObject(ans, "error", req ? e.msg : "bad request line");
        } else {
            const cJSON *acc = cJSON_GetObjectItemCaseSensitive(req, "accept"), *s;
            cJSON *res = cJSON_AddArrayToObject(ans, "accepted");
            cJSON_ArrayForEach(s, acc) {
                gram_match *m = NULL;
                gram_match_create(a, &m, NULL);
                /* fed in two pieces, so a split character crosses steps */
                size_t len = strlen(s->valuestring), half = len / 2;
                int ok = gram_match_accept_bytes(m, s->valuestring, half) == 0 &&
                         gram_match_accept_bytes(m, s->valuestring + half, len - half) == 0 &&
                         gram_match_can_end(m);
                int whole = gram_accepts(g, s->valuestring, len);
                if (ok != whole) {
                    fprintf(stderr, "gram_check: matcher and gram_accepts disagree on %s\n", s->valuestring);
                    abort();
                }
                cJSON_AddItemToArray(res, cJSON_CreateBool(ok));
                gram_match_destroy(m);
            }
            int walks = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(req, "walks")) > 0
                            ? (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(req, "walks")) : 0;
            const cJSON *seed = cJSON_GetObjectItemCaseSensitive(req, "seed");
            uint64_t rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)(cJSON_IsNumber(seed) ? seed->valuedouble : 1);
            cJSON *wl = cJSON_AddArrayToObject(ans, "walks");
            for (int i = 0; i < walks; i++) {
                char *w = walk(a, v, bytes, lens, eos, &rng);
                cJSON_AddItemToArray(wl, w ? cJSON_CreateString(w) : cJSON_CreateNull());
                free(w);
            }
        }
        char *o = cJSON_PrintUnformatted(ans);
        puts(o);
        fflush(stdout);
        free(o);
        free(gbnf);
        gram_auto_destroy(a);
        gram_destroy(g);
        cJSON_Delete(req);
        cJSON_Delete(ans);
    }
    free(line);
    free(bytes);
    free(lens);
    gram_vocab_destroy(v);
    return 0;
}
