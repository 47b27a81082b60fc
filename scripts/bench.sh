#!/usr/bin/env bash
# The benchmark runner: every benchmark of docs/results as a named suite, and the tables of
# README.md and docs/results/*.md rendered from the committed raw rows (docs/results/README.md).
#   bash scripts/bench.sh list                  suites, tables, durations
#   bash scripts/bench.sh trainer peers         run suites (3 rounds), append raw rows, render
#   bash scripts/bench.sh all                   every suite (about 3.5 hours on 2 cores)
#   bash scripts/bench.sh render | check        rewrite / verify the committed tables
# Options: --rounds N, --quick (smoke run, rows to runs/bench/quick/), --out FILE, --work DIR.
# Builds build/mxtrain first when it is missing (MXTRAIN_BIN names another binary); the
# PyTorch suites make the pinned environment (scripts/pyenv.sh) on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  list|render|check|"") ;;
  *) [ -n "${MXTRAIN_BIN:-}" ] || [ -x build/mxtrain ] || bash scripts/build.sh ;;
esac
exec python3 bench/harness "$@"
