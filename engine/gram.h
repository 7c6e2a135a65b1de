/* gram_: grammar-constrained decoding.
 *
 * Four objects, each with one job:
 * - gram: a compiled grammar, parsed from GBNF text as llama.cpp writes it
 *   (rules `name ::= ...`, alternatives `|`, sequences, groups `( )`, `*`
 *   `+` `?` `{m}` `{m,}` `{m,n}`, string literals with escapes, character
 *   classes `[a-z]` `[^"\\]`, `.`, `#` comments; the start rule is `root`).
 *   Immutable once made: any number of threads may read it.
 * - gram_vocab: the vocabulary as token id -> bytes, held as a byte trie so
 *   the mask of a state costs one pruned walk of the trie. Immutable.
 * - gram_auto: the pushdown automaton of one grammar over one vocabulary: it
 *   interns parser states (sets of rule stacks) as small integers, memoizes
 *   transitions between them and caches token masks per state. It grows as
 *   states are discovered, so it is used by ONE thread (the engine's); many
 *   requests with the same grammar share one.
 * - gram_match: one sequence's position in a gram_auto: accept a token,
 *   roll back n tokens (rejected drafts), the mask of allowed tokens now.
 *
 * Matching is over Unicode code points decoded from UTF-8; a token may end
 * inside a character (byte-fallback pieces), which the matcher carries as a
 * partial character. Bytes that are not valid UTF-8 never match. */
#ifndef INFERD_GRAM_H
#define INFERD_GRAM_H

#include <stdint.h>

#include "common.h"

typedef struct gram gram;
typedef struct gram_vocab gram_vocab;
typedef struct gram_auto gram_auto;
typedef struct gram_match gram_match;

/* ------------------------------------------------------------- grammar --- */

/* Parses GBNF text (len bytes, need not be NUL-terminated). Errors say what
 * is wrong and where ("line 3 col 7: ...", "rule 'x' is undefined", "rule
 * 'x' is left-recursive"). A grammar over GRAM_MAX_ELEMS elements after
 * expanding repetitions is refused. */
#define GRAM_MAX_ELEMS (1 << 20)
int gram_parse(const char *text, size_t len, gram **out, inf_err *err);
void gram_destroy(gram *g); /* NULL-safe */

/* Whether the whole of text (len bytes) is a sentence of the grammar: a
 * reference-free check for tests and callers that hold a complete string. */
int gram_accepts(const gram *g, const char *text, size_t len);

/* ---------------------------------------------------------- vocabulary --- */

/* A vocabulary of n tokens; bytes[i] (len[i] bytes) is what token i decodes
 * to. Tokens with no bytes (control tokens) are never allowed by a grammar;
 * the end of a sentence is the caller's eos ids. All input is copied. */
int gram_vocab_create(int n, const char *const *bytes, const int *len,
                      gram_vocab **out, inf_err *err);
void gram_vocab_destroy(gram_vocab *v); /* NULL-safe */
int gram_vocab_size(const gram_vocab *v);

/* ----------------------------------------------------------- automaton --- */

/* eos: [n_eos] token ids allowed exactly when the grammar can end here
 * (copied). g and v must outlive the automaton. */
int gram_auto_create(const gram *g, const gram_vocab *v, const int32_t *eos, int n_eos,
                     gram_auto **out, inf_err *err);
void gram_auto_destroy(gram_auto *a); /* NULL-safe */

/* Counters for benchmarks and tests. */
typedef struct gram_auto_stats {
    int64_t states;       /* distinct parser states interned            */
    int64_t mask_hits;    /* masks served from the cache                 */
    int64_t mask_walks;   /* masks computed by walking the trie          */
} gram_auto_stats;
gram_auto_stats gram_auto_stats_get(const gram_auto *a);

/* ------------------------------------------------------------- matcher --- */

/* A matcher at the start of the grammar. The automaton must outlive it. */
int gram_match_create(gram_auto *a, gram_match **out, inf_err *err);
void gram_match_destroy(gram_match *m); /* NULL-safe */

/* Feeds one token. INF_OK when the grammar allows it (the matcher moves on
 * and records a checkpoint), INF_ERR_INVALID when it does not (nothing
 * changes). An eos token is allowed only where the grammar can end; after it
 * every token is refused. */
int gram_match_accept(gram_match *m, int32_t token);

/* Feeds raw bytes (a prompt prefix or a test string) as one step: INF_OK or
 * INF_ERR_INVALID (nothing changes). */
int gram_match_accept_bytes(gram_match *m, const char *s, size_t len);

/* Undoes the last n accepted steps (n larger than the count: back to the
 * start). */
void gram_match_rollback(gram_match *m, int n);

/* Steps accepted so far (tokens and byte strings). */
int gram_match_steps(const gram_match *m);

/* Whether the text so far is a complete sentence (eos would be allowed). */
int gram_match_can_end(const gram_match *m);

/* Whether nothing but eos can follow (the grammar is complete and no token
 * extends it): the engine may stop here. */
int gram_match_must_end(gram_match *m);

/* The allowed tokens now as a bitset: bit i of words[i / 32] for token i;
 * words has (vocab size + 31) / 32 entries. Returns the allowed count. The
 * cached mask is copied, so words belongs to the caller. */
int gram_match_mask(gram_match *m, uint32_t *words);

/* Sets logits[i] = -inf for every token the grammar refuses now (n is the
 * row's length; ids at or beyond the vocabulary are refused). */
void gram_match_apply(gram_match *m, float *logits, int n);

#endif
