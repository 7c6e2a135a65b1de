/* cfg_: the YAML config file (--config FILE, as vLLM's). A mapping whose keys
 * are the long option names (dashes or underscores) and whose values are
 * scalars; a nested mapping or list (e.g. speculative-config) is handed to
 * its option as JSON text. Command-line flags override the file, and the
 * file overrides INFERD_* environment variables (the caller's order of
 * applying them). An unknown key or a bad value is an error naming the file,
 * line and key. */
#ifndef INFERD_CFG_H
#define INFERD_CFG_H

#include "app/args.h"

typedef struct cfg_file cfg_file;

/* Reads path and sets the specs' destinations. String values stay owned by
 * *out until cfg_free. */
int cfg_load(const char *path, const arg_spec *specs, int n_specs, cfg_file **out, inf_err *err);
void cfg_free(cfg_file *c); /* NULL-safe */

#endif
