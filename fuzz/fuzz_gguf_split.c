/* A GGUF model split in two files (engine/gguf_split.c): the input's first
 * u32 (little-endian) says how many of the bytes after it are the first
 * file, the rest is the second; both go into the scratch directory under
 * llama.cpp's names and the model loader opens the first. Whatever the two
 * say of their split keys, tensors and shapes, a load either succeeds with
 * every tensor findable or fails with a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/gguf_model.h"
#include "fuzz/fuzz_file.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 4)
        return 0;
    size_t n1 = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 |
                (size_t)data[3] << 24;
    if (n1 > size - 4)
        n1 = size - 4;
    if (fuzz_write("m-00001-of-00002.gguf", data + 4, n1) ||
        fuzz_write("m-00002-of-00002.gguf", data + 4 + n1, size - 4 - n1))
        return 0;
    char path[512];
    snprintf(path, sizeof path, "%s/m-00001-of-00002.gguf", fuzz_dir());
    gguf_file *g = NULL;
    inf_err err;
    if (gguf_open_model(path, &g, &err) == INF_OK) {
        for (int i = 0; i < gguf_tensor_count(g); i++) /* every name finds itself */
            if (gguf_find_tensor(g, gguf_tensor_at(g, i)->name) != gguf_tensor_at(g, i))
                abort();
        gguf_close(g);
    }
    model *m = NULL;
    if (gguf_model_load(path, NULL, &m, &err) == INF_OK)
        model_destroy(m);
    return 0;
}
