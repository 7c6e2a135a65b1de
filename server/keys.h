/* keys_: API keys (vLLM's --api-key, repeated, and --api-key-file with one
 * key per line). A request is authorized when its "Authorization: Bearer K"
 * matches any key; every key is compared in full and in constant time, so
 * neither the key nor which key matched shows in the timing. The file is
 * read again by keys_reload (on SIGHUP); a reload that fails keeps the keys
 * in force. Not thread-safe: one thread (the loop) checks and reloads. */
#ifndef INFERD_KEYS_H
#define INFERD_KEYS_H

#include <stddef.h>

#include "engine/common.h"

typedef struct keys keys;

/* list[0..n) is copied; file may be NULL. In the file, blank lines and
 * lines starting with '#' are skipped and surrounding spaces trimmed. An
 * unreadable file, or a file that gives no key, is an error naming it.
 * With no key at all, *out is NULL (no authentication) and INF_OK. */
int keys_create(const char *const *list, int n, const char *file, keys **out, inf_err *err);
void keys_destroy(keys *k); /* NULL-safe */

/* Reads the file again (a set without a file is unchanged). On error the
 * old keys stay. *n_out (may be NULL) gets how many keys now hold. */
int keys_reload(keys *k, int *n_out, inf_err *err);

/* Whether the Authorization header value (may be NULL) carries a valid
 * key; 1 when k is NULL (authentication off). */
int keys_check(const keys *k, const char *authorization);

/* Constant-time equality of two byte strings: the time depends on their
 * lengths only, not on where they differ. */
int keys_equal(const char *a, size_t la, const char *b, size_t lb);

#endif
