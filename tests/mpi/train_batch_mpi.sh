#!/usr/bin/env bash
# tests/mpi/train_batch_mpi.sh — micro_batch_size is per rank (docs/config.md, "Batch size").
#
# For every recipe that trains (bf16, mxfp8, mxfp8-32x32, blockwise, fp8-current with its
# all-reduced weight amax, fp8-delayed with its max-reduced amax histories): 2 FSDP ranks with micro-batch 8 and grad_accum 1 train on
# the sequences of one process with micro-batch 8 and grad_accum 2, so every step's loss and
# the validation loss agree within 1e-4 relative; the precision decisions are identical
# (per-rank tokens); the summary records the batch. Resuming that 2-rank checkpoint in one
# process with grad_accum 1 keeps the global batch of 16 by raising grad_accum to 2 (said on
# stderr) and finishes like the one-process run; 2 ranks with grad_accum 2 (one reduce-scatter
# per micro-batch) match one process with grad_accum 4; at 3 ranks (3 x 8 does not divide 16) it
# stops every rank with an error naming the numbers.
# Usage: train_batch_mpi.sh MXTRAIN MPIEXEC   (CTest `mpi_train_per_rank_batch`)
source "$(dirname "$0")/support/train_lib.sh"
cfg=$DATA/mpi_tiny.yaml

for recipe in bf16 mxfp8 mxfp8-32x32 blockwise fp8-current fp8-delayed; do
  "$BIN" train --config "$cfg" --recipe "$recipe" --grad-accum 2 --quiet \
    --metrics-out "$TMP/one_$recipe.jsonl" --decisions-out "$TMP/one.json"
  mpi 2 train --config "$cfg" --recipe "$recipe" --fsdp --grad-accum 1 --quiet \
    --metrics-out "$TMP/two.jsonl" --decisions-out "$TMP/two.json"
  same_losses "$TMP/one_$recipe.jsonl" "$TMP/two.jsonl" "$recipe: 2 ranks x grad_accum 1 vs 1 x 2" 4
  cmp "$TMP/one.json" "$TMP/two.json" || { echo "$recipe: precision decisions differ"; exit 1; }
  for kv in global_batch:16 micro_batch_size:8 world_size:2 grad_accum:1; do
    got=$(summary "$TMP/two.jsonl" "${kv%%:*}")
    [ "$got" = "${kv#*:}" ] || { echo "$recipe: summary ${kv%%:*} is $got, expected ${kv#*:}"; exit 1; }
  done
  [ "$(summary "$TMP/one_$recipe.jsonl" global_batch)" = 16 ] || { echo "one-process global_batch"; exit 1; }
done

# ZeRO-3 reduce-scatters every micro-batch into the shard gradients: with grad_accum 2 on 2
# ranks the shards sum four micro-batches per step, as one process with grad_accum 4 does.
"$BIN" train --config "$cfg" --recipe mxfp8 --grad-accum 4 --quiet --metrics-out "$TMP/one4.jsonl"
mpi 2 train --config "$cfg" --recipe mxfp8 --fsdp --grad-accum 2 --quiet \
  --metrics-out "$TMP/two2.jsonl"
same_losses "$TMP/one4.jsonl" "$TMP/two2.jsonl" "mxfp8: 2 ranks x grad_accum 2 vs 1 x 4" 4

# Prefetch depth and the progress thread change when bytes move, never what arrives: the same
# losses, bit for bit, with neither and with two modules ahead.
for fs in "{prefetch: 0, progress_thread: false}" "{prefetch: 2, progress_thread: true}"; do
  { cat "$cfg"; echo "fsdp: $fs"; } > "$TMP/comm.yaml"
  mpi 2 train --config "$TMP/comm.yaml" --recipe mxfp8 --fsdp --grad-accum 2 --quiet \
    --metrics-out "$TMP/comm.jsonl"
  cmp <(field "$TMP/two2.jsonl" loss) <(field "$TMP/comm.jsonl" loss) ||
    { echo "fsdp $fs changed the losses"; exit 1; }
done

# The start-up line states the global batch.
mpi 2 train --config "$cfg" --fsdp --steps 1 --metrics-out "$TMP/x.jsonl" 2> "$TMP/err.txt"
grep -q "batch: 16 sequences of 32 tokens per step (micro_batch_size 8 x 2 rank(s) x grad_accum 1)" \
  "$TMP/err.txt" || { cat "$TMP/err.txt"; echo "no batch line"; exit 1; }

# Resume at another world size: the global batch (16) is kept by changing grad_accum.
mpi 2 train --config "$cfg" --fsdp --quiet --stop-after 2 --checkpoint-dir "$TMP/ck" \
  --metrics-out "$TMP/part.jsonl"
"$BIN" train --config "$cfg" --resume --checkpoint-dir "$TMP/ck" --metrics-out "$TMP/part.jsonl" \
  2> "$TMP/err.txt"
grep -q "training.grad_accum 1 -> 2 keeps the global batch of 16 sequences" "$TMP/err.txt" ||
  { cat "$TMP/err.txt"; echo "no grad_accum note on resume"; exit 1; }
same_losses "$TMP/one_mxfp8.jsonl" "$TMP/part.jsonl" "2-rank checkpoint resumed in 1 process" 4 loss

# fp8-delayed: the amax histories are saved with the optimizer state; resuming on 2 ranks (rank
# 0 reads them and broadcasts) continues the one-process run.
mpi 2 train --config "$cfg" --recipe fp8-delayed --fsdp --quiet --stop-after 2 \
  --checkpoint-dir "$TMP/ckd" --metrics-out "$TMP/partd.jsonl"
mpi 2 train --config "$cfg" --recipe fp8-delayed --fsdp --quiet --resume \
  --checkpoint-dir "$TMP/ckd" --metrics-out "$TMP/partd.jsonl"
same_losses "$TMP/one_fp8-delayed.jsonl" "$TMP/partd.jsonl" "fp8-delayed resumed on 2 ranks" 4 loss

# ... and when it cannot be kept, every rank stops with the numbers.
t0=$SECONDS
if mpi 3 train --config "$cfg" --fsdp --quiet --resume --checkpoint-dir "$TMP/ck" --steps 6 \
     > "$TMP/err.txt" 2>&1; then
  echo "resuming a global batch of 16 at 3 x 8 should have failed"; exit 1
fi
grep -q "error: cannot resume at 3 rank(s) with the checkpoint's global batch: it has 16 sequences" \
  "$TMP/err.txt" || { cat "$TMP/err.txt"; exit 1; }
[ $((SECONDS - t0)) -le 60 ] || { echo "the failed resume took $((SECONDS - t0)) s"; exit 1; }
echo "per-rank micro-batch: all checks passed"
