/* The YAML config file (--config) through cfg_load, into a table with an
 * option of every kind, as serve's own table is. */
#include "fuzz/fuzz_file.h"
#include "app/cfg.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    const char *model = NULL, *spec = NULL;
    int port = 0, flag = 0;
    float util = 0;
    arg_strs keys = {0};
    const arg_spec specs[] = {
        {"model", ARG_STR, &model, "DIR", ""},
        {"speculative-config", ARG_STR, &spec, "JSON", ""},
        {"port", ARG_INT, &port, "N", ""},
        {"gpu-memory-utilization", ARG_FLOAT, &util, "F", ""},
        {"enable-prefix-caching", ARG_FLAG, &flag, NULL, ""},
        {"no-enable-prefix-caching", ARG_FLAG_OFF, &flag, NULL, ""},
        {"api-key", ARG_STRS, &keys, "KEY", ""},
        {"config", ARG_STR, &model, "FILE", ""},
    };
    char path[64];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    cfg_file *c = NULL;
    inf_err err;
    if (cfg_load(path, specs, (int)(sizeof specs / sizeof *specs), &c, &err) == INF_OK) {
        /* the strings the options point at live until cfg_free */
        size_t n = (model ? strlen(model) : 0) + (spec ? strlen(spec) : 0);
        for (int i = 0; i < keys.n; i++)
            n += strlen(keys.v[i]);
        (void)n;
    }
    cfg_free(c);
    close(fd);
    return 0;
}
