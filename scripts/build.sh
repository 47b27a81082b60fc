#!/usr/bin/env bash
# Configures and builds mxtrain (Release) into ./build. MXTRAIN_CHECK_PYTHON (scripts/test.sh
# sets it from scripts/pyenv.sh) is the interpreter the Python tests run with.
# `scripts/build.sh clang` builds the same tree — libraries, `mxtrain`, every test, benchmark
# and the Python module — with clang++-14 into ./build-clang instead, at -O0 (a build check,
# not for running: clang's warnings come from its front end, whatever the optimisation, and
# -O0 compiles in about half -O1's time) and with warnings as errors: CI's proof that the
# tree builds with both compilers (the tests run from ./build, GCC's).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = clang ]; then
  cmake -S . -B build-clang -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_BUILD_TYPE=O0 -DCMAKE_CXX_FLAGS_O0=-O0 -DCMAKE_CXX_FLAGS=-Werror
  cmake --build build-clang -j "$(nproc)"
  exit 0
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  ${MXTRAIN_CHECK_PYTHON:+-DMXTRAIN_CHECK_PYTHON="$MXTRAIN_CHECK_PYTHON"}
cmake --build build -j "$(nproc)"
