/* The server command: `inferd --model DIR [options]`. */
#ifndef INFERD_SERVE_H
#define INFERD_SERVE_H

/* argv excludes the program name; returns the process exit status. */
int serve_main(int argc, char **argv);

#endif
