#!/usr/bin/env bash
# tests/package/install_example.sh — the installed CMake package works: stages
# `cmake --install` of a build tree into a scratch prefix, configures examples/quantize_matrix
# against it with find_package(mxtrain) (CMAKE_PREFIX_PATH = the prefix only), builds it, runs
# it and checks its output line by line.
# Usage: install_example.sh CMAKE BUILD_DIR EXAMPLE_DIR [GENERATOR]   (CTest: `package_example`)
set -u
CMAKE=${1:?usage: install_example.sh CMAKE BUILD_DIR EXAMPLE_DIR [GENERATOR]}
BUILD=${2:?build directory}
EXAMPLE=${3:?example source directory}
GENERATOR=${4:-Unix Makefiles}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mxt_package_XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILS=0
fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

"$CMAKE" --install "$BUILD" --prefix "$WORK/prefix" > "$WORK/install.log" 2>&1 ||
  { cat "$WORK/install.log"; echo "FAIL: cmake --install exited non-zero"; exit 1; }
for f in include/mxtrain/quantize.h include/mxtrain/policy/policy.h bin/mxtrain; do
  [ -e "$WORK/prefix/$f" ] || fail "not installed: $f"
done
ls "$WORK"/prefix/lib*/libmxt_core.a > /dev/null 2>&1 || fail "not installed: libmxt_core.a"
ls "$WORK"/prefix/lib*/cmake/mxtrain/mxtrainConfigVersion.cmake > /dev/null 2>&1 ||
  fail "not installed: mxtrainConfigVersion.cmake"

"$CMAKE" -S "$EXAMPLE" -B "$WORK/build" -G "$GENERATOR" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" > "$WORK/configure.log" 2>&1 ||
  { cat "$WORK/configure.log"; echo "FAIL: configuring the example exited non-zero"; exit 1; }
"$CMAKE" --build "$WORK/build" > "$WORK/build.log" 2>&1 ||
  { cat "$WORK/build.log"; echo "FAIL: building the example exited non-zero"; exit 1; }
# The headers came from the staged prefix, not the source tree.
grep -q -- "$WORK/prefix/include" "$WORK/build/CMakeFiles/quantize_matrix.dir/flags.make" \
  "$WORK/build/build.ninja" 2>/dev/null || fail "the example did not use the installed headers"

out=$(OMP_NUM_THREADS=1 "$WORK/build/quantize_matrix") || fail "quantize_matrix exited $?"
expected="quantized 4x64 float32 -> e4m3 elements, rowwise blocks
scales (4x2 E8M0): 128 128 128 128 128 128 128 128
row 0 codes: 30 ba 1a 76 7e 30 ba 1a 76 7e
bytes: 256 data + 8 scales
round trip: max abs error 0 over 256 values"
[ "$out" = "$expected" ] || fail "quantize_matrix printed:"$'\n'"$out"$'\n'"expected:"$'\n'"$expected"

[ "$FAILS" -eq 0 ] && echo "package_example: all checks passed"
exit $(( FAILS > 0 ))
