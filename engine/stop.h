/* stop_: stop strings over streamed text.
 *
 * A matcher is made from a request's stop strings and fed the detokenized
 * text as the sequence produces it. It hands back the bytes that can be
 * emitted now and says when a stop string has matched; text that may still
 * turn out to be the start of a stop string is held back.
 *
 * Rules (the whole contract; tests/test_stop.c checks them against a brute
 * force reference):
 * - Hold-back: after a feed, exactly the longest suffix of the text not yet
 *   emitted that is a proper prefix of some stop string is held; everything
 *   before it is emitted. No stop strings: nothing is ever held.
 * - Match: the occurrence that starts earliest in the whole text wins; of
 *   several starting at the same byte, the shortest (the one that completes
 *   first; equal strings: the lower index). A completed occurrence is only
 *   reported once no occurrence starting earlier can still complete, so a
 *   stream gives the same answer as the whole text at once would.
 * - On a match the text before the occurrence is emitted (and, with
 *   include_in_output, the stop string itself, as vLLM's
 *   include_stop_str_in_output); later input is ignored.
 * - At the end of a sequence (EOS, length) stop_flush releases the held text
 *   (cut at a match that was waiting, see stop_flush).
 * Matching is on bytes. When the stop strings and the fed text are valid
 * UTF-8 in whole characters, every output is whole characters too (an
 * occurrence and a held suffix both start where a stop string's first
 * character starts).
 *
 * Cost: a feed of len bytes costs O((len + L) * n * L) for n stop strings of
 * at most L bytes, whatever the length of the text before it. Everything is
 * allocated by stop_create; feeding allocates nothing. */
#ifndef INFERD_STOP_H
#define INFERD_STOP_H

#include "common.h"

typedef struct stop stop;

typedef struct stop_config {
    const char *const *strs; /* [n] NUL-terminated stop strings, copied;
                                empty strings never match (ignored)        */
    int n;                   /* 0: pass-through                           */
    int include_in_output;   /* emit the matched stop string too          */
} stop_config;

stop_config stop_config_default(void); /* no stop strings, not included */

/* Makes a matcher. INF_ERR_INVALID for n < 0 or a NULL string. */
int stop_create(const stop_config *cfg, stop **out, inf_err *err);
void stop_destroy(stop *s); /* NULL-safe */

/* Forgets all text and any match, for a new sequence with the same strings. */
void stop_reset(stop *s);

/* The most bytes a matcher ever holds back: the longest stop string's length
 * minus one (0 without stop strings). */
size_t stop_max_hold(const stop *s);

/* Feeds len bytes of new text. Writes the bytes that can be emitted now to
 * out, which must have room for len + stop_max_hold(s) bytes, and returns
 * their count (may be 0). *matched (may be NULL) is set to the index in
 * cfg->strs of the stop string that matched in this feed, else -1. After a
 * match every later feed returns 0 with *matched = -1. */
size_t stop_feed(stop *s, const char *text, size_t len, char *out, int *matched);

/* End of sequence: writes what is held back (at most stop_max_hold(s) bytes)
 * to out and returns its count; nothing after a match. The held text can
 * still hold a match that was waiting on a longer stop string starting
 * earlier (stop strings "bcd" and "c", text "bc"): with no more text coming
 * it is final, so only the text before it is written and *matched (may be
 * NULL) names it; else *matched = -1. */
size_t stop_flush(stop *s, char *out, int *matched);

int stop_matched(const stop *s);      /* index of the matched string, or -1 */
size_t stop_held(const stop *s);      /* bytes held back right now          */
const char *stop_str(const stop *s, int i); /* the i-th string, NULL if out of
                                               range; valid for s's lifetime */

#endif
