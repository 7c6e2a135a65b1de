/* hub_gguf_: which GGUF files of a Hub repository serve a model, by a tag
 * as llama.cpp's `-hf ORG/NAME:TAG` and Ollama's `hf.co/ORG/NAME:TAG` take
 * it (app/hub.c asks; public for tests/test_hub.c and fuzz/fuzz_hub.c). */
#ifndef INFERD_HUB_GGUF_H
#define INFERD_HUB_GGUF_H

#include "engine/common.h"

/* The tag of "ORG/NAME:TAG" (after the ':'), or NULL; *repo_len: the
 * length of ORG/NAME. */
const char *hub_gguf_tag(const char *id, size_t *repo_len);

/* Among files[0..n) (a repository's paths), the GGUF model tag names:
 *  - tag ending in ".gguf": the file of that name (its path or base name);
 *  - another tag: the files whose base name holds it as a word, any case
 *    (Q4_K_M matches "model-Q4_K_M.gguf" and "m.q4_k_m-00001-of-00002.gguf",
 *    not "model-Q4_K_M_L.gguf"; Q4_K matches neither);
 *  - no tag: Q4_K_M's files if there are some (llama.cpp's default), else
 *    all of them.
 * Vision projectors (mmproj*) are never a model. The matches must be one
 * model: one file, or every part of one split (NAME-00001-of-0000N.gguf,
 * ...), whose indices go to pick[] in order (*n_pick; pick holds n), the
 * file to load first. Else an error listing what there is. */
int hub_gguf_pick(char *const *files, int n, const char *tag, int *pick, int *n_pick,
                  inf_err *err);

/* The file to load of snap's GGUF model for tag (its .gguf files, at its
 * top level and one folder down, picked as above; malloc'd), or NULL. */
char *hub_gguf_cached(const char *snap, const char *tag);

/* 1 when f is a GGUF path (".gguf", no ".." part, not absolute). */
int hub_gguf_name(const char *f);

#endif
