/* oai_: chat's tools and tool_choice. Required and named choices are
 * enforced by grammar, as vLLM does, in a form that needs no model-specific
 * parser: a named choice makes the output the function's arguments (its
 * parameters schema), "required" a JSON list of {"name", "parameters"}
 * objects, one of the tools each. "auto" leaves the model free and needs a
 * --tool-call-parser to find calls in its text. */
#include "server/oai_int.h"

#include <stdlib.h>
#include <string.h>

#include "engine/common.h"

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return 0;
    return 1;
}

static int parse_list(const cJSON *tools, oai_request *r, oai_error *err)
{
    if (!cJSON_IsArray(tools))
        return oai__bad_type(err, "tools", "a list", tools);
    int n = cJSON_GetArraySize(tools);
    if (!n)
        return 0;
    if (!(r->tools = calloc((size_t)n, sizeof *r->tools)))
        return oai__no_memory(err);
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *type = oai__get(t, "type"), *fn = oai__get(t, "function");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsObject(fn))
            return oai_fail(err, 400, OAI_INVALID, "tools",
                            "tools[%d] must be {\"type\": \"function\", \"function\": {...}}", r->n_tools);
        const cJSON *name = oai__get(fn, "name"), *params = oai__get(fn, "parameters");
        if (!cJSON_IsString(name) || !valid_name(name->valuestring))
            return oai_fail(err, 400, OAI_INVALID, "tools",
                            "tools[%d].function.name must be 1 to 64 letters, digits, '_' or '-'",
                            r->n_tools);
        if (params && !cJSON_IsObject(params))
            return oai_fail(err, 400, OAI_INVALID, "tools",
                            "tools[%d].function.parameters must be a JSON Schema object", r->n_tools);
        oai_tool *o = &r->tools[r->n_tools++];
        o->name = strdup(name->valuestring);
        o->parameters = params ? cJSON_PrintUnformatted(params) : strdup("{\"type\":\"object\"}");
        if (!o->name || !o->parameters)
            return oai__no_memory(err);
        for (int i = 0; i + 1 < r->n_tools; i++)
            if (!strcmp(r->tools[i].name, o->name))
                return oai_fail(err, 400, OAI_INVALID, "tools", "tools[%d]: function '%s' is given twice",
                                r->n_tools - 1, o->name);
    }
    return 0;
}

static int parse_choice(const cJSON *tc, oai_request *r, oai_error *err)
{
    if (cJSON_IsString(tc)) {
        const char *s = tc->valuestring;
        r->tool_choice = !strcmp(s, "none") ? OAI_TOOL_NONE : !strcmp(s, "auto") ? OAI_TOOL_AUTO
                       : !strcmp(s, "required") ? OAI_TOOL_REQUIRED : -1;
        if (r->tool_choice < 0) {
            char got[64];
            oai__echo_str(s, got, sizeof got);
            return oai_fail(err, 400, OAI_INVALID, "tool_choice",
                            "tool_choice must be \"none\", \"auto\", \"required\" or a named function, got %s", got);
        }
        return 0;
    }
    const cJSON *fn = oai__get(tc, "function"), *name = oai__get(fn, "name");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(name))
        return oai_fail(err, 400, OAI_INVALID, "tool_choice",
                        "tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    for (int i = 0; i < r->n_tools; i++)
        if (!strcmp(r->tools[i].name, name->valuestring)) {
            r->tool_choice = OAI_TOOL_NAMED;
            return (r->tool_name = strdup(name->valuestring)) ? 0 : oai__no_memory(err);
        }
    char got[64];
    oai__echo_str(name->valuestring, got, sizeof got);
    return oai_fail(err, 400, OAI_INVALID, "tool_choice", "tool_choice names %s, which is not in tools", got);
}

/* The schema "required" constrains the output to. */
static char *required_schema(const oai_request *r)
{
    inf_buf b = {0};
    inf_buf_printf(&b, "{\"type\":\"array\",\"minItems\":1,%s\"items\":{\"anyOf\":[",
                   r->parallel_tool_calls ? "" : "\"maxItems\":1,");
    for (int i = 0; i < r->n_tools; i++) {
        cJSON *name = cJSON_CreateString(r->tools[i].name);
        char *nj = name ? cJSON_PrintUnformatted(name) : NULL;
        inf_buf_printf(&b, "%s{\"type\":\"object\",\"properties\":{\"name\":{\"const\":%s},\"parameters\":%s},"
                           "\"required\":[\"name\",\"parameters\"],\"additionalProperties\":false}",
                       i ? "," : "", nj ? nj : "\"\"", r->tools[i].parameters);
        free(nj);
        cJSON_Delete(name);
    }
    inf_buf_put(&b, "]}}", 3);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int oai__parse_tools(const cJSON *root, const oai_limits *lim, oai_request *r, oai_error *err)
{
    const cJSON *tools = oai__get(root, "tools"), *tc = oai__get(root, "tool_choice");
    int rc;
    if ((rc = oai__want_bool(oai__get(root, "parallel_tool_calls"), "parallel_tool_calls",
                             &r->parallel_tool_calls, err)))
        return rc;
    if (tools && (rc = parse_list(tools, r, err)))
        return rc;
    r->tool_choice = r->n_tools ? OAI_TOOL_AUTO : OAI_TOOL_NONE;
    if (tc && (rc = parse_choice(tc, r, err)))
        return rc;
    if (r->tool_choice != OAI_TOOL_NONE && !r->n_tools)
        return oai_fail(err, 400, OAI_INVALID, "tool_choice", "tool_choice needs tools");
    if (r->tool_choice == OAI_TOOL_AUTO && !lim->auto_tools && !tc)
        r->tool_choice = OAI_TOOL_NONE; /* tools only for the template to render */
    if (r->tool_choice == OAI_TOOL_AUTO && !lim->auto_tools)
        return oai_fail(err, 400, OAI_INVALID, "tool_choice",
                        "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
    if (r->tool_choice == OAI_TOOL_AUTO && r->grammar)
        return 0; /* the format wins; calls may still be found in the text */
    if (r->tool_choice == OAI_TOOL_REQUIRED || r->tool_choice == OAI_TOOL_NAMED) {
        if (r->grammar)
            return oai_fail(err, 400, OAI_INVALID, "tool_choice",
                            "tool_choice \"required\" or a named function cannot be combined with "
                            "response_format, structured_outputs or guided_*");
        if (r->tool_choice == OAI_TOOL_NAMED) {
            for (int i = 0; i < r->n_tools; i++)
                if (!strcmp(r->tools[i].name, r->tool_name))
                    return oai__grammar_from_schema(r, r->tools[i].parameters, "tools", err);
        }
        char *s = required_schema(r);
        if (!s)
            return oai__no_memory(err);
        rc = oai__grammar_from_schema(r, s, "tools", err);
        free(s);
        return rc;
    }
    return 0;
}
