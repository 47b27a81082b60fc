#!/usr/bin/env bash
# Configures and builds mxtrain (Release) into ./build. MXTRAIN_CHECK_PYTHON (scripts/test.sh
# sets it from scripts/pyenv.sh) is the interpreter the Python tests run with.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  ${MXTRAIN_CHECK_PYTHON:+-DMXTRAIN_CHECK_PYTHON="$MXTRAIN_CHECK_PYTHON"}
cmake --build build -j "$(nproc)"
