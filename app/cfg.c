#include "app/cfg.h"
#include "engine/common.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

struct cfg_file {
    char **strings;  /* values the specs point at */
    int n, cap;
};

void cfg_free(cfg_file *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        free(c->strings[i]);
    free(c->strings);
    free(c);
}

static char *keep(cfg_file *c, char *s)
{
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        char **n = realloc(c->strings, sizeof *n * (size_t)cap);
        if (!n) {
            free(s);
            return NULL;
        }
        c->strings = n;
        c->cap = cap;
    }
    return c->strings[c->n++] = s;
}

/* Whether s is a number as JSON writes one (not 0x10, inf, .5 or 1.). */
static int json_number(const char *s)
{
    if (*s == '-')
        s++;
    if (*s == '0')
        s++;
    else if (*s >= '1' && *s <= '9')
        while (*s >= '0' && *s <= '9')
            s++;
    else
        return 0;
    if (*s == '.') {
        if (!(*++s >= '0' && *s <= '9'))
            return 0;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!(*s >= '0' && *s <= '9'))
            return 0;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    return !*s;
}

/* A YAML scalar as JSON: plain numbers, booleans and null stay bare. */
static void put_scalar(inf_buf *b, const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    int plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (plain && (!strcmp(v, "true") || !strcmp(v, "false") || !strcmp(v, "null") ||
                  json_number(v))) {
        inf_buf_put(b, v, strlen(v));
        return;
    }
    inf_buf_put(b, "\"", 1);
    for (; *v; v++) {
        if (*v == '"' || *v == '\\')
            inf_buf_put(b, "\\", 1);
        if ((unsigned char)*v < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned char)*v);
            inf_buf_put(b, esc, strlen(esc));
            continue;
        }
        inf_buf_put(b, v, 1);
    }
    inf_buf_put(b, "\"", 1);
}

/* Nesting deeper than any option needs: the recursion below must not be
 * driven off the stack by a file of "[[[[..." (found by fuzz_cfg). */
#define CFG_MAX_DEPTH 64

/* The rest of a mapping or sequence (its start already read) as JSON. */
static int to_json(yaml_parser_t *p, yaml_event_type_t start, inf_buf *b, int depth)
{
    if (depth > CFG_MAX_DEPTH)
        return -1;
    int mapping = start == YAML_MAPPING_START_EVENT, n = 0;
    inf_buf_put(b, mapping ? "{" : "[", 1);
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(p, &ev))
            return -1;
        yaml_event_type_t t = ev.type;
        if (t == YAML_MAPPING_END_EVENT || t == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (n && (!mapping || n % 2 == 0))
            inf_buf_put(b, ",", 1);
        else if (n)
            inf_buf_put(b, ":", 1);
        int rc = 0;
        if (t == YAML_SCALAR_EVENT)
            put_scalar(b, &ev);
        else if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT)
            rc = to_json(p, t, b, depth + 1);
        else
            rc = -1; /* anchors and aliases: not for a config file */
        yaml_event_delete(&ev);
        if (rc)
            return rc;
        n++;
    }
    inf_buf_put(b, mapping ? "}" : "]", 1);
    return 0;
}

int cfg_load(const char *path, const arg_spec *specs, int n_specs, cfg_file **out, inf_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return inf_fail(err, INF_ERR_IO, "%s: cannot open the config file", path);
    cfg_file *c = calloc(1, sizeof *c);
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_file(&p, f);
    int rc = c ? INF_OK : inf_fail(err, INF_ERR_NOMEM, "out of memory");
    int depth = 0; /* 1 inside the top-level mapping */
    while (!rc) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = inf_fail(err, INF_ERR_FORMAT, "%s:%zu: %s", path, p.problem_mark.line + 1,
                          p.problem ? p.problem : "not valid YAML");
            break;
        }
        yaml_event_type_t t = ev.type;
        size_t line = ev.start_mark.line + 1;
        if (t == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (depth == 0 && t == YAML_MAPPING_START_EVENT) {
            depth = 1;
        } else if (depth == 0 && t == YAML_SCALAR_EVENT) {
            rc = inf_fail(err, INF_ERR_FORMAT, "%s:%zu: expected a mapping of option names to "
                                               "values", path, line);
        } else if (depth == 1 && t == YAML_MAPPING_END_EVENT) {
            depth = 0;
        } else if (depth == 1 && t == YAML_SCALAR_EVENT) {
            char key[128];
            snprintf(key, sizeof key, "%s", (const char *)ev.data.scalar.value);
            yaml_event_t val;
            if (!yaml_parser_parse(&p, &val)) {
                rc = inf_fail(err, INF_ERR_FORMAT, "%s:%zu: %s", path, p.problem_mark.line + 1,
                              p.problem ? p.problem : "not valid YAML");
                yaml_event_delete(&ev);
                break;
            }
            char *v = NULL;
            if (val.type == YAML_SCALAR_EVENT) {
                v = strdup((const char *)val.data.scalar.value);
            } else if (val.type == YAML_MAPPING_START_EVENT ||
                       val.type == YAML_SEQUENCE_START_EVENT) {
                inf_buf b = {0};
                if (to_json(&p, val.type, &b, 1) || b.oom) {
                    free(b.p);
                    rc = inf_fail(err, INF_ERR_FORMAT, "%s:%zu: key '%s': cannot read its value",
                                  path, line, key);
                } else {
                    v = b.p;
                }
            } else {
                rc = inf_fail(err, INF_ERR_FORMAT, "%s:%zu: key '%s': unexpected value", path,
                              line, key);
            }
            yaml_event_delete(&val);
            if (!rc && (!v || !keep(c, v)))
                rc = inf_fail(err, INF_ERR_NOMEM, "out of memory");
            if (!rc && !strcmp(key, "config"))
                rc = inf_fail(err, INF_ERR_INVALID, "%s:%zu: a config file cannot name another "
                                                    "with 'config'", path, line);
            inf_err e2 = {0};
            if (!rc && args_set(specs, n_specs, key, v, &e2))
                rc = inf_fail(err, INF_ERR_INVALID, "%s:%zu: key '%s': %s", path, line, key,
                              e2.msg);
        } else if (depth == 1) {
            rc = inf_fail(err, INF_ERR_FORMAT, "%s:%zu: keys must be option names", path, line);
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    fclose(f);
    if (rc) {
        cfg_free(c);
        return rc;
    }
    *out = c;
    return INF_OK;
}
