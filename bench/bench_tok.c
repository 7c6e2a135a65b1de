/* bench_tok: tokenizer speed on one core. For each tokenizer directory:
 * load time, encode throughput (MB/s and tokens/s) on English prose and
 * on a mixed corpus (code, numbers, many scripts, emoji), and beside it the
 * pre-tokenizer (the regex split) alone on the same prose. Prints a table;
 * --json FILE writes the figures. Not a test: it asserts nothing.
 *
 *   bench_tok [--json FILE] [--mb N] [--corpus-out DIR] NAME=DIR...
 *
 * --corpus-out writes the two corpora (prose.txt, mixed.txt) for the
 * JavaScript reference's run (scripts/bench-tok).
 * The corpora are generated from a fixed seed (N MB each, default 2).
 * Times are the thread's CPU time (one core's work, steadier than the wall
 * clock on a shared machine); each load and each encode is the median of
 * three (the development machine is loaded by others). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/tok.h"
#include "engine/tok_hf.h"
#include "engine/tok_int.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static unsigned long long rng_state = 88172645463325252ull;

static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

static const char *WORDS[] = {
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on",
    "are", "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or",
    "had", "by", "hot", "word", "but", "what", "some", "we", "can", "out", "other", "were",
    "all", "there", "when", "up", "use", "your", "how", "said", "an", "each", "she", "which",
    "do", "their", "time", "if", "will", "way", "about", "many", "then", "them", "write",
    "would", "like", "so", "these", "her", "long", "make", "thing", "see", "him", "two", "has",
    "look", "more", "day", "could", "go", "come", "did", "number", "sound", "no", "most",
    "people", "my", "over", "know", "water", "than", "call", "first", "who", "may", "down",
    "side", "been", "now", "find", "beautiful", "understanding", "government", "unbelievably",
    "characteristics", "Wednesday", "London", "Elizabeth", "electricity", "don't", "we'll",
};

static void prose(inf_buf *b, size_t bytes)
{
    size_t nw = sizeof WORDS / sizeof *WORDS;
    while (b->len < bytes && !b->oom) {
        int n = 6 + (int)rnd(14);
        for (int i = 0; i < n; i++) {
            const char *w = WORDS[rnd((unsigned)nw)];
            char first[64];
            snprintf(first, sizeof first, "%s", w);
            if (i == 0 && first[0] >= 'a' && first[0] <= 'z')
                first[0] = (char)(first[0] - 32);
            inf_buf_printf(b, "%s%s%s", i ? " " : "", first, i + 1 == n ? "" : rnd(9) ? "" : ",");
        }
        inf_buf_put(b, rnd(5) ? ". " : ".\n\n", rnd(5) ? 2 : 3);
    }
}

static const char *MIXED[] = {
    "def f(x):\n\treturn x * 2  # double\n\n",
    "for (int i = 0; i < 1024; i++) {\n        sum += a[i] * b[i];\n}\n",
    "3.14159 2718281828 1e-10 0x1F 1,000,000 and 42. ",
    "我们今天去公园散步，天气非常好。人工智能正在改变世界。",
    "日本語のテキスト：ひらがな、カタカナ、漢字を含みます。",
    "مرحبا بالعالم، هذه جملة باللغة العربية. ",
    "नमस्ते दुनिया, यह हिंदी में एक वाक्य है। ",
    "Привет, мир! Это предложение на русском языке. ",
    "👍 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷 ❤️ ",
    "Ünïcödé façade naïve coöperate Zürich straße. ",
    "<div class=\"a\"><span>text</span></div> &amp; ",
    "    \t  \n   \t\t\n                \n",
};

static void mixed(inf_buf *b, size_t bytes)
{
    size_t n = sizeof MIXED / sizeof *MIXED;
    while (b->len < bytes && !b->oom) {
        const char *s = MIXED[rnd((unsigned)n)];
        inf_buf_put(b, s, strlen(s));
        if (rnd(3) == 0)
            prose(b, b->len + 200);
    }
}

static double median3(double a, double b, double c)
{
    return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

/* CPU seconds for one encode of text (the median of three), and its tokens. */
static double time_encode(const tok *t, const inf_buf *text, int *n_tokens)
{
    double dts[3];
    for (int r = 0; r < 3; r++) {
        int32_t *ids = NULL;
        inf_err e;
        double t0 = cpu_now();
        if (tok_encode(t, text->p, text->len, 0, &ids, n_tokens, &e)) {
            fprintf(stderr, "bench_tok: %s\n", e.msg);
            exit(1);
        }
        dts[r] = cpu_now() - t0;
        free(ids);
    }
    return median3(dts[0], dts[1], dts[2]);
}

/* CPU seconds to load dir's tokenizer (the median of three); *out the last. */
static double time_load(const char *dir, tok **out)
{
    double dts[3];
    for (int r = 0; r < 3; r++) {
        inf_err e;
        double t0 = cpu_now();
        if (tok_create(dir, out, &e)) {
            fprintf(stderr, "bench_tok: %s\n", e.msg);
            exit(1);
        }
        dts[r] = cpu_now() - t0;
        if (r < 2)
            tok_destroy(*out);
    }
    return median3(dts[0], dts[1], dts[2]);
}

/* Seconds for the pre-tokenizer alone over text (tokenizer.json only). */
static double time_split(const tok *t, const inf_buf *text, size_t *pieces)
{
    const hf_impl *h = t->impl;
    hf_splits s = {0}, tmp = {0};
    double t0 = cpu_now();
    hf_splits_add(&s, text->p, text->len, 1);
    if (h->pre && hf_pre_apply(h->pre, &s, &tmp)) {
        fprintf(stderr, "bench_tok: split failed\n");
        exit(1);
    }
    double dt = cpu_now() - t0;
    *pieces = s.n;
    hf_splits_free(&s);
    hf_splits_free(&tmp);
    return dt;
}

int main(int argc, char **argv)
{
    const char *json = NULL, *corpus_out = NULL;
    double mb = 2;
    int first = 1;
    while (first < argc && argv[first][0] == '-') {
        if (strcmp(argv[first], "--json") == 0 && first + 1 < argc)
            json = argv[first + 1];
        else if (strcmp(argv[first], "--corpus-out") == 0 && first + 1 < argc)
            corpus_out = argv[first + 1];
        else if (strcmp(argv[first], "--mb") == 0 && first + 1 < argc)
            mb = atof(argv[first + 1]);
        else {
            fprintf(stderr, "usage: bench_tok [--json FILE] [--mb N] [--corpus-out DIR] NAME=DIR...\n");
            return 2;
        }
        first += 2;
    }
    if (first == argc || mb <= 0) {
        fprintf(stderr, "usage: bench_tok [--json FILE] [--mb N] [--corpus-out DIR] NAME=DIR...\n");
        return 2;
    }
    inf_buf en = {0}, mx = {0};
    prose(&en, (size_t)(mb * 1e6));
    mixed(&mx, (size_t)(mb * 1e6));
    if (en.oom || mx.oom)
        return 1;
    for (int k = 0; corpus_out && k < 2; k++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", corpus_out, k ? "mixed.txt" : "prose.txt");
        const inf_buf *b = k ? &mx : &en;
        FILE *f = fopen(p, "wb");
        if (!f || fwrite(b->p, 1, b->len, f) != b->len || fclose(f)) {
            perror(p);
            return 1;
        }
    }
    inf_buf out = {0};
    inf_buf_printf(&out, "{\"bench\":\"tok\",\"corpus_mb\":%.2f,\"tokenizers\":[", mb);
    printf("%-14s %-14s %8s %10s %12s %10s %12s %10s\n", "tokenizer", "kind", "load s",
           "prose MB/s", "prose tok/s", "mixed MB/s", "mixed tok/s", "split MB/s");
    for (int a = first; a < argc; a++) {
        char *eq = strchr(argv[a], '=');
        if (!eq) {
            fprintf(stderr, "bench_tok: %s is not NAME=DIR\n", argv[a]);
            return 2;
        }
        *eq = '\0';
        const char *name = argv[a], *dir = eq + 1;
        tok *t = NULL;
        double load = time_load(dir, &t);
        int np = 0, nm = 0;
        double tp = time_encode(t, &en, &np), tm = time_encode(t, &mx, &nm);
        size_t pieces = 0;
        int hf = strcmp(tok_kind(t), "tokenizer.json") == 0;
        double ts = hf ? time_split(t, &en, &pieces) : 0;
        char split[32] = "-";
        if (hf)
            snprintf(split, sizeof split, "%.2f", en.len / ts / 1e6);
        printf("%-14s %-14s %8.3f %10.2f %12.0f %10.2f %12.0f %10s\n", name, tok_kind(t), load,
               en.len / tp / 1e6, np / tp, mx.len / tm / 1e6, nm / tm, split);
        inf_buf_printf(&out,
                       "%s{\"name\":\"%s\",\"kind\":\"%s\",\"load_s\":%.4f,"
                       "\"prose_mb_s\":%.3f,\"prose_tokens_s\":%.0f,\"prose_tokens\":%d,"
                       "\"mixed_mb_s\":%.3f,\"mixed_tokens_s\":%.0f,\"mixed_tokens\":%d",
                       a > first ? "," : "", name, tok_kind(t), load, en.len / tp / 1e6, np / tp,
                       np, mx.len / tm / 1e6, nm / tm, nm);
        if (hf)
            inf_buf_printf(&out, ",\"split_mb_s\":%.3f,\"split_pieces\":%zu", en.len / ts / 1e6,
                           pieces);
        inf_buf_put(&out, "}", 1);
        tok_destroy(t);
    }
    inf_buf_put(&out, "]}\n", 3);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f || fputs(out.p, f) < 0 || fclose(f)) {
            perror(json);
            return 1;
        }
    }
    free(out.p);
    free(en.p);
    free(mx.p);
    return 0;
}
