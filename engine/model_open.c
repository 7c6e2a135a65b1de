/* model_load: the one entry point that picks the loader by what the path
 * is (a GGUF file, or a Hugging Face directory), so model.c and
 * gguf_model.c do not know each other's formats. */
#include "gguf_model.h"
#include "model.h"

int model_load(const char *dir, model **out, inf_err *err)
{
    if (gguf_model_path(dir)) /* one file: GGUF */
        return gguf_model_load(dir, out, err);
    return model_load_dir(dir, out, err);
}
