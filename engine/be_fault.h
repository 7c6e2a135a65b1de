/* be_fault_: a backend that fails on command, wrapped around a real one,
 * to exercise the fault path end to end (tests, the soak): a step whose
 * batch holds the configured token id fails its forward with an error, as
 * a GPU fault or an allocation failure would; every other step is the
 * wrapped backend's. The engine then ends the requests of that step with an
 * error (an OpenAI error object, or an SSE error event mid-stream), counts
 * them as finished_reason="error" and keeps serving the rest. Off unless
 * `inferd serve --fault-token-id N` asks for it. */
#ifndef INFERD_BE_FAULT_H
#define INFERD_BE_FAULT_H

#include "engine/be.h"

typedef struct be_fault_config {
    int token_id;   /* a batch holding this token id fails                   */
} be_fault_config;

/* Wraps inner, which stays the caller's (destroy the wrapper first). */
int be_fault_create(be_backend *inner, const be_fault_config *c, be_backend **out,
                    inf_err *err);

/* Forward calls that failed on command so far (any thread). */
long be_fault_count(const be_backend *be);

#endif
