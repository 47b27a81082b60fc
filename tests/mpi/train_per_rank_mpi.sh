#!/usr/bin/env bash
# tests/mpi/train_per_rank_mpi.sh — no option given to one rank only can make a job wait
# forever (docs/distributed.md, "Launch agreement"). At
# FSDP, tp 2 and ep 2, every run-mode and output flag is given to rank 1 only (MPMD):
#   * the options that may differ per rank (--quiet: a launcher that quiets every rank but
#     rank 0; --ignore-memory-check) train to the end, exit 0, and the metrics rank 0 writes
#     are complete;
#   * every other one is refused on every rank within 30 s, with mxtrain's line naming the
#     option and both values, and no metrics file.
# Usage: train_per_rank_mpi.sh MXTRAIN MPIEXEC   (CTest `mpi_train_per_rank_options`)
source "$(dirname "$0")/support/train_lib.sh"
dense=$DATA/mpi_tiny.yaml
moe=$DATA/mpi_tiny_moe.yaml

# An HF directory for --init-from (the dense model's shape; one process, no MPI).
"$BIN" train --quiet --config "$dense" --steps 1 --checkpoint-dir "$TMP/hf_ck"
"$BIN" export --quiet --checkpoint "$TMP/hf_ck" --out "$TMP/hf"

# run LABEL EXPECT RANK0_ARGS -- RANK1_ARGS: one rank each. EXPECT is "ok" (exit 0 and a
# summary row in rank 0's metrics) or the error both ranks must print.
run() {
  local label=$1 expect=$2 a=() b=()
  shift 2
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  b=("$@")
  rm -rf "$TMP/m.jsonl" "$TMP/ck"
  local t0=$SECONDS rc=0
  timeout 120 "$MPIEXEC" --oversubscribe -np 1 "$BIN" train "${a[@]}" \
    : -np 1 "$BIN" train "${b[@]}" > "$TMP/out.txt" 2>&1 || rc=$?
  local took=$((SECONDS - t0))
  [ "$rc" -ne 124 ] || { cat "$TMP/out.txt"; echo "FAIL $label: still running after 120 s"; exit 1; }
  if [ "$expect" = ok ]; then
    [ "$rc" -eq 0 ] || { cat "$TMP/out.txt"; echo "FAIL $label: exit status $rc"; exit 1; }
    grep -q '"summary"' "$TMP/m.jsonl" ||
      { cat "$TMP/out.txt"; echo "FAIL $label: no summary row in rank 0's metrics"; exit 1; }
    echo "ok $label: trained to the end in $took s"
    return
  fi
  [ "$rc" -ne 0 ] || { cat "$TMP/out.txt"; echo "FAIL $label: exit status 0"; exit 1; }
  [ "$took" -le 30 ] || { cat "$TMP/out.txt"; echo "FAIL $label: took $took s"; exit 1; }
  for r in 0 1; do
    grep -qF "rank $r: error: $expect" "$TMP/out.txt" ||
      { cat "$TMP/out.txt"; echo "FAIL $label: no \"rank $r: error: $expect\""; exit 1; }
  done
  [ -e "$TMP/m.jsonl" ] && { echo "FAIL $label: a metrics file was written"; exit 1; }
  echo "ok $label: refused on both ranks after $took s"
}

differ() { echo "the ranks were started with different $1: rank 0 has \`$2\`, rank 1 has \`$3\`"; }

for layout in fsdp tp2 ep2; do
  case $layout in
    fsdp) L=(--config "$dense" --fsdp) ;;
    tp2) L=(--config "$dense" --tp 2) ;;
    ep2) L=(--config "$moe" --ep 2) ;;
  esac
  M=(--metrics-out "$TMP/m.jsonl")
  C=(--checkpoint-dir "$TMP/ck")
  # Per-rank by design: rank 1 quiet (or skipping its memory check) trains like the others.
  run "$layout: --quiet on rank 1" ok "${L[@]}" "${M[@]}" -- "${L[@]}" "${M[@]}" --quiet
  run "$layout: --ignore-memory-check on rank 1" ok "${L[@]}" "${M[@]}" -- "${L[@]}" "${M[@]}" \
    --ignore-memory-check
  # Everything else must agree.
  run "$layout: --metrics-out on rank 1 only" "$(differ --metrics-out '(none)' "$TMP/m2.jsonl")" \
    "${L[@]}" -- "${L[@]}" --metrics-out "$TMP/m2.jsonl"
  run "$layout: another --metrics-out on rank 1" \
    "$(differ --metrics-out "$TMP/m.jsonl" "$TMP/m2.jsonl")" \
    "${L[@]}" "${M[@]}" -- "${L[@]}" --metrics-out "$TMP/m2.jsonl"
  run "$layout: --decisions-out on rank 1 only" \
    "$(differ --decisions-out '(none)' "$TMP/d.json")" \
    "${L[@]}" "${M[@]}" -- "${L[@]}" "${M[@]}" --decisions-out "$TMP/d.json"
  run "$layout: --profile-steps on rank 1 only" "$(differ --profile-steps 0 1)" \
    "${L[@]}" "${M[@]}" -- "${L[@]}" "${M[@]}" --profile-steps 1
  run "$layout: --profile-out on rank 1 only" "$(differ --profile-out '(none)' "$TMP/p.json")" \
    "${L[@]}" "${M[@]}" --profile-steps 1 -- "${L[@]}" "${M[@]}" --profile-steps 1 \
    --profile-out "$TMP/p.json"
  run "$layout: --peak-gflops on rank 1 only" "$(differ --peak-gflops '(measured)' 100)" \
    "${L[@]}" "${M[@]}" -- "${L[@]}" "${M[@]}" --peak-gflops 100
  run "$layout: --dry-run on rank 1 only" "$(differ --dry-run off on)" \
    "${L[@]}" -- "${L[@]}" --dry-run
  run "$layout: --checkpoint-dir on rank 1 only" "$(differ --checkpoint-dir '(none)' "$TMP/ck")" \
    "${L[@]}" "${M[@]}" -- "${L[@]}" "${M[@]}" "${C[@]}"
  run "$layout: --stop-after on rank 1 only" "$(differ --stop-after '(none)' 2)" \
    "${L[@]}" "${M[@]}" "${C[@]}" -- "${L[@]}" "${M[@]}" "${C[@]}" --stop-after 2
  run "$layout: --resume on rank 1 only" "$(differ --resume off on)" \
    "${L[@]}" "${M[@]}" "${C[@]}" -- "${L[@]}" "${M[@]}" "${C[@]}" --resume
  run "$layout: --overwrite-checkpoints on rank 1 only" "$(differ --overwrite-checkpoints off on)" \
    "${L[@]}" "${M[@]}" "${C[@]}" -- "${L[@]}" "${M[@]}" "${C[@]}" --overwrite-checkpoints
  run "$layout: --steps on rank 1 only" "$(differ '--steps (training.steps)' 4 5)" \
    "${L[@]}" "${M[@]}" --steps 4 -- "${L[@]}" "${M[@]}" --steps 5
  if [ "$layout" != ep2 ]; then  # the HF directory is the dense model's
    run "$layout: --init-from on rank 1 only" "$(differ --init-from '(none)' "$TMP/hf")" \
      "${L[@]}" "${M[@]}" -- "${L[@]}" "${M[@]}" --init-from "$TMP/hf"
  fi
done
echo "per-rank options: all checks passed"
