/* The offline generator command: `inferd generate --model DIR --prompt TEXT`.
 * Prints only the completion on stdout; diagnostics go to stderr. */
#ifndef INFERD_GENERATE_H
#define INFERD_GENERATE_H

/* argv excludes "generate"; returns the process exit status. */
int generate_main(int argc, char **argv);

#endif
