/* JSON Schemas and regexes through the converters: the first byte picks
 * schema (strict or not) or regex. Whatever a converter accepts must be
 * GBNF that gram_parse accepts (or refuses only as too large). */
#include <stdlib.h>
#include <string.h>

#include "engine/gram.h"
#include "engine/gram_src.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    char *gbnf = NULL;
    inf_err e;
    int rc;
    if (data[0] % 3 == 2)
        rc = gram_src_regex((const char *)data + 1, size - 1, &gbnf, &e);
    else
        rc = gram_src_json_schema((const char *)data + 1, size - 1, data[0] % 3, &gbnf, &e);
    if (rc != INF_OK)
        return 0;
    gram *g = NULL;
    if (gram_parse(gbnf, strlen(gbnf), &g, &e) != INF_OK && !strstr(e.msg, "too large") &&
        !strstr(e.msg, "left-recursive"))
        abort();
    gram_destroy(g);
    free(gbnf);
    return 0;
}
