/* A template and its variables through jinja_parse and jinja_render: the
 * input is the template, then a NUL byte, then the variables as JSON (a
 * default conversation when absent or not an object). Small limits keep
 * each run short; rendering must stop at them with an error, never crash,
 * leak or write past max_output. */
#include <stdlib.h>
#include <string.h>

#include "engine/jinja.h"

static const char DEFAULT_VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", "
    "\"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}, {\"role\": \"assistant\", "
    "\"content\": null, \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": "
    "{\"a\": 1}}}]}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    const char *src = (const char *)data;
    const unsigned char *nul = memchr(data, 0, size);
    size_t src_len = nul ? (size_t)(nul - data) : size;
    cJSON *vars = NULL;
    if (nul) {
        size_t n = size - src_len - 1;
        char *text = malloc(n + 1);
        if (!text)
            return 0;
        memcpy(text, nul + 1, n);
        text[n] = 0;
        vars = cJSON_Parse(text);
        free(text);
    }
    if (!cJSON_IsObject(vars)) {
        cJSON_Delete(vars);
        vars = cJSON_Parse(DEFAULT_VARS);
    }
    jinja_tmpl *t = NULL;
    inf_err err;
    if (jinja_parse(src, src_len, &t, &err) == INF_OK) {
        jinja_opts o = jinja_opts_default();
        o.max_output = 1 << 16;
        o.max_memory = 8 << 20;
        o.max_steps = 20000;
        o.max_depth = 32;
        o.now = 1700000000;
        char *out = NULL;
        size_t len = 0;
        if (jinja_render(t, vars, &o, &out, &len, &err) == INF_OK && (len > o.max_output ||
                                                                      strlen(out) > len))
            abort();
        free(out);
        jinja_destroy(t);
    }
    cJSON_Delete(vars);
    return 0;
}
