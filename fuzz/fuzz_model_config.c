/* config.json through model_config_load, and (first byte odd)
 * generation_config.json beside a fixed valid config.json through
 * model_load, which reads both before it looks for weights (there are none
 * in the scratch directory: it must fail cleanly there). */
#include "engine/model.h"
#include "fuzz/fuzz_file.h"

static const char valid_config[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":64,"
    "\"intermediate_size\":128,\"num_attention_heads\":4,\"num_hidden_layers\":2,"
    "\"vocab_size\":512,\"hidden_act\":\"silu\"}";

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1)
        return 0;
    inf_err err;
    if (data[0] & 1) {
        if (fuzz_write("config.json", valid_config, sizeof valid_config - 1) ||
            fuzz_write("generation_config.json", data + 1, size - 1))
            return 0;
        model *m = NULL;
        if (model_load(fuzz_dir(), &m, &err) == INF_OK)
            abort(); /* no weights there: loading cannot succeed */
        return 0;
    }
    char path[64];
    int fd = fuzz_memfd(data + 1, size - 1, path, sizeof path);
    if (fd < 0)
        return 0;
    model_config cfg;
    if (model_config_load(path, &cfg, &err) == INF_OK)
        (void)model_context(&cfg);
    close(fd);
    return 0;
}
