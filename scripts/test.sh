#!/usr/bin/env bash
# README command 2: set up and build if needed, then run every kiln test — the Catch2 suites
# (bazel test), the golden IR tests (lit + FileCheck) and the pytest suites. Exits non-zero if
# any of them fails.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
PY="$(pwd)/.venv/bin/python"
export KILN_PYTHON="$PY"
status=0

# Runs bazel quietly: progress lines are dropped, everything else (failures) is shown.
quiet_bazel() {
  local log rc
  log="$(mktemp)"
  bazel "$@" >"$log" 2>&1
  rc=$?
  grep -vE "^(\[|Loading|Analyzing|INFO: (Invocation|Analyzed|Found|Elapsed|From|[0-9]+ process))" "$log"
  rm -f "$log"
  return $rc
}

echo "== C++ unit tests (Catch2: bazel test //tests/...)"
quiet_bazel test //tests/... || status=1

echo "== Golden IR tests (lit + FileCheck: tests/lit)"
if quiet_bazel build //tools:kiln-opt; then
  .venv/bin/lit -sv tests/lit || status=1
else
  echo "kiln-opt failed to build"
  status=1
fi

echo "== Fuzz targets (libFuzzer, bounded)"
tests/fuzz/run.sh 15 || status=1

echo "== CUDA tensors on the host emulator (pytest: tests/python/cuda, KILN_CUDA_EMULATOR=1)"
# The same generated CUDA C a GPU runs, compiled by the host compiler: the whole CUDA path
# (moves, eager ops, kiln.compile on the device) is tested on machines without a GPU.
KILN_CUDA_EMULATOR=1 "$PY" -m pytest -q -p no:cacheprovider tests/python/cuda || status=1

echo "== Python tests (pytest: tests/python)"
"$PY" -m pytest -q -p no:cacheprovider tests/python "$@" || status=1

# pytest's summary stays the last line on success; a failure anywhere is named here.
[ $status = 0 ] || echo "kiln: TESTS FAILED (see the suites above)"
exit $status
