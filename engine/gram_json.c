/* JSON Schema -> GBNF (the subset gram_src.h lists). Each schema becomes a
 * rule; rule names come from where the schema sits (root-address-city) and
 * identical bodies share one rule. The primitive rules (space, string,
 * number, ...) have reserved names and are written only when used. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram_json_int.h"

/* The primitives: name, body, and the primitives the body names. */
static const struct prim {
    const char *name, *body, *deps[4];
} prims[] = {
    /* one line, at most one space between tokens (json.dumps' two styles):
     * free whitespace lets a weak model spend its tokens on indentation */
    {"space", "\" \"?", {0}},
    {"boolean", "(\"true\" | \"false\") space", {"space"}},
    {"null", "\"null\" space", {"space"}},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", {0}},
    {"decimal-part", "[0-9]{1,16}", {0}},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space",
     {"integral-part", "decimal-part", "space"}},
    {"integer", "(\"-\"? integral-part) space", {"integral-part", "space"}},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})", {0}},
    /* one code point per item: no \u escapes, whose surrogate pairs would
     * count twice against minLength/maxLength, and no characters past
     * U+FFFF, which JavaScript (zod) counts as two */
    {"char1", "[^\"\\\\\\x7F\\x00-\\x1F\\U00010000-\\U0010FFFF] | [\\\\] [\"\\\\/bfnrt]", {0}},
    {"string", "\"\\\"\" char* \"\\\"\" space", {"char", "space"}},
    {"value", "object | array | string | number | boolean | null",
     {"object", "array", "string", "number"}},
    {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space",
     {"string", "value", "space"}},
    {"array", "\"[\" space ( value (\",\" space value)* )? \"]\" space", {"value", "space"}},
    {"comma", "\",\" space", {"space"}},
    {"colon", "\":\" space", {"space"}},
    {"date", "[0-9]{4} \"-\" ( \"0\" [13578] \"-\" d31 | \"1\" [02] \"-\" d31 | \"0\" [469] \"-\" d30"
             " | \"11-\" d30 | \"02-\" d28 ) | leap-year \"-02-29\"", {"d31", "d30", "d28", "leap-year"}},
    {"d31", "\"0\" [1-9] | [12] [0-9] | \"3\" [01]", {0}},
    {"d30", "\"0\" [1-9] | [12] [0-9] | \"30\"", {0}},
    {"d28", "\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]", {0}},
    {"leap-year", "[0-9]{2} ( [02468] [48] | [2468] [0] | [13579] [26] ) | ( [02468] [048] | [13579] [26] ) \"00\"", {0}},
    {"time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )?"
             " ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )", {0}},
    {"date-time", "date \"T\" time", {"date", "time"}},
    {"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}", {0}},
    {"ipv4-octet", "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]", {0}},
    {"ipv4", "ipv4-octet \".\" ipv4-octet \".\" ipv4-octet \".\" ipv4-octet", {"ipv4-octet"}},
};
#define N_PRIMS ((int)(sizeof prims / sizeof prims[0]))

static int prim_index(const char *name)
{
    for (int i = 0; i < N_PRIMS; i++)
        if (!strcmp(prims[i].name, name))
            return i;
    return -1;
}

const char *gj__prim(gj *c, const char *name)
{
    int i = prim_index(name);
    if (i < 0 || c->prim_used[i])
        return i < 0 ? NULL : prims[i].name;
    c->prim_used[i] = 1;
    for (int k = 0; k < 4 && prims[i].deps[k]; k++)
        gj__prim(c, prims[i].deps[k]);
    if (!strcmp(name, "value")) { /* value's alternatives name these too */
        gj__prim(c, "boolean");
        gj__prim(c, "null");
    }
    return prims[i].name;
}

int gj__fail(gj *c, const char *fmt, const char *arg)
{
    if (c->failed)
        return INF_ERR_INVALID;
    c->failed = 1;
    char m[512];
    snprintf(m, sizeof m, fmt, arg ? arg : "");
    return inf_fail(c->err, INF_ERR_INVALID, "json_schema at %s%s: %s", c->path[0] == '#' ? "" : "#",
                    c->path, m);
}

static int taken(const gj *c, const char *name)
{
    if (prim_index(name) >= 0 || !strcmp(name, "root"))
        return 1;
    for (int i = 0; i < c->n_rules; i++)
        if (!strcmp(c->rules[i].name, name))
            return 1;
    return 0;
}

/* Registers a rule named after hint (made unique); body may be NULL (set
 * later by gj__set). Returns the stored name or NULL when out of memory. */
const char *gj__rule(gj *c, const char *hint, const char *body)
{
    if (body)
        for (int i = 0; i < c->n_rules; i++)
            if (c->rules[i].body && !strcmp(c->rules[i].body, body))
                return c->rules[i].name;
    char base[96], name[112];
    size_t k = 0;
    for (const char *h = hint; *h && k < sizeof base - 1; h++)
        base[k++] = (*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9') ? *h : '-';
    base[k] = 0;
    if (!k)
        strcpy(base, "r");
    snprintf(name, sizeof name, "%s", base);
    /* numbered from the rule count, not from 1: a schema that makes
     * thousands of rules from one hint (a long key's trie) would otherwise
     * try every taken number for each new rule */
    for (int n = c->n_rules + 1; taken(c, name); n++)
        snprintf(name, sizeof name, "%s-%d", base, n);
    if (c->n_rules == c->cap_rules) {
        int cap = c->cap_rules ? 2 * c->cap_rules : 32;
        gj_rule *r = realloc(c->rules, sizeof *r * (size_t)cap);
        if (!r)
            return NULL;
        c->rules = r;
        c->cap_rules = cap;
    }
    gj_rule *r = &c->rules[c->n_rules];
    r->name = strdup(name);
    r->body = body ? strdup(body) : NULL;
    if (!r->name || (body && !r->body)) {
        free(r->name);
        free(r->body);
        return NULL;
    }
    c->n_rules++;
    return r->name;
}

void gj__set(gj *c, const char *name, const char *body)
{
    for (int i = 0; i < c->n_rules; i++)
        if (c->rules[i].name == name) {
            free(c->rules[i].body);
            c->rules[i].body = strdup(body);
            if (!c->rules[i].body)
                c->oom = 1;
        }
}

/* The JSON value v as GBNF: scalars as their compact text, arrays and
 * objects structurally so any whitespace the other rules allow is allowed
 * between their tokens. */
static void value_lit(gj *c, inf_buf *b, const cJSON *v)
{
    const char *sp = gj__prim(c, "space");
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        int obj = cJSON_IsObject(v), i = 0;
        inf_buf_printf(b, "\"%c\" %s", obj ? '{' : '[', sp);
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (i++)
                inf_buf_printf(b, " %s", gj__prim(c, "comma"));
            if (obj) {
                cJSON *k = cJSON_CreateString(e->string);
                char *j = k ? cJSON_PrintUnformatted(k) : NULL;
                cJSON_Delete(k);
                if (!j) {
                    c->oom = 1;
                    return;
                }
                inf_buf_put(b, " ", 1);
                gram_src__lit(b, j, strlen(j));
                inf_buf_printf(b, " %s", gj__prim(c, "colon"));
                free(j);
            }
            inf_buf_put(b, " ", 1);
            value_lit(c, b, e);
        }
        inf_buf_printf(b, " \"%c\" %s", obj ? '}' : ']', sp);
        return;
    }
    char *j = cJSON_PrintUnformatted(v);
    if (!j) {
        c->oom = 1;
        return;
    }
    gram_src__lit(b, j, strlen(j));
    inf_buf_printf(b, " %s", sp);
    free(j);
}

static const char *literal(gj *c, const cJSON *v, const char *hint)
{
    inf_buf b = {0};
    value_lit(c, &b, v);
    const char *r = b.oom || c->oom ? NULL : gj__rule(c, hint, b.p);
    free(b.p);
    return r;
}

static const char *alternatives(gj *c, const cJSON *list, const char *hint, const char *kw)
{
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list)) {
        gj__fail(c, "'%s' must be a non-empty array", kw);
        return NULL;
    }
    inf_buf b = {0};
    int i = 0;
    const cJSON *s;
    size_t plen = strlen(c->path);
    cJSON_ArrayForEach(s, list) {
        char h[128];
        snprintf(h, sizeof h, "%s-%d", hint, i);
        snprintf(c->path + plen, sizeof c->path - plen, "/%s/%d", kw, i);
        const char *r = gj__visit(c, s, h);
        c->path[plen] = 0;
        if (!r) {
            free(b.p);
            return NULL;
        }
        inf_buf_printf(&b, "%s%s", i++ ? " | " : "", r);
    }
    const char *r = b.oom ? NULL : gj__rule(c, hint, b.p);
    free(b.p);
    return r;
}

/* oneOf is generated as its anyOf, which is exact when no document can
 * match two branches; strict mode refuses a oneOf where that is not proven
 * (elsewhere it is read as anyOf, as vLLM's engines do). With anyOf beside
 * it the oneOf would be ignored: refused in strict mode too. */
static int one_of_exact(gj *c, const cJSON *any, const cJSON *one)
{
    if (!one || !c->strict || !cJSON_IsArray(one))
        return 1;
    if (any) {
        gj__fail(c, "'anyOf' and 'oneOf' together are not supported%s", NULL);
        return 0;
    }
    int a, b;
    if (gj__one_of_disjoint(c, one, &a, &b))
        return 1;
    char msg[400];
    snprintf(msg, sizeof msg,
             "'oneOf' branches %d and %d may both match one document: inferd enforces oneOf only "
             "where no document can match two branches (different types, different const/enum "
             "values, or a required property with different values or forbidden by the other's "
             "additionalProperties false)",
             a, b);
    gj__fail(c, "%s", msg);
    return 0;
}

static const char *enum_rule(gj *c, const cJSON *list, const char *hint)
{
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list)) {
        gj__fail(c, "'enum' must be a non-empty array%s", NULL);
        return NULL;
    }
    inf_buf b = {0};
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, list) {
        if (i++)
            inf_buf_put(&b, " | ", 3);
        value_lit(c, &b, v);
    }
    const char *r = b.oom || c->oom ? NULL : gj__rule(c, hint, b.p);
    free(b.p);
    return r;
}

/* The string forms: format, pattern, length bounds. */
static const char *string_rule(gj *c, const cJSON *s, const char *hint)
{
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minLength");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    const char *sp = gj__prim(c, "space");
    inf_buf b = {0};
    const char *r = NULL;
    if (pat) {
        if (!cJSON_IsString(pat)) {
            gj__fail(c, "'pattern' must be a string%s", NULL);
            return NULL;
        }
        if (mn || mx || (cJSON_IsString(fmt) && c->strict)) {
            gj__fail(c, "'pattern' together with %s is not supported", mn || mx ? "minLength/maxLength" : "format");
            return NULL;
        }
        const char *pn = gj__rule(c, hint, NULL);
        if (!pn)
            return NULL;
        inf_buf rb = {0};
        inf_err e = {0};
        int rc = gram_src__regex_rules(&rb, pn, pat->valuestring, strlen(pat->valuestring), 1, &e);
        if (rc || rb.oom) {
            free(rb.p);
            size_t plen = strlen(c->path);
            snprintf(c->path + plen, sizeof c->path - plen, "/pattern");
            if (rc)
                gj__fail(c, "%s", e.msg);
            else
                c->oom = 1;
            return NULL;
        }
        /* the rule's body: after "name ::= ", without the final newline */
        rb.p[rb.len - 1] = 0;
        gj__set(c, pn, rb.p + strlen(pn) + 5);
        free(rb.p);
        inf_buf_printf(&b, "\"\\\"\" %s \"\\\"\" %s", pn, sp);
    } else if (cJSON_IsString(fmt) && prim_index(fmt->valuestring) >= 0 &&
               (!strcmp(fmt->valuestring, "date") || !strcmp(fmt->valuestring, "time") ||
                !strcmp(fmt->valuestring, "date-time") || !strcmp(fmt->valuestring, "uuid") ||
                !strcmp(fmt->valuestring, "ipv4"))) {
        if (mn || mx) {
            gj__fail(c, "'format' together with minLength/maxLength is not supported%s", NULL);
            return NULL;
        }
        inf_buf_printf(&b, "\"\\\"\" %s \"\\\"\" %s", gj__prim(c, fmt->valuestring), sp);
    } else {
        if (fmt && c->strict) {
            gj__fail(c, "format '%s' is not supported", cJSON_IsString(fmt) ? fmt->valuestring : "?");
            return NULL;
        }
        if (!mn && !mx)
            return gj__prim(c, "string");
        double lo = mn ? mn->valuedouble : 0, hi = mx ? mx->valuedouble : -1;
        if ((mn && (!cJSON_IsNumber(mn) || lo < 0 || lo != floor(lo) || lo > 100000)) ||
            (mx && (!cJSON_IsNumber(mx) || hi < 0 || hi != floor(hi) || hi > 100000))) {
            gj__fail(c, "minLength/maxLength must be whole numbers from 0 to 100000%s", NULL);
            return NULL;
        }
        if (mx && hi < lo) {
            gj__fail(c, "maxLength is below minLength%s", NULL);
            return NULL;
        }
        const char *ch = gj__prim(c, "char1");
        if (mx)
            inf_buf_printf(&b, "\"\\\"\" %s{%.0f,%.0f} \"\\\"\" %s", ch, lo, hi, sp);
        else
            inf_buf_printf(&b, "\"\\\"\" %s{%.0f,} \"\\\"\" %s", ch, lo, sp);
    }
    r = b.oom ? NULL : gj__rule(c, hint, b.p);
    free(b.p);
    return r;
}

/* The keywords strict mode allows (all others are refused there). */
static const char *const known[] = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "enum",
    "const", "format", "pattern", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "title", "description", "default", "examples",
    "$schema", "$id", "$comment", NULL};

static int check_keywords(gj *c, const cJSON *s)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(k->string, known[i]);
        if (!ok)
            return gj__fail(c, "unsupported keyword '%s'", k->string);
    }
    return 0;
}

static const char *typed(gj *c, const cJSON *s, const char *type, const char *hint)
{
    if (!strcmp(type, "object"))
        return gj__object(c, s, hint);
    if (!strcmp(type, "array"))
        return gj__array(c, s, hint);
    if (!strcmp(type, "string"))
        return string_rule(c, s, hint);
    if (!strcmp(type, "integer") || !strcmp(type, "number"))
        return gj__number(c, s, hint, type[0] == 'i');
    if (!strcmp(type, "boolean") || !strcmp(type, "null"))
        return gj__prim(c, type);
    gj__fail(c, "unknown type '%s'", type);
    return NULL;
}

const char *gj__visit(gj *c, const cJSON *s, const char *hint)
{
    if (cJSON_IsTrue(s))
        return gj__prim(c, "value");
    if (!cJSON_IsObject(s)) {
        gj__fail(c, cJSON_IsFalse(s) ? "the schema false matches nothing%s" : "a schema must be an object%s", NULL);
        return NULL;
    }
    if (++c->depth > 64) {
        gj__fail(c, "schema nested too deep%s", NULL);
        return NULL;
    }
    const char *r = NULL;
    if (c->strict && check_keywords(c, s))
        goto out;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (ref)
        r = gj__ref(c, ref, hint);
    else if (any || one)
        r = one_of_exact(c, any, one) ? alternatives(c, any ? any : one, hint, any ? "anyOf" : "oneOf")
                                      : NULL;
    else if (all)
        r = gj__all_of(c, s, all, hint);
    else if (cst)
        r = literal(c, cst, hint);
    else if (en)
        r = enum_rule(c, en, hint);
    else if (cJSON_IsArray(ty)) {
        inf_buf b = {0};
        int i = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, ty) {
            if (!cJSON_IsString(t)) {
                gj__fail(c, "'type' entries must be strings%s", NULL);
                break;
            }
            char h[128];
            snprintf(h, sizeof h, "%s-%s", hint, t->valuestring);
            const char *x = typed(c, s, t->valuestring, h);
            if (!x)
                break;
            inf_buf_printf(&b, "%s%s", i++ ? " | " : "", x);
        }
        if (!c->failed && !i)
            gj__fail(c, "'type' is an empty list%s", NULL);
        if (!c->failed && !c->oom && !b.oom)
            r = gj__rule(c, hint, b.p);
        free(b.p);
    } else if (cJSON_IsString(ty)) {
        r = typed(c, s, ty->valuestring, hint);
    } else if (ty) {
        gj__fail(c, "'type' must be a string or a list%s", NULL);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "properties") ||
               cJSON_GetObjectItemCaseSensitive(s, "additionalProperties")) {
        r = gj__object(c, s, hint);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "items") ||
               cJSON_GetObjectItemCaseSensitive(s, "prefixItems")) {
        r = gj__array(c, s, hint);
    } else {
        r = gj__prim(c, "value");
    }
    if (!r && !c->failed)
        c->oom = 1;
out:
    c->depth--;
    return c->failed || c->oom ? NULL : r;
}

static int finish(gj *c, const char *root, char **gbnf)
{
    inf_buf b = {0};
    inf_buf_printf(&b, "root ::= %s\n", root);
    for (int i = 0; i < c->n_rules; i++)
        inf_buf_printf(&b, "%s ::= %s\n", c->rules[i].name, c->rules[i].body ? c->rules[i].body : "\"\"");
    for (int i = 0; i < N_PRIMS; i++)
        if (c->prim_used[i])
            inf_buf_printf(&b, "%s ::= %s\n", prims[i].name, prims[i].body);
    if (b.oom) {
        free(b.p);
        return inf_fail(c->err, INF_ERR_NOMEM, "json_schema: out of memory");
    }
    *gbnf = b.p;
    return INF_OK;
}

static void gj_free(gj *c)
{
    for (int i = 0; i < c->n_rules; i++) {
        free(c->rules[i].name);
        free(c->rules[i].body);
    }
    free(c->rules);
    for (int i = 0; i < c->n_refs; i++)
        free(c->refs[i].ref);
    free(c->refs);
}

int gram_src_json_schema(const char *schema, size_t len, int strict, char **gbnf, inf_err *err)
{
    *gbnf = NULL;
    if (!gram_src__utf8_ok(schema, len))
        return inf_fail(err, INF_ERR_INVALID, "json_schema: not valid UTF-8");
    cJSON *doc = cJSON_ParseWithLength(schema, len);
    if (!doc)
        return inf_fail(err, INF_ERR_INVALID, "json_schema: not valid JSON");
    gj c = {.root = doc, .strict = strict, .err = err};
    c.prim_used = c.prim_used_store;
    const char *r = gj__visit(&c, doc, "root");
    int rc;
    if (r)
        rc = finish(&c, r, gbnf);
    else if (c.failed)
        rc = INF_ERR_INVALID;
    else
        rc = inf_fail(err, INF_ERR_NOMEM, "json_schema: out of memory");
    gj_free(&c);
    cJSON_Delete(doc);
    return rc;
}

int gram_src_json_object(char **gbnf, inf_err *err)
{
    *gbnf = NULL;
    gj c = {.err = err};
    c.prim_used = c.prim_used_store;
    int rc = finish(&c, gj__prim(&c, "object"), gbnf);
    gj_free(&c);
    return rc;
}
