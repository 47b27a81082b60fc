#!/usr/bin/env bash
# tests/cli/generate_fsdp_cli.sh — `mxtrain generate` reads a checkpoint written by a 2-rank
# FSDP run (rank 0 gathers whole tensors, so it is read like a one-process checkpoint):
# generation runs in one process, greedy output is the same on every run, and the JSON
# record names the step.
# Usage: generate_fsdp_cli.sh MXTRAIN_BINARY MPIEXEC   (CTest `mpi_cli_generate_np2`)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bin=$(realpath "$1")
mpiexec=$2
here=$(cd "$(dirname "$0")/.." && pwd)
workdir generate_fsdp
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
write_corpus corpus.txt
timeout 300 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$bin" train \
  --config "$here/data/fsdp_tiny.yaml" --data corpus.txt --steps 4 --fsdp --quiet \
  --checkpoint-dir ck 2> train.err || { cat train.err; exit 1; }
run() { timeout 120 "$bin" generate --checkpoint ck --prompt 'the quick' --max-new-tokens 40 "$@"; }
run --temperature 0 --json --quiet > a.json
run --temperature 0 --json --quiet > b.json
python3 - a.json b.json <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["step"] == 4 and a["new_tokens"] == 40 and a["prompt"] == "the quick", a
assert a["continuation"] == b["continuation"], (a, b)
print("fsdp checkpoint continuation:", repr(a["continuation"]))
PY
echo "generate from an FSDP checkpoint: all checks passed"
