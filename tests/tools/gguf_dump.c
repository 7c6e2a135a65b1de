/* gguf_dump: what inferd's GGUF reader makes of a file, for the numpy checks
 * (tests/ref/check_gguf.py).
 *
 *   gguf_dump FILE            prints the version, counts and each tensor
 *   gguf_dump FILE OUTDIR     also writes each readable tensor, dequantized,
 *                             as OUTDIR/NAME.f32 (raw little-endian float32)
 *
 * Exit 0, or 1 with the reader's message on stderr. */
#include <stdio.h>
#include <stdlib.h>

#include "engine/gguf.h"

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: gguf_dump FILE [OUTDIR]\n");
        return 2;
    }
    gguf_file *g;
    inf_err err = {0};
    if (gguf_open(argv[1], &g, &err)) {
        fprintf(stderr, "gguf_dump: %s\n", err.msg);
        return 1;
    }
    printf("version %u, %d metadata keys, %d tensors\n", gguf_version(g), gguf_kv_count(g),
           gguf_tensor_count(g));
    int rc = 0;
    for (int i = 0; i < gguf_tensor_count(g) && !rc; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        int64_t n = 1;
        for (int d = 0; d < t->n_dims; d++)
            n *= t->ne[d];
        printf("%s %s %lld\n", t->name, t->type_name, (long long)n);
        if (argc < 3 || !t->known)
            continue;
        float *v = malloc(sizeof(float) * (size_t)n);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.f32", argv[2], t->name);
        FILE *f = v ? fopen(path, "wb") : NULL;
        if (f) {
            gguf_dequant(t->type, t->data, v, n);
            rc = fwrite(v, sizeof(float), (size_t)n, f) != (size_t)n;
            rc |= fclose(f) != 0;
        } else {
            rc = 1;
        }
        if (rc)
            fprintf(stderr, "gguf_dump: cannot write %s\n", path);
        free(v);
    }
    gguf_close(g);
    return rc;
}
