/* oai_: the bodies of vLLM's /tokenize and /detokenize. */
#include "server/oai_int.h"

#include <stdlib.h>
#include <string.h>

int oai_parse_tokenize(const char *body, size_t len, const oai_limits *lim, oai_tokenize *out,
                       oai_error *err)
{
    cJSON *root = NULL;
    int rc;

    memset(out, 0, sizeof *out);
    out->add_special_tokens = 1;
    if ((rc = oai__parse_body(body, len, &root, err)))
        return rc;
    const cJSON *p = oai__get(root, "prompt");
    if (cJSON_IsString(p)) {
        rc = oai__want_bool(oai__get(root, "add_special_tokens"), "add_special_tokens",
                            &out->add_special_tokens, err);
        if (!rc)
            rc = oai__want_str(p, "prompt", &out->prompt, err);
    } else if (cJSON_IsArray(oai__get(root, "messages"))) {
        /* a chat body: its messages validated as /v1/chat/completions does */
        rc = oai_parse(OAI_CHAT, body, len, lim, &out->chat, err);
    } else {
        rc = oai_fail(err, 400, OAI_INVALID, "prompt",
                      "either \"prompt\" (a string) or \"messages\" is required");
    }
    cJSON_Delete(root);
    if (rc)
        oai_tokenize_free(out);
    return rc;
}

void oai_tokenize_free(oai_tokenize *t)
{
    if (!t)
        return;
    free(t->prompt);
    oai_request_free(&t->chat);
    memset(t, 0, sizeof *t);
}

int oai_parse_detokenize(const char *body, size_t len, oai_detokenize *out, oai_error *err)
{
    cJSON *root = NULL;
    int rc;

    memset(out, 0, sizeof *out);
    if ((rc = oai__parse_body(body, len, &root, err)))
        return rc;
    const cJSON *t = oai__get(root, "tokens"), *it;
    int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1;
    if (n < 0)
        rc = oai_fail(err, 400, OAI_INVALID, "tokens", "\"tokens\" must be a list of token ids");
    else if (n > 0 && !(out->tokens = malloc(sizeof *out->tokens * (size_t)n)))
        rc = oai__no_memory(err);
    if (!rc)
        cJSON_ArrayForEach(it, t) {
            if ((rc = oai__want_id(it, "tokens", "tokens", &out->tokens[out->n_tokens], err)))
                break;
            out->n_tokens++;
        }
    cJSON_Delete(root);
    if (rc)
        oai_detokenize_free(out);
    return rc;
}

void oai_detokenize_free(oai_detokenize *d)
{
    if (!d)
        return;
    free(d->tokens);
    memset(d, 0, sizeof *d);
}
