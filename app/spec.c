#include "app/spec.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>

#include "engine/spec_draft.h"
#include "engine/cfgjson.h"
#include "engine/spec_mlp.h"
#ifdef INFERD_CUDA
#include "cuda/backend.h"
#include "cuda/mlp.h"
#endif

static int json_int(const cJSON *o, const char *key, int *out, inf_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v))
        return INF_OK;
    if (!cfgj_is_int(v, out))
        return inf_fail(err, INF_ERR_INVALID, "--speculative-config: \"%s\" must be an integer",
                        key);
    return INF_OK;
}

/* The JSON of --speculative-config over what the older flags set. */
static int parse_config(const char *text, app_spec *s, inf_err *err)
{
    cJSON *j = cJSON_Parse(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return inf_fail(err, INF_ERR_INVALID, "--speculative-config is not a JSON object");
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "method");
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *floor = cJSON_GetObjectItemCaseSensitive(j, "min_acceptance");
    int rc = INF_OK;
    if (cJSON_IsString(dir) && strcmp(dir->valuestring, "[ngram]") != 0) {
        /* a directory: a draft model, or an MLP speculator (by its config,
         * or "method": "mlp_speculator") */
        s->method = (cJSON_IsString(m) && !strcmp(m->valuestring, "mlp_speculator")) ||
                            spec_mlp_detect(dir->valuestring)
                        ? APP_SPEC_MLP
                        : APP_SPEC_DRAFT;
        snprintf(s->model_buf, sizeof s->model_buf, "%s", dir->valuestring);
        s->model = s->model_buf;
    } else if ((cJSON_IsString(m) && !strcmp(m->valuestring, "ngram")) ||
               (cJSON_IsString(dir) && !strcmp(dir->valuestring, "[ngram]"))) {
        s->method = APP_SPEC_NGRAM;
    } else if (cJSON_IsString(m) && !strcmp(m->valuestring, "draft_model")) {
        rc = inf_fail(err, INF_ERR_INVALID, "--speculative-config: method draft_model needs "
                                            "\"model\": the draft's directory");
    } else {
        rc = inf_fail(err, INF_ERR_INVALID,
                      "--speculative-config: say \"method\": \"ngram\" or give a draft "
                      "\"model\" directory (got method %s)",
                      cJSON_IsString(m) ? m->valuestring : "none");
    }
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "num_speculative_tokens")))
        s->k_given = 1;
    if (!rc)
        rc = json_int(j, "num_speculative_tokens", &s->k, err);
    if (!rc)
        rc = json_int(j, "prompt_lookup_max", &s->lookup_max, err);
    if (!rc)
        rc = json_int(j, "prompt_lookup_min", &s->lookup_min, err);
    if (!rc)
        rc = json_int(j, "disable_by_batch_size", &s->disable_by_batch_size, err);
    if (!rc && floor) {
        if (!cJSON_IsNumber(floor) || floor->valuedouble < 0 || floor->valuedouble > 1)
            rc = inf_fail(err, INF_ERR_INVALID,
                          "--speculative-config: \"min_acceptance\" must be in [0, 1]");
        else
            s->min_acceptance = floor->valuedouble;
    }
    cJSON_Delete(j);
    return rc;
}

int app_spec_parse(const app_spec_args *a, app_spec *s, inf_err *err)
{
    memset(s, 0, sizeof *s);
    s->k = a->num_tokens > 0 ? a->num_tokens : 4;
    s->k_given = a->num_tokens > 0;
    s->lookup_max = a->ngram_max > 0 ? a->ngram_max : 4;
    s->lookup_min = a->ngram_min > 0 ? a->ngram_min : 1;
    s->disable_by_batch_size = 8;
    s->min_acceptance = 0.1;
    if (a->model) {
        if (!strcmp(a->model, "[ngram]")) {
            s->method = APP_SPEC_NGRAM;
        } else {
            s->method = spec_mlp_detect(a->model) ? APP_SPEC_MLP : APP_SPEC_DRAFT;
            s->model = a->model;
        }
    }
    int rc = a->config ? parse_config(a->config, s, err) : INF_OK;
    if (rc)
        return rc;
    if (s->method != APP_SPEC_OFF && (s->k < 1 || s->k > 32))
        return inf_fail(err, INF_ERR_INVALID, "num_speculative_tokens must be 1..32, got %d",
                        s->k);
    if (s->method == APP_SPEC_NGRAM && (s->lookup_min < 1 || s->lookup_max < s->lookup_min))
        return inf_fail(err, INF_ERR_INVALID,
                        "prompt_lookup_min %d / prompt_lookup_max %d: need 1 <= min <= max",
                        s->lookup_min, s->lookup_max);
    return INF_OK;
}

int app_spec_k(const app_spec *s) { return s->method != APP_SPEC_OFF ? s->k : 0; }

const char *app_spec_name(const app_spec *s)
{
    return s->method == APP_SPEC_NGRAM ? "n-gram prompt lookup" : s->model ? s->model : "off";
}

int app_spec_load_draft(app_spec *s, inf_err *err)
{
    return s->method == APP_SPEC_DRAFT ? model_load(s->model, &s->dm, err) : INF_OK;
}

/* Fed the target's hidden states: no model, no KV. Beside a CUDA target its
 * stages run on the target's GPU (cuda/mlp.h). */
static int open_mlp(app_spec *s, const model *m, const app_backend_config *target_bc,
                    inf_err *err)
{
    spec_mlp_config mc = {.dir = s->model, .target_vocab = m->cfg.vocab_size,
                          .target_hidden = m->cfg.hidden_size};
    int rc = spec_mlp_create(&mc, &s->proposer, err);
#ifdef INFERD_CUDA
    if (!rc && target_bc->device && !strcmp(target_bc->device, "cuda")) {
        spec_mlp_weights w;
        spec_mlp_weights_of(s->proposer, &w);
        spec_mlp_device dev;
        rc = cuda_mlp_create(cuda_config_default().device, &w, target_bc->max_seqs, &dev, err);
        if (!rc)
            spec_mlp_set_device(s->proposer, &dev);
        s->on_gpu = !rc;
    }
#else
    (void)target_bc;
#endif
    int np = rc ? 0 : spec_mlp_n_predict(s->proposer);
    if (!rc && s->k_given && s->k > np)
        rc = inf_fail(err, INF_ERR_INVALID, "%s: num_speculative_tokens %d is more than the "
                      "speculator's n_predict %d", s->model, s->k, np);
    if (!rc && !s->k_given && np < s->k) /* the backend is sized for the default */
        s->k = np;
    return rc;
}

/* The draft model (loaded by app_spec_load_draft) and its backend, which
 * shares the target's KV block count. */
static int open_draft(app_spec *s, const model *m, const tok *tk,
                      const app_backend_config *target_bc, int num_blocks, int max_len,
                      logger *log, inf_err *err)
{
    if (!s->dm)
        return inf_fail(err, INF_ERR_INVALID, "%s: the draft model is not loaded", s->model);
    int rc = tok_create(s->model, &s->dtk, err);
    if (!rc)
        rc = spec_draft_check_tokenizers(tk, s->dtk, s->model, err);
    if (!rc && s->dm->cfg.vocab_size != m->cfg.vocab_size)
        rc = inf_fail(err, INF_ERR_UNSUPPORTED, "%s: the draft's vocabulary (%d) differs from "
                      "the target's (%d)", s->model, s->dm->cfg.vocab_size, m->cfg.vocab_size);
    int draft_len = model_context(&s->dm->cfg);
    if (!rc && draft_len < max_len)
        log_msg(log, LOG_INFO, "loader", NULL,
                "%s: the draft's context (%d) is shorter than the served context (%d): "
                "sequences past %d tokens are not speculated",
                s->model, draft_len, max_len, draft_len);
    app_backend_config dc = *target_bc;
    dc.is_draft = 1;
    dc.draft = NULL;
    dc.num_blocks = num_blocks;
    app_backend db = {0};
    if (!rc)
        rc = app_backend_open(s->dm, &dc, &db, err);
    s->dbe = db.be;
    if (!rc) {
        spec_draft_config sc = {.draft = s->dm, .backend = s->dbe, .num_blocks = num_blocks,
                                .block_size = target_bc->block_size,
                                .max_tokens = target_bc->max_tokens,
                                .max_seqs = target_bc->max_seqs, .max_len = max_len,
                                .draft_len = draft_len, .vocab = m->cfg.vocab_size};
        rc = spec_draft_create(&sc, &s->proposer, err);
    }
    return rc;
}

int app_spec_open(app_spec *s, const model *m, const tok *tk,
                  const app_backend_config *target_bc, int num_blocks, int max_len, logger *log,
                  inf_err *err)
{
    switch (s->method) {
    case APP_SPEC_NGRAM: {
        spec_ngram_config nc = {.lookup_max = s->lookup_max, .lookup_min = s->lookup_min};
        return spec_ngram_create(&nc, &s->proposer, err);
    }
    case APP_SPEC_MLP:
        return open_mlp(s, m, target_bc, err);
    case APP_SPEC_DRAFT:
        return open_draft(s, m, tk, target_bc, num_blocks, max_len, log, err);
    case APP_SPEC_OFF:
        break;
    }
    return INF_OK;
}

void app_spec_close(app_spec *s)
{
    if (s->proposer)
        s->proposer->ops->destroy(s->proposer);
    be_destroy(s->dbe);
    tok_destroy(s->dtk);
    model_destroy(s->dm);
    s->proposer = NULL;
    s->dbe = NULL;
    s->dtk = NULL;
    s->dm = NULL;
}
