/* cfgj_: the strict config-file getters (cfgjson.h). */
#include "cfgjson.h"

#include <limits.h>
#include <stdlib.h>

/* Config files are a few KB; anything huge is not one. */
#define CFGJ_MAX_BYTES ((long)16 << 20)


/* Reads and parses a JSON object file. */
int cfgj_read(const char *path, cJSON **out, inf_err *err)
{
    *out = NULL;
    char *buf;
    int rc = inf_read_file(path, CFGJ_MAX_BYTES, &buf, NULL, NULL, err);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    if (!root)
        return inf_fail(err, INF_ERR_FORMAT, "%s: not valid JSON", path);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return inf_fail(err, INF_ERR_FORMAT, "%s: not a JSON object", path);
    }
    *out = root;
    return INF_OK;
}

/* key's value, or NULL when absent or null (both mean "use the default"). */
const cJSON *cfgj_item(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(v) ? NULL : v;
}

int cfgj_is_int(const cJSON *v, int *out)
{
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!(d >= (double)INT_MIN && d <= (double)INT_MAX) || d != (double)(int)d)
        return 0;
    *out = (int)d;
    return 1;
}

/* An integer key; when absent *out keeps its default, or it is an error if
 * required. */
int cfgj_int(const cJSON *o, const char *key, int required, int *out,
                      const char *path, inf_err *err)
{
    const cJSON *v = cfgj_item(o, key);
    if (!v) {
        if (required)
            return inf_fail(err, INF_ERR_FORMAT, "%s: missing required key '%s'", path, key);
        return INF_OK;
    }
    if (!cfgj_is_int(v, out))
        return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be an integer", path, key);
    return INF_OK;
}

int cfgj_num(const cJSON *o, const char *key, double *out, const char *path, inf_err *err)
{
    const cJSON *v = cfgj_item(o, key);
    if (!v)
        return INF_OK;
    if (!cJSON_IsNumber(v))
        return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be a number", path, key);
    *out = v->valuedouble;
    return INF_OK;
}

int cfgj_bool(const cJSON *o, const char *key, int *out, const char *path, inf_err *err)
{
    const cJSON *v = cfgj_item(o, key);
    if (!v)
        return INF_OK;
    if (!cJSON_IsBool(v))
        return inf_fail(err, INF_ERR_FORMAT, "%s: '%s' must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return INF_OK;
}
