#!/usr/bin/env bash
# Builds kiln's C++ targets with Bazel and installs the Python extension into frontend/kiln/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${KILN_PYTHON:-$(pwd)/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
export KILN_PYTHON="$PY"
log="$(mktemp)"
if ! bazel build "$@" //frontend:_C.so //aot:kilnc //aot:libkiln_aot.so //tests/cpp/... >"$log" 2>&1; then
  grep -vE "^(Loading|Analyzing|INFO: (Invocation|Analyzed|Found|Elapsed|From))" "$log" >&2
  rm -f "$log"
  echo "kiln: build failed" >&2
  exit 1
fi
rm -f "$log"
suffix="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
install -m 0755 bazel-bin/frontend/_C.so "frontend/kiln/_C.tmp$$" && mv -f "frontend/kiln/_C.tmp$$" "frontend/kiln/_C${suffix}"
# kilnc and its runtime, beside the venv's python: kilnc finds ../lib/kiln-aot/ from its own path.
venv="$(dirname "$(dirname "$PY")")"
if [ -f "$venv/pyvenv.cfg" ]; then
  mkdir -p "$venv/lib/kiln-aot"
  for f in bazel-bin/aot/libkiln_aot.so aot/kiln_aot.h; do
    b="$(basename "$f")"
    install -m 0644 "$f" "$venv/lib/kiln-aot/.$b.tmp$$" && mv -f "$venv/lib/kiln-aot/.$b.tmp$$" "$venv/lib/kiln-aot/$b"
  done
  install -m 0755 bazel-bin/aot/kilnc "$venv/bin/.kilnc.tmp$$" && mv -f "$venv/bin/.kilnc.tmp$$" "$venv/bin/kilnc"
fi
