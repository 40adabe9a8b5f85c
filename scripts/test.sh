#!/usr/bin/env bash
# Runs every kiln test: set-up and build, the Catch2 suites (bazel test), then the pytest suites.
# Exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
PY="$(pwd)/.venv/bin/python"
status=0

echo "== C++ unit tests (Catch2, bazel test //tests/...)"
KILN_PYTHON="$PY" bazel test //tests/... 2>&1 | grep -vE "^(Loading|Analyzing|INFO: (Invocation|Analyzed|Found|Elapsed|From))" || true
[ "${PIPESTATUS[0]}" = 0 ] || status=1

echo "== Python tests (pytest tests/python)"
"$PY" -m pytest -q -p no:cacheprovider tests/python "$@" || status=1

exit $status
