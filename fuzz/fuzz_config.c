/* A config.json through model_config_load (sizes and the model
 * description of every family: rope_scaling, layer_types, soft-caps, ...),
 * from memory through a memfd so nothing touches the disk. */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/model.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    int fd = memfd_create("fuzz-config", 0);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        static model_config c; /* large: off the fuzzer's stack */
        inf_err err;
        if (model_config_load(path, &c, &err) == INF_OK) {
            (void)mdesc_features(&c.desc);
            (void)mdesc_min_window(&c.desc);
            (void)model_context(&c);
        }
    }
    close(fd);
    return 0;
}
