#!/bin/sh
# End-to-end checks run by `make test` after the unit tests: the engine
# against the float64 numpy reference, and the offline generator's CLI.
set -eu
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" tests/ref/check_engine.py --build "$BUILD" --fixtures "$BUILD/fixtures"
# GGUF files against the numpy reader of the format (gguf_ref.py).
"$PYTHON" tests/ref/check_gguf.py --build "$BUILD" --fixtures "$BUILD/fixtures"
# GGUF tokenizer metadata and chat templates against the tokenizer's own files.
"$PYTHON" tests/ref/check_gguf_tok.py --build "$BUILD" --fixtures "$BUILD/fixtures"
# GPTQ / AWQ checkpoints against numpy packings of the formats.
"$PYTHON" tests/ref/check_hfq.py --build "$BUILD" --fixtures "$BUILD/fixtures"
"$PYTHON" tests/ref/check_hidden.py --build "$BUILD" --fixtures "$BUILD/fixtures"
"$PYTHON" tests/ref/check_mlp_spec.py --build "$BUILD"
# The MLP speculator trainer: the loss falls and its checkpoint loads in inferd.
"$PYTHON" tests/ref/check_mlp_train.py --build "$BUILD"
# The grammar engine against Python references (json, a JSON Schema validator, re).
"$PYTHON" tests/ref/check_gram.py --build "$BUILD"
# The daemon end to end: the official openai SDK and raw HTTP (node:test).
INFERD_TEST_FIXTURES="$BUILD/fixtures" BUILD="$BUILD" node --test --test-concurrency=1 tests/e2e/
# Models by Hub id: the Hub client against a mock Hub on loopback.
"$PYTHON" tests/hub/check_hub.py --build "$BUILD" --model "$BUILD/fixtures/tiny"
# run-batch: OpenAI batch files through the same server, in order, per-line errors.
"$PYTHON" tests/batch/check_batch.py --build "$BUILD" --model "$BUILD/fixtures/tiny"
# Running as a service: systemd notifications, the config file, the access log.
"$PYTHON" tests/service/check_service.py --build "$BUILD" --model "$BUILD/fixtures/tiny"
# Packaging: the man page matches --help; the Dockerfiles and the systemd unit
# match the binary (runtime libraries, flags, structure; systemd-analyze).
BUILD="$BUILD" ./tests/check-manpage.sh
BUILD="$BUILD" ./tests/check-install.sh
BUILD="$BUILD" ./scripts/check-dockerfile
