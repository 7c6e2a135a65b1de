/* `inferd download ORG/NAME`: fetches a model into the Hub cache without
 * serving it, and prints its snapshot directory. */
#include "app/download.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/args.h"
#include "app/hub.h"

typedef struct bar {
    int tty, quiet;
    char file[256];
    int last;
} bar;

/* A bar per file on a terminal, a line per finished file otherwise. */
static void on_progress(void *user, const char *file, size_t done, size_t total)
{
    bar *b = user;
    if (b->quiet)
        return;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : -1;
    if (strcmp(b->file, file)) {
        snprintf(b->file, sizeof b->file, "%s", file);
        b->last = -2;
    }
    if (pct == b->last)
        return;
    b->last = pct;
    if (b->tty && pct >= 0)
        fprintf(stderr, "\r%-40.40s %3d%% (%.1f / %.1f MB)%s", file, pct, (double)done / 1e6,
                (double)total / 1e6, pct == 100 ? "\n" : "");
    else if (pct == 100)
        fprintf(stderr, "inferd download: %s (%.1f MB)\n", file, (double)total / 1e6);
}

int download_main(int argc, char **argv)
{
    const char *revision = "main", *dir = NULL;
    int quiet = 0, help = 0;
    const arg_spec specs[] = {
        {"revision", ARG_STR, &revision, "REV", "branch, tag or commit (default main)"},
        {"download-dir", ARG_STR, &dir, "DIR", "the Hub cache to use (default: $HF_HUB_CACHE, "
                                               "$HF_HOME/hub or ~/.cache/huggingface/hub)"},
        {"quiet", ARG_FLAG, &quiet, NULL, "no progress on stderr"},
    };
    int n_specs = (int)(sizeof specs / sizeof *specs);
    inf_err err = {0};
    const char *id = argc > 0 && argv[0][0] != '-' ? argv[0] : NULL;
    if (args_parse(specs, n_specs, argc - (id != NULL), argv + (id != NULL), &help, &err)) {
        fprintf(stderr, "inferd download: %s\n", err.msg);
        return 2;
    }
    if (help || !id) {
        fprintf(help ? stdout : stderr,
                "usage: inferd download ORG/NAME [options]\n\n"
                "Fetches the files serving needs into the Hugging Face cache (shared with\n"
                "huggingface_hub, transformers and vLLM) and prints the snapshot directory.\n"
                "HF_TOKEN, HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE apply.\n\noptions:\n");
        args_help(help ? stdout : stderr, specs, n_specs);
        return help ? 0 : 2;
    }
    hub_config hc;
    hub_config_from_env(&hc);
    hc.revision = revision;
    if (dir)
        hc.cache = dir;
    bar b = {.tty = isatty(STDERR_FILENO), .quiet = quiet, .last = -2};
    hc.progress = on_progress;
    hc.user = &b;
    char *snap = NULL;
    if (hub_resolve(&hc, id, &snap, &err)) {
        fprintf(stderr, "inferd download: %s\n", err.msg);
        return 2;
    }
    printf("%s\n", snap);
    free(snap);
    return 0;
}
