/* Private to the gram_ module (gram_parse.c, gram_auto.c, gram_vocab.c,
 * gram_match.c): the compiled grammar's layout and the automaton's tables. */
#ifndef INFERD_GRAM_INT_H
#define INFERD_GRAM_INT_H

#include "gram.h"

/* A grammar is llama.cpp's flat element layout: each rule is its
 * alternatives' elements separated by ALT and closed by END. A character
 * class is CHAR or CHAR_NOT followed by any number of CHAR_ALT items, each
 * item optionally followed by RNG_UPPER (its range's upper bound). */
enum {
    GE_END = 0,   /* end of a rule                                       */
    GE_ALT,       /* start of the next alternative                       */
    GE_REF,       /* value: a rule id                                    */
    GE_CHAR,      /* value: a code point (first item of a class)         */
    GE_CHAR_NOT,  /* like CHAR, the class negated                        */
    GE_RNG_UPPER, /* value: upper bound of the preceding item's range   */
    GE_CHAR_ALT,  /* value: another item of the same class              */
    GE_ANY,       /* any code point                                      */
};

typedef struct gram_elem {
    uint32_t type;
    uint32_t value;
} gram_elem;

struct gram {
    gram_elem *e;     /* [n_e] all rules, concatenated                        */
    int n_e;
    int *rule_start;  /* [n_rules] index in e of each rule's first element   */
    int n_rules;
    int root;         /* rule id of `root`                                   */
};

static inline int gram__is_end(const gram_elem *e)
{
    return e->type == GE_END || e->type == GE_ALT;
}

static inline int gram__is_char(const gram_elem *e)
{
    return e->type == GE_CHAR || e->type == GE_CHAR_NOT || e->type == GE_ANY;
}

/* Whether the class starting at e matches some code point in [lo, hi]. */
int gram__class_hits(const gram_elem *e, uint32_t lo, uint32_t hi);

/* The element after the class starting at e (its index offset). */
int gram__class_len(const gram_elem *e);

/* The token trie in preorder: node i (root excluded) is reached by byte
 * byte[i] from the nearest earlier node of depth depth[i] - 1; end[i] is
 * the index after its subtree; tok[i] the first token whose bytes end here
 * (-1: none), further ones through next_same[token]. */
struct gram_vocab {
    int n;            /* tokens                                               */
    int n_nodes;
    uint8_t *byte;    /* [n_nodes]                                            */
    uint16_t *depth;  /* [n_nodes] 1-based                                    */
    int32_t *end;     /* [n_nodes]                                            */
    int32_t *tok;     /* [n_nodes]                                            */
    int32_t *next_same; /* [n] another token with the same bytes, or -1      */
    char **bytes;     /* [n] each token's bytes (copied)                     */
    int *len;         /* [n]                                                  */
    int max_depth;
};

/* A matcher position: an interned parser state plus a partial UTF-8
 * character (need more bytes, acc the bits so far, nb bytes seen). */
typedef struct gram__pos {
    int32_t sid;      /* state id; GRAM__DEAD or GRAM__ENDED otherwise       */
    uint8_t need, nb;
    uint32_t acc;
} gram__pos;
#define GRAM__DEAD  (-1)
#define GRAM__ENDED (-2) /* eos accepted */

/* Automaton internals used by the matcher and the trie walk. */
gram__pos gram__start(gram_auto *a);
gram__pos gram__step_byte(gram_auto *a, gram__pos p, uint8_t b);
int gram__state_accepts(const gram_auto *a, int32_t sid);
int gram__state_open(const gram_auto *a, int32_t sid); /* has char nodes */
const gram_vocab *gram__vocab(const gram_auto *a);
const int32_t *gram__eos(const gram_auto *a, int *n);
/* The cached mask of state sid (NULL: not cached yet), and the store; the
 * automaton owns stored masks. */
const uint32_t *gram__mask_get(gram_auto *a, int32_t sid);
void gram__mask_put(gram_auto *a, int32_t sid, uint32_t *words);

/* Computes the mask at p by walking the trie (words zeroed first). Returns
 * the count of allowed tokens, -1 when out of memory. */
int gram__walk(gram_auto *a, gram__pos p, uint32_t *words);

#endif
