/* The bodies of POST /tokenize and POST /detokenize (vLLM's) through their
 * parsers (server/oai.h); the first byte picks which. */
#include <stdlib.h>

#include "server/oai.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    oai_error e;
    if (data[0] & 1) {
        oai_detokenize d;
        if (oai_parse_detokenize(body, len, &d, &e) == 0) {
            for (int i = 0; i < d.n_tokens; i++)
                if (d.tokens[i] < 0)
                    abort(); /* the parser promised token ids */
            oai_detokenize_free(&d);
        }
        return 0;
    }
    oai_limits lim = oai_limits_default();
    oai_tokenize q;
    if (oai_parse_tokenize(body, len, &lim, &q, &e) == 0) {
        if (!q.prompt && q.chat.n_messages < 1)
            abort(); /* success means a prompt or messages */
        oai_tokenize_free(&q);
    }
    return 0;
}
