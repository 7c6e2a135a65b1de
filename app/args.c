#include "app/args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* "max_tokens" and "max-tokens" name the same option. */
static int same_name(const char *a, size_t alen, const char *b)
{
    size_t i = 0;
    for (; i < alen && b[i]; i++) {
        char ca = a[i] == '_' ? '-' : a[i];
        if (ca != b[i])
            return 0;
    }
    return i == alen && b[i] == '\0';
}

static int set_value(const arg_spec *s, const char *v, inf_err *err)
{
    char *end;
    switch (s->kind) {
    case ARG_STR:
        *(const char **)s->dst = v;
        return INF_OK;
    case ARG_INT: {
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < -2147483647L || x > 2147483647L)
            return inf_fail(err, INF_ERR_INVALID, "--%s expects an integer, got '%s'",
                            s->name, v);
        *(int *)s->dst = (int)x;
        return INF_OK;
    }
    case ARG_FLOAT: {
        errno = 0;
        float x = strtof(v, &end);
        if (errno || end == v || *end || !isfinite(x))
            return inf_fail(err, INF_ERR_INVALID, "--%s expects a number, got '%s'",
                            s->name, v);
        *(float *)s->dst = x;
        return INF_OK;
    }
    case ARG_STRS: {
        arg_strs *l = s->dst;
        if (l->n == ARG_STRS_MAX)
            return inf_fail(err, INF_ERR_INVALID, "--%s: at most %d values", s->name,
                            ARG_STRS_MAX);
        l->v[l->n++] = v;
        return INF_OK;
    }
    case ARG_FLAG:
    case ARG_FLAG_OFF:
        break;
    }
    return inf_fail(err, INF_ERR_INVALID, "--%s takes no value", s->name);
}

static const arg_spec *find_spec(const arg_spec *specs, int n_specs, const char *name,
                                 size_t len)
{
    for (int k = 0; k < n_specs; k++)
        if (same_name(name, len, specs[k].name))
            return &specs[k];
    return NULL;
}

/* A repeatable option named on this command line starts empty: these
 * values replace the environment's and the config file's. */
static void reset_named_lists(const arg_spec *specs, int n_specs, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0)
            continue;
        const char *name = argv[i] + 2, *eq = strchr(name, '=');
        const arg_spec *s = find_spec(specs, n_specs, name, eq ? (size_t)(eq - name)
                                                               : strlen(name));
        if (s && s->kind == ARG_STRS)
            ((arg_strs *)s->dst)->n = 0;
    }
}

int args_parse(const arg_spec *specs, int n_specs, int argc, char **argv,
               int *want_help, inf_err *err)
{
    *want_help = 0;
    reset_named_lists(specs, n_specs, argc, argv);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *want_help = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0)
            return inf_fail(err, INF_ERR_INVALID, "unexpected argument '%s'", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const arg_spec *s = find_spec(specs, n_specs, name, len);
        if (!s)
            return inf_fail(err, INF_ERR_INVALID, "unknown option '--%.*s' (see --help)",
                            (int)len, name);
        if (s->kind == ARG_FLAG || s->kind == ARG_FLAG_OFF) {
            if (eq)
                return inf_fail(err, INF_ERR_INVALID, "--%s takes no value", s->name);
            *(int *)s->dst = s->kind == ARG_FLAG;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v)
            return inf_fail(err, INF_ERR_INVALID, "--%s needs a value", s->name);
        int rc = set_value(s, v, err);
        if (rc)
            return rc;
    }
    return INF_OK;
}

/* A flag from a string (environment, config file): 0 when v is not one. */
static int flag_value(const arg_spec *s, const char *v)
{
    static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        int on = !strcasecmp(v, yes[i]) ? 1 : !strcasecmp(v, no[i]) ? 0 : -1;
        if (on >= 0) {
            *(int *)s->dst = s->kind == ARG_FLAG ? on : !on;
            return 1;
        }
    }
    return 0;
}

int args_set(const arg_spec *specs, int n_specs, const char *name, const char *value,
             inf_err *err)
{
    for (int k = 0; k < n_specs; k++) {
        if (!same_name(name, strlen(name), specs[k].name))
            continue;
        if (specs[k].kind == ARG_STRS) /* one value from a config key replaces the rest */
            ((arg_strs *)specs[k].dst)->n = 0;
        if (specs[k].kind != ARG_FLAG && specs[k].kind != ARG_FLAG_OFF)
            return set_value(&specs[k], value, err);
        if (!flag_value(&specs[k], value))
            return inf_fail(err, INF_ERR_INVALID, "%s expects true or false, got '%s'", name,
                            value);
        return INF_OK;
    }
    return inf_fail(err, INF_ERR_INVALID, "unknown option '%s' (see --help)", name);
}

int args_from_env(const arg_spec *specs, int n_specs, const char *prefix, inf_err *err)
{
    for (int i = 0; i < n_specs; i++) {
        char var[128];
        int n = snprintf(var, sizeof var, "%s", prefix);
        for (const char *p = specs[i].name; *p && n < (int)sizeof var - 1; p++)
            var[n++] = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        var[n] = '\0';
        const char *v = getenv(var);
        if (!v)
            continue;
        if (specs[i].kind == ARG_FLAG || specs[i].kind == ARG_FLAG_OFF) {
            if (!flag_value(&specs[i], v))
                return inf_fail(err, INF_ERR_INVALID, "%s expects true or false, got '%s'", var, v);
            continue;
        }
        if (specs[i].kind == ARG_STRS)
            ((arg_strs *)specs[i].dst)->n = 0;
        inf_err e2 = {0};
        int rc = set_value(&specs[i], v, &e2);
        if (rc)
            return inf_fail(err, rc, "%s: %s", var, e2.msg);
    }
    return INF_OK;
}

void args_help(FILE *f, const arg_spec *specs, int n_specs)
{
    for (int i = 0; i < n_specs; i++) {
        char lhs[64];
        snprintf(lhs, sizeof lhs, "--%s%s%s", specs[i].name, specs[i].metavar ? " " : "",
                 specs[i].metavar ? specs[i].metavar : "");
        fprintf(f, "  %-28s %s\n", lhs, specs[i].help);
    }
}
