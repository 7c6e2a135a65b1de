/* oneOf, exactly: "exactly one branch matches" is not something a
 * context-free grammar can say in general (it needs the complement of the
 * branches' intersections), but when no document can match two branches at
 * once, "exactly one" and "at least one" are the same language, and the
 * anyOf grammar is exact. This proves that, pair by pair, with the
 * arguments JSON Schema's own semantics give (over the whole schema, not
 * the grammar generated from it, so every argument holds for anything the
 * grammar can produce):
 *
 *   - the branches' possible JSON types do not meet (integer and number do);
 *   - both are const/enum value sets with no value in common;
 *   - both can only match objects, and a property required by both has
 *     schemas that are disjoint themselves (a discriminator: "kind":
 *     {"const": "a"} against {"const": "b"}), or a property one requires is
 *     forbidden by the other (additionalProperties false without it among
 *     its properties: pydantic's and zod's strict unions).
 *
 * A pair none of these separates "may overlap": gram_json.c refuses it in
 * strict mode and reads it as anyOf otherwise (docs/structured-outputs.md). */
#include "gram_json_int.h"

#include <math.h>
#include <string.h>

enum {
    T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32, T_FRAC = 64,
    T_ALL = 127,
};

#define MAX_DEPTH 16 /* $ref chains and nesting looked through */

/* s, its $ref followed (the target's language contains s's). */
static const cJSON *deref(const gj *c, const cJSON *s)
{
    for (int i = 0; i < MAX_DEPTH && cJSON_IsObject(s); i++) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        if (!cJSON_IsString(ref))
            return s;
        const cJSON *t = gj__resolve(c->root, ref->valuestring);
        if (!t)
            return s;
        s = t;
    }
    return s;
}

static int value_type(const cJSON *v)
{
    if (cJSON_IsNull(v))
        return T_NULL;
    if (cJSON_IsBool(v))
        return T_BOOL;
    if (cJSON_IsObject(v))
        return T_OBJ;
    if (cJSON_IsArray(v))
        return T_ARR;
    if (cJSON_IsString(v))
        return T_STR;
    return v->valuedouble == floor(v->valuedouble) ? T_INT : T_FRAC;
}

static int type_name(const char *n)
{
    static const struct { const char *n; int t; } names[] = {
        {"null", T_NULL}, {"boolean", T_BOOL}, {"object", T_OBJ}, {"array", T_ARR},
        {"string", T_STR}, {"integer", T_INT}, {"number", T_INT | T_FRAC}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(n, names[i].n))
            return names[i].t;
    return T_ALL;
}

/* The JSON types a document matching s may have (a superset). */
static int types(const gj *c, const cJSON *s, int depth)
{
    if (cJSON_IsFalse(s))
        return 0;
    if (!cJSON_IsObject(s) || depth > MAX_DEPTH)
        return T_ALL;
    int m = T_ALL;
    const cJSON *k, *v;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref")) && cJSON_IsString(k)) {
        const cJSON *t = gj__resolve(c->root, k->valuestring);
        if (t)
            m &= types(c, t, depth + 1);
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        int tm = cJSON_IsString(k) ? type_name(k->valuestring) : 0;
        if (cJSON_IsArray(k))
            cJSON_ArrayForEach(v, k) tm |= cJSON_IsString(v) ? type_name(v->valuestring) : T_ALL;
        m &= tm;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "const")))
        m &= value_type(k);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum")) && cJSON_IsArray(k)) {
        int em = 0;
        cJSON_ArrayForEach(v, k) em |= value_type(v);
        m &= em;
    }
    static const char *const alts[] = {"anyOf", "oneOf"};
    for (int i = 0; i < 2; i++)
        if ((k = cJSON_GetObjectItemCaseSensitive(s, alts[i])) && cJSON_IsArray(k)) {
            int am = 0;
            cJSON_ArrayForEach(v, k) am |= types(c, v, depth + 1);
            m &= am;
        }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "allOf")) && cJSON_IsArray(k))
        cJSON_ArrayForEach(v, k) m &= types(c, v, depth + 1);
    return m;
}

/* s's const or enum: the values a match must equal (NULL: no such list);
 * *one says whether it is the single const value. */
static const cJSON *values(const cJSON *s, int *one)
{
    const cJSON *k = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "const") : NULL;
    *one = k != NULL;
    if (k)
        return k;
    k = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "enum") : NULL;
    return cJSON_IsArray(k) ? k : NULL;
}

static int values_meet(const cJSON *a, int a1, const cJSON *b, int b1)
{
    const cJSON *x, *y;
    if (a1 && b1)
        return cJSON_Compare(a, b, 1);
    if (a1)
        return values_meet(b, b1, a, a1);
    cJSON_ArrayForEach(x, a) {
        if (b1 && cJSON_Compare(x, b, 1))
            return 1;
        if (!b1)
            cJSON_ArrayForEach(y, b) if (cJSON_Compare(x, y, 1)) return 1;
    }
    return 0;
}

static int requires(const cJSON *s, const char *p)
{
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required"), *r;
    cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && !strcmp(r->valuestring, p)) return 1;
    return 0;
}

static const cJSON *property(const cJSON *s, const char *p)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    return cJSON_IsObject(props) ? cJSON_GetObjectItemCaseSensitive(props, p) : NULL;
}

/* Whether an object b matches cannot hold property p: b's
 * additionalProperties is false and p is not among its properties. */
static int forbids(const cJSON *b, const char *p)
{
    return cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(b, "additionalProperties")) &&
           !property(b, p);
}

static int disjoint(const gj *c, const cJSON *a, const cJSON *b, int depth);

/* a and b only match objects: a property tells them apart. */
static int objects_disjoint(const gj *c, const cJSON *a, const cJSON *b, int depth)
{
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(a, "required"), *r;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r))
            continue;
        const char *p = r->valuestring;
        if (forbids(b, p))
            return 1;
        const cJSON *pa = property(a, p), *pb = property(b, p);
        if (requires(b, p) && pa && pb && disjoint(c, pa, pb, depth + 1))
            return 1;
    }
    req = cJSON_GetObjectItemCaseSensitive(b, "required");
    cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && forbids(a, r->valuestring)) return 1;
    return 0;
}

static int disjoint(const gj *c, const cJSON *a, const cJSON *b, int depth)
{
    if (depth > MAX_DEPTH)
        return 0;
    a = deref(c, a);
    b = deref(c, b);
    int ta = types(c, a, 0), tb = types(c, b, 0);
    if (!(ta & tb))
        return 1;
    int a1, b1;
    const cJSON *va = values(a, &a1), *vb = values(b, &b1);
    if (va && vb && !values_meet(va, a1, vb, b1))
        return 1;
    return (ta & tb) == T_OBJ && cJSON_IsObject(a) && cJSON_IsObject(b) &&
           objects_disjoint(c, a, b, depth);
}

int gj__one_of_disjoint(const gj *c, const cJSON *list, int *first, int *second)
{
    int i = 0;
    const cJSON *x, *y;
    cJSON_ArrayForEach(x, list) {
        int j = 0;
        cJSON_ArrayForEach(y, list) {
            if (j > i && !disjoint(c, x, y, 0)) {
                *first = i;
                *second = j;
                return 0;
            }
            j++;
        }
        i++;
    }
    return 1;
}
