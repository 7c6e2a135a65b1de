#!/bin/sh
# End-to-end checks run by `make test` after the unit tests: the engine
# against the float64 numpy reference, and the offline generator's CLI.
set -eu
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
# Under ThreadSanitizer (make test TSAN=1) the numeric reference checks are
# left out: they drive single-request tools whose numbers the plain and
# ASan runs already check, and TSan would multiply their minutes for no
# thread it has not seen in the unit tests. The daemon's checks (e2e, hub,
# run-batch, service) run in full: they are where threads meet.
if [ "${TSAN:-0}" = 1 ]; then
    echo "run-checks: TSAN=1: numeric reference checks (check_engine, check_gguf, check_hfq, check_bnb, check_ct,"
    echo "run-checks:   check_hidden, check_mlp_spec, check_mlp_train, check_gram) not run here;"
    echo "run-checks:   make test and make test SAN=1 run them"
else
"$PYTHON" tests/ref/check_engine.py --build "$BUILD" --fixtures "$BUILD/fixtures"
# GGUF files against the numpy reader of the format (gguf_ref.py).
"$PYTHON" tests/ref/check_gguf.py --build "$BUILD" --fixtures "$BUILD/fixtures"
# GGUF tokenizer metadata and chat templates against the tokenizer's own files.
"$PYTHON" tests/ref/check_gguf_tok.py --build "$BUILD" --fixtures "$BUILD/fixtures"
# GPTQ / AWQ checkpoints against numpy packings of the formats.
"$PYTHON" tests/ref/check_hfq.py --build "$BUILD" --fixtures "$BUILD/fixtures"
# bitsandbytes 4-bit (NF4 / FP4, double quantization) and 8-bit (LLM.int8) against numpy's serialization.
"$PYTHON" tests/ref/check_bnb.py --build "$BUILD" --fixtures "$BUILD/fixtures"
# compressed-tensors W8A8 int8 checkpoints against the scheme in numpy (ct_ref.py).
"$PYTHON" tests/ref/check_ct.py --build "$BUILD" --fixtures "$BUILD/fixtures"
"$PYTHON" tests/ref/check_hidden.py --build "$BUILD" --fixtures "$BUILD/fixtures"
"$PYTHON" tests/ref/check_mlp_spec.py --build "$BUILD"
# The MLP speculator trainer: the loss falls and its checkpoint loads in inferd.
"$PYTHON" tests/ref/check_mlp_train.py --build "$BUILD"
# The grammar engine against Python references (json, a JSON Schema validator, re).
"$PYTHON" tests/ref/check_gram.py --build "$BUILD"
fi
# The daemon end to end: the official openai SDK and raw HTTP (node:test).
# Under TSan the tokenizer corpus suites (tokenizer, tok_models: one thread
# encoding megabytes of text, checked to the id by the plain and ASan runs)
# are left out, saying so; every suite with a daemon runs.
if [ "${TSAN:-0}" = 1 ]; then
    e2e=$(ls tests/e2e/*.test.mjs | grep -v -e '/tokenizer\.test\.mjs$' -e '/tok_models\.test\.mjs$')
    echo "run-checks: TSAN=1: e2e without tokenizer.test.mjs and tok_models.test.mjs (tokenizer corpora)"
else
    e2e=tests/e2e/
fi
# A bound on the whole run (it takes minutes, under TSan too): a test that
# hangs fails here instead of using up CI's time.
# shellcheck disable=SC2086 # a list of files
INFERD_TEST_FIXTURES="$BUILD/fixtures" BUILD="$BUILD" timeout -k 30 2400 \
    node --test --test-concurrency=1 $e2e
# Models by Hub id: the Hub client against a mock Hub on loopback.
"$PYTHON" tests/hub/check_hub.py --build "$BUILD" --model "$BUILD/fixtures/tiny"
# make run's model: the default by Hub id through a mock Hub, else offline the
# embedded models/stories260K and its known story.
"$PYTHON" tests/run/check_run.py --build "$BUILD" --model "$BUILD/fixtures/fam-qwen2"
# run-batch: OpenAI batch files through the same server, in order, per-line errors.
"$PYTHON" tests/batch/check_batch.py --build "$BUILD" --model "$BUILD/fixtures/tiny"
# Running as a service: systemd notifications, the config file, the access log.
"$PYTHON" tests/service/check_service.py --build "$BUILD" --model "$BUILD/fixtures/tiny"
# Packaging: the man page matches --help; the Dockerfiles and the systemd unit
# match the binary (runtime libraries, flags, structure; systemd-analyze).
BUILD="$BUILD" ./tests/check-manpage.sh
BUILD="$BUILD" ./tests/check-install.sh
BUILD="$BUILD" ./scripts/check-dockerfile
# The images' HEALTHCHECK, run as Docker runs it, over http, TLS and mutual TLS.
"$PYTHON" tests/service/check_healthcheck.py --build "$BUILD" --model "$BUILD/fixtures/tiny"
