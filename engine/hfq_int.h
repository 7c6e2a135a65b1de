/* hfq's internals, shared by hfq.c (GPTQ, AWQ) and hfq_ct.c
 * (compressed-tensors). */
#ifndef INFERD_HFQ_INT_H
#define INFERD_HFQ_INT_H

#include "hfq.h"

#include <cJSON.h>

typedef enum { HFQ_GPTQ, HFQ_AWQ, HFQ_CT_INT8 } hfq_kind;

struct hfq {
    hfq_kind kind;
    int group;       /* group_size; <= 0: one group per row */
    int zero_plus1;  /* GPTQ v1 stores zero - 1                */
    char path[512];  /* config.json, for messages              */
    void **bufs;     /* what bound tensors point into           */
    int n_bufs, cap;
};

/* A string key, or NULL. */
const char *hfq__jstr(const cJSON *o, const char *k);
/* An integer key, or def when absent; -1000 when not an integer. */
int hfq__jint(const cJSON *o, const char *k, int def);
/* n floats owned by q (freed by hfq_free), or NULL. */
float *hfq__keep(hfq *q, size_t n);

/* Checks a compressed-tensors quantization_config qc: INF_OK when it is
 * W8A8 int8 as inferd runs it, else an error naming the field and value. */
int hfq__ct_open(const cJSON *qc, const char *path, inf_err *err);

/* hfq_bind for compressed-tensors: name is I8 [rows, cols] beside its
 * name-minus-"weight" + "weight_scale". */
int hfq__ct_bind(hfq *q, const st_set *st, const char *name, int64_t rows, int64_t cols,
                 model_tensor *out, inf_err *err);

#endif
