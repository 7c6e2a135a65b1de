#!/bin/sh
# End-to-end checks run by `make test` after the unit tests: the engine
# against the float64 numpy reference, and the offline generator's CLI.
set -eu
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" tests/ref/check_engine.py --build "$BUILD" --fixtures "$BUILD/fixtures"
