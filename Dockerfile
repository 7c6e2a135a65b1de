# inferd, CPU image: a build stage with Debian 12's -dev packages, and a slim
# Debian 12 runtime stage with only the libraries the binary links.
#
#   docker build -t inferd .
#   docker run -d --name inferd -p 8000:8000 \
#       -v /srv/models/stories260K:/models/model:ro inferd
#   curl -fsS http://127.0.0.1:8000/health
#   docker stop inferd                      # SIGTERM: drain, exit 0
#
# Configuration is by INFERD_* variables (-e, --env-file config/inferd.env) or
# flags after the image name, which replace CMD and override the variables:
#   docker run ... inferd --max-model-len 2048 --served-model-name stories
# The model is mounted at /models/model (INFERD_MODEL); mount a directory of
# models at /models and set INFERD_MODEL=/models/NAME to pick one. Its files
# must be readable by uid 10001 (world-readable is enough).
#
# `make test` runs scripts/check-dockerfile, which holds this file to the built
# binary: the runtime stage installs exactly the packages of the libraries
# `ldd build/inferd` resolves (and curl for the HEALTHCHECK), the build stage
# the -dev packages of the libraries it links, and every option used here
# exists in `inferd --help`. Change the package lists together with the
# Makefile's LDLIBS.

FROM debian:12 AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential pkg-config \
        libcjson-dev libuv1-dev libmicrohttpd-dev libgnutls28-dev libsentencepiece-dev libyaml-dev \
        libcurl4-gnutls-dev nettle-dev \
        libpcre2-dev libutf8proc-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# .dockerignore keeps a host build/ out: make would take it as up to date.
COPY . .
# Baseline x86-64 code; the AVX2/AVX-512 kernels are picked at run time, so the
# image runs on any x86-64 host.
RUN make -j"$(nproc)" build/inferd \
 && strip build/inferd \
 && build/inferd --version

FROM debian:12-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libcjson1 libuv1 libmicrohttpd12 libgnutls30 libsentencepiece0 libyaml-0-2 \
        libpcre2-8-0 libutf8proc2 \
        libstdc++6 libgcc-s1 libcurl3-gnutls libnettle8 ca-certificates \
        curl \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 inferd \
 && useradd --uid 10001 --gid inferd --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin inferd \
 && install -d -m 0755 /models
COPY --from=build /src/build/inferd /usr/local/bin/inferd

# HTTPS: mount the key and certificate read-only (readable by uid 10001) and
# set INFERD_SSL_KEYFILE / INFERD_SSL_CERTFILE (docs/security.md); the
# HEALTHCHECK below then speaks https (to itself on loopback, so without
# checking the certificate's name). With --ssl-cert-reqs 2 it needs a client
# certificate too: HEALTHCHECK_CERT / HEALTHCHECK_KEY (mounted like the rest):
#   docker run ... -v /etc/inferd/tls:/tls:ro -e INFERD_SSL_KEYFILE=/tls/server.key \
#     -e INFERD_SSL_CERTFILE=/tls/server.pem inferd
# Listen on all the container's interfaces; the model at /models/model.
# Shutdown grace 8 s: `docker stop` sends SIGKILL 10 s after SIGTERM by default
# (Kubernetes: 30 s), so the drain finishes first. For a longer drain raise both:
#   docker run -e INFERD_SHUTDOWN_GRACE=30 --stop-timeout 40 ...
ENV INFERD_MODEL=/models/model \
    INFERD_HOST=0.0.0.0 \
    INFERD_PORT=8000 \
    INFERD_SHUTDOWN_GRACE=8
USER 10001:10001
EXPOSE 8000
VOLUME ["/models"]
STOPSIGNAL SIGTERM
# /health is 503 while the model loads, 200 once it serves; a large model gets
# 10 minutes to load before failures count.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10m --retries=3 \
    CMD s=http; [ -z "$INFERD_SSL_CERTFILE" ] || s=https; \
        curl -fsSk ${HEALTHCHECK_CERT:+--cert "$HEALTHCHECK_CERT" --key "$HEALTHCHECK_KEY"} \
            "$s://127.0.0.1:${INFERD_PORT:-8000}/health" >/dev/null || exit 1
# Exec form: inferd is PID 1 and gets docker stop's SIGTERM itself. `serve`
# takes its options from the INFERD_* variables above; arguments given to
# `docker run IMAGE ...` replace it (`inferd --port 9000` serves too, and
# `inferd generate --model /models/model --prompt ...` generates offline).
ENTRYPOINT ["/usr/local/bin/inferd"]
CMD ["serve"]
