/* oai_: the fields that constrain the output to a grammar, compiled to GBNF
 * here (on the HTTP thread) so whatever cannot be compiled is a 400 naming
 * the part, and the engine only gets checked grammar text:
 *   response_format       {"type": "text" | "json_object" | "json_schema",
 *                          "json_schema": {"name", "schema", "strict"}}
 *   structured_outputs    vLLM's: {"json" | "regex" | "choice" | "grammar" |
 *                          "json_object"}
 *   guided_json, guided_regex, guided_choice, guided_grammar  (vLLM's older)
 * At most one of them may constrain a request. */
#include "server/oai_int.h"

#include <stdlib.h>
#include <string.h>

#include "engine/gram.h"
#include "engine/gram_src.h"

/* src -> r->grammar, checked by gram_parse; param names the field. */
static int finish(oai_request *r, char *gbnf, int rc, const inf_err *e, const char *param,
                  oai_error *err)
{
    if (rc) {
        free(gbnf);
        return rc == INF_ERR_NOMEM ? oai__no_memory(err)
                                   : oai_fail(err, 400, OAI_INVALID, param, "%s: %s", param, e->msg);
    }
    gram *g = NULL;
    inf_err pe = {0};
    if ((rc = gram_parse(gbnf, strlen(gbnf), &g, &pe))) {
        free(gbnf);
        return rc == INF_ERR_NOMEM ? oai__no_memory(err)
                                   : oai_fail(err, 400, OAI_INVALID, param, "%s: %s", param, pe.msg);
    }
    gram_destroy(g);
    r->grammar = gbnf;
    return 0;
}

static int from_schema(oai_request *r, const cJSON *schema, int strict, const char *param,
                       oai_error *err)
{
    char *text = NULL;
    if (cJSON_IsString(schema)) { /* guided_json may be a JSON string */
        text = strdup(schema->valuestring);
    } else if (cJSON_IsObject(schema) || cJSON_IsBool(schema)) {
        text = cJSON_PrintUnformatted(schema);
    } else {
        return oai__bad_type(err, param, "a JSON schema (an object)", schema);
    }
    if (!text)
        return oai__no_memory(err);
    char *gbnf = NULL;
    inf_err e = {0};
    int rc = gram_src_json_schema(text, strlen(text), strict, &gbnf, &e);
    free(text);
    return finish(r, gbnf, rc, &e, param, err);
}

int oai__grammar_from_schema(oai_request *r, const char *schema, const char *param,
                             oai_error *err)
{
    char *gbnf = NULL;
    inf_err e = {0};
    int rc = gram_src_json_schema(schema, strlen(schema), 0, &gbnf, &e);
    return finish(r, gbnf, rc, &e, param, err);
}

static int from_regex(oai_request *r, const cJSON *v, const char *param, oai_error *err)
{
    if (!cJSON_IsString(v))
        return oai__bad_type(err, param, "a string", v);
    char *gbnf = NULL;
    inf_err e = {0};
    int rc = gram_src_regex(v->valuestring, strlen(v->valuestring), &gbnf, &e);
    return finish(r, gbnf, rc, &e, param, err);
}

static int from_choice(oai_request *r, const cJSON *v, const char *param, oai_error *err)
{
    int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || n < 1)
        return oai__bad_type(err, param, "a non-empty list of strings", v);
    const char **c = calloc((size_t)n, sizeof *c);
    if (!c)
        return oai__no_memory(err);
    for (int i = 0; i < n; i++) {
        const cJSON *s = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(s)) {
            free(c);
            return oai__bad_type(err, param, "a non-empty list of strings", v);
        }
        c[i] = s->valuestring;
    }
    char *gbnf = NULL;
    inf_err e = {0};
    int rc = gram_src_choice(c, n, &gbnf, &e);
    free(c);
    return finish(r, gbnf, rc, &e, param, err);
}

static int from_gbnf(oai_request *r, const cJSON *v, const char *param, oai_error *err)
{
    if (!cJSON_IsString(v))
        return oai__bad_type(err, param, "a string (GBNF)", v);
    char *gbnf = strdup(v->valuestring);
    if (!gbnf)
        return oai__no_memory(err);
    return finish(r, gbnf, 0, NULL, param, err);
}

static int from_json_object(oai_request *r, const char *param, oai_error *err)
{
    char *gbnf = NULL;
    inf_err e = {0};
    int rc = gram_src_json_object(&gbnf, &e);
    return finish(r, gbnf, rc, &e, param, err);
}

static int response_format(oai_request *r, const cJSON *rf, oai_error *err)
{
    if (!cJSON_IsObject(rf))
        return oai__bad_type(err, "response_format", "an object", rf);
    const cJSON *type = oai__get(rf, "type");
    if (!cJSON_IsString(type))
        return oai__bad_type(err, "response_format.type", "a string", type);
    if (!strcmp(type->valuestring, "text"))
        return 0;
    if (!strcmp(type->valuestring, "json_object"))
        return from_json_object(r, "response_format", err);
    if (strcmp(type->valuestring, "json_schema")) {
        char got[64];
        oai__echo_str(type->valuestring, got, sizeof got);
        return oai_fail(err, 400, OAI_INVALID, "response_format.type",
                        "response_format.type must be \"text\", \"json_object\" or \"json_schema\", got %s",
                        got);
    }
    const cJSON *js = oai__get(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return oai__bad_type(err, "response_format.json_schema", "an object", js);
    const cJSON *schema = oai__get(js, "schema");
    int strict = 0;
    int rc = oai__want_bool(oai__get(js, "strict"), "response_format.json_schema.strict", &strict, err);
    if (rc)
        return rc;
    if (!schema) /* OpenAI: a schema-less json_schema means any JSON object */
        return from_json_object(r, "response_format.json_schema", err);
    return from_schema(r, schema, strict, "response_format.json_schema.schema", err);
}

int oai__parse_grammar(const cJSON *root, oai_request *r, oai_error *err)
{
    static const char *const keys[] = {"response_format", "structured_outputs", "guided_json",
                                       "guided_regex", "guided_choice", "guided_grammar"};
    const cJSON *v[6];
    int given = 0, which = -1;
    for (int i = 0; i < 6; i++) {
        v[i] = oai__get(root, keys[i]);
        /* response_format text constrains nothing */
        const cJSON *t = i == 0 ? oai__get(v[0], "type") : NULL;
        if (v[i] && !(i == 0 && cJSON_IsString(t) && !strcmp(t->valuestring, "text"))) {
            given++;
            which = which < 0 ? i : which;
        }
    }
    if (given > 1)
        return oai_fail(err, 400, OAI_INVALID, keys[which],
                        "only one of response_format, structured_outputs and guided_* may be given");
    switch (which) {
    case 0:
        return response_format(r, v[0], err);
    case 1: {
        const cJSON *so = v[1], *x;
        if (!cJSON_IsObject(so))
            return oai__bad_type(err, "structured_outputs", "an object", so);
        int n = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, so) n += !cJSON_IsNull(it) && strcmp(it->string, "disable_any_whitespace") &&
                                         strcmp(it->string, "disable_additional_properties") &&
                                         strcmp(it->string, "whitespace_pattern");
        if (n != 1)
            return oai_fail(err, 400, OAI_INVALID, "structured_outputs",
                            "structured_outputs must give exactly one of json, regex, choice, grammar, json_object");
        if ((x = oai__get(so, "json")))
            return from_schema(r, x, 0, "structured_outputs.json", err);
        if ((x = oai__get(so, "regex")))
            return from_regex(r, x, "structured_outputs.regex", err);
        if ((x = oai__get(so, "choice")))
            return from_choice(r, x, "structured_outputs.choice", err);
        if ((x = oai__get(so, "grammar")))
            return from_gbnf(r, x, "structured_outputs.grammar", err);
        if ((x = oai__get(so, "json_object"))) {
            int on = 0, rc = oai__want_bool(x, "structured_outputs.json_object", &on, err);
            return rc ? rc : on ? from_json_object(r, "structured_outputs.json_object", err) : 0;
        }
        return oai_fail(err, 400, OAI_INVALID, "structured_outputs",
                        "structured_outputs must give exactly one of json, regex, choice, grammar, json_object");
    }
    case 2:
        return from_schema(r, v[2], 0, "guided_json", err);
    case 3:
        return from_regex(r, v[3], "guided_regex", err);
    case 4:
        return from_choice(r, v[4], "guided_choice", err);
    case 5:
        return from_gbnf(r, v[5], "guided_grammar", err);
    }
    return 0;
}
