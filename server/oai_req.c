/* oai_: completions and chat request bodies (the contract is in oai.h).
 *
 * Parsing reads the body with cJSON into a local oai_request and hands it
 * over only when every field has passed, so a failure never leaves half a
 * request behind. */
#include "server/oai_int.h"

#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { K_ANY = 0, K_CMPL = 1, K_CHAT = 2 };

static int for_kind(int mask, oai_kind k)
{
    return mask == K_ANY || (mask == K_CMPL) == (k == OAI_COMPLETION);
}

/* Plain boolean fields, into int members. */
static const struct {
    const char *key;
    size_t off;
    int kinds;
} bool_fields[] = {
    {"stream", offsetof(oai_request, stream), K_ANY},
    {"echo", offsetof(oai_request, echo), K_CMPL},
    {"add_generation_prompt", offsetof(oai_request, add_generation_prompt), K_CHAT},
    {"continue_final_message", offsetof(oai_request, continue_final_message), K_CHAT},
    {"ignore_eos", offsetof(oai_request, ignore_eos), K_ANY},
    {"skip_special_tokens", offsetof(oai_request, skip_special_tokens), K_ANY},
    {"speculative", offsetof(oai_request, speculative), K_ANY},
};

/* Plain float fields. temperature: OpenAI documents [0, 2]; vLLM sets no
 * upper bound; we take [0, 100] (beyond that sampling is uniform anyway).
 * repetition_penalty must fit a float. */
static const struct {
    const char *key;
    size_t off;
    oai__span s;
} num_fields[] = {
    {"temperature", offsetof(oai_request, temperature), {0, 100, 0, 0, 1}},
    {"top_p", offsetof(oai_request, top_p), {0, 1, 1, 0, 1}},
    {"min_p", offsetof(oai_request, min_p), {0, 1, 0, 0, 1}},
    {"presence_penalty", offsetof(oai_request, presence_penalty), {-2, 2, 0, 0, 1}},
    {"frequency_penalty", offsetof(oai_request, frequency_penalty), {-2, 2, 0, 0, 1}},
    {"repetition_penalty", offsetof(oai_request, repetition_penalty), {0, FLT_MAX, 1, 0, 0}},
};

static const oai__span SPAN_INT_POS = {1, INT_MAX, 0, 0, 0};
static const oai__span SPAN_INT_NONNEG = {0, INT_MAX, 0, 0, 0};

static int parse_simple(const cJSON *o, oai_kind kind, oai_request *r,
                        oai_error *err)
{
    for (size_t i = 0; i < sizeof bool_fields / sizeof bool_fields[0]; i++) {
        if (!for_kind(bool_fields[i].kinds, kind))
            continue;
        int *dst = (int *)((char *)r + bool_fields[i].off);
        int rc = oai__want_bool(oai__get(o, bool_fields[i].key), bool_fields[i].key, dst, err);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < sizeof num_fields / sizeof num_fields[0]; i++) {
        float *dst = (float *)((char *)r + num_fields[i].off);
        double d = *dst;
        int rc = oai__want_num(oai__get(o, num_fields[i].key), num_fields[i].key,
                          num_fields[i].s, &d, err);
        if (rc)
            return rc;
        *dst = (float)d;
        /* an open lower bound must also hold for the float we keep */
        if (num_fields[i].s.lo_open && !(*dst > num_fields[i].s.lo))
            return oai_fail(err, 400, OAI_INVALID, num_fields[i].key,
                            "%s must be greater than 0 (as a 32-bit float), "
                            "got %g", num_fields[i].key, d);
    }
    return 0;
}

/* max_tokens / max_completion_tokens (the latter wins, as in vLLM),
 * min_tokens, n, best_of, top_k, seed. */
static int parse_counts(const cJSON *o, const oai_limits *lim, oai_request *r,
                        oai_error *err)
{
    oai__span n_span = {1, lim->max_n, 0, 0, 1};
    int best_of = -1, top_k = r->top_k;

    if (oai__want_int32(oai__get(o, "max_tokens"), "max_tokens", SPAN_INT_POS,
                   &r->max_tokens, err) ||
        oai__want_int32(oai__get(o, "max_completion_tokens"), "max_completion_tokens",
                   SPAN_INT_POS, &r->max_tokens, err))
        return 400;
    if (oai__want_int32(oai__get(o, "min_tokens"), "min_tokens", SPAN_INT_NONNEG,
                   &r->min_tokens, err))
        return 400;
    if (r->max_tokens >= 0 && r->min_tokens > r->max_tokens)
        return oai_fail(err, 400, OAI_INVALID, "min_tokens",
                        "min_tokens must be at most max_tokens (%d), got %d",
                        r->max_tokens, r->min_tokens);
    if (oai__want_int32(oai__get(o, "n"), "n", n_span, &r->n, err))
        return 400;
    /* best_of > n needs ranking by cumulative logprob, which we do not do. */
    if (oai__want_int32(oai__get(o, "best_of"), "best_of", SPAN_INT_POS, &best_of, err))
        return 400;
    if (best_of != -1 && best_of != r->n)
        return oai_fail(err, 400, OAI_INVALID, "best_of",
                        "best_of must be null or equal to n (%d), got %d",
                        r->n, best_of);
    if (oai__want_int32(oai__get(o, "top_k"), "top_k", (oai__span){INT_MIN, INT_MAX, 0, 0, 0},
                   &top_k, err))
        return 400;
    if (top_k == 0)
        top_k = -1; /* vLLM: 0 also means off */
    if (top_k < -1)
        return oai_fail(err, 400, OAI_INVALID, "top_k",
                        "top_k must be -1 (off) or at least 1, got %d", top_k);
    r->top_k = top_k;
    const cJSON *seed = oai__get(o, "seed");
    if (seed && cJSON_IsNumber(seed) &&
        !(seed->valuedouble >= -0x1p63 && seed->valuedouble <= 0x1p63))
        return oai_fail(err, 400, OAI_INVALID, "seed",
                        "seed must be a 64-bit integer, got %g",
                        seed->valuedouble);
    if (oai__want_int(seed, "seed", (oai__span){-0x1p63, 0x1p63, 0, 0, 1}, &r->seed, err))
        return 400;
    r->has_seed = seed != NULL;
    return 0;
}

/* logprobs: completions take an integer (null = off); chat takes a boolean
 * plus top_logprobs, which requires logprobs true (as OpenAI). */
static int parse_logprobs(const cJSON *o, oai_kind kind, const oai_limits *lim,
                          oai_request *r, oai_error *err)
{
    oai__span s = {0, lim->max_logprobs, 0, 0, 1};
    const cJSON *lp = oai__get(o, "logprobs");
    const cJSON *plp = oai__get(o, "prompt_logprobs");

    if (plp && !cJSON_IsNumber(plp))
        return oai__bad_type(err, "prompt_logprobs", "an integer or null", plp);
    /* -1: the whole vocabulary (vLLM), held to max_logprobs as vLLM does */
    if (plp && plp->valuedouble == -1 && lim->vocab_size > lim->max_logprobs)
        return oai_fail(err, 400, OAI_INVALID, "prompt_logprobs",
                        "Requested prompt logprobs of %d (-1: the whole vocabulary), which is "
                        "greater than max allowed: %d", lim->vocab_size, lim->max_logprobs);
    if (plp && plp->valuedouble == -1 && lim->vocab_size <= 0)
        return oai_fail(err, 400, OAI_INVALID, "prompt_logprobs",
                        "prompt_logprobs -1 (the whole vocabulary) is greater than max "
                        "allowed: %d", lim->max_logprobs);
    if (plp && plp->valuedouble == -1)
        r->prompt_logprobs = lim->vocab_size;
    else if (oai__want_int32(plp, "prompt_logprobs", s, &r->prompt_logprobs, err))
        return 400;
    if (kind == OAI_COMPLETION) {
        if (lp && !cJSON_IsNumber(lp))
            return oai__bad_type(err, "logprobs", "an integer or null", lp);
        return oai__want_int32(lp, "logprobs", s, &r->logprobs, err);
    }
    int on = 0, top = 0;
    const cJSON *tl = oai__get(o, "top_logprobs");
    if (oai__want_bool(lp, "logprobs", &on, err) ||
        oai__want_int32(tl, "top_logprobs", s, &top, err))
        return 400;
    if (tl && !on)
        return oai_fail(err, 400, OAI_INVALID, "top_logprobs",
                        "top_logprobs requires logprobs to be true, got "
                        "logprobs %s", lp ? "false" : "absent");
    r->logprobs = on ? top : -1;
    return 0;
}

static int parse_stream_options(const cJSON *o, oai_request *r, oai_error *err)
{
    const cJSON *so = oai__get(o, "stream_options");

    if (!so)
        return 0;
    if (!cJSON_IsObject(so))
        return oai__bad_type(err, "stream_options", "an object", so);
    if (!r->stream)
        return oai_fail(err, 400, OAI_INVALID, "stream_options",
                        "stream_options can only be set when stream is true, "
                        "got stream false");
    return oai__want_bool(oai__get(so, "include_usage"), "stream_options.include_usage",
                     &r->include_usage, err);
}

static int parse_stop(const cJSON *o, const oai_limits *lim, oai_request *r,
                      oai_error *err)
{
    const cJSON *v = oai__get(o, "stop"), *it;
    int n, i = 0;

    if (!v)
        return 0;
    if (cJSON_IsString(v))
        n = 1;
    else if (cJSON_IsArray(v))
        n = cJSON_GetArraySize(v);
    else
        return oai__bad_type(err, "stop", "a string or a list of strings", v);
    if (n > lim->max_stop)
        return oai_fail(err, 400, OAI_INVALID, "stop",
                        "stop must have at most %d strings, got %d",
                        lim->max_stop, n);
    if (n == 0)
        return 0;
    r->stop = calloc((size_t)n, sizeof *r->stop);
    if (!r->stop)
        return oai__no_memory(err);
    for (it = cJSON_IsString(v) ? v : v->child; it && i < n; it = it->next) {
        if (!cJSON_IsString(it))
            return oai_fail(err, 400, OAI_INVALID, "stop",
                            "stop must be a string or a list of strings, got "
                            "a list holding a %s", oai__json_type(it));
        if (!it->valuestring[0])
            return oai_fail(err, 400, OAI_INVALID, "stop",
                            "stop strings must not be empty, got \"\"");
        r->stop[i] = strdup(it->valuestring);
        if (!r->stop[i])
            return oai__no_memory(err);
        r->n_stop = ++i;
    }
    return 0;
}

static int parse_stop_ids(const cJSON *o, oai_request *r, oai_error *err)
{
    const cJSON *v = oai__get(o, "stop_token_ids"), *it;
    int n;

    if (!v)
        return 0;
    if (!cJSON_IsArray(v))
        return oai__bad_type(err, "stop_token_ids", "a list of token ids", v);
    n = cJSON_GetArraySize(v);
    if (n == 0)
        return 0;
    r->stop_token_ids = malloc((size_t)n * sizeof *r->stop_token_ids);
    if (!r->stop_token_ids)
        return oai__no_memory(err);
    cJSON_ArrayForEach(it, v) {
        int rc = oai__want_id(it, "stop_token_ids", "stop_token_ids",
                         &r->stop_token_ids[r->n_stop_token_ids], err);
        if (rc)
            return rc;
        r->n_stop_token_ids++;
    }
    return 0;
}

/* A logit_bias key: decimal digits naming a token id that fits int32. */
static int parse_id_key(const char *s, int32_t *out)
{
    int64_t v = 0;

    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
        if (v > INT32_MAX)
            return -1;
    }
    *out = (int32_t)v;
    return 0;
}

typedef struct bias_ent {
    int32_t id;
    int ord;
    float v;
} bias_ent;

static int bias_cmp(const void *a, const void *b)
{
    const bias_ent *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* logit_bias: {"token id": bias}; a repeated key keeps its last value, as
 * a JSON object read into a dict would. */
static int parse_bias(const cJSON *o, oai_request *r, oai_error *err)
{
    const cJSON *v = oai__get(o, "logit_bias"), *it;
    bias_ent *e = NULL;
    int n, k = 0, rc = 0;

    if (!v)
        return 0;
    if (!cJSON_IsObject(v))
        return oai__bad_type(err, "logit_bias", "an object of token id -> bias", v);
    n = cJSON_GetArraySize(v);
    if (n == 0)
        return 0;
    e = malloc((size_t)n * sizeof *e);
    if (!e)
        return oai__no_memory(err);
    cJSON_ArrayForEach(it, v) {
        if (parse_id_key(it->string, &e[k].id)) {
            char got[96];
            oai__echo_str(it->string, got, sizeof got);
            rc = oai_fail(err, 400, OAI_INVALID, "logit_bias",
                          "logit_bias keys must be token ids (non-negative "
                          "integers), got %s", got);
            goto fail;
        }
        if (!cJSON_IsNumber(it)) {
            rc = oai_fail(err, 400, OAI_INVALID, "logit_bias",
                          "logit_bias values must be numbers, got %s",
                          oai__json_type(it));
            goto fail;
        }
        if (!(it->valuedouble >= -100 && it->valuedouble <= 100)) {
            char got[40];
            oai__fmt_double(it->valuedouble, got, sizeof got);
            rc = oai_fail(err, 400, OAI_INVALID, "logit_bias",
                          "logit_bias values must be in [-100, 100], got %s "
                          "for token %s", got, it->string);
            goto fail;
        }
        e[k].v = (float)it->valuedouble;
        e[k].ord = k;
        k++;
    }
    qsort(e, (size_t)n, sizeof *e, bias_cmp);
    r->bias_ids = malloc((size_t)n * sizeof *r->bias_ids);
    r->bias_values = malloc((size_t)n * sizeof *r->bias_values);
    if (!r->bias_ids || !r->bias_values) {
        rc = oai__no_memory(err);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        if (i + 1 < n && e[i + 1].id == e[i].id)
            continue; /* a later value for the same id follows */
        r->bias_ids[r->n_bias] = e[i].id;
        r->bias_values[r->n_bias] = e[i].v;
        r->n_bias++;
    }
fail:
    free(e);
    return rc;
}

/* ---- parsing: the body --------------------------------------------------- */

void oai__request_init(oai_request *r, oai_kind kind)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->add_generation_prompt = 1;
    r->max_tokens = -1;
    r->n = 1;
    r->temperature = 1.0f;
    r->top_p = 1.0f;
    r->top_k = -1;
    r->repetition_penalty = 1.0f;
    r->logprobs = -1;
    r->prompt_logprobs = -1;
    r->skip_special_tokens = 1;
    r->speculative = 1;
    r->parallel_tool_calls = 1;
}

int oai_parse(oai_kind kind, const char *body, size_t len, const oai_limits *lim,
              oai_request *out, oai_error *err)
{
    oai_limits dl = oai_limits_default();
    oai_request r;
    cJSON *root = NULL;
    int rc;

    oai__request_init(&r, kind);
    if (!lim)
        lim = &dl;
    if (!out)
        return oai_fail(err, 500, "server_error", "", "no request to fill");
    memset(out, 0, sizeof *out);
    if ((rc = oai__parse_body(body, len, &root, err)))
        goto fail;
    if ((rc = oai__want_str(oai__get(root, "model"), "model", &r.model, err)))
        goto fail;
    rc = kind == OAI_CHAT ? oai__parse_messages(root, &r, err)
                          : oai__parse_prompt(root, lim, &r, err);
    if (rc)
        goto fail;
    if (kind == OAI_COMPLETION && oai__get(root, "suffix")) {
        rc = oai_fail(err, 400, OAI_INVALID, "suffix",
                      "suffix is not currently supported");
        goto fail;
    }
    if ((rc = parse_simple(root, kind, &r, err)) ||
        (kind == OAI_CHAT && (rc = oai__parse_template_inputs(root, &r, err))) ||
        (rc = parse_stream_options(root, &r, err)) ||
        (rc = parse_counts(root, lim, &r, err)) ||
        (rc = parse_logprobs(root, kind, lim, &r, err)) ||
        (rc = parse_stop(root, lim, &r, err)) ||
        (rc = parse_stop_ids(root, &r, err)) ||
        (rc = parse_bias(root, &r, err)) ||
        (rc = oai__parse_grammar(root, &r, err)) ||
        (kind == OAI_CHAT && (rc = oai__parse_tools(root, lim, &r, err))) ||
        (rc = oai__want_str(oai__get(root, "user"), "user", &r.user, err)) ||
        (rc = oai__want_str(oai__get(root, "cache_salt"), "cache_salt", &r.cache_salt, err)))
        goto fail;
    if (r.cache_salt && !r.cache_salt[0]) {
        rc = oai_fail(err, 400, OAI_INVALID, "cache_salt",
                      "cache_salt must be a non-empty string, got \"\"");
        goto fail;
    }
    cJSON_Delete(root);
    *out = r;
    return 0;
fail:
    cJSON_Delete(root);
    oai_request_free(&r);
    return rc;
}

void oai_request_free(oai_request *r)
{
    if (!r)
        return;
    free(r->model);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    for (int i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    free(r->messages_json);
    free(r->tools_json);
    free(r->documents_json);
    free(r->chat_template_kwargs_json);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->stop_token_ids);
    free(r->bias_ids);
    free(r->bias_values);
    free(r->user);
    free(r->cache_salt);
    free(r->grammar);
    for (int i = 0; i < r->n_tools; i++) {
        free(r->tools[i].name);
        free(r->tools[i].parameters);
    }
    free(r->tools);
    free(r->tool_name);
    memset(r, 0, sizeof *r);
}
