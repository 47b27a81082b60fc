#!/usr/bin/env bash
# tests/mpi/train_failure_mpi.sh — an error on one rank ends every rank within seconds with
# that rank's message (docs/distributed.md, "Failures"): `mxtrain train --fsdp` at 2 ranks
# where only rank 0 writes files, and rank 0 cannot write
#   metrics     --metrics-out in a directory that does not exist (refused at start-up)
#   decisions   --decisions-out in a directory that does not exist (refused at start-up)
#   checkpoint  a regular file where the checkpoint directory should be (start-up), and a
#               directory where the checkpoint's `latest` file goes: the save after the last
#               step fails on rank 0 while rank 1 waits for it in a collective
#   sigkill     rank 1 is killed with SIGKILL in the middle of training: mpirun ends the job
#   sigkill_tp  the same at tp 2 (tensor-parallel collectives in every layer)
#   sigkill_ep  the same at ep 2 (expert all-to-alls), on the MoE test model
# Each launch must exit non-zero within 60 s (a hang would hit the 120 s `timeout`).
# Usage: train_failure_mpi.sh MXTRAIN MPIEXEC CASE   (CTest `mpi_train_abort_CASE`)
source "$(dirname "$0")/support/train_lib.sh"
case_name=${3:?usage: train_failure_mpi.sh MXTRAIN MPIEXEC metrics|decisions|checkpoint|sigkill|sigkill_tp|sigkill_ep}
cfg=$DATA/mpi_tiny.yaml
layout=(--fsdp)
case $case_name in
  sigkill_tp) layout=(--tp 2) ;;
  sigkill_ep) layout=(--ep 2); cfg=$DATA/mpi_tiny_moe.yaml ;;
esac

# expect_abort LABEL EXPECTED_MESSAGE TRAIN_ARGS...: 2 ranks, non-zero exit within 60 s,
# "rank 0: error: EXPECTED_MESSAGE" in the output.
expect_abort() {
  local label=$1 msg=$2
  shift 2
  local t0=$SECONDS rc=0
  timeout 120 "$MPIEXEC" --oversubscribe -np 2 "$BIN" train --config "$cfg" --fsdp --quiet "$@" \
    > "$TMP/out.txt" 2>&1 || rc=$?
  local took=$((SECONDS - t0))
  cat "$TMP/out.txt"
  [ "$rc" -ne 0 ] || { echo "FAIL $label: exit status 0"; exit 1; }
  [ "$rc" -ne 124 ] || { echo "FAIL $label: still running after 120 s (hang)"; exit 1; }
  [ "$took" -le 60 ] || { echo "FAIL $label: took $took s"; exit 1; }
  grep -qF "rank 0: error: $msg" "$TMP/out.txt" ||
    { echo "FAIL $label: no \"rank 0: error: $msg\""; exit 1; }
  echo "ok $label: exit status $rc after $took s"
}

case $case_name in
  metrics)
    expect_abort "metrics file" "--metrics-out $TMP/missing/m.jsonl: directory" \
      --metrics-out "$TMP/missing/m.jsonl" ;;
  decisions)
    expect_abort "decisions file" "--decisions-out $TMP/missing/d.json: directory" \
      --decisions-out "$TMP/missing/d.json" ;;
  checkpoint)
    touch "$TMP/ckfile"
    expect_abort "checkpoint dir is a file" "--checkpoint-dir $TMP/ckfile" \
      --checkpoint-dir "$TMP/ckfile"
    mkdir -p "$TMP/ck/latest/in-the-way"
    expect_abort "checkpoint save fails after training" "cannot write $TMP/ck/latest" \
      --checkpoint-dir "$TMP/ck" --steps 2 ;;
  sigkill | sigkill_tp | sigkill_ep)
    "$MPIEXEC" --oversubscribe -np 2 "$BIN" train --config "$cfg" "${layout[@]}" --quiet \
      --steps 100000 --metrics-out "$TMP/m.jsonl" > "$TMP/out.txt" 2>&1 &
    launcher=$!
    trap 'kill -9 $launcher 2>/dev/null || true; rm -rf "$TMP"' EXIT
    for _ in $(seq 240); do  # training has started once a step is in the metrics
      grep -q '"loss"' "$TMP/m.jsonl" 2>/dev/null && break
      kill -0 $launcher 2>/dev/null || { cat "$TMP/out.txt"; echo "FAIL: run ended early"; exit 1; }
      sleep 0.5
    done
    grep -q '"loss"' "$TMP/m.jsonl" || { echo "FAIL: no training step within 120 s"; exit 1; }
    victim=$(rank_pid $launcher 1) ||
      { show_procs $launcher; cat "$TMP/out.txt"; echo "FAIL: rank 1 not found under mpirun"; exit 1; }
    kill -9 "$victim"
    t0=$SECONDS
    while kill -0 $launcher 2>/dev/null && [ $((SECONDS - t0)) -le 60 ]; do sleep 0.5; done
    kill -0 $launcher 2>/dev/null && { echo "FAIL: mpirun still running 60 s after rank 1 died"; exit 1; }
    rc=0
    wait $launcher || rc=$?
    cat "$TMP/out.txt"
    [ "$rc" -ne 0 ] || { echo "FAIL: mpirun exited 0 after rank 1 was killed"; exit 1; }
    echo "ok $case_name: mpirun exited with status $rc $((SECONDS - t0)) s after rank 1 died" ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
