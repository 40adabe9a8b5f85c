#!/usr/bin/env bash
# One-time (idempotent) set-up of a fresh Debian 12/13 machine for kiln: apt packages, the Python
# venv (.venv) with the test oracle and tools, then the build. Fast when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

APT_PACKAGES=(bazel-bootstrap bazel-rules-java bazel-platforms llvm-19-dev libmlir-19-dev
  mlir-19-tools libfmt-dev catch2 libopenblas-dev pybind11-dev nlohmann-json3-dev openmpi-bin)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Optional: clang with libFuzzer for tests/fuzz/run.sh, which skips without them.
OPTIONAL_APT_PACKAGES=(clang-19 libclang-rt-19-dev)
missing=()
for p in "${OPTIONAL_APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing optional apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
    echo "[setup] ${missing[*]} not available: the libFuzzer runs of scripts/test.sh will skip"
fi

PY_BASE="${KILN_BASE_PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv from $PY_BASE"
  "$PY_BASE" -m venv .venv
fi
PY="$ROOT/.venv/bin/python"
stamp=.venv/.kiln-requirements
if ! cmp -s requirements-dev.txt "$stamp" 2>/dev/null; then
  echo "[setup] installing Python packages (requirements-dev.txt)"
  "$PY" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
  cp requirements-dev.txt "$stamp"
fi
# Make `import kiln` resolve to this checkout's frontend/ from the venv.
site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$ROOT/frontend" > "$site/kiln-dev.pth"

KILN_PYTHON="$PY" scripts/build.sh
