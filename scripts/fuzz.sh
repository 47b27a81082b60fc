#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang-14, ASan + UBSan) into build-fuzz and runs each
# for a time budget, starting from its seed corpus fuzz/corpus/<name>/ (new inputs go to a
# scratch copy, so the repository is not changed). Any crash, sanitizer finding or
# differential mismatch fails the run and leaves the input as build-fuzz/crash-*.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 20)] [target names...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(npy checkpoint config policy report quantize corpus)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++-14 -DMXTRAIN_FUZZ=ON \
  -DMXTRAIN_BUILD_TESTS=OFF -DMXTRAIN_BUILD_BENCH=OFF > /dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMP_NUM_THREADS=1
for t in "${targets[@]}"; do
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$t/." "$work/"
  echo "== fuzz_$t for ${secs}s"
  rc=0
  ./build-fuzz/fuzz_$t -max_total_time="$secs" -max_len=65536 -rss_limit_mb=4096 \
    -artifact_prefix=build-fuzz/ -print_final_stats=1 "$work" > "build-fuzz/fuzz_$t.log" 2>&1 || rc=$?
  grep -E "^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|MISMATCH|SUMMARY)" "build-fuzz/fuzz_$t.log" || true
  [ "$rc" -eq 0 ] || tail -n 40 "build-fuzz/fuzz_$t.log"
  rm -rf "$work"
  [ "$rc" -eq 0 ] || { echo "fuzz_$t failed (exit $rc); input in build-fuzz/"; exit 1; }
done
