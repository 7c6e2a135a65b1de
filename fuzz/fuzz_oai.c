/* A request body through the OpenAI parser and validator, as every kind of
 * endpoint parses it; the first byte picks the kind. */
#include <stdlib.h>

#include "server/oai.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    oai_kind kind = data[0] & 1 ? OAI_CHAT : OAI_COMPLETION;
    oai_limits lim = oai_limits_default();
    oai_request r;
    oai_error e;
    if (oai_parse(kind, (const char *)data + 1, size - 1, &lim, &r, &e) == 0)
        oai_request_free(&r);
    return 0;
}
