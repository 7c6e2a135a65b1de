#include "server/oai_tokenize.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

int oai_tokenize_parse(const char *body, size_t len, const oai_limits *lim,
                       oai_tokenize_req *out, oai_error *err)
{
    memset(out, 0, sizeof *out);
    out->add_special_tokens = 1;
    cJSON *j = cJSON_ParseWithLength(body, len);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(j, "add_special_tokens");
    int rc = 0;
    if (!cJSON_IsObject(j)) {
        rc = oai_fail(err, 400, "invalid_request_error", "", "the body is not a JSON object");
    } else if (spec && !cJSON_IsNull(spec) && !cJSON_IsBool(spec)) {
        rc = oai_fail(err, 400, "invalid_request_error", "add_special_tokens",
                      "\"add_special_tokens\" must be true or false");
    } else if (cJSON_IsString(p)) {
        out->add_special_tokens = spec && cJSON_IsBool(spec) ? cJSON_IsTrue(spec) : 1;
        if (!(out->prompt = strdup(p->valuestring)))
            rc = oai_fail(err, 500, "internal_error", "", "out of memory");
    } else if (cJSON_IsArray(msgs)) {
        /* the chat parser, so that messages are validated the same way */
        if ((rc = oai_parse(OAI_CHAT, body, len, lim, &out->chat_req, err)) == 0)
            out->chat = 1;
    } else {
        rc = oai_fail(err, 400, "invalid_request_error", "prompt",
                      "either \"prompt\" (a string) or \"messages\" is required");
    }
    cJSON_Delete(j);
    if (rc)
        oai_tokenize_free(out);
    return rc;
}

void oai_tokenize_free(oai_tokenize_req *r)
{
    free(r->prompt);
    if (r->chat)
        oai_request_free(&r->chat_req);
    memset(r, 0, sizeof *r);
}

int oai_detokenize_parse(const char *body, size_t len, int vocab, int32_t **ids_out, int *n_out,
                         oai_error *err)
{
    *ids_out = NULL;
    *n_out = 0;
    cJSON *j = cJSON_ParseWithLength(body, len);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
    int32_t *ids = n > 0 ? malloc(sizeof *ids * (size_t)n) : NULL;
    int rc = 0;
    if (n < 0)
        rc = oai_fail(err, 400, "invalid_request_error", "tokens",
                      "\"tokens\" must be a list of token ids");
    else if (n > 0 && !ids)
        rc = oai_fail(err, 500, "internal_error", "", "out of memory");
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, t) {
        if (rc)
            break;
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < vocab) ||
            x->valuedouble != (int)x->valuedouble)
            rc = oai_fail(err, 400, "invalid_request_error", "tokens",
                          "token %d is not an id in the vocabulary (0..%d)", i, vocab - 1);
        else
            ids[i++] = (int32_t)x->valuedouble;
    }
    cJSON_Delete(j);
    if (rc) {
        free(ids);
        return rc;
    }
    *ids_out = ids;
    *n_out = n;
    return 0;
}
