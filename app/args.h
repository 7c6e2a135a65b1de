/* args_: long-option parsing shared by inferd's commands. "--name value",
 * "--name=value" and underscore spellings ("--max_tokens") all work, as in
 * vLLM's CLI. */
#ifndef INFERD_ARGS_H
#define INFERD_ARGS_H

#include <stdio.h>

#include "engine/common.h"

/* ARG_FLAG sets its int to 1; ARG_FLAG_OFF ("--no-x") sets the same int
 * as an ARG_FLAG "--x" to 0, so whichever source comes last wins. ARG_STRS
 * is a repeatable option ("--api-key A --api-key B") collecting into an
 * arg_strs; a source that names it (the command line, the environment, a
 * config key) replaces what earlier sources gave, as for every option. */
typedef enum arg_kind { ARG_STR, ARG_INT, ARG_FLOAT, ARG_FLAG, ARG_FLAG_OFF, ARG_STRS } arg_kind;

#define ARG_STRS_MAX 64
typedef struct arg_strs {
    const char *v[ARG_STRS_MAX]; /* borrowed from argv, environ or the config */
    int n;
} arg_strs;

typedef struct arg_spec {
    const char *name;    /* without dashes, e.g. "max-tokens"          */
    arg_kind kind;
    void *dst;           /* const char **, int *, float *, int * or arg_strs * */
    const char *metavar; /* shown in --help; NULL for flags            */
    const char *help;
} arg_spec;

/* Parses argv[0..argc) (no program name) into the specs' destinations.
 * Unknown options, missing or malformed values: INF_ERR_INVALID with a
 * message naming the option. A bare "--help" sets *want_help. */
int args_parse(const arg_spec *specs, int n_specs, int argc, char **argv,
               int *want_help, inf_err *err);

/* Reads every option from the environment first: "max-num-seqs" is
 * PREFIX + "MAX_NUM_SEQS" (e.g. INFERD_MAX_NUM_SEQS); flags take "1",
 * "true" or "yes". Same errors as args_parse, naming the variable. */
int args_from_env(const arg_spec *specs, int n_specs, const char *prefix, inf_err *err);

/* Sets the option called name (dashes or underscores) from a string value;
 * flags take true/false, yes/no, on/off or 1/0. INF_ERR_INVALID for an unknown
 * name or a bad value, with a message naming the option. */
int args_set(const arg_spec *specs, int n_specs, const char *name, const char *value,
             inf_err *err);

/* One line per option. */
void args_help(FILE *f, const arg_spec *specs, int n_specs);

#endif
