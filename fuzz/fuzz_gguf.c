/* A GGUF file through the container reader and every block dequantizer
 * (from memory), then through the whole model loader (metadata mapping,
 * shapes, conversion) from a memfd. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/gguf.h"
#include "engine/gguf_model.h"

/* Q4_0's codes as the int4 kernels take them (gguf_q4_0_codes) hold the
 * values the dequantizer gives, bit for bit (NaN as NaN). */
static void q4_0_codes_agree(const void *src, int64_t n, const float *v)
{
    uint8_t *u = malloc((size_t)n / 2);
    uint16_t *d = malloc(sizeof *d * (size_t)(n / 32));
    if (u && d) {
        gguf_q4_0_codes(src, n, u, d);
        for (int64_t i = 0; i < n; i++) {
            int q = i % 2 ? u[i / 2] >> 4 : u[i / 2] & 0xF;
            float w = (float)(q - 8) * inf_f16_to_f32(d[i / 32]);
            if (memcmp(&w, &v[i], sizeof w) && !(w != w && v[i] != v[i]))
                abort();
        }
    }
    free(u);
    free(d);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    gguf_file *g = NULL;
    inf_err err;
    if (gguf_open_mem(data, size, "fuzz", &g, &err) == INF_OK) {
        for (int i = 0; i < gguf_kv_count(g); i++)
            (void)gguf_find_kv(g, gguf_kv_at(g, i)->key);
        for (int i = 0; i < gguf_tensor_count(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            int64_t n = 1;
            for (int d = 0; d < t->n_dims; d++)
                n *= t->ne[d];
            if (!t->known || n > (1 << 20))
                continue;
            float *v = malloc(sizeof(float) * (size_t)n);
            if (v)
                gguf_dequant(t->type, t->data, v, n);
            if (v && t->type == GGUF_Q4_0)
                q4_0_codes_agree(t->data, n, v);
            free(v);
        }
        gguf_close(g);
    }
    int fd = memfd_create("fuzz-gguf", 0);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        model *m = NULL;
        if (gguf_model_load(path, NULL, &m, &err) == INF_OK)
            model_destroy(m);
        /* with lazy layers: every layer converted, let go, converted
         * again; then as the CPU's int4 loads it (Q4_0 as codes, let go) */
        const model_load_opts lazy = {.lazy_layers = 1};
        if (gguf_model_load(path, &lazy, &m, &err) == INF_OK) {
            for (int l = 0; l < m->cfg.n_layers; l++)
                if (model_layer_need(m, l, &err) == INF_OK) {
                    model_layer_packed(m, l);
                    if (model_layer_need(m, l, &err) != INF_OK)
                        abort(); /* converted once, it converts again */
                }
            model_destroy(m);
        }
        const model_load_opts codes = {.lazy_layers = 1, .packed_q4 = 1};
        if (gguf_model_load(path, &codes, &m, &err) == INF_OK) {
            for (int l = 0; l < m->cfg.n_layers; l++)
                if (model_layer_need(m, l, &err) == INF_OK) {
                    model_layer_packed(m, l);
                    if (m->layers[l].wq.q4 || m->layers[l].w_down.q4_scale)
                        abort(); /* a packed layer's codes are let go */
                }
            model_destroy(m);
        }
    }
    close(fd);
    return 0;
}
