/* A POST /v1/responses body through oai_parse_responses, as the daemon
 * parses it; a body it accepts must be a chat request with messages, and
 * the Response encoders must take the parsed text. */
#include <stdlib.h>
#include <string.h>

#include "server/oai.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    oai_limits lim = oai_limits_default();
    oai_error e;
    oai_request r;
    if (oai_parse_responses((const char *)data, size, &lim, &r, &e) != 0)
        return 0;
    if (r.kind != OAI_CHAT || r.n_messages < 1)
        abort();
    const char *t = r.messages[r.n_messages - 1].content;
    oai_meta m = {.kind = OAI_CHAT, .id = "resp_0", .created = 1, .model = "m"};
    oai_usage u = {1, 2, 0};
    int seq = 0;
    char *a = oai_resp_json(&m, t, strlen(t), "length", &u);
    char *b = oai_resp_start_sse(&m, &seq);
    char *c = oai_resp_delta_sse(&m, &seq, t, strlen(t));
    char *d = oai_resp_end_sse(&m, &seq, t, strlen(t), "stop", &u);
    if (!a || !b || !c || !d || seq != 9)
        abort();
    free(a), free(b), free(c), free(d);
    oai_request_free(&r);
    return 0;
}
