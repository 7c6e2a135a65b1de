/* hub_: models by Hugging Face Hub id (issue 23). hub_resolve turns
 * "ORG/NAME" into a local directory in the Hub's own cache layout
 * ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub:
 * models--ORG--NAME/{blobs,snapshots,refs}), shared with huggingface_hub,
 * transformers and vLLM: a model one of them fetched is found without a
 * request, and the other way round. Missing files are fetched with libcurl:
 * only what serving needs (config, generation config, tokenizer files, chat
 * template, safetensors index and shards; or, for ORG/NAME:TAG, the one GGUF
 * model the tag names: app/hub_gguf.h), each resumed with a range request
 * after a cut, an LFS file checked against the sha256 the Hub names in its
 * ETag, and every file written under a temporary name and renamed when whole,
 * so a killed download never leaves a file that looks complete. */
#ifndef INFERD_HUB_H
#define INFERD_HUB_H

#include <stddef.h>

#include "engine/common.h"

/* Bytes of the current file so far and its size (0: unknown). */
typedef void (*hub_progress_fn)(void *user, const char *file, size_t done, size_t total);

typedef struct hub_config {
    const char *endpoint;  /* $HF_ENDPOINT, else https://huggingface.co      */
    const char *cache;     /* the hub cache directory (above)               */
    const char *token;     /* $HF_TOKEN, else the token file; NULL: none    */
    const char *revision;  /* a branch, tag or commit; "main"               */
    int offline;           /* $HF_HUB_OFFLINE: the cache only               */
    int tokenizer_only;    /* fetch and require only the tokenizer files
                            * (--tokenizer ORG/NAME): tokenizer.json or
                            * .model, tokenizer_config.json, special tokens,
                            * chat template, generation config              */
    long etag_timeout;     /* seconds to connect and answer a metadata
                            * request ($HF_HUB_ETAG_TIMEOUT, 10): a Hub that
                            * cannot be reached fails fast, never hangs;
                            * 0: libcurl's defaults                         */
    long download_timeout; /* seconds to connect for a file's bytes
                            * ($HF_HUB_DOWNLOAD_TIMEOUT, 10); 0: libcurl's */
    hub_progress_fn progress; /* may be NULL                                */
    void *user;
    char buf[3][4096];     /* storage for the strings found in files       */
} hub_config;

/* The configuration the environment gives (HF_ENDPOINT, HF_HUB_CACHE,
 * HF_HOME, HF_TOKEN, HF_TOKEN_PATH or $HF_HOME/token, HF_HUB_OFFLINE,
 * HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT: huggingface_hub's names). */
void hub_config_from_env(hub_config *c);

/* Whether s names a Hub repository rather than a local directory: it does
 * not exist on disk and reads ORG/NAME (one '/', letters, digits, '-',
 * '_', '.'; no "..", no leading '/' or '.'), or ORG/NAME:TAG (a tag of
 * those characters but '/'), either after "hf.co/" or "huggingface.co/"
 * (Ollama's hf.co/ORG/NAME:TAG). */
int hub_is_repo_id(const char *s);

/* The snapshot directory of repo_id at c->revision (malloc'd, *dir; for a
 * GGUF model, the path of its first file in it), from
 * the cache when it holds the model (no request), else downloaded; with
 * c->tokenizer_only, a snapshot holding a tokenizer is enough and only the
 * tokenizer's files are fetched. Errors
 * (INF_ERR_IO for the network, INF_ERR_INVALID for ids, INF_ERR_UNSUPPORTED
 * for gated repos) carry one line saying what to do. */
int hub_resolve(const hub_config *c, const char *repo_id, char **dir, inf_err *err);

/* The local path of what --model or --tokenizer names: name itself when it
 * is not a Hub id (a directory or file that exists wins over an id), else
 * the snapshot hub_resolve finds or fetches under c (*owned, malloc'd; the
 * caller frees it; *path points to it). */
int hub_local_path(const hub_config *c, const char *name, const char **path, char **owned,
                   inf_err *err);

/* ---- what the Hub sends (public for fuzz/fuzz_hub.c) ---------------------- */

/* The response headers a download needs; "W/" and quotes taken off ETags. */
typedef struct hub_headers {
    char etag[160], linked_etag[160], commit[64];
    long long length, linked_size; /* -1 / 0 when absent */
} hub_headers;

/* Reads one header line (as libcurl hands it, CRLF included, not NUL-
 * terminated) into h; a status line ("HTTP/...") starts a new response. */
void hub_header_line(hub_headers *h, const char *line, size_t n);

/* The Hub API's answer about a revision ({"sha": ..., "siblings":
 * [{"rfilename": ...}]}): its commit (40 hex digits) and the files serving
 * wants, as a malloc'd array of malloc'd names (hub_files_free). */
int hub_revision_parse(const char *json, size_t len, char commit[41], char ***files, int *n,
                       inf_err *err);
void hub_files_free(char **files, int n);

#endif
