/* tls_: HTTPS for srv_ through libmicrohttpd's GnuTLS support, configured
 * with vLLM's option names: --ssl-keyfile, --ssl-certfile, --ssl-ca-certs and
 * --ssl-cert-reqs (0: no client certificate, 1: optional, verified when
 * sent, 2: required; Python's ssl.CERT_NONE/OPTIONAL/REQUIRED). */
#ifndef INFERD_TLS_H
#define INFERD_TLS_H

#include <microhttpd.h>

#include "engine/common.h"

typedef struct tls_config {
    const char *keyfile;     /* PEM private key; NULL with certfile: plain HTTP */
    const char *certfile;    /* PEM certificate chain                         */
    const char *ca_certs;    /* PEM CAs that sign client certificates         */
    int cert_reqs;           /* 0, 1 or 2 as above                            */
} tls_config;

tls_config tls_config_default(void); /* everything off: plain HTTP */

/* Whether c asks for TLS at all (a key or a certificate given). */
int tls_enabled(const tls_config *c);

typedef struct tls tls;

/* Checks the configuration and reads the PEM files. INF_ERR_INVALID for a
 * key without a certificate (or the reverse), client certificates without
 * CAs, or a libmicrohttpd built without TLS; INF_ERR_IO naming an unreadable
 * file. A disabled config gives *out = NULL and INF_OK. */
int tls_create(const tls_config *c, tls **out, inf_err *err);
void tls_destroy(tls *t); /* NULL-safe; after the MHD daemon has stopped */

/* The daemon flags and options (into opts, at most max entries, ended by
 * MHD_OPTION_END) that turn TLS on; with t NULL, none. t must outlive the
 * daemon: MHD keeps pointers to the PEM text. */
unsigned tls_mhd_flags(const tls *t);
void tls_mhd_options(const tls *t, struct MHD_OptionItem *opts, int max);

/* Whether the connection's client certificate satisfies --ssl-cert-reqs
 * (1 when client certificates are not asked for). why (may be NULL) gets
 * the reason for a refusal. */
int tls_peer_ok(const tls *t, struct MHD_Connection *mc, char *why, size_t why_len);

#endif
