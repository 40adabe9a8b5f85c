#!/usr/bin/env bash
# The GPU checks of the CUDA backend, for a machine with an NVIDIA GPU (well under 8 minutes on
# a warm Bazel cache): builds kiln (scripts/build.sh, which builds //tests/cpp/... too), prints
# the device, then runs
#   - cuda_program_test: whole loop programs through CudaProgram on the GPU ([gpu]: MLP with
#     host externs, layer_norm, rms_norm, split reductions, a transposed input, concurrent runs,
#     errors) and on the host emulator ([emulated]), against the interpreter and the CPU
#     CompiledProgram, plus one timing line (GPU vs the CPU executor);
#   - caching_allocator_test.
# Exits non-zero when the build or a check fails. Without a GPU it prints
# "no CUDA device: nothing to run" and exits 0.
#
#   tests/gpu/run.sh            Environment: KILN_PYTHON (default .venv/bin/python), KILN_LIBCUDA
set -euo pipefail
cd "$(dirname "$0")/../.."

has_gpu() {
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    return 0
  fi
  # No nvidia-smi (a minimal container): a device node and the driver library are enough.
  [ -e /dev/nvidia0 ] && { [ -n "${KILN_LIBCUDA:-}" ] || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; }
}

if ! has_gpu; then
  echo "no CUDA device: nothing to run"
  exit 0
fi

echo "== device"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "/dev/nvidia0 present (no nvidia-smi)"
fi

echo "== build (scripts/build.sh)"
start=$SECONDS
timeout 300 bash scripts/build.sh
echo "built in $((SECONDS - start)) s"

status=0
run() {
  local name="$1" limit="$2"
  shift 2
  echo "== $name $*"
  local t=$SECONDS
  # From the workspace root: the tests find the .venv's NVRTC wheel through their source file.
  if ! timeout "$limit" "bazel-bin/tests/cpp/$name" --durations yes "$@"; then
    echo "FAILED: $name" >&2
    status=1
  fi
  echo "($name: $((SECONDS - t)) s)"
}
# Limits (seconds) keep the whole script under 8 minutes: build 300 + 20 + 100 + 60.
run caching_allocator_test 20
run cuda_program_test 100 '[gpu]'
run cuda_program_test 60 '[emulated]'

if [ "$status" -eq 0 ]; then
  echo "tests/gpu/run.sh: all GPU checks passed"
else
  echo "tests/gpu/run.sh: FAILED" >&2
fi
exit "$status"
