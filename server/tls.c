#include "server/tls.h"

#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>

struct tls {
    tls_config cfg;
    char *key, *cert, *ca; /* PEM text, NUL-terminated (MHD keeps pointers) */
};

tls_config tls_config_default(void)
{
    tls_config c = {0};
    return c;
}

int tls_enabled(const tls_config *c)
{
    return c && ((c->keyfile && *c->keyfile) || (c->certfile && *c->certfile));
}

/* A PEM file: small, so a limit catches a wrong path (a model file). */
static int read_pem(const char *opt, const char *path, char **out, inf_err *err)
{
    inf_err e = {0};
    if (inf_read_file(path, 1 << 20, out, NULL, NULL, &e))
        return inf_fail(err, INF_ERR_INVALID, "--%s: %s", opt, e.msg); /* a usage error */
    return INF_OK;
}

int tls_create(const tls_config *c, tls **out, inf_err *err)
{
    *out = NULL;
    int has_ca = c->ca_certs && *c->ca_certs;
    if (!tls_enabled(c)) {
        if (has_ca || c->cert_reqs)
            return inf_fail(err, INF_ERR_INVALID, "--ssl-ca-certs and --ssl-cert-reqs need "
                                                  "--ssl-keyfile and --ssl-certfile");
        return INF_OK;
    }
    if (!(c->keyfile && *c->keyfile) || !(c->certfile && *c->certfile))
        return inf_fail(err, INF_ERR_INVALID,
                        "TLS needs both --ssl-keyfile and --ssl-certfile");
    if (c->cert_reqs < 0 || c->cert_reqs > 2)
        return inf_fail(err, INF_ERR_INVALID, "--ssl-cert-reqs is 0 (none), 1 (optional) or "
                                              "2 (required), got %d", c->cert_reqs);
    if (c->cert_reqs && !has_ca)
        return inf_fail(err, INF_ERR_INVALID, "--ssl-cert-reqs %d needs --ssl-ca-certs: the "
                                              "CAs that sign client certificates", c->cert_reqs);
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return inf_fail(err, INF_ERR_INVALID, "this libmicrohttpd was built without TLS "
                                              "(GnuTLS): --ssl-keyfile cannot be used");
    tls *t = calloc(1, sizeof *t);
    if (!t)
        return inf_fail(err, INF_ERR_NOMEM, "out of memory");
    t->cfg = *c;
    int rc = read_pem("ssl-keyfile", c->keyfile, &t->key, err);
    if (!rc)
        rc = read_pem("ssl-certfile", c->certfile, &t->cert, err);
    if (!rc && c->cert_reqs) /* the CAs matter only when client certificates do */
        rc = read_pem("ssl-ca-certs", c->ca_certs, &t->ca, err);
    if (rc) {
        tls_destroy(t);
        return rc;
    }
    *out = t;
    return INF_OK;
}

void tls_destroy(tls *t)
{
    if (!t)
        return;
    free(t->key);
    free(t->cert);
    free(t->ca);
    free(t);
}

unsigned tls_mhd_flags(const tls *t)
{
    return t ? MHD_USE_TLS : 0;
}

void tls_mhd_options(const tls *t, struct MHD_OptionItem *opts, int max)
{
    int n = 0;
    if (t && max >= 4) {
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, t->key};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, t->cert};
        /* a trust list makes MHD ask every client for a certificate */
        if (t->ca)
            opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, t->ca};
    }
    if (max >= 1)
        opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

int tls_peer_ok(const tls *t, struct MHD_Connection *mc, char *why, size_t why_len)
{
    if (!t || !t->cfg.cert_reqs)
        return 1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    gnutls_session_t s = ci ? (gnutls_session_t)ci->tls_session : NULL;
    if (!s) {
        if (why)
            snprintf(why, why_len, "no TLS session");
        return 0;
    }
    unsigned n_certs = 0;
    if (!gnutls_certificate_get_peers(s, &n_certs) || n_certs == 0) {
        if (t->cfg.cert_reqs == 1)
            return 1; /* optional, and none sent */
        if (why)
            snprintf(why, why_len, "no client certificate (--ssl-cert-reqs 2 requires one)");
        return 0;
    }
    unsigned status = 0;
    int rc = gnutls_certificate_verify_peers2(s, &status);
    if (rc != GNUTLS_E_SUCCESS || status != 0) {
        if (why) {
            gnutls_datum_t d = {0};
            if (rc == GNUTLS_E_SUCCESS &&
                gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &d, 0) ==
                    GNUTLS_E_SUCCESS) {
                snprintf(why, why_len, "client certificate refused: %s", (char *)d.data);
                gnutls_free(d.data);
            } else {
                snprintf(why, why_len, "client certificate refused: %s", gnutls_strerror(rc));
            }
        }
        return 0;
    }
    return 1;
}
