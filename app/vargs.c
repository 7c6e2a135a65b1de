#include "app/vargs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's short aliases (vllm/engine/arg_utils.py). */
static const struct {
    const char *alias, *name;
} aliases[] = {
    {"-tp", "--tensor-parallel-size"},
    {"-pp", "--pipeline-parallel-size"},
    {"-dp", "--data-parallel-size"},
    {"-q", "--quantization"},
};

/* vLLM flags inferd takes without acting on them. value: NO (a switch),
 * OPT (a switch that may be followed by true/false), ANY (a value, any), or a
 * list of the values that change nothing here (others are refused). */
enum { V_NO, V_OPT, V_ANY, V_SOME };

static const struct {
    const char *name; /* without dashes */
    int value;
    const char *ok[3]; /* V_SOME: the values accepted */
    const char *why;
} noops[] = {
    {"use-v2-block-manager", V_NO, {0}, "the KV cache is always paged (vLLM deprecated it too)"},
    {"enable-chunked-prefill", V_OPT, {0}, "prompts are always prefilled in chunks"},
    {"trust-remote-code", V_NO, {0}, "inferd runs no code from a model's repository"},
    {"disable-log-requests", V_NO, {0}, "inferd never logs request bodies"},
    {"disable-custom-all-reduce", V_NO, {0}, "tensor parallelism uses NCCL's all-reduce"},
    {"swap-space", V_ANY, {0}, "there is no CPU swap: preempted sequences are recomputed"},
    {"max-log-len", V_ANY, {0}, "inferd never logs prompts"},
    {"uvicorn-log-level", V_ANY, {0}, "see --log-level"},
    {"dtype", V_SOME, {"auto"}, "weights keep the checkpoint's dtype"},
    {"load-format", V_SOME, {"auto", "safetensors"}, "weights are read from safetensors"},
    {"tokenizer-mode", V_SOME, {"auto"}, "the model's own tokenizer is used"},
    {"pipeline-parallel-size", V_SOME, {"1"}, "one pipeline stage"},
    {"data-parallel-size", V_SOME, {"1"}, "one engine per process"},
};

/* "max_tokens" and "max-tokens" name the same flag. */
static int same_name(const char *a, size_t alen, const char *b)
{
    size_t i = 0;
    for (; i < alen && b[i]; i++)
        if ((a[i] == '_' ? '-' : a[i]) != b[i])
            return 0;
    return i == alen && b[i] == '\0';
}

static int is_bool(const char *s)
{
    static const char *words[] = {"true", "false", "True", "False", "1", "0"};
    for (size_t i = 0; s && i < sizeof words / sizeof *words; i++)
        if (!strcmp(s, words[i]))
            return 1;
    return 0;
}

static int push(vargs *v, const char *s)
{
    char *d = strdup(s);
    if (!d)
        return 0;
    v->argv[v->argc++] = d;
    return 1;
}

static void note(vargs *v, const char *fmt, const char *a, const char *b)
{
    if (v->n_notes < VARGS_MAX_NOTES)
        snprintf(v->notes[v->n_notes++], sizeof v->notes[0], fmt, a, b);
}

void vargs_free(vargs *v)
{
    for (int i = 0; v->argv && i < v->argc; i++)
        free(v->argv[i]);
    free(v->argv);
    memset(v, 0, sizeof *v);
}

/* A no-op flag at argv[*i] (name[0..len), inline value eq or NULL): checks
 * and skips its value. */
static int drop_noop(int k, int argc, char **argv, int *i, const char *eq, vargs *out,
                     inf_err *err)
{
    const char *name = noops[k].name, *val = NULL;
    switch (noops[k].value) {
    case V_NO:
        if (eq)
            return inf_fail(err, INF_ERR_INVALID, "--%s takes no value", name);
        break;
    case V_OPT:
        if (eq)
            val = eq;
        else if (*i + 1 < argc && is_bool(argv[*i + 1]))
            val = argv[++*i];
        if (val && !is_bool(val))
            return inf_fail(err, INF_ERR_INVALID, "--%s expects true or false, got '%s'", name,
                            val);
        break;
    default:
        val = eq ? eq : *i + 1 < argc ? argv[++*i] : NULL;
        if (!val)
            return inf_fail(err, INF_ERR_INVALID, "--%s needs a value", name);
        if (noops[k].value == V_SOME) {
            int ok = 0;
            for (int j = 0; j < 3 && noops[k].ok[j] && !ok; j++)
                ok = !strcmp(val, noops[k].ok[j]);
            if (!ok)
                return inf_fail(err, INF_ERR_INVALID, "--%s %s is not supported: %s", name, val,
                                noops[k].why);
        }
    }
    note(out, "--%s does nothing here: %s", name, noops[k].why);
    return INF_OK;
}

int vargs_normalize(int argc, char **argv, vargs *out, inf_err *err)
{
    memset(out, 0, sizeof *out);
    /* at most one extra element: the positional model's "--model" */
    out->argv = calloc((size_t)argc + 2, sizeof *out->argv);
    if (!out->argv)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    int positional = argc > 0 && argv[0][0] != '-', ok = 1, rc = INF_OK;
    if (positional) /* `inferd serve ORG/NAME [options]`, as `vllm serve` */
        ok = push(out, "--model") && push(out, argv[0]);
    for (int i = positional; ok && !rc && i < argc; i++) {
        const char *a = argv[i];
        char buf[256];
        int k = -1;
        for (size_t j = 0; j < sizeof aliases / sizeof *aliases; j++) {
            size_t n = strlen(aliases[j].alias);
            if (!strcmp(a, aliases[j].alias)) {
                a = aliases[j].name;
            } else if (!strncmp(a, aliases[j].alias, n) && a[n] == '=') { /* -tp=2 */
                snprintf(buf, sizeof buf, "%s%s", aliases[j].name, a + n);
                a = buf;
            }
        }
        if (!strncmp(a, "--", 2)) {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (size_t j = 0; j < sizeof noops / sizeof *noops && k < 0; j++)
                if (same_name(name, len, noops[j].name))
                    k = (int)j;
            if (positional && same_name(name, len, "model")) {
                rc = inf_fail(err, INF_ERR_INVALID, "the model is given twice: as '%s' and "
                              "as --model", argv[0]);
                break;
            }
            if (k >= 0) {
                rc = drop_noop(k, argc, argv, &i, eq ? eq + 1 : NULL, out, err);
                continue;
            }
        }
        ok = push(out, a);
    }
    if (!ok)
        rc = inf_fail(err, INF_ERR_NOMEM, "out of memory");
    if (rc)
        vargs_free(out);
    return rc;
}
