/* Request JSON text through jinja_vars (the reader of jinja_json.c and
 * vLLM's message rebuilding of jinja_vars.c), then a template that walks
 * every value (str, repr, tojson, iteration): the input is the JSON text.
 * Read as a variable, as the variables' object, and as messages for both
 * content shapes; each must fail cleanly or render within the limits. */
#include <stdlib.h>
#include <string.h>

#include "engine/jinja.h"

static const char TEMPLATE[] =
    "{{ v }}{{ v | tojson }}{{ v | tojson(indent=1, sort_keys=true) }}{{ [v] }}"
    "{% for m in messages %}{{ m.role }}{{ m.content }}{% for p in m.content %}{{ p.text }}"
    "{% endfor %}{{ m.tool_calls | tojson }}{% endfor %}";

static void render(const jinja_tmpl *t, const jinja_vars *v, const jinja_opts *o)
{
    char *out = NULL;
    size_t len = 0;
    inf_err err;
    if (jinja_render_vars(t, v, o, &out, &len, &err) == INF_OK &&
        (len > o->max_output || strlen(out) > len))
        abort();
    free(out);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    const char *json = (const char *)data;
    jinja_opts o = jinja_opts_default();
    o.max_output = 1 << 16;
    o.max_memory = 8 << 20;
    o.max_steps = 20000;
    o.max_depth = 32;
    o.now = 1700000000;
    jinja_tmpl *t = NULL;
    inf_err err;
    if (jinja_parse(TEMPLATE, strlen(TEMPLATE), &t, &err))
        abort();
    for (int mode = 0; mode < 4; mode++) {
        jinja_vars *v = NULL;
        if (jinja_vars_create(&o, &v))
            break;
        int rc = mode == 0 ? jinja_vars_set_json(v, "v", json, size, &err)
               : mode == 1 ? jinja_vars_set_members(v, json, size, NULL, &err)
                           : jinja_vars_set_messages(v, json, size, mode == 3, &err);
        if (rc == INF_OK) {
            size_t n;
            const char *ft = jinja_vars_final_text(v, &n);
            if (ft && memchr(ft, 0, n + 1) == NULL) /* the text ends with a NUL */
                abort();
            render(t, v, &o);
        }
        jinja_vars_destroy(v);
    }
    jinja_destroy(t);
    return 0;
}
