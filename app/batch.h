/* batch_: `inferd run-batch`, vLLM's run_batch. Reads OpenAI's batch input
 * file (one {"custom_id", "method", "url", "body"} per line), runs every
 * request through a server it starts on loopback (so the parsing, engine
 * and encoding are exactly the server's), and writes OpenAI's batch output
 * format in input order. */
#ifndef INFERD_BATCH_H
#define INFERD_BATCH_H

/* argv excludes "run-batch". Returns the exit status: 0 when the output
 * file was written (per-line errors included), 2 on bad usage, 1 when the
 * server could not start or the files could not be read or written. */
int batch_main(int argc, char **argv);

#endif
