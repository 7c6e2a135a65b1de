/* vargs_: vLLM's command lines as its guides print them. Before args_parse
 * reads them, vargs_normalize rewrites the serve command's arguments:
 *  - a model as the first, positional argument (`vllm serve ORG/NAME`)
 *    becomes --model;
 *  - vLLM's short aliases become their long names (-tp 2 is
 *    --tensor-parallel-size 2; the table is in vargs.c and docs/vllm-flags.md);
 *  - vLLM flags that change nothing here are dropped with a note that says
 *    so (--use-v2-block-manager, --trust-remote-code, --dtype auto, ...);
 *  - vLLM flags whose value inferd cannot honour are refused with a message
 *    (--pipeline-parallel-size 2, --dtype float32).
 * Everything else passes through unchanged, for args_parse to judge. */
#ifndef INFERD_VARGS_H
#define INFERD_VARGS_H

#include "engine/common.h"

enum { VARGS_MAX_NOTES = 16 };

typedef struct vargs {
    int argc;
    char **argv;                         /* the rewritten arguments (owned) */
    int n_notes;
    char notes[VARGS_MAX_NOTES][160];    /* one line per dropped flag       */
} vargs;

/* Rewrites argv[0..argc) (no program or command name) into out. Fails
 * (INF_ERR_INVALID, a message naming the flag) on a refused value, a flag
 * that lacks its value, or a model given both positionally and as --model.
 * out is empty after a failure; vargs_free either way. */
int vargs_normalize(int argc, char **argv, vargs *out, inf_err *err);
void vargs_free(vargs *v);

#endif
