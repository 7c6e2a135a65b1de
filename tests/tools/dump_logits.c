/* dump_logits: the C engine's logits for every position of a token sequence,
 * as raw little-endian float32 [n_tokens][vocab], for comparison with the
 * numpy reference (tests/ref/llama_ref.py).
 *
 *   dump_logits --model DIR --tokens 1,2,3 --out FILE [--kernels K] [--quantization int8|int4]
 *               [--chunk N] [--threads N] [--hidden FILE]
 *
 * --hidden also writes the final hidden state of every position (after the
 * final norm; be_batch.want_hidden) as float32 [n_tokens][hidden_size]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/backend.h"
#include "engine/batch.h"
#include "engine/kv.h"
#include "engine/model.h"
#include "app/args.h"
#include "app/backend.h"

static int parse_ids(const char *s, int32_t *ids, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s)
            return -1;
        ids[n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
    }
    return *s ? -1 : n;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *tokens = NULL, *out = NULL, *kernels = "auto", *quant = NULL;
    const char *hid_out = NULL;
    int chunk = 0, threads = 0, help = 0;
    const arg_spec specs[] = {
        {"model", ARG_STR, &dir, "DIR", "model directory"},
        {"tokens", ARG_STR, &tokens, "IDS", "comma-separated token ids"},
        {"out", ARG_STR, &out, "FILE", "output file"},
        {"kernels", ARG_STR, &kernels, "NAME", "kernel table"},
        {"chunk", ARG_INT, &chunk, "N", "feed the sequence N tokens per forward (default all)"},
        {"threads", ARG_INT, &threads, "N", "threads"},
        {"quantization", ARG_STR, &quant, "NAME", "none, int8 or int4"},
        {"hidden", ARG_STR, &hid_out, "FILE", "also the final hidden states"},
    };
    inf_err err = {0};
    if (args_parse(specs, 8, argc - 1, argv + 1, &help, &err) || !dir || !tokens || !out) {
        fprintf(stderr, "dump_logits: %s\n", err.msg[0] ? err.msg : "--model, --tokens, --out required");
        return 2;
    }
    if (cpu_quant_parse(quant) < 0) {
        fprintf(stderr, "dump_logits: --quantization %s: none, int8 or int4\n", quant);
        return 2;
    }
    int32_t ids[4096];
    int n = parse_ids(tokens, ids, 4096);
    if (n < 1) {
        fprintf(stderr, "dump_logits: bad --tokens\n");
        return 2;
    }
    if (chunk <= 0 || chunk > n)
        chunk = n;
    model *m = NULL;
    be_backend *be = NULL;
    kv_pool *kv = NULL;
    kv_seq seq = {0};
    batch_builder *bb = NULL;
    float *logits = NULL, *hidden = NULL;
    /* a pre-quantized checkpoint's integers as serve loads them */
    app_backend_config bc = app_backend_config_default();
    bc.quant = cpu_quant_parse(quant);
    model_load_opts lo = app_backend_load_opts(&bc);
    int rc = model_load_with(dir, &lo, &m, &err);
    if (rc)
        goto done;
    int V = m->cfg.vocab_size;
    cpu_config cc = cpu_config_default();
    cc.kernels = kernels;
    cc.quant = cpu_quant_parse(quant);
    cc.n_threads = threads;
    cc.max_tokens = chunk;
    cc.max_context = n;
    cc.num_blocks = (n + cc.block_size - 1) / cc.block_size + 1;
    cc.layer_need = model_layer_need;     /* as serve does: the loader's copy */
    cc.layer_packed = model_layer_packed; /* of each layer goes once packed   */
    cc.layer_ctx = m;
    kv_config kc = {.num_blocks = cc.num_blocks, .block_size = cc.block_size};
    if ((rc = cpu_backend_create(m, &cc, &be, &err)) || (rc = kv_create(&kc, &kv, &err)))
        goto done;
    logits = malloc(sizeof(float) * (size_t)n * V);
    batch_limits bl = {.max_tokens = chunk, .max_seqs = 1, .max_rows = chunk,
                       .max_blocks = cc.num_blocks - 1};
    if ((rc = batch_create(&bl, &bb, &err)))
        goto done;
    batch_set_want_hidden(bb, hid_out != NULL);
    int D = m->cfg.hidden_size;
    if (hid_out && !(hidden = malloc(sizeof(float) * (size_t)n * D))) {
        rc = inf_fail(&err, INF_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (!logits || kv_seq_reserve(kv, &seq, n)) {
        rc = inf_fail(&err, INF_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int p0 = 0; p0 < n; p0 += chunk) {
        int c = n - p0 < chunk ? n - p0 : chunk;
        batch_reset(bb);
        batch_add_seq(bb, kv, &seq, ids + p0, p0, c);
        for (int i = 0; i < c; i++)
            batch_add_logits(bb, i);
        be_out o = {.logits = logits + (size_t)p0 * V,
                    .hidden = hidden ? hidden + (size_t)p0 * D : NULL};
        if ((rc = be_forward_out(be, batch_get(bb), &o, &err)))
            goto done;
    }
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(logits, sizeof(float), (size_t)n * V, f) != (size_t)n * V) {
        rc = inf_fail(&err, INF_ERR_IO, "%s: cannot write", out);
        if (f)
            fclose(f);
        goto done;
    }
    fclose(f);
    if (hid_out) {
        f = fopen(hid_out, "wb");
        if (!f || fwrite(hidden, sizeof(float), (size_t)n * D, f) != (size_t)n * D) {
            rc = inf_fail(&err, INF_ERR_IO, "%s: cannot write", hid_out);
            if (f)
                fclose(f);
            goto done;
        }
        fclose(f);
    }
done:
    if (rc)
        fprintf(stderr, "dump_logits: %s\n", err.msg);
    free(logits);
    free(hidden);
    batch_destroy(bb);
    if (kv)
        kv_seq_release(kv, &seq);
    kv_destroy(kv);
    be_destroy(be);
    model_destroy(m);
    return rc ? 1 : 0;
}
