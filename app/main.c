/* inferd's entry point: dispatches to a command. */
#include <stdio.h>
#include <string.h>

#include "engine/version.h"
#include "app/batch.h"
#include "app/download.h"
#include "app/generate.h"
#include "app/serve.h"

static void usage(FILE *f)
{
    fprintf(f,
            "inferd %s: an OpenAI-compatible LLM inference server\n\n"
            "usage:\n"
            "  inferd --model DIR [options]                          the OpenAI-compatible server\n"
            "  inferd generate --model DIR --prompt TEXT [options]   offline generation\n"
            "  inferd download ORG/NAME [options]                    fetch a model from the Hub\n"
            "  inferd run-batch -i IN.jsonl -o OUT.jsonl --model DIR  OpenAI batch files offline\n"
            "  inferd --version\n\n"
            "`inferd serve --help` and `inferd generate --help` list the options.\n",
            inf_version());
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "generate"))
        return generate_main(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "download"))
        return download_main(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "run-batch"))
        return batch_main(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "--version")) {
        printf("inferd %s (%s)\n", inf_version(), inf_version_build());
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "serve"))
        return serve_main(argc - 2, argv + 2);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    return serve_main(argc - 1, argv + 1); /* `inferd --model DIR ...`, as vLLM's serve */
}
