#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/Makefile: clang-19, ASan, UBSan) and runs each for a
# bounded time from its seed corpus. Exits non-zero when a target fails to build or the fuzzer
# finds a crash, a leak, undefined behaviour or a timeout; the input that triggered it is kept
# under the build folder and its path printed. Skips (exit 0, a SKIP line) when clang-19 or its
# fuzzer runtime (libclang-rt-19-dev) is not installed.
#
#   tests/fuzz/run.sh [seconds per target, default 20] [kir_parser|safetensors: only that one]
# Environment: KILN_FUZZ_BUILD (build folder, default /tmp/kiln-fuzz-<hash of the checkout>),
# KILN_FUZZ_JOBS (make -j, default 2).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"
SECONDS_EACH="${1:-20}"
ONLY="${2:-}"
BUILD="${KILN_FUZZ_BUILD:-/tmp/kiln-fuzz-$(echo "$ROOT" | md5sum | cut -c1-8)}"

if ! command -v clang++-19 >/dev/null; then
  echo "SKIP: clang++-19 not found (install clang-19 and libclang-rt-19-dev to run the fuzzers)"
  exit 0
fi
probe="$(mktemp -d)"
echo 'extern "C" int LLVMFuzzerTestOneInput(const char *, unsigned long) { return 0; }' \
  >"$probe/p.cc"
if ! clang++-19 -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2>/dev/null; then
  rm -rf "$probe"
  echo "SKIP: clang++-19 cannot link -fsanitize=fuzzer (install libclang-rt-19-dev)"
  exit 0
fi
rm -rf "$probe"

echo "[fuzz] building into $BUILD"
if ! make -s -f tests/fuzz/Makefile BUILD="$BUILD" -j"${KILN_FUZZ_JOBS:-2}"; then
  echo "FAIL: the fuzz targets did not build"
  exit 1
fi

status=0
for target in kir_parser:kir safetensors:safetensors; do
  name="${target%%:*}"
  [ -n "$ONLY" ] && [ "$ONLY" != "$name" ] && continue
  seeds="tests/fuzz/corpus/${target##*:}"
  work="$BUILD/corpus/$name"     # what the fuzzer learns; the committed seeds stay untouched
  artifacts="$BUILD/artifacts/$name"
  mkdir -p "$work" "$artifacts"
  log="$BUILD/$name.log"
  echo "[fuzz] ${name}_fuzz for ${SECONDS_EACH}s (seeds: $seeds)"
  "$BUILD/${name}_fuzz" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
    -max_len=16384 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    -dict="tests/fuzz/${target##*:}.dict" "$work" "$seeds" >"$log" 2>&1
  rc=$?
  grep -E "^stat::number_of_executed_units|^#[0-9]+[[:space:]]+DONE" "$log" | sed 's/^/  /'
  if [ $rc != 0 ]; then
    status=1
    echo "FAIL: ${name}_fuzz exited with $rc; the end of its log ($log):"
    tail -40 "$log"
    echo "reproduce: $BUILD/${name}_fuzz $(ls -t "$artifacts"/* 2>/dev/null | head -1)"
  fi
done
[ $status = 0 ] && echo "[fuzz] no crash found"
exit $status
