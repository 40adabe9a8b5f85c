#!/usr/bin/env bash
# The GPU checks of the CUDA backend, for a machine with an NVIDIA GPU (well under 8 minutes on
# a warm Bazel cache): builds kiln (scripts/build.sh, which builds //tests/cpp/... too), prints
# the device, then runs
#   - cuda_program_test: whole loop programs through CudaProgram on the GPU ([gpu]: MLP with
#     host externs, layer_norm, rms_norm, split reductions, a transposed input, concurrent runs,
#     errors) and on the host emulator ([emulated]), against the interpreter and the CPU
#     CompiledProgram, plus one timing line (GPU vs the CPU executor);
#   - caching_allocator_test;
#   - cuda_cublas_gpu_test: the GEMM externs on cuBLAS against the eager kernels, with a
#     TFLOP/s line timed by CUDA events (skipped with a message when libcublas is absent:
#     `pip install nvidia-cublas` or set KILN_CUBLAS);
#   - pytest tests/python/cuda on the GPU: CUDA tensors, every eager op family against the CPU,
#     Module.cuda(), kiln.compile on the device;
#   - bench/cuda.py: eager and compiled kiln on the GPU beside torch when torch has CUDA there;
#   - pytest tests/python/distributed/test_nccl.py: kiln.distributed's NCCL backend on the GPUs
#     through kilnrun (1 rank, and 2 ranks plus a timeout when 2 GPUs exist), against NumPy
#     (skipped with a message when libnccl is absent: `pip install nvidia-nccl-cu13` or set
#     KILN_NCCL_LIB).
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
# Limits (seconds): build 300 + 20 + 100 + 60 + 30 + pytest 150 + bench 60 + NCCL 180; the
# build is seconds on a warm cache, so a run takes well under 8 minutes.
run caching_allocator_test 20
run cuda_program_test 100 '[gpu]'
run cuda_program_test 60 '[emulated]'
run cuda_cublas_gpu_test 30 '[gpu]'

PY="${KILN_PYTHON:-.venv/bin/python}"
echo "== pytest tests/python/cuda (on the GPU)"
t=$SECONDS
if ! timeout 150 "$PY" -m pytest -q -p no:cacheprovider tests/python/cuda; then
  echo "FAILED: pytest tests/python/cuda" >&2
  status=1
fi
echo "(pytest: $((SECONDS - t)) s)"
echo "== bench/cuda.py"
timeout 60 "$PY" bench/cuda.py || { echo "FAILED: bench/cuda.py" >&2; status=1; }

echo "== pytest tests/python/distributed/test_nccl.py (NCCL on the GPUs)"
if ! nccl_missing="$(timeout 60 "$PY" -c 'from kiln import _C; print(_C._distributed.nccl_unavailable_reason())')"; then
  echo "FAILED: asking kiln whether NCCL can run here" >&2
  status=1
elif [ -n "$nccl_missing" ]; then
  echo "NCCL is not available, skipping its checks: $nccl_missing"
elif ! command -v mpirun >/dev/null 2>&1; then
  echo "Open MPI (mpirun) is not installed, skipping the NCCL checks (scripts/setup.sh installs it)"
else
  t=$SECONDS
  if ! timeout 180 "$PY" -m pytest -q -p no:cacheprovider -rs tests/python/distributed/test_nccl.py; then
    echo "FAILED: pytest tests/python/distributed/test_nccl.py" >&2
    status=1
  fi
  echo "(NCCL pytest: $((SECONDS - t)) s)"
fi

if [ "$status" -eq 0 ]; then
  echo "tests/gpu/run.sh: all GPU checks passed"
else
  echo "tests/gpu/run.sh: FAILED" >&2
fi
exit "$status"
