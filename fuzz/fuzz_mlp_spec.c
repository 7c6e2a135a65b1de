/* The MLP speculator's checkpoint (spec_mlp_create): config.json and
 * model.safetensors in a scratch directory, split from the input at its
 * first NUL byte (no NUL: config.json alone). A checkpoint that loads is
 * run once through every stage, whose tokens must lie in its vocabulary. */
#include <stdint.h>

#include "engine/spec_mlp.h"
#include "fuzz/fuzz_file.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    const unsigned char *nul = memchr(data, 0, size);
    size_t n_cfg = nul ? (size_t)(nul - data) : size;
    if (fuzz_write("config.json", data, n_cfg))
        return 0;
    if (nul) {
        if (fuzz_write("model.safetensors", nul + 1, size - n_cfg - 1))
            return 0;
    } else {
        fuzz_unlink("model.safetensors");
    }
    spec_mlp_config cfg = {.dir = fuzz_dir()};
    spec_proposer *p = NULL;
    inf_err err;
    if (spec_mlp_create(&cfg, &p, &err) != INF_OK)
        return 0;
    int n = spec_mlp_n_predict(p), vocab = spec_mlp_vocab(p);
    if (n < 1 || n > 32 || vocab < 1)
        abort();
    /* the hidden state has emb_dim floats; a checkpoint that loaded holds
     * proj.0 of [inner][emb_dim] at 2 bytes or more each */
    float *hidden = calloc(size / 2 + 1, sizeof *hidden);
    int32_t toks[32];
    if (hidden) {
        spec_mlp_run(p, hidden, vocab - 1, n, toks, NULL);
        for (int i = 0; i < n; i++)
            if (toks[i] < 0 || toks[i] >= vocab)
                abort();
    }
    free(hidden);
    p->ops->destroy(p);
    return 0;
}
