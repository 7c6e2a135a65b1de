/* The bodies of POST /tokenize and POST /detokenize (vLLM's) through their
 * parsers; the first byte picks which. */
#include <stdlib.h>

#include "server/oai_tokenize.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    oai_error e;
    if (data[0] & 1) {
        int32_t *ids = NULL;
        int n = 0;
        if (oai_detokenize_parse(body, len, 32000, &ids, &n, &e) == 0) {
            for (int i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= 32000)
                    abort(); /* the parser promised ids in the vocabulary */
        }
        free(ids);
        return 0;
    }
    oai_limits lim = oai_limits_default();
    oai_tokenize_req q;
    if (oai_tokenize_parse(body, len, &lim, &q, &e) == 0) {
        if (!q.chat && !q.prompt)
            abort(); /* success means a prompt or messages */
        oai_tokenize_free(&q);
    }
    return 0;
}
