#include "app/backend.h"

#include <stdio.h>
#include <string.h>

#include "cpu/backend.h"
#ifdef INFERD_CUDA
#include "cuda/backend.h"
#endif
#include "engine/eng.h"
#include "engine/kv.h"

_Static_assert((int)APP_QUANT_NONE == (int)CPU_QUANT_NONE, "APP_QUANT_NONE is cpu_quant's none");

app_backend_config app_backend_config_default(void)
{
    return (app_backend_config){.device = "cpu", .kernels = "auto", .block_size = 16,
                                .max_tokens = 512, .max_seqs = 1, .gpu_mem = 0.9f, .tp = 1};
}

const char *app_backend_default_device(void)
{
#ifdef INFERD_CUDA
    char why[256];
    return cuda_available(why, sizeof why) ? "cuda" : "cpu";
#else
    return "cpu";
#endif
}

int app_backend_quant(const char *name) { return cpu_quant_parse(name); }

model_load_opts app_backend_load_opts(const app_backend_config *c)
{
    int cpu = !c->device || !strcmp(c->device, "cpu");
    /* int8 rows go to either device as stored (cuda/upload.c) */
    /* the CPU packs every layer matrix for int8 / int4, and CUDA uploads
     * each: a GGUF file's are converted one layer at a time as they do
     * (the backends' layer hooks) */
    /* 4-bit codes go to either device's int4 (CUDA's upload takes the
     * symmetric ones as stored, cuda/upload.c) */
    return (model_load_opts){.packed_q4 = !c->is_draft && c->quant == CPU_QUANT_INT4,
                             .packed_q8 = !c->is_draft && c->quant == CPU_QUANT_INT8,
                             .lazy_layers = !c->is_draft && (!cpu || c->quant != CPU_QUANT_NONE),
                             .threads = c->threads};
}

/* The context c's model is opened for: a draft's own is shorter at times. */
static int context_for(const model *m, const app_backend_config *c)
{
    int ctx = c->max_context > 0 ? c->max_context : model_context(&m->cfg);
    if (c->is_draft && model_context(&m->cfg) < ctx)
        ctx = model_context(&m->cfg);
    return ctx;
}

static size_t kv_budget(const app_backend_config *c)
{
    return c->kv_bytes ? c->kv_bytes : (size_t)4 << 30;
}

static int open_cpu(const model *m, const app_backend_config *c, app_backend *out, inf_err *err)
{
    cpu_config cc = cpu_config_default();
    cc.n_threads = c->is_draft ? 1 : c->threads; /* a draft's steps are too short to split */
    cc.kernels = c->kernels;
    cc.quant = c->is_draft ? CPU_QUANT_NONE : c->quant; /* --quantization is the target's */
    cc.layer_need = c->layer_need;
    cc.layer_packed = c->layer_packed;
    cc.layer_ctx = c->layer_ctx;
    cc.block_size = c->block_size;
    cc.max_tokens = c->max_tokens;
    cc.max_context = out->max_context;
    /* the KV pool: every sequence at full length, or the memory budget */
    cc.num_blocks = c->num_blocks > 0
                        ? c->num_blocks
                        : kv_pool_blocks(kv_budget(c),
                                         cpu_kv_bytes_per_token(m) * (size_t)c->block_size,
                                         c->block_size, c->max_seqs, out->max_context);
    int rc = cpu_backend_create(m, &cc, &out->be, err);
    if (!rc) {
        out->num_blocks = cc.num_blocks;
        snprintf(out->kernels, sizeof out->kernels, "%s", cpu_backend_kernels(out->be));
    }
    return rc;
}

#ifdef INFERD_CUDA
_Static_assert((int)CUDA_QUANT_INT8 == (int)CPU_QUANT_INT8 &&
                   (int)CUDA_QUANT_INT4 == (int)CPU_QUANT_INT4,
               "--quantization means the same on both devices");

/* The draft's GPU shape beside a target of c: the same step, the shorter of
 * the two contexts; its pool the target's blocks. */
static cuda_config draft_gpu_config(const model *dm, const app_backend_config *c)
{
    int ctx = model_context(&dm->cfg);
    int max_len = c->max_context > 0 ? c->max_context : ctx;
    return cuda_config_for(c->block_size, c->max_tokens, ctx < max_len ? ctx : max_len,
                           c->max_seqs);
}

static int open_cuda(const model *m, const app_backend_config *c, app_backend *out, inf_err *err)
{
    if (c->is_draft) {
        cuda_config dc = draft_gpu_config(m, c);
        dc.num_blocks = c->num_blocks;
        int rc = cuda_backend_create(m, &dc, &out->be, err);
        if (!rc) {
            out->num_blocks = c->num_blocks;
            snprintf(out->kernels, sizeof out->kernels, "cuda");
        }
        return rc;
    }
    cuda_config gc = cuda_config_for(c->block_size, c->max_tokens, out->max_context, c->max_seqs);
    if (c->gpu_mem > 0)
        gc.gpu_memory_utilization = c->gpu_mem;
    gc.max_logits = c->max_seqs * (c->spec_k + 1) + ENG_PROMPT_LOGPROB_ROWS;
    gc.tensor_parallel_size = c->tp > 0 ? c->tp : 1;
    gc.quant = c->quant; /* a draft (above) keeps its checkpoint's dtype */
    gc.layer_need = c->layer_need;
    gc.layer_packed = c->layer_packed;
    gc.layer_ctx = c->layer_ctx;
    int rc = INF_OK;
    size_t per = 0, dfixed = 0, dper = 0;
    if (c->num_blocks > 0) {
        gc.num_blocks = c->num_blocks;
    } else {
        if (c->draft) { /* the draft's share comes out of the same budget */
            app_backend_config t = *c;
            t.max_context = out->max_context;
            cuda_config dc = draft_gpu_config(c->draft, &t);
            rc = cuda_backend_footprint(c->draft, &dc, &dfixed, &dper, err);
            gc.reserve_bytes = dfixed + ((size_t)64 << 20); /* and its library state */
            gc.extra_block_bytes = dper;
        }
        if (!rc && c->kv_bytes && /* a byte budget: exactly that cache, as on the CPU */
            !(rc = cuda_backend_footprint(m, &gc, NULL, &per, err)))
            gc.num_blocks = kv_pool_blocks(c->kv_bytes, per + dper, c->block_size, c->max_seqs,
                                           out->max_context);
    }
    if (!rc)
        rc = cuda_backend_create(m, &gc, &out->be, err);
    if (!rc) {
        cuda_info ci;
        cuda_backend_info(out->be, &ci);
        out->num_blocks = ci.num_blocks;
        snprintf(out->kernels, sizeof out->kernels, "cuda");
        int at = snprintf(out->note, sizeof out->note,
                          "cuda: %.80s x%d, weights %.1f GiB, activations %.1f GiB, KV %.1f GiB "
                          "per GPU", ci.device, ci.tp, ci.weights / 1073741824.0,
                          ci.acts / 1073741824.0, ci.kv / 1073741824.0);
        if (ci.q4_requant > 0 && at > 0 && (size_t)at < sizeof out->note)
            snprintf(out->note + at, sizeof out->note - (size_t)at,
                     "; %d layer matrices' 4-bit codes requantized from their values (zero "
                     "points or sorted inputs, which the GPU's int4 does not hold)",
                     ci.q4_requant);
    }
    return rc;
}
#endif

int app_backend_open(const model *m, const app_backend_config *c, app_backend *out,
                     inf_err *err)
{
    memset(out, 0, sizeof *out);
    if (c->is_draft && c->num_blocks <= 0)
        return inf_fail(err, INF_ERR_INVALID, "a draft's backend needs the target's KV blocks");
    out->max_context = context_for(m, c);
    if (!c->device || !strcmp(c->device, "cpu"))
        return open_cpu(m, c, out, err);
#ifdef INFERD_CUDA
    if (!strcmp(c->device, "cuda"))
        return open_cuda(m, c, out, err);
#endif
    if (!strcmp(c->device, "cuda"))
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "--device %s: this build has no CUDA backend (build with make CUDA=1)",
                        c->device);
    return inf_fail(err, INF_ERR_INVALID, "--device is cpu or cuda, not %s", c->device);
}
