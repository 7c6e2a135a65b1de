/* The server command: `inferd --model DIR [options]`. */
#ifndef INFERD_SERVE_H
#define INFERD_SERVE_H

/* argv excludes the program name; returns the process exit status. */
int serve_main(int argc, char **argv);

typedef struct api api;

/* An offline command on the served model: called on the calling thread
 * once the model, engine and api are ready (api_submit runs requests);
 * returns the process exit status. */
typedef int (*serve_offline_fn)(void *user, api *a);

/* As serve_main (the same options, environment and config file), but no
 * HTTP server: the model loads on this thread, then fn runs. Returns fn's
 * status, or serve's for a usage or load failure (2 or 1). */
int serve_offline(int argc, char **argv, serve_offline_fn fn, void *user);

#endif
