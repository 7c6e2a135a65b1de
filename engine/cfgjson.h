/* cfgj_: strict getters over a model's JSON config files (config.json,
 * generation_config.json, an MLP speculator's or a GGUF file's mapped
 * metadata). Absent and null both mean "keep the default"; a value of the
 * wrong JSON type is a format error naming the file and the key. */
#ifndef INFERD_CFGJSON_H
#define INFERD_CFGJSON_H

#include <cJSON.h>

#include "common.h"

/* Reads and parses path, which must hold one JSON object (a few KB; over
 * 16 MiB is refused). */
int cfgj_read(const char *path, cJSON **out, inf_err *err);

/* key's value, or NULL when absent or null. */
const cJSON *cfgj_item(const cJSON *o, const char *key);

/* 1 and *out set when v is a number holding an int exactly. */
int cfgj_is_int(const cJSON *v, int *out);

/* A number / integer / boolean key: absent keeps *out (an absent required
 * int is an error); the wrong JSON type is INF_ERR_FORMAT naming path and
 * key. */
int cfgj_int(const cJSON *o, const char *key, int required, int *out, const char *path,
             inf_err *err);
int cfgj_num(const cJSON *o, const char *key, double *out, const char *path, inf_err *err);
int cfgj_bool(const cJSON *o, const char *key, int *out, const char *path, inf_err *err);

#endif
