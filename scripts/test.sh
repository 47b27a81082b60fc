#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite (CTest), the cross-checks against
# torchao, transformers, ml_dtypes and PyTorch 2 included (their environment: scripts/pyenv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
MXTRAIN_CHECK_PYTHON=$(bash scripts/pyenv.sh | tail -n 1)
export MXTRAIN_CHECK_PYTHON
bash scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j 2 --timeout 900
