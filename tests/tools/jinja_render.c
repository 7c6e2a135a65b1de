/* jinja_render TEMPLATE [VARS.json]: renders a Jinja template file with
 * the variables of a JSON object (a file, or "-" for stdin; read as the
 * server reads request JSON, json.loads's way) through inferd's interpreter and writes the text to stdout; errors to stderr,
 * exit status 1. For checking a template by hand against Python's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja.h"

static char *slurp(const char *path)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f)
        return NULL;
    size_t n = 0, cap = 4096;
    char *b = malloc(cap);
    for (size_t r; b && (r = fread(b + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (cap - n - 1 == 0) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
            }
            b = nb;
        }
    }
    if (b)
        b[n] = 0;
    if (f != stdin)
        fclose(f);
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s TEMPLATE [VARS.json|-]\n", argv[0]);
        return 2;
    }
    char *src = slurp(argv[1]), *vars_text = argc > 2 ? slurp(argv[2]) : NULL;
    if (!src || (argc > 2 && !vars_text)) {
        fprintf(stderr, "cannot read input\n");
        return 2;
    }
    jinja_tmpl *t = NULL;
    jinja_vars *vars = NULL;
    inf_err err = {0};
    char *out = NULL;
    size_t len = 0;
    int rc = jinja_parse(src, strlen(src), &t, &err);
    jinja_opts o = jinja_opts_default();
    if (getenv("JINJA_NOW")) /* strftime_now's clock, for comparisons */
        o.now = (time_t)atoll(getenv("JINJA_NOW"));
    if (!rc && (rc = jinja_vars_create(&o, &vars)))
        snprintf(err.msg, sizeof err.msg, "out of memory");
    if (!rc && vars_text)
        rc = jinja_vars_set_members(vars, vars_text, strlen(vars_text), NULL, &err);
    if (!rc)
        rc = jinja_render_vars(t, vars, &o, &out, &len, &err);
    if (rc)
        fprintf(stderr, "error: %s\n", err.msg);
    else
        fwrite(out, 1, len, stdout);
    free(out);
    jinja_destroy(t);
    jinja_vars_destroy(vars);
    free(src);
    free(vars_text);
    return rc ? 1 : 0;
}
