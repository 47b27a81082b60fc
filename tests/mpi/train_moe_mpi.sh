#!/usr/bin/env bash
# tests/mpi/train_moe_mpi.sh — FSDP at 3 ranks, where shards are uneven: the tiny MoE model
# (tests/data/mpi_tiny_moe.yaml; expert weights [4, 80, 64] and [4, 64, 40] cut across
# experts at 32-row boundaries, the last rank holding padding) trained 3 steps with mxfp8 and
# mxfp8-32x32, and the dense tiny model with mxfp8, each matching one process with
# grad_accum 3 (the same micro-batches, routing and auxiliary loss included): every step's
# loss and the validation loss within 1e-4 relative.
# Usage: train_moe_mpi.sh MXTRAIN MPIEXEC   (CTest `mpi_train_moe_np3`)
source "$(dirname "$0")/support/train_lib.sh"

run() {  # run CONFIG RECIPE LABEL STEPS
  "$BIN" train --config "$1" --recipe "$2" --grad-accum 3 --quiet --metrics-out "$TMP/one.jsonl"
  mpi 3 train --config "$1" --recipe "$2" --fsdp --grad-accum 1 --quiet \
    --metrics-out "$TMP/three.jsonl"
  same_losses "$TMP/one.jsonl" "$TMP/three.jsonl" "$3 $2: 3 ranks vs 1 process" "$4"
  if [ "$3" = moe ] && ! grep -q '"aux_loss":[0-9.e+-]*[1-9]' "$TMP/three.jsonl"; then
    echo "moe: no auxiliary loss recorded"; exit 1
  fi
}
for recipe in mxfp8 mxfp8-32x32; do run "$DATA/mpi_tiny_moe.yaml" "$recipe" moe 3; done
run "$DATA/mpi_tiny.yaml" mxfp8 dense 4
echo "3-rank FSDP: all checks passed"
