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
    /* the request's own strings as a call's pieces, whatever bytes they hold */
    const char *name = r.n_tools ? r.tools[0].name : t;
    oai_tool_call call = {0, t, name, t, strlen(t)};
    oai_choice c = {.text = t, .text_len = strlen(t), .finish_reason = "length",
                    .calls = &call, .n_calls = r.n_tools > 0, .stop_reason_id = -1};
    oai_resp_stream s;
    oai_resp_stream_init(&s);
    oai_error err;
    oai_fail(&err, 500, "internal_error", "", "%s", t);
    char *a = oai_resp_json(&m, &c, &u);
    char *b = oai_resp_start_sse(&m, &s);
    char *d = oai_resp_delta_sse(&m, &s, &c);
    char *f = oai_resp_end_sse(&m, &s, "stop", &u);
    char *g = oai_resp_fail_sse(&m, &s, &err);
    if (!a || !b || !d || !f || !g || s.n_items != (*t || !c.n_calls) + c.n_calls)
        abort();
    free(a), free(b), free(d), free(f), free(g);
    oai_resp_stream_free(&s);
    oai_request_free(&r);
    return 0;
}
