/* GBNF text -> gram (llama.cpp's grammar syntax and element layout).
 * Repetitions become helper rules as llama.cpp expands them; then every
 * referenced rule must be defined and no rule may be left-recursive (the
 * automaton would expand it forever). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram_int.h"

#define MAX_NEST 256 /* parentheses deep; deeper is refused, not recursed */

typedef struct evec {
    gram_elem *p;
    int n, cap;
} evec;

typedef struct rule {
    char *name;
    evec body;
    int defined;
    const char *use; /* first reference, for "undefined" messages */
} rule;

typedef struct parser {
    const char *s, *end, *start;
    rule *rules;
    int n_rules, cap_rules;
    int *named;      /* hash table of user rule ids, -1 empty */
    int n_named, cap_named;
    int64_t n_elems; /* all rules, to enforce GRAM_MAX_ELEMS */
    int depth;
    inf_err *err;
    int failed;
} parser;

static int fail_at(parser *p, const char *at, const char *fmt, const char *arg)
{
    if (p->failed)
        return INF_ERR_INVALID;
    p->failed = 1;
    int line = 1, col = 1;
    for (const char *c = p->start; c < at && c < p->end; c++) {
        if (*c == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    return inf_fail(p->err, INF_ERR_INVALID, "grammar line %d col %d: %s", line, col, msg);
}

static int push(parser *p, evec *v, uint32_t type, uint32_t value)
{
    if (++p->n_elems > GRAM_MAX_ELEMS)
        return fail_at(p, p->s, "grammar too large after expanding repetitions%s", NULL);
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 16;
        gram_elem *q = realloc(v->p, (size_t)cap * sizeof *q);
        if (!q) {
            p->failed = 1;
            return inf_fail(p->err, INF_ERR_NOMEM, "grammar: out of memory");
        }
        v->p = q;
        v->cap = cap;
    }
    v->p[v->n++] = (gram_elem){type, value};
    return 0;
}

static uint64_t name_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Appends a rule named name (n bytes); -1 when out of memory. */
static int rule_add(parser *p, const char *name, size_t n)
{
    if (p->n_rules == p->cap_rules) {
        int cap = p->cap_rules ? p->cap_rules * 2 : 32;
        rule *r = realloc(p->rules, (size_t)cap * sizeof *r);
        if (!r)
            return -1;
        p->rules = r;
        p->cap_rules = cap;
    }
    rule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = strndup(name, n);
    if (!r->name)
        return -1;
    return p->n_rules++;
}

/* The id of the user's rule `name` (n bytes), made when new; names are
 * found through an open-addressed table of ids. */
static int rule_id(parser *p, const char *name, size_t n)
{
    if (2 * (p->n_named + 1) > p->cap_named) {
        int cap = p->cap_named ? p->cap_named * 2 : 64;
        int *t = malloc(sizeof(int) * (size_t)cap);
        if (!t)
            return -1;
        for (int i = 0; i < cap; i++)
            t[i] = -1;
        for (int i = 0; i < p->cap_named; i++) {
            if (p->named[i] < 0)
                continue;
            const char *nm = p->rules[p->named[i]].name;
            size_t j = name_hash(nm, strlen(nm)) & (size_t)(cap - 1);
            while (t[j] >= 0)
                j = (j + 1) & (size_t)(cap - 1);
            t[j] = p->named[i];
        }
        free(p->named);
        p->named = t;
        p->cap_named = cap;
    }
    size_t j = name_hash(name, n) & (size_t)(p->cap_named - 1);
    for (; p->named[j] >= 0; j = (j + 1) & (size_t)(p->cap_named - 1)) {
        const char *nm = p->rules[p->named[j]].name;
        if (strlen(nm) == n && !memcmp(nm, name, n))
            return p->named[j];
    }
    int id = rule_add(p, name, n);
    if (id >= 0) {
        p->named[j] = id;
        p->n_named++;
    }
    return id;
}

/* A fresh helper rule named after base ("base~7": '~' keeps it apart from
 * every name a user can write). */
static int new_rule(parser *p, int base)
{
    char name[128];
    snprintf(name, sizeof name, "%.80s~%d", p->rules[base].name, p->n_rules);
    int id = rule_add(p, name, strlen(name));
    if (id < 0) {
        p->failed = 1;
        return inf_fail(p->err, INF_ERR_NOMEM, "grammar: out of memory");
    }
    return id;
}

static void set_rule(parser *p, int id, evec *v)
{
    free(p->rules[id].body.p);
    p->rules[id].body = *v;
    p->rules[id].defined = 1;
    *v = (evec){0};
}

static int is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

/* Skips blanks and comments; newlines only when newline_ok. */
static void space(parser *p, int newline_ok)
{
    while (p->s < p->end) {
        char c = *p->s;
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            p->s++;
        } else if (c == '#') {
            while (p->s < p->end && *p->s != '\n')
                p->s++;
        } else {
            break;
        }
    }
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One UTF-8 code point at p->s (advanced); -1 on malformed input. */
static int64_t utf8_char(parser *p)
{
    const unsigned char *s = (const unsigned char *)p->s;
    size_t left = (size_t)(p->end - p->s);
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || (size_t)n > left)
        return -1;
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        v = v << 6 | (s[i] & 0x3F);
    }
    p->s += n;
    return v;
}

/* One character of a literal or class, escapes decoded; -1 on error. */
static int64_t lit_char(parser *p)
{
    if (p->s >= p->end)
        return fail_at(p, p->s, "unexpected end of input%s", NULL);
    if (*p->s != '\\') {
        int64_t c = utf8_char(p);
        if (c < 0)
            return fail_at(p, p->s, "invalid UTF-8%s", NULL);
        return c;
    }
    if (p->end - p->s < 2)
        return fail_at(p, p->s, "unfinished escape%s", NULL);
    char e = p->s[1];
    p->s += 2;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = p->s < p->end ? hexval(*p->s) : -1;
            if (h < 0)
                return fail_at(p, p->s, "bad hex escape%s", NULL);
            v = v << 4 | (uint32_t)h;
            p->s++;
        }
        if (v > 0x10FFFF)
            return fail_at(p, p->s, "code point out of range%s", NULL);
        return v;
    }
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '[': case ']': case '-': case '^': return e;
    default: return fail_at(p, p->s - 2, "unknown escape%s", NULL);
    }
}

static int alternates(parser *p, int rid, evec *out);

/* Appends `prev` (the last term, elems [from, n)) per {min,max}; max < 0 is
 * unbounded. */
static int repeat(parser *p, int rid, evec *out, int from, int min, int max)
{
    int plen = out->n - from;
    if (plen <= 0)
        return fail_at(p, p->s, "repetition without a preceding item%s", NULL);
    gram_elem *prev = malloc((size_t)plen * sizeof *prev);
    if (!prev)
        return fail_at(p, p->s, "out of memory%s", NULL);
    memcpy(prev, out->p + from, (size_t)plen * sizeof *prev);
    int rc = 0;
    if (min == 0)
        out->n = from;
    for (int i = 1; i < min && !rc; i++)
        for (int j = 0; j < plen && !rc; j++)
            rc = push(p, out, prev[j].type, prev[j].value);
    int n_opt = max < 0 ? 1 : max - min, last = -1;
    for (int i = 0; i < n_opt && !rc; i++) {
        int id = new_rule(p, rid);
        if (id < 0) {
            rc = -1;
            break;
        }
        evec r = {0};
        for (int j = 0; j < plen && !rc; j++)
            rc = push(p, &r, prev[j].type, prev[j].value);
        if (!rc && (i > 0 || max < 0))
            rc = push(p, &r, GE_REF, (uint32_t)(max < 0 ? id : last));
        if (!rc)
            rc = push(p, &r, GE_ALT, 0);
        if (!rc)
            rc = push(p, &r, GE_END, 0);
        if (rc) {
            free(r.p);
            break;
        }
        set_rule(p, id, &r);
        last = id;
    }
    if (!rc && n_opt > 0)
        rc = push(p, out, GE_REF, (uint32_t)last);
    free(prev);
    return rc;
}

static int number(parser *p, int *v)
{
    const char *s = p->s;
    long x = 0;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9' && x <= 1000000)
        x = x * 10 + (*p->s++ - '0');
    if (p->s == s)
        return fail_at(p, p->s, "expected a number%s", NULL);
    if (x > 1000000)
        return fail_at(p, s, "repetition count too large%s", NULL);
    *v = (int)x;
    return 0;
}

static int char_class(parser *p, evec *out)
{
    p->s++; /* [ */
    uint32_t start = GE_CHAR;
    if (p->s < p->end && *p->s == '^') {
        start = GE_CHAR_NOT;
        p->s++;
    }
    int first = 1;
    while (p->s < p->end && *p->s != ']') {
        int64_t c = lit_char(p);
        if (c < 0)
            return -1;
        if (push(p, out, first ? start : GE_CHAR_ALT, (uint32_t)c))
            return -1;
        first = 0;
        if (p->end - p->s >= 2 && p->s[0] == '-' && p->s[1] != ']') {
            p->s++;
            int64_t hi = lit_char(p);
            if (hi < 0)
                return -1;
            if (hi < c)
                return fail_at(p, p->s, "character range out of order%s", NULL);
            if (push(p, out, GE_RNG_UPPER, (uint32_t)hi))
                return -1;
        }
    }
    if (p->s >= p->end)
        return fail_at(p, p->s, "unterminated character class%s", NULL);
    if (first) /* [] matches nothing, [^] anything: llama.cpp refuses both */
        return fail_at(p, p->s, "empty character class%s", NULL);
    p->s++;
    return 0;
}

static int sequence(parser *p, int rid, evec *out, int nested)
{
    int last = out->n;
    while (p->s < p->end && !p->failed) {
        char c = *p->s;
        if (c == '"') {
            p->s++;
            last = out->n;
            while (p->s < p->end && *p->s != '"') {
                int64_t ch = lit_char(p);
                if (ch < 0 || push(p, out, GE_CHAR, (uint32_t)ch))
                    return -1;
            }
            if (p->s >= p->end)
                return fail_at(p, p->s, "unterminated string literal%s", NULL);
            p->s++;
        } else if (c == '[') {
            last = out->n;
            if (char_class(p, out))
                return -1;
        } else if (is_word(c)) {
            const char *n0 = p->s;
            while (p->s < p->end && is_word(*p->s))
                p->s++;
            if (p->end - p->s >= 3 && !memcmp(p->s, "::=", 3))
                return fail_at(p, n0, "a rule starts inside another (missing newline?)%s", NULL);
            space(p, nested);
            if (p->end - p->s >= 3 && !memcmp(p->s, "::=", 3)) {
                p->s = n0; /* the next rule's name: this sequence is done */
                break;
            }
            p->s = n0;
            while (p->s < p->end && is_word(*p->s))
                p->s++;
            int id = rule_id(p, n0, (size_t)(p->s - n0));
            if (id < 0)
                return fail_at(p, n0, "out of memory%s", NULL);
            if (!p->rules[id].use)
                p->rules[id].use = n0;
            last = out->n;
            if (push(p, out, GE_REF, (uint32_t)id))
                return -1;
        } else if (c == '(') {
            if (++p->depth > MAX_NEST)
                return fail_at(p, p->s, "groups nested too deep%s", NULL);
            p->s++;
            space(p, 1);
            int id = new_rule(p, rid);
            if (id < 0)
                return -1;
            evec sub = {0};
            if (alternates(p, rid, &sub)) {
                free(sub.p);
                return -1;
            }
            set_rule(p, id, &sub);
            if (p->s >= p->end || *p->s != ')')
                return fail_at(p, p->s, "expected ')'%s", NULL);
            p->s++;
            p->depth--;
            last = out->n;
            if (push(p, out, GE_REF, (uint32_t)id))
                return -1;
        } else if (c == '.') {
            p->s++;
            last = out->n;
            if (push(p, out, GE_ANY, 0))
                return -1;
        } else if (c == '*' || c == '+' || c == '?') {
            p->s++;
            if (repeat(p, rid, out, last, c == '+', c == '?' ? 1 : -1))
                return -1;
        } else if (c == '{') {
            p->s++;
            space(p, nested);
            int min = 0, max = -1;
            if (number(p, &min))
                return -1;
            space(p, nested);
            if (p->s < p->end && *p->s == ',') {
                p->s++;
                space(p, nested);
                if (p->s < p->end && *p->s >= '0' && *p->s <= '9' && number(p, &max))
                    return -1;
            } else {
                max = min;
            }
            space(p, nested);
            if (p->s >= p->end || *p->s != '}')
                return fail_at(p, p->s, "expected '}'%s", NULL);
            p->s++;
            if (max >= 0 && max < min)
                return fail_at(p, p->s, "repetition {m,n} with n < m%s", NULL);
            if (repeat(p, rid, out, last, min, max))
                return -1;
        } else {
            break;
        }
        space(p, nested);
    }
    return p->failed ? -1 : 0;
}

/* Alternatives into out, closed by END; stops before ')' or a newline at
 * top level. */
static int alternates(parser *p, int rid, evec *out)
{
    int nested = p->depth > 0;
    if (sequence(p, rid, out, nested))
        return -1;
    while (p->s < p->end && *p->s == '|') {
        p->s++;
        if (push(p, out, GE_ALT, 0))
            return -1;
        space(p, 1);
        if (sequence(p, rid, out, nested))
            return -1;
    }
    return push(p, out, GE_END, 0);
}

static int parse_rules(parser *p)
{
    space(p, 1);
    while (p->s < p->end) {
        const char *n0 = p->s;
        while (p->s < p->end && is_word(*p->s))
            p->s++;
        if (p->s == n0)
            return fail_at(p, p->s, "expected a rule name%s", NULL);
        int id = rule_id(p, n0, (size_t)(p->s - n0));
        if (id < 0)
            return fail_at(p, n0, "out of memory%s", NULL);
        if (p->rules[id].defined)
            return fail_at(p, n0, "rule '%s' is defined twice", p->rules[id].name);
        space(p, 0);
        if (p->end - p->s < 3 || memcmp(p->s, "::=", 3))
            return fail_at(p, p->s, "expected '::='%s", NULL);
        p->s += 3;
        space(p, 1);
        evec body = {0};
        p->depth = 0;
        if (alternates(p, id, &body)) {
            free(body.p);
            return -1;
        }
        set_rule(p, id, &body);
        /* a rule ends at a newline, or where a trailing '|' let the next
         * rule's head be reached */
        const char *q = p->s;
        while (q < p->end && is_word(*q))
            q++;
        while (q < p->end && (*q == ' ' || *q == '\t'))
            q++;
        int next_head = q > p->s && p->end - q >= 3 && !memcmp(q, "::=", 3);
        if (p->s < p->end && *p->s != '\n' && *p->s != '\r' && !next_head)
            return fail_at(p, p->s, "unexpected character%s", NULL);
        space(p, 1);
    }
    return 0;
}

/* Nullable rules, then a cycle among "may start with" edges (through
 * nullable prefixes) is left recursion. Iterative: rule chains can be long. */
static int check_left_recursion(parser *p, const gram *g)
{
    int n = g->n_rules, rc = 0;
    char *nullable = calloc((size_t)n, 1), *color = calloc((size_t)n, 1);
    int *stack = malloc(sizeof(int) * 2 * ((size_t)n + 1));
    if (!nullable || !color || !stack) {
        rc = inf_fail(p->err, INF_ERR_NOMEM, "grammar: out of memory");
        goto out;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < n; r++) {
            if (nullable[r])
                continue;
            const gram_elem *e = g->e + g->rule_start[r];
            int ok = 1;
            for (;; e++) {
                if (gram__is_end(e)) {
                    if (ok) {
                        nullable[r] = 1;
                        changed = 1;
                        break;
                    }
                    if (e->type == GE_END)
                        break;
                    ok = 1;
                } else if (e->type == GE_REF) {
                    ok = ok && nullable[e->value];
                } else if (e->type != GE_RNG_UPPER && e->type != GE_CHAR_ALT) {
                    ok = 0;
                }
            }
        }
    }
    /* DFS over edges r -> refs at a nullable-prefixed position; the stack
     * holds (rule, element cursor). */
    for (int s = 0; s < n && !rc; s++) {
        if (color[s])
            continue;
        int sp = 0;
        stack[0] = s;
        stack[1] = g->rule_start[s];
        color[s] = 1;
        while (sp >= 0 && !rc) {
            int r = stack[2 * sp];
            int *cur = &stack[2 * sp + 1];
            int next = -1;
            while (next < 0) {
                const gram_elem *e = g->e + *cur;
                if (e->type == GE_END)
                    break;
                (*cur)++;
                if (e->type == GE_REF) {
                    next = (int)e->value;
                    if (!nullable[next]) /* rest of this alternative is not first */
                        while (!gram__is_end(g->e + *cur))
                            (*cur)++;
                } else if (!gram__is_end(e)) {
                    while (!gram__is_end(g->e + *cur))
                        (*cur)++;
                }
            }
            if (next < 0) {
                color[r] = 2;
                sp--;
            } else if (color[next] == 1) {
                rc = inf_fail(p->err, INF_ERR_INVALID, "grammar: rule '%s' is left-recursive",
                              p->rules[next].name);
            } else if (!color[next]) {
                color[next] = 1;
                sp++;
                stack[2 * sp] = next;
                stack[2 * sp + 1] = g->rule_start[next];
            }
        }
    }
out:
    free(nullable);
    free(color);
    free(stack);
    return rc;
}

static void free_rules(parser *p)
{
    for (int i = 0; i < p->n_rules; i++) {
        free(p->rules[i].name);
        free(p->rules[i].body.p);
    }
    free(p->rules);
    free(p->named);
}

int gram_parse(const char *text, size_t len, gram **out, inf_err *err)
{
    *out = NULL;
    parser p = {.s = text, .end = text + len, .start = text, .err = err};
    gram *g = NULL;
    int rc = parse_rules(&p);
    if (rc)
        goto fail;
    int root = -1;
    for (int i = 0; i < p.n_rules; i++) {
        if (!p.rules[i].defined) {
            rc = fail_at(&p, p.rules[i].use, "rule '%s' is used but not defined",
                         p.rules[i].name);
            goto fail;
        }
        if (!strcmp(p.rules[i].name, "root"))
            root = i;
    }
    if (root < 0) {
        rc = inf_fail(err, INF_ERR_INVALID, "grammar: no 'root' rule");
        goto fail;
    }
    g = calloc(1, sizeof *g);
    if (!g || !(g->rule_start = malloc(sizeof(int) * (size_t)p.n_rules)) ||
        !(g->e = malloc(sizeof(gram_elem) * (size_t)(p.n_elems + 1)))) {
        rc = inf_fail(err, INF_ERR_NOMEM, "grammar: out of memory");
        goto fail;
    }
    g->n_rules = p.n_rules;
    g->root = root;
    for (int i = 0; i < p.n_rules; i++) {
        g->rule_start[i] = g->n_e;
        memcpy(g->e + g->n_e, p.rules[i].body.p, sizeof(gram_elem) * (size_t)p.rules[i].body.n);
        g->n_e += p.rules[i].body.n;
    }
    rc = check_left_recursion(&p, g);
    if (rc)
        goto fail;
    free_rules(&p);
    *out = g;
    return INF_OK;
fail:
    if (rc != INF_ERR_NOMEM)
        rc = INF_ERR_INVALID;
    free_rules(&p);
    gram_destroy(g);
    return rc;
}

void gram_destroy(gram *g)
{
    if (!g)
        return;
    free(g->e);
    free(g->rule_start);
    free(g);
}

int gram__class_len(const gram_elem *e)
{
    if (e->type == GE_ANY)
        return 1;
    int n = 1;
    if (e[n].type == GE_RNG_UPPER)
        n++;
    while (e[n].type == GE_CHAR_ALT) {
        n++;
        if (e[n].type == GE_RNG_UPPER)
            n++;
    }
    return n;
}

/* Intervals of a class, sorted, for the negated case's coverage test. */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int gram__class_hits(const gram_elem *e, uint32_t lo, uint32_t hi)
{
    if (e->type == GE_ANY)
        return 1;
    int n = gram__class_len(e);
    if (e->type == GE_CHAR) {
        for (int i = 0; i < n; i++) {
            uint32_t a = e[i].value, b = i + 1 < n && e[i + 1].type == GE_RNG_UPPER ? e[++i].value : a;
            if (a <= hi && b >= lo)
                return 1;
        }
        return 0;
    }
    /* Negated: some point of [lo, hi] lies outside the union of the items. */
    uint64_t iv[64];
    int k = 0;
    for (int i = 0; i < n && k < 64; i++) {
        uint32_t a = e[i].value, b = i + 1 < n && e[i + 1].type == GE_RNG_UPPER ? e[++i].value : a;
        iv[k++] = (uint64_t)a << 32 | b;
    }
    if (k == 64) /* too many to sort here: allow, the full character decides */
        return 1;
    qsort(iv, (size_t)k, sizeof *iv, cmp_u64);
    uint64_t next = lo; /* first point not yet known covered */
    for (int i = 0; i < k; i++) {
        uint32_t a = (uint32_t)(iv[i] >> 32), b = (uint32_t)iv[i];
        if (a > next)
            break;
        if ((uint64_t)b + 1 > next)
            next = (uint64_t)b + 1;
    }
    return next <= hi;
}
