/* Private to the JSON Schema converter (gram_json.c, gram_json_obj.c). */
#ifndef INFERD_GRAM_JSON_INT_H
#define INFERD_GRAM_JSON_INT_H

#include <cjson/cJSON.h>

#include "gram_src.h"

typedef struct gj_rule {
    char *name, *body; /* body NULL: reserved, set later (a $ref target) */
} gj_rule;

typedef struct gj_ref {
    char *ref;         /* the $ref string */
    const char *name;  /* its rule */
} gj_ref;

typedef struct gj {
    const cJSON *root; /* the whole document, for $ref */
    int strict;
    inf_err *err;
    int failed, oom;
    gj_rule *rules;
    int n_rules, cap_rules;
    gj_ref *refs;
    int n_refs, cap_refs;
    char prim_used_store[64];
    char *prim_used;   /* [primitives] 1 once a primitive rule is used */
    char path[512];    /* JSON pointer of the schema being converted */
    int depth;
} gj;

/* The rule for schema s (its stored name), NULL on failure (c->failed or
 * c->oom say which). hint seeds the rule's name. */
const char *gj__visit(gj *c, const cJSON *s, const char *hint);
const char *gj__object(gj *c, const cJSON *s, const char *hint);
const char *gj__array(gj *c, const cJSON *s, const char *hint);
const char *gj__number(gj *c, const cJSON *s, const char *hint, int integer);
const char *gj__ref(gj *c, const cJSON *ref, const char *hint);
const char *gj__all_of(gj *c, const cJSON *s, const cJSON *all, const char *hint);

/* The schema a local "#/..." JSON pointer names in root, or NULL. */
const cJSON *gj__resolve(const cJSON *root, const char *ref);
/* Whether no document can match two of oneOf's branches (gram_json_one.c),
 * so that its anyOf grammar is exact; else 0 with the first pair not proven
 * apart in *first < *second. */
int gj__one_of_disjoint(const gj *c, const cJSON *list, int *first, int *second);

const char *gj__prim(gj *c, const char *name);         /* marks it used */
const char *gj__rule(gj *c, const char *hint, const char *body);
void gj__set(gj *c, const char *name, const char *body);
/* Records a message naming c->path; fmt has one %s (arg may be NULL). */
int gj__fail(gj *c, const char *fmt, const char *arg);

#endif
