#include "tests/mlp_fix.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <cmocka.h>

/* A safetensors file of f32 tensors; cols 0: a vector of rows values. */
typedef struct wtensor {
    char name[64];
    int64_t rows, cols;
    float *data;
} wtensor;

static size_t count(const wtensor *t) { return (size_t)(t->rows * (t->cols > 0 ? t->cols : 1)); }

static void write_st(const char *path, wtensor *t, int n)
{
    size_t cap = 256 + (size_t)n * 160, len = 0, off = 0;
    char *hdr = malloc(cap);
    assert_non_null(hdr);
    len += (size_t)snprintf(hdr + len, cap - len, "{");
    for (int i = 0; i < n; i++) {
        size_t bytes = count(&t[i]) * 4;
        if (t[i].cols > 0)
            len += (size_t)snprintf(hdr + len, cap - len,
                                    "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],"
                                    "\"data_offsets\":[%zu,%zu]}", i ? "," : "", t[i].name,
                                    (long long)t[i].rows, (long long)t[i].cols, off, off + bytes);
        else
            len += (size_t)snprintf(hdr + len, cap - len,
                                    "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],"
                                    "\"data_offsets\":[%zu,%zu]}", i ? "," : "", t[i].name,
                                    (long long)t[i].rows, off, off + bytes);
        off += bytes;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8)
        hdr[len++] = ' ';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n8 = len;
    fwrite(&n8, 8, 1, f);
    fwrite(hdr, 1, len, f);
    for (int i = 0; i < n; i++)
        fwrite(t[i].data, 4, count(&t[i]), f);
    assert_int_equal(fclose(f), 0);
    free(hdr);
}

float mlp_fix_gauss(unsigned *s)
{
    double u = 0;
    for (int i = 0; i < 12; i++) {
        *s = *s * 1103515245u + 12345u;
        u += (double)(*s >> 8) / 16777216.0;
    }
    return (float)(u - 6.0);
}

void mlp_fix_write(const char *dir, int V, int D, int I, int n_predict, int tied, float head_sd,
                   unsigned seed)
{
    mkdir(dir, 0755);
    char path[800];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"architectures\": [\"MLPSpeculatorPreTrainedModel\"], \"model_type\": "
               "\"mlp_speculator\", \"vocab_size\": %d, \"emb_dim\": %d, \"inner_dim\": %d, "
               "\"n_predict\": %d, \"top_k_tokens_per_head\": [1, 1, 1], \"n_candidates\": 1, "
               "\"tie_weights\": %s, \"scale_input\": true}\n", V, D, I, n_predict,
            tied ? "true" : "false");
    assert_int_equal(fclose(f), 0);
    int sets = tied ? 1 : n_predict, projs = tied ? 2 : n_predict, n = 0;
    wtensor *t = calloc((size_t)(4 * sets + projs), sizeof *t);
    assert_non_null(t);
    /* kind 0 emb, 1 head, 2 ln weight, 3 ln bias, 4 proj */
    int *kind = calloc((size_t)(4 * sets + projs), sizeof *kind);
    assert_non_null(kind);
    for (int i = 0; i < sets; i++) {
        static const char *const names[4] = {"emb.%d.weight", "head.%d.weight",
                                             "ln.%d.weight", "ln.%d.bias"};
        for (int k = 0; k < 4; k++, n++) {
            char bare[48];
            snprintf(bare, sizeof bare, names[k], i);
            snprintf(t[n].name, sizeof t[n].name, "speculator.%s", bare);
            t[n].rows = k < 2 ? V : I;
            t[n].cols = k < 2 ? I : 0;
            kind[n] = k;
        }
    }
    for (int i = 0; i < projs; i++, n++) {
        snprintf(t[n].name, sizeof t[n].name, "speculator.proj.%d.weight", i);
        t[n].rows = I;
        t[n].cols = i == 0 ? D : I;
        kind[n] = 4;
    }
    for (int i = 0; i < n; i++) {
        size_t c = count(&t[i]);
        t[i].data = malloc(c * 4);
        assert_non_null(t[i].data);
        for (size_t j = 0; j < c; j++)
            t[i].data[j] = kind[i] == 2   ? 1.0f + 0.1f * mlp_fix_gauss(&seed)
                           : kind[i] == 0 ? mlp_fix_gauss(&seed)
                           : kind[i] == 1 ? mlp_fix_gauss(&seed) * head_sd
                                          : mlp_fix_gauss(&seed) * 0.2f;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_st(path, t, n);
    for (int i = 0; i < n; i++)
        free(t[i].data);
    free(t);
    free(kind);
}
