/* The tree-less JSON reader of tokenizer.json (tok_hf_json.c) and the
 * loader sections built on it (model.vocab, model.merges): the input is
 * checked as one value, every string in it decoded, then loaded as a
 * tokenizer.json; when it loads, a fixed text is encoded and decoded.
 * fuzz_tok covers the rest of the loader and the stages; this one is fast
 * enough to reach the reader's corners (escapes, surrogates, nesting). */
#include <stdlib.h>
#include <string.h>

#include "engine/tok.h"
#include "engine/tok_hf.h"
#include "engine/tok_int.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    const char *s = (const char *)data;
    hf_js j = {s, s + size, NULL};
    size_t count = 0;
    int rc = hf_js_skip(&j, &count);
    if (rc == INF_OK && !(j.p >= s && j.p <= s + size))
        abort(); /* the cursor must stay within the text */
    inf_buf b = {0};
    for (const char *q = s; (q = memchr(q, '"', size - (size_t)(q - s))); q++) {
        hf_js k = {q, s + size, NULL};
        if (hf_js_str(&k, &b) == INF_OK && (k.p <= q || k.p > s + size))
            abort();
    }
    free(b.p);
    tok *t = NULL;
    inf_err err;
    if (tok_hf_open(s, size, "fuzz.json", NULL, &t, &err) == INF_OK) {
        static const char text[] = "Hello  world \xE2\x96\x81x <s> caf\xC3\xA9 123";
        int32_t *ids = NULL;
        int n = 0;
        if (tok_encode_ex(t, text, sizeof text - 1, 0, &ids, &n, &err) == INF_OK) {
            char *out = NULL;
            size_t len = 0;
            if (tok_decode(t, ids, n, &out, &len, &err) == INF_OK)
                free(out);
            free(ids);
        }
        tok_destroy(t);
    }
    return 0;
}
