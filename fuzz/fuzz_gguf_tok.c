/* A GGUF file's tokenizer metadata (tok_gguf.c) from a memfd: the
 * tokenizer built from it encodes and decodes a fixed text, and the
 * tokenizer_config equivalent (special tokens, chat templates) is built. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/tok_gguf.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    int fd = memfd_create("fuzz-gguf-tok", 0);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        inf_err err;
        tok *t = NULL;
        if (tok_gguf_create(path, &t, &err) == INF_OK) {
            static const char text[] = "Hello  world 123 <s>\n\xe6\x97\xa5\xf0\x9f\x98\x80 \xff";
            int32_t *ids = NULL;
            int n = 0;
            if (tok_encode(t, text, sizeof text - 1, 1, &ids, &n, &err) == INF_OK) {
                char *s = NULL;
                if (tok_decode(t, ids, n, &s, NULL, &err) == INF_OK)
                    free(s);
                free(ids);
            }
            tok_destroy(t);
        }
        cJSON *c = NULL;
        if (tok_gguf_config(path, &c, &err) == INF_OK)
            cJSON_Delete(c);
    }
    close(fd);
    return 0;
}
