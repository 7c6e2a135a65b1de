/* A request body through the OpenAI parsers, as every endpoint parses it;
 * the first byte picks which: completions, chat, /tokenize, /detokenize. */
#include <stdlib.h>

#include "server/oai.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    oai_limits lim = oai_limits_default();
    oai_error e;
    switch (data[0] & 3) {
    case 0:
    case 1: {
        oai_request r;
        if (oai_parse(data[0] & 1 ? OAI_CHAT : OAI_COMPLETION, body, len, &lim, &r, &e) == 0)
            oai_request_free(&r);
        break;
    }
    case 2: {
        oai_tokenize t;
        if (oai_parse_tokenize(body, len, &lim, &t, &e) == 0)
            oai_tokenize_free(&t);
        break;
    }
    default: {
        oai_detokenize d;
        if (oai_parse_detokenize(body, len, &d, &e) == 0)
            oai_detokenize_free(&d);
    }
    }
    return 0;
}
