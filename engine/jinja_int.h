/* jinja__: what the Jinja interpreter's files share (not a public API).
 *
 * jinja_lex.c    source -> tokens (Jinja's lexer rules, whitespace control)
 * jinja_parse.c  tokens -> syntax tree
 * jinja_val.c    values, the arena, str()/repr()/json.dumps, comparisons
 * jinja_eval.c   the tree-walking evaluator
 * jinja_access.c  attribute, item, slice, iteration, Undefined
 * jinja_ops.c    operators
 * jinja_lib.c    filters
 * jinja_test.c   tests and globals
 * jinja_str.c    methods of str, dict, list (what the sandbox allows)
 * jinja_util.c   the globals cycler, joiner, lipsum
 * jinja_fmt.c    str % args and str.format with format specs
 * jinja_json.c   JSON text -> values (Python's json.loads)
 * jinja_vars.c   jinja_vars: a render's variables, vLLM's messages */
#ifndef INFERD_JINJA_INT_H
#define INFERD_JINJA_INT_H

#include <stdint.h>
#include <stddef.h>

#include "jinja.h"

/* ---------------------------------------------------------------- arena */

typedef struct jx_chunk jx_chunk;
typedef struct jx_arena {
    jx_chunk *head;
    size_t used, cap; /* bytes handed out; the limit (0: none)              */
    int full;         /* the limit was hit                                   */
} jx_arena;

void *jx_alloc(jx_arena *a, size_t n); /* zeroed; NULL when over the limit */
void *jx_alloc_raw(jx_arena *a, size_t n); /* the same, not zeroed          */
void jx_arena_free(jx_arena *a);

/* --------------------------------------------------------------- values */

typedef enum jv_type {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_NS, JV_FUNC, JV_LOOP,
} jv_type;

typedef struct jstr { size_t len; char b[]; } jstr;
typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jloop jloop;

/* Why a value is undefined, kept unformatted until an error needs it
 * (templates test for missing keys all the time). */
typedef struct jundef {
    int kind;            /* 1 "'name' is undefined", 2 no attribute, 3 no element */
    const char *obj;     /* kinds 2, 3: Jinja's name of the object's type      */
    const char *name;    /* kinds 1, 2                                         */
    struct jv *key;      /* kind 3                                             */
} jundef;

struct jv {
    jv_type t;
    int tuple;           /* JV_LIST: a tuple (repr with parentheses);
                            JV_UNDEF: u.ud (lazy hint) rather than u.s;
                            JV_NS: a cycler (read-only, jinja_util.c)          */
    union {
        int b;
        int64_t i;
        double f;
        jstr *s;         /* JV_STR; JV_UNDEF: the hint (may be NULL)        */
        jlist *l;
        jdict *d;        /* JV_DICT, JV_NS                                  */
        jfunc *fn;
        jloop *lp;
        jundef *ud;
    } u;
};

struct jlist { int n, cap; jv *v; };
struct jdict { int n, cap; jv *k, *v; };

typedef struct jctx jctx;
typedef struct jnode jnode;

/* Call arguments: positional then keyword. */
typedef struct jargs {
    int n, nk;
    jv *v;
    const char **kname;
    jv *kv;
} jargs;

typedef int (*jbuiltin)(jctx *c, jv self, const jargs *a, jv *out);
typedef int (*jfilter_fn)(jctx *c, jv in, const jargs *a, jv *out);

typedef enum jfunc_kind { JF_BUILTIN, JF_MACRO, JF_CALLER } jfunc_kind;
struct jfunc {
    jfunc_kind kind;
    const char *name;
    jbuiltin fn;         /* JF_BUILTIN                                      */
    jv self;             /* a bound method's object                         */
    const jnode *node;   /* JF_MACRO / JF_CALLER: the macro or call block   */
    struct jscope *scope;/* where it was defined                            */
    jv caller;           /* a macro called from {% call %}: its caller      */
};

struct jloop {
    jlist *items;
    int index0, depth0;
    const jnode *node;   /* the for loop (loop(...) recursion)              */
    struct jscope *scope;
};

/* Constructors (strings are copied into the arena). */
static inline jv jv_undef(void) { jv v = {0}; v.t = JV_UNDEF; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(int b) { jv v = {0}; v.t = JV_BOOL; v.u.b = !!b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.u.f = f; return v; }

/* Each returns 0, or -1 with the error recorded in c. */
int jv_str(jctx *c, const char *s, size_t n, jv *out);
int jv_cstr(jctx *c, const char *s, jv *out);
int jv_str2(jctx *c, const jstr *a, const jstr *b, jv *out); /* a + b */
int jv_list_new(jctx *c, int cap, jv *out);
int jv_list_push(jctx *c, jv list, jv item);
int jv_dict_new(jctx *c, jv *out);
int jv_dict_set(jctx *c, jv dict, jv key, jv val);
int jv_dict_add(jctx *c, jv dict, jv key, jv val); /* key known absent */
jv *jv_dict_get(jv dict, const char *key, size_t klen); /* NULL if absent  */
jv *jv_dict_find(jctx *c, jv dict, jv key);           /* by == ; NULL    */
int jv_undef_hint(jctx *c, jv *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int jv_from_json(jctx *c, const cJSON *j, jv *out);

int jv_truthy(jv v);
int jv_is_num(jv v);     /* int, float or bool (Python's Number)            */
double jv_num(jv v);
const char *jv_type_name(jv v); /* Python's: "str", "dict object", ...       */

/* Text forms, appended to a buffer: str(), repr(), json.dumps(). */
typedef struct jbuf { char *p; size_t len, cap; } jbuf;
int jb_put(jctx *c, jbuf *b, const char *s, size_t n);
int jb_str(jctx *c, jbuf *b, jv v);
int jb_repr(jctx *c, jbuf *b, jv v);
int jb_json(jctx *c, jbuf *b, jv v, const char *indent, int level, int sort_keys,
            const char *item_sep, const char *key_sep);
int jv_to_str(jctx *c, jv v, jv *out); /* str(v) as a string value         */
void jfmt_float(double f, char *buf, size_t cap); /* Python's repr(float)  */

/* Python ==, and ordering (<0, 0, >0; -1 with an error for incomparable). */
int jv_eq(jv a, jv b);
int jv_cmp(jctx *c, jv a, jv b, int *out);

/* UTF-8 helpers. */
size_t ju_decode(const unsigned char *s, size_t n, unsigned *cp);
int ju_is_space(unsigned cp);
size_t ju_count(const char *s, size_t n); /* code points */
size_t ju_offset(const char *s, size_t n, size_t cp); /* byte of code point */

/* ---------------------------------------------------------------- tokens */

typedef enum jtok_type {
    JT_EOF, JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP,
} jtok_type;

typedef struct jtok {
    jtok_type t;
    int line;
    const char *s; size_t n; /* DATA/NAME/OP: the text; STRING: unescaped  */
    int64_t i;
    double f;
} jtok;

typedef struct jtoks { jtok *v; int n, cap; } jtoks;

/* Tokenizes src; strings land in arena a. */
int jx_lex(const char *src, size_t len, jx_arena *a, jtoks *out, inf_err *err);

/* ------------------------------------------------------------ the tree */

typedef enum jnode_kind {
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_CALL_BLOCK,
    JN_FILTER_BLOCK, JN_BREAK, JN_CONTINUE, JN_BODY, JN_WITH, JN_LOAD, JN_BLOCK,
    /* expressions */
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL,
    JN_FILTER, JN_TEST, JN_BIN, JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR, JN_COND,
    JN_CONCAT, JN_COMPARE, JN_NSREF,
} jnode_kind;

/* Operators of JN_BIN and JN_COMPARE. */
enum { JO_ADD, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_POW,
       JO_EQ, JO_NE, JO_LT, JO_LE, JO_GT, JO_GE, JO_IN, JO_NOTIN };

/* JN_MACRO's op: the body reads varargs / kwargs. */
enum { JM_VARARGS = 1, JM_KWARGS = 2 };
/* JN_LOAD's op: the tag that loads another template. */
enum { JL_INCLUDE, JL_IMPORT, JL_FROM, JL_EXTENDS };

/* One node; which fields mean what depends on kind (jinja_parse.c says). */
struct jnode {
    jnode_kind kind;
    int op, line;
    jnode *a, *b, *c;
    jnode **list; int n;        /* body, items, args, operands              */
    jnode **list2; int n2;      /* else body, keyword values, defaults      */
    const char **names; int nn; /* keyword names, targets, parameters      */
    int *ops;                   /* JN_COMPARE: n operators                  */
    const char *name;           /* JN_NAME, JN_ATTR, filters, tests, macros */
    jfilter_fn filter;          /* JN_FILTER: resolved at parse time        */
    jv lit;                     /* JN_LIT, JN_TEXT                          */
    int recursive;              /* JN_FOR                                   */
};

struct jinja_tmpl {
    jx_arena arena;
    jnode *root;                /* JN_BODY                                  */
    int iterates_content;
};

int jx_parse(const jtoks *toks, jx_arena *a, jnode **root, int *iterates_content,
             inf_err *err);

/* -------------------------------------------------------- the evaluator */

typedef struct jscope {
    struct jscope *parent;
    int n, cap;
    const char **names;
    jv *vals;
} jscope;

struct jctx {
    jx_arena arena;
    const jinja_opts *o;
    jbuf *out;                  /* where output goes now                    */
    int depth;
    long steps;
    int line;                   /* of the node being evaluated              */
    int failed;
    int code;
    int raw_msg;                /* msg is raise_exception's, verbatim       */
    int json_ascii;             /* tojson(ensure_ascii=True) in progress    */
    char msg[480];
    jscope *globals;
};

int jx_fail(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int jx_undef_error(jctx *c, jv u); /* fails with why u is undefined        */
/* An undefined value whose reason (jundef kind 1-3) is formatted only if
 * an error needs it. */
int jx_lazy_undef(jctx *c, int kind, const char *obj, const char *name, const jv *key, jv *out);
int jx_step(jctx *c);           /* counts a step; -1 past the limit         */

/* Evaluator entry points the library needs (map/select use filters and
 * tests; macros are called). */
int jx_call(jctx *c, jv fn, const jargs *a, jv *out);
int jx_filter(jctx *c, const char *name, jv in, const jargs *a, jv *out);
int jx_filter_fn(jctx *c, jfilter_fn f, jv in, const jargs *a, jv *out);
int jx_test(jctx *c, const char *name, jv in, const jargs *a, int *out);
int jx_getattr(jctx *c, jv obj, const char *name, jv *out);
int jx_getitem(jctx *c, jv obj, jv key, jv *out);
int jx_slice(jctx *c, jv obj, jv *parts, jv *out); /* parts: start, stop, step (none: default) */
/* Operators (jinja_ops.c): JO_* of jinja_parse's nodes. */
int jx_binop(jctx *c, int op, jv a, jv b, jv *out);
int jx_compare(jctx *c, int op, jv a, jv b, jv *out);
int jx_compare_int(jctx *c, int op, jv a, jv b, int *out);
int jx_eval_expr(jctx *c, const jnode *n, jv *out);
/* The items a for loop walks: a list's, a dict's keys, a str's characters;
 * undefined is empty; anything else is an error. */
int jx_iter(jctx *c, jv v, jlist **out);
int jx_scope_set(jctx *c, jscope *s, const char *name, jv v);

/* Python's fmt % args, and fmt.format(*a) (jinja_fmt.c). */
int jx_percent(jctx *c, jv fmt, jv args, jv *out);
int jx_str_format(jctx *c, jv self, const jargs *a, jv *out);

/* Reads JSON text s[0:n] into *out as json.loads would (jinja_json.c). */
int jx_json_read(jctx *c, const char *s, size_t n, jv *out);

/* A render's variables, built before it in their own arena (the render
 * reads them, never changes them). */
struct jinja_vars {
    jinja_opts o;
    jctx c;
    jscope s;
};

/* The library: lookup of a filter / test by name (NULL if unknown), a
 * method of a str/dict/list (0 with out undefined if none), globals. */
jfilter_fn jx_find_filter(const char *name);
int jx_find_test(const char *name);   /* 1 if known */
int jx_method(jctx *c, jv self, const char *name, jv *out);
int jx_add_globals(jctx *c, jscope *g);
int jx_add_util_globals(jctx *c, jscope *g); /* cycler, joiner, lipsum */
/* Argument helper: the i-th positional or the keyword name, or NULL. */
const jv *jx_arg(const jargs *a, int i, const char *name);

#endif
