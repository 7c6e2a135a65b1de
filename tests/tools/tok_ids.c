/* tok_ids: encodes each line of a corpus with inferd's tokenizer, for the
 * exactness check against the JavaScript port of Hugging Face's tokenizers
 * (tests/e2e/tokenizer.test.mjs).
 *
 *   tok_ids [--special] DIR CORPUS
 *
 * CORPUS holds one text per line, hex-encoded (any bytes, invalid UTF-8
 * included). For each it prints one line: the ids (space-separated), a tab,
 * the hex of decode(ids), a tab, and the hex of the streamed text (each id
 * pushed through tok_stream, then flushed) or "BAD" when a streamed chunk
 * was not valid UTF-8 on its own. --special adds BOS/EOS as the policy says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tok.h"

static int unhex(const char *s, size_t n, char *out)
{
    for (size_t i = 0; i + 1 < n + 1 && i < n; i += 2) {
        unsigned v;
        if (sscanf(s + i, "%2x", &v) != 1)
            return -1;
        out[i / 2] = (char)v;
    }
    return (int)(n / 2);
}

static void put_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%02x", (unsigned char)s[i]);
}

/* Whether s[0:n] is valid UTF-8 (no partial character at either end). */
static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                   : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!k || i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
        i += k;
    }
    return 1;
}

int main(int argc, char **argv)
{
    int special = argc > 1 && strcmp(argv[1], "--special") == 0;
    if (argc != 3 + special) {
        fprintf(stderr, "usage: tok_ids [--special] DIR CORPUS\n");
        return 2;
    }
    tok *t = NULL;
    inf_err e = {0};
    if (tok_create(argv[1 + special], &t, &e)) {
        fprintf(stderr, "tok_ids: %s\n", e.msg);
        return 2;
    }
    FILE *f = fopen(argv[2 + special], "r");
    if (!f) {
        perror(argv[2 + special]);
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) >= 0) {
        size_t n = (size_t)got;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        char *text = malloc(n / 2 + 1);
        int len = text ? unhex(line, n, text) : -1;
        int32_t *ids = NULL;
        int k = 0;
        if (len < 0 || tok_encode(t, text, (size_t)len, special, &ids, &k, &e)) {
            fprintf(stderr, "tok_ids: %s\n", len < 0 ? "bad hex" : e.msg);
            return 1;
        }
        for (int i = 0; i < k; i++)
            printf(i ? " %d" : "%d", ids[i]);
        putchar('\t');
        char *dec = NULL;
        size_t dl = 0;
        if (tok_decode(t, ids, k, &dec, &dl, &e)) {
            fprintf(stderr, "tok_ids: %s\n", e.msg);
            return 1;
        }
        put_hex(dec, dl);
        putchar('\t');
        tok_stream *s = NULL;
        if (tok_stream_create(t, NULL, 0, &s, &e)) {
            fprintf(stderr, "tok_ids: %s\n", e.msg);
            return 1;
        }
        int bad = 0;
        char *all = malloc(1);
        size_t all_len = 0;
        for (int i = 0; i <= k && all; i++) {
            const char *c;
            size_t cl;
            int rc = i < k ? tok_stream_push(s, ids[i], &c, &cl, &e) : tok_stream_flush(s, &c, &cl, &e);
            if (rc) {
                fprintf(stderr, "tok_ids: %s\n", e.msg);
                return 1;
            }
            bad |= !valid_utf8((const unsigned char *)c, cl);
            char *p = realloc(all, all_len + cl + 1);
            if (!p)
                return 1;
            all = p;
            memcpy(all + all_len, c, cl);
            all_len += cl;
        }
        if (bad)
            fputs("BAD", stdout);
        else
            put_hex(all, all_len);
        putchar('\n');
        free(all);
        tok_stream_destroy(s);
        free(dec);
        free(ids);
        free(text);
    }
    free(line);
    fclose(f);
    tok_destroy(t);
    return 0;
}
