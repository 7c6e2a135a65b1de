/* inferd's entry point: dispatches to a command. */
#include <stdio.h>
#include <string.h>

#include "server/generate.h"

#define INFERD_VERSION "0.1.0"

static void usage(FILE *f)
{
    fprintf(f,
            "inferd %s: an OpenAI-compatible LLM inference server\n\n"
            "usage:\n"
            "  inferd generate --model DIR --prompt TEXT [options]   offline generation\n"
            "  inferd --version\n"
            "  inferd --help\n\n"
            "`inferd generate --help` lists the generator's options. The HTTP server\n"
            "(`inferd --model DIR`) is not built yet.\n",
            INFERD_VERSION);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "generate"))
        return generate_main(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "--version")) {
        printf("inferd %s\n", INFERD_VERSION);
        return 0;
    }
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return 2;
}
