#!/usr/bin/env bash
# tests/mpi/train_launch_mpi.sh — the ranks of an mpirun job agree on how they were started
# before any collective (train/launch.h). MPMD launches where one rank has another run-mode
# flag (--dry-run, --stop-after, --resume on rank 0 only, no --fsdp, --steps) or another
# config, and 2 ranks without a parallel mode, each end every rank within 30 s with
# mxtrain's own line naming the setting, and nothing is trained or written.
# Usage: train_launch_mpi.sh MXTRAIN MPIEXEC   (CTest `mpi_train_launch_agreement`)
source "$(dirname "$0")/support/train_lib.sh"
cfg=$DATA/mpi_tiny.yaml
sed 's/lr: 0.01/lr: 0.02/' "$cfg" > "$TMP/other_lr.yaml"
base=(train --quiet --metrics-out "$TMP/m.jsonl")

# refused LABEL MESSAGE RANK0_ARGS -- RANK1_ARGS: one rank each (MPMD); both must print
# "rank R: error: MESSAGE", exit non-zero within 30 s, and leave no metrics file.
refused() {
  local label=$1 msg=$2 a=() b=()
  shift 2
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  b=("$@")
  local t0=$SECONDS rc=0
  timeout 120 "$MPIEXEC" --oversubscribe -np 1 "$BIN" "${base[@]}" "${a[@]}" \
    : -np 1 "$BIN" "${base[@]}" "${b[@]}" > "$TMP/out.txt" 2>&1 || rc=$?
  local took=$((SECONDS - t0))
  [ "$rc" -ne 0 ] || { cat "$TMP/out.txt"; echo "FAIL $label: exit status 0"; exit 1; }
  [ "$rc" -ne 124 ] || { cat "$TMP/out.txt"; echo "FAIL $label: still running after 120 s"; exit 1; }
  [ "$took" -le 30 ] || { cat "$TMP/out.txt"; echo "FAIL $label: took $took s"; exit 1; }
  for r in 0 1; do
    grep -qF "rank $r: error: $msg" "$TMP/out.txt" ||
      { cat "$TMP/out.txt"; echo "FAIL $label: no \"rank $r: error: $msg\""; exit 1; }
  done
  [ -e "$TMP/m.jsonl" ] && { echo "FAIL $label: a metrics file was written"; exit 1; }
  echo "ok $label: exit status $rc after $took s"
}

refused "--dry-run on rank 1" \
  "the ranks were started with different --dry-run: rank 0 has \`off\`, rank 1 has \`on\`" \
  --config "$cfg" --fsdp -- --config "$cfg" --fsdp --dry-run
refused "--stop-after on rank 1" \
  "the ranks were started with different --stop-after: rank 0 has \`(none)\`, rank 1 has \`2\`" \
  --config "$cfg" --fsdp -- --config "$cfg" --fsdp --stop-after 2
refused "--resume on rank 0 only" \
  "the ranks were started with different --resume: rank 0 has \`on\`, rank 1 has \`off\`" \
  --config "$cfg" --fsdp --checkpoint-dir "$TMP/ck" --resume -- \
  --config "$cfg" --fsdp --checkpoint-dir "$TMP/ck"
refused "no --fsdp on rank 1" \
  "the ranks were started with different --fsdp (fsdp.enabled): rank 0 has \`on\`, rank 1 has \`off\`" \
  --config "$cfg" --fsdp -- --config "$cfg"
refused "--checkpoint-dir on rank 0 only" \
  "the ranks were started with different --checkpoint-dir: rank 0 has \`$TMP/ck\`, rank 1 has \`(none)\`" \
  --config "$cfg" --fsdp --checkpoint-dir "$TMP/ck" -- --config "$cfg" --fsdp
refused "another --steps on rank 1" \
  "the ranks were started with different --steps (training.steps): rank 0 has \`4\`, rank 1 has \`5\`" \
  --config "$cfg" --fsdp -- --config "$cfg" --fsdp --steps 5
refused "another config on rank 1" "training config differs across ranks" \
  --config "$cfg" --fsdp -- --config "$TMP/other_lr.yaml" --fsdp

# Two ranks and no parallel mode: refused on every rank (not two copies of one run).
rc=0
t0=$SECONDS
timeout 120 "$MPIEXEC" --oversubscribe -np 2 "$BIN" "${base[@]}" --config "$cfg" \
  > "$TMP/out.txt" 2>&1 || rc=$?
cat "$TMP/out.txt"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ $((SECONDS - t0)) -le 30 ] ||
  { echo "FAIL 2 ranks without --fsdp: exit $rc after $((SECONDS - t0)) s"; exit 1; }
for r in 0 1; do
  grep -qF "rank $r: error: mpirun started 2 ranks but the run has no parallel mode: pass --fsdp" \
    "$TMP/out.txt" || { echo "FAIL 2 ranks without --fsdp: rank $r did not say so"; exit 1; }
done
[ -e "$TMP/m.jsonl" ] && { echo "FAIL 2 ranks without --fsdp: a metrics file was written"; exit 1; }
echo "ok 2 ranks without --fsdp refused"

# One rank under mpirun without --fsdp is one process, as without mpirun.
mpi 1 train --config "$cfg" --quiet --steps 2 --metrics-out "$TMP/one.jsonl"
[ "$(grep -c '"loss"' "$TMP/one.jsonl")" = 2 ] || { echo "FAIL mpirun -np 1 without --fsdp"; exit 1; }
echo "launch agreement: all checks passed"
