/* mdesc_: RoPE's inverse frequencies for each rope_scaling kind, computed
 * once at load (Hugging Face's modeling_rope_utils equations; the choices
 * where HF depends on the sequence length: docs/architectures.md). */
#include "model_int.h"

#include <math.h>
#include <string.h>

static void rope_plain(md_rope *r, int rot, double div)
{
    for (int i = 0; i < rot / 2; i++)
        r->inv_freq[i] = pow(r->theta, -2.0 * i / rot) / div;
}

/* Llama 3.1: wavelengths longer than orig/low are divided by factor, shorter
 * than orig/high kept, the band between blended. */
static void rope_llama3(md_rope *r, int rot, double low, double high, int orig)
{
    rope_plain(r, rot, 1.0);
    double low_wl = orig / low, high_wl = orig / high;
    for (int i = 0; i < rot / 2; i++) {
        double f = r->inv_freq[i], wl = 2.0 * M_PI / f;
        if (wl > low_wl) {
            r->inv_freq[i] = f / r->factor;
        } else if (wl >= high_wl) {
            double s = (orig / wl - low) / (high - low);
            r->inv_freq[i] = (1.0 - s) * f / r->factor + s * f;
        }
    }
}

static double yarn_mscale(double scale, double m)
{
    return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

static double yarn_dim(double rotations, int dim, double base, int orig)
{
    return dim * log(orig / (rotations * 2.0 * M_PI)) / (2.0 * log(base));
}

/* YaRN: interpolated (inv_freq / factor) below the ramp, extrapolated
 * (plain) above it, linear between dims low and high. */
static void rope_yarn(md_rope *r, int rot, double beta_fast, double beta_slow, int orig,
                      int truncate)
{
    double low = yarn_dim(beta_fast, rot, r->theta, orig);
    double high = yarn_dim(beta_slow, rot, r->theta, orig);
    if (truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = low > 0 ? low : 0;
    high = high < rot - 1 ? high : rot - 1;
    if (low == high)
        high += 0.001;
    for (int i = 0; i < rot / 2; i++) {
        double pf = pow(r->theta, 2.0 * i / rot);
        double ramp = (i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double ext = 1.0 - ramp;
        r->inv_freq[i] = (1.0 / (r->factor * pf)) * (1.0 - ext) + (1.0 / pf) * ext;
    }
}

static int rope_factors(const cJSON *rs, const char *key, int n, double *out, const char *path,
                        inf_err *err)
{
    const cJSON *v = cfgj_item(rs, key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != n)
        return inf_fail(err, INF_ERR_FORMAT,
                        "%s: rope_scaling '%s' must be a list of %d numbers "
                        "(rotary dimensions / 2)",
                        path, key, n);
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble > 0))
            return inf_fail(err, INF_ERR_FORMAT, "%s: rope_scaling '%s' must hold positive numbers",
                            path, key);
        out[i] = e->valuedouble;
    }
    return INF_OK;
}

/* LongRoPE (Phi-3): inv_freq[i] = 1 / (factor_i * theta^(2i/rot)), short
 * factors below original_max_position_embeddings, long ones from there. */
static int rope_longrope(const cJSON *root, const cJSON *rs, md_rope *r, int rot,
                         const model_config *c, const char *path, inf_err *err)
{
    double sf[MD_MAX_FREQ], lf[MD_MAX_FREQ];
    int rc, orig = 0, n = rot / 2;
    if ((rc = rope_factors(rs, "short_factor", n, sf, path, err)) ||
        (rc = rope_factors(rs, "long_factor", n, lf, path, err)) ||
        (rc = cfgj_int(rs, "original_max_position_embeddings", 0, &orig, path, err)) ||
        (rc = cfgj_int(root, "original_max_position_embeddings", 0, &orig, path, err)))
        return rc;
    double factor = r->factor;
    if (cfgj_item(root, "original_max_position_embeddings")) /* HF: the ratio wins */
        factor = (double)c->max_position_embeddings / orig;
    if (orig <= 0)
        return inf_fail(err, INF_ERR_FORMAT,
                        "%s: rope_scaling type 'longrope' needs "
                        "original_max_position_embeddings",
                        path);
    double af = factor <= 1.0 ? 1.0 : sqrt(1.0 + log(factor) / log((double)orig));
    if ((rc = cfgj_num(rs, "attention_factor", &af, path, err)))
        return rc;
    for (int i = 0; i < n; i++) {
        double p = pow(r->theta, 2.0 * i / rot);
        r->inv_freq[i] = 1.0 / (sf[i] * p);
        r->inv_freq_long[i] = 1.0 / (lf[i] * p);
    }
    r->attn_factor = af;
    r->long_from = orig;
    return INF_OK;
}

/* rope_scaling into r (theta already set), for rot rotated dimensions. */
int mdesc__rope(const cJSON *root, const cJSON *rs, md_rope *r, int rot,
                      const model_config *c, const char *path, inf_err *err)
{
    r->kind = MD_ROPE_DEFAULT;
    r->factor = 1.0;
    r->attn_factor = 1.0;
    r->long_from = INT_MAX;
    const char *type = "default";
    int rc;
    if (rs) {
        if (!cJSON_IsObject(rs))
            return inf_fail(err, INF_ERR_FORMAT, "%s: 'rope_scaling' must be an object", path);
        const cJSON *t = cfgj_item(rs, "rope_type");
        if (!t)
            t = cfgj_item(rs, "type");
        if (!cJSON_IsString(t))
            return inf_fail(err, INF_ERR_FORMAT, "%s: rope_scaling has no 'rope_type' string",
                            path);
        type = t->valuestring;
        if ((rc = cfgj_num(rs, "factor", &r->factor, path, err)))
            return rc;
        if (!(r->factor > 0))
            return inf_fail(err, INF_ERR_FORMAT, "%s: rope_scaling 'factor' must be positive",
                            path);
    }
    if (!strcmp(type, "default")) {
        rope_plain(r, rot, 1.0);
    } else if (!strcmp(type, "linear")) {
        r->kind = MD_ROPE_LINEAR;
        rope_plain(r, rot, r->factor);
    } else if (!strcmp(type, "dynamic")) {
        /* HF rescales only for sequences beyond max_position_embeddings,
         * which is the longest context inferd runs a model at */
        r->kind = MD_ROPE_DYNAMIC;
        rope_plain(r, rot, 1.0);
    } else if (!strcmp(type, "llama3")) {
        double low = 1.0, high = 4.0;
        int orig = 0;
        if ((rc = cfgj_num(rs, "low_freq_factor", &low, path, err)) ||
            (rc = cfgj_num(rs, "high_freq_factor", &high, path, err)) ||
            (rc = cfgj_int(rs, "original_max_position_embeddings", 1, &orig, path, err)))
            return rc;
        if (!(low > 0 && high > low && orig > 0))
            return inf_fail(err, INF_ERR_FORMAT,
                            "%s: rope_scaling llama3 needs 0 < low_freq_factor "
                            "< high_freq_factor and original_max_position_embeddings > 0",
                            path);
        r->kind = MD_ROPE_LLAMA3;
        rope_llama3(r, rot, low, high, orig);
    } else if (!strcmp(type, "yarn")) {
        double bf = 32, bs = 1, ms = 0, msa = 0, af = 0;
        int orig = c->max_position_embeddings, trunc = 1;
        if ((rc = cfgj_num(rs, "beta_fast", &bf, path, err)) ||
            (rc = cfgj_num(rs, "beta_slow", &bs, path, err)) ||
            (rc = cfgj_num(rs, "mscale", &ms, path, err)) ||
            (rc = cfgj_num(rs, "mscale_all_dim", &msa, path, err)) ||
            (rc = cfgj_num(rs, "attention_factor", &af, path, err)) ||
            (rc = cfgj_bool(rs, "truncate", &trunc, path, err)) ||
            (rc = cfgj_int(rs, "original_max_position_embeddings", 0, &orig, path, err)))
            return rc;
        if (orig <= 0 || !(bf > 0 && bs > 0))
            return inf_fail(err, INF_ERR_FORMAT,
                            "%s: rope_scaling yarn has a bad "
                            "original_max_position_embeddings, beta_fast or beta_slow",
                            path);
        r->kind = MD_ROPE_YARN;
        rope_yarn(r, rot, bf, bs, orig, trunc);
        r->attn_factor = af > 0 ? af
                         : ms > 0 && msa > 0
                             ? yarn_mscale(r->factor, ms) / yarn_mscale(r->factor, msa)
                             : yarn_mscale(r->factor, 1.0);
    } else if (!strcmp(type, "longrope") || !strcmp(type, "su")) {
        r->kind = MD_ROPE_LONGROPE;
        return rope_longrope(root, rs, r, rot, c, path, err);
    } else {
        return inf_fail(err, INF_ERR_UNSUPPORTED,
                        "%s: rope_scaling type '%s' is not supported "
                        "(linear, dynamic, llama3, yarn, longrope)",
                        path, type);
    }
    return INF_OK;
}
