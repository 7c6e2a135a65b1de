/* A safetensors file (header and data) through st_open_file, from memory
 * through a memfd so nothing touches the disk. */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/st.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    int fd = memfd_create("fuzz-st", 0);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        st_set *s = NULL;
        inf_err err;
        if (st_open_file(path, &s, &err) == INF_OK) {
            for (int i = 0; i < st_count(s); i++)
                (void)st_get(s, i)->nbytes;
            st_destroy(s);
        }
    }
    close(fd);
    return 0;
}
