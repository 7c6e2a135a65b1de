/* generation_config.json, beside a fixed valid config.json, through
 * model_load, which reads both before it looks for weights (config.json
 * alone is fuzz_config's). There are no weights in the scratch directory:
 * loading must fail cleanly there, whatever the file holds. */
#include "engine/model.h"
#include "fuzz/fuzz_file.h"

static const char valid_config[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":64,"
    "\"intermediate_size\":128,\"num_attention_heads\":4,\"num_hidden_layers\":2,"
    "\"vocab_size\":512,\"hidden_act\":\"silu\"}";

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static int have_config;
    if (!have_config) {
        if (fuzz_write("config.json", valid_config, sizeof valid_config - 1))
            abort();
        have_config = 1;
    }
    if (fuzz_write("generation_config.json", data, size))
        return 0;
    model *m = NULL;
    inf_err err;
    if (model_load(fuzz_dir(), &m, &err) == INF_OK)
        abort(); /* no weights there: loading cannot succeed */
    return 0;
}
