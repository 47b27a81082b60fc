#!/usr/bin/env bash
# All-gather bytes and time per training step under FSDP on the default config
# (configs/tiny.yaml) for bf16, mxfp8 (on-demand and all) and mxfp8-32x32 at 2 and 4 ranks,
# all in one invocation. The global batch stays that of one process (8 sequences of 128
# tokens): micro_batch_size is per rank, so each of the N ranks runs 8/N sequences. Prints a
# Markdown table (medians over steps 2..N of rank 0's metrics: bytes this rank sent, ms
# inside the all-gathers, whole step ms).
# Usage: bash scripts/fsdp_train_bench.sh [STEPS]   (MXTRAIN_BIN overrides build/mxtrain)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
steps=${1:-20}
out=runs/fsdp
mkdir -p "$out"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for mode in on-demand all; do
  sed "s/^precision:/fsdp:\n  mxfp8_gather: $mode\nprecision:/" configs/tiny.yaml > "$out/tiny-$mode.yaml"
done
for np in 2 4; do
  for run in bf16:on-demand mxfp8:on-demand mxfp8:all mxfp8-32x32:on-demand; do
    recipe=${run%%:*}; mode=${run##*:}
    mpirun --oversubscribe -np "$np" "$bin" train --config "$out/tiny-$mode.yaml" \
      --recipe "$recipe" --fsdp --steps "$steps" --micro-batch-size $((8 / np)) --quiet \
      --metrics-out "$out/np$np-$recipe-$mode.jsonl" 2>/dev/null
  done
done
python3 tools/fsdp_tables.py train "$out"
