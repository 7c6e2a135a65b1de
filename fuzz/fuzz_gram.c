/* GBNF text through gram_parse; when it parses, the bytes after the first
 * NUL go through gram_accepts and a matcher byte by byte with rollback. */
#include <stdlib.h>
#include <string.h>

#include "engine/gram.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nul = memchr(text, 0, size);
    size_t glen = nul ? (size_t)(nul - text) : size;
    gram *g = NULL;
    inf_err e;
    if (gram_parse(text, glen, &g, &e) != INF_OK)
        return 0;
    const char *s = nul ? nul + 1 : "";
    size_t slen = nul ? size - glen - 1 : 0;
    int whole = gram_accepts(g, s, slen);
    gram_auto *a = NULL;
    gram_match *m = NULL;
    if (gram_auto_create(g, NULL, NULL, 0, &a, &e) == INF_OK &&
        gram_match_create(a, &m, &e) == INF_OK) {
        size_t i = 0;
        for (; i < slen && gram_match_accept_bytes(m, s + i, 1) == INF_OK; i++)
            ;
        int ok = i == slen && gram_match_can_end(m);
        if (ok != whole) /* the two paths must agree */
            abort();
        gram_match_rollback(m, (int)(i / 2));
    }
    gram_match_destroy(m);
    gram_auto_destroy(a);
    gram_destroy(g);
    return 0;
}
