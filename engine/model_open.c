/* model_load: the one entry point that picks the loader by what the path
 * is (a GGUF file, or a Hugging Face directory), so model.c and
 * gguf_model.c do not know each other's formats. */
#include "gguf_model.h"
#include "model.h"

int model_load(const char *dir, model **out, inf_err *err)
{
    return model_load_with(dir, NULL, out, err);
}

int model_load_with(const char *dir, const model_load_opts *o, model **out, inf_err *err)
{
    if (gguf_model_path(dir)) /* one file: GGUF (its Q4_0 goes through f32) */
        return gguf_model_load(dir, o, out, err);
    return model_load_dir_with(dir, o, out, err);
}
