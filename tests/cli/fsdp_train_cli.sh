#!/usr/bin/env bash
# FSDP training matches one-process training: the same config and global batch (8 sequences:
# micro-batch 2 per rank, grad_accum 4 / ranks) trained for 20 steps as 1 process and as 2 and
# 4 MPI ranks (--fsdp) for every recipe; the per-step losses must agree within 1e-4 relative
# (ranks sum their gradients in another order, so the match is not bitwise). Also: ranks
# started with different configs stop with a clear error, not a hang; and an FSDP checkpoint
# resumes in one process and at the same world size.
# Usage: fsdp_train_cli.sh MXTRAIN_BINARY MPIEXEC
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bin=$(realpath "$1")
mpiexec=$2
here=$(cd "$(dirname "$0")/.." && pwd)
cfg=$here/data/fsdp_tiny.yaml
workdir fsdp_train
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi() { timeout 300 "$mpiexec" --oversubscribe -np "$@"; }

losses() { grep '"loss"' "$1" | sed 's/.*"loss":\([^,}]*\).*/\1/'; }

compare() {  # compare FILE_A FILE_B LABEL
  paste <(losses "$1") <(losses "$2") | awk -v label="$3" '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r }
    END {
      if (n != 20) { printf "%s: expected 20 steps, got %d\n", label, n; exit 1 }
      printf "%s: worst relative loss difference %.3g over %d steps\n", label, worst, n
      exit (worst <= 1e-4) ? 0 : 1
    }'
}

for recipe in bf16 mxfp8 mxfp8-32x32; do
  "$bin" train --config "$cfg" --recipe "$recipe" --quiet --metrics-out "$WORK/one.jsonl" 2>/dev/null
  for np in 2 4; do
    mpi "$np" "$bin" train --config "$cfg" --recipe "$recipe" --fsdp --quiet \
      --grad-accum $((4 / np)) --metrics-out "$WORK/fsdp$np.jsonl" 2>/dev/null
    compare "$WORK/one.jsonl" "$WORK/fsdp$np.jsonl" "$recipe np=$np"
    grep -q '"allgather_bytes"' "$WORK/fsdp$np.jsonl" || { echo "no allgather_bytes"; exit 1; }
  done
done

# Ranks started with different configs (MPMD launch) stop with a clear error on every rank.
sed 's/lr: 0.01/lr: 0.02/' "$cfg" > "$WORK/other.yaml"
if timeout 300 "$mpiexec" --oversubscribe -np 1 "$bin" train --config "$cfg" --fsdp --quiet : \
     -np 1 "$bin" train --config "$WORK/other.yaml" --fsdp --quiet > "$WORK/err.txt" 2>&1; then
  echo "mismatched configs should have failed"; exit 1
fi
grep -q "training config" "$WORK/err.txt" || { cat "$WORK/err.txt"; exit 1; }

# An FSDP checkpoint (2 ranks, stopped at step 10) resumes in one process and finishes
# the run like an uninterrupted one-process run.
mpi 2 "$bin" train --config "$cfg" --fsdp --quiet --grad-accum 2 --stop-after 10 \
  --checkpoint-dir "$WORK/ckpt" --metrics-out "$WORK/part.jsonl" 2>/dev/null
"$bin" train --config "$cfg" --quiet --resume --checkpoint-dir "$WORK/ckpt" \
  --metrics-out "$WORK/part.jsonl" 2>/dev/null
"$bin" train --config "$cfg" --quiet --metrics-out "$WORK/one.jsonl" --recipe mxfp8-32x32 2>/dev/null
compare "$WORK/one.jsonl" "$WORK/part.jsonl" "fsdp checkpoint -> one-process resume"

# And at the same world size: 2 ranks stop at step 10, 2 ranks resume.
rm -rf "$WORK/ckpt2"
mpi 2 "$bin" train --config "$cfg" --fsdp --quiet --grad-accum 2 --stop-after 10 \
  --checkpoint-dir "$WORK/ckpt2" --metrics-out "$WORK/part2.jsonl" 2>/dev/null
mpi 2 "$bin" train --config "$cfg" --fsdp --quiet --grad-accum 2 --resume --checkpoint-dir "$WORK/ckpt2" \
  --metrics-out "$WORK/part2.jsonl" 2>/dev/null
compare "$WORK/one.jsonl" "$WORK/part2.jsonl" "fsdp checkpoint -> fsdp resume (2 ranks)"
echo "fsdp trainer: all checks passed"
