/* A template and its variables through jinja_parse and jinja_render: the
 * input is the template, then a NUL byte, then the variables as JSON,
 * read as the server reads them (jinja_vars; a default conversation when
 * absent or not an object). Small limits keep
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
    jinja_opts o = jinja_opts_default();
    o.max_output = 1 << 16;
    o.max_memory = 8 << 20;
    o.max_steps = 20000;
    o.max_depth = 32;
    o.now = 1700000000;
    jinja_tmpl *t = NULL;
    jinja_vars *vars = NULL;
    inf_err err;
    if (jinja_vars_create(&o, &vars))
        return 0;
    /* the variables as the server reads them (jinja_vars), or the default */
    if (!nul || jinja_vars_set_members(vars, (const char *)nul + 1, size - src_len - 1, NULL,
                                       &err) != INF_OK) {
        jinja_vars_destroy(vars);
        if (jinja_vars_create(&o, &vars) ||
            jinja_vars_set_members(vars, DEFAULT_VARS, strlen(DEFAULT_VARS), NULL, &err))
            abort();
    }
    if (jinja_parse(src, src_len, &t, &err) == INF_OK) {
        char *out = NULL;
        size_t len = 0;
        if (jinja_render_vars(t, vars, &o, &out, &len, &err) == INF_OK &&
            (len > o.max_output || strlen(out) > len))
            abort();
        free(out);
        jinja_destroy(t);
    }
    jinja_vars_destroy(vars);
    return 0;
}
