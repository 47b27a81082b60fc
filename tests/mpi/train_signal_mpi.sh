#!/usr/bin/env bash
# tests/mpi/train_signal_mpi.sh — a 2-rank FSDP (or tp 2) run stopped by SIGTERM loses
# nothing: the signal delivered to rank 1 only (or to mpirun, which forwards it to every rank)
# stops both ranks after the same step, agreed at the step's end; rank 0 writes the checkpoint
# and the summary row and prints the one stop line (no other rank prints one); both exit 143.
# Resuming at 2 ranks gives the losses and final weights of an uninterrupted 2-rank run bit
# for bit, every step once in the metrics. While the run holds its checkpoint directory,
# another run is refused.
# Usage: train_signal_mpi.sh MXTRAIN MPIEXEC   (CTest `mpi_train_signal`)
source "$(dirname "$0")/support/train_lib.sh"
# 4000 steps (about 3 ms each on 2 cores): mpirun passes SIGTERM on only after
# odls_base_sigkill_timeout (2 s below), and the run must still be going then.
STEPS=4000
{ sed "s/steps: 4,/steps: $STEPS,/" "$DATA/mpi_tiny.yaml"; } > "$TMP/run.yaml"
cfg=$TMP/run.yaml
SAME=$(realpath "$(dirname "$0")/../../tools/same_metrics.py")
rows() { local n; n=$(grep -c '"loss"' "$1" 2>/dev/null) || true; echo "${n:-0}"; }

for L in fsdp tp2; do
  args=(--fsdp); [ $L = tp2 ] && args=(--tp 2)
  mpi 2 train --config "$cfg" "${args[@]}" --quiet --metrics-out "$TMP/full_$L.jsonl" \
    --checkpoint-dir "$TMP/full_${L}_ck"
done

# stop_run NAME TARGET [MPIRUN_ARGS...]: a 2-rank run (layout $L: fsdp or tp2) into
# $TMP/NAME.jsonl and $TMP/NAME_ck; once 10 steps are done SIGTERM goes to TARGET (rank1 or
# mpirun); checks the outcome.
stop_run() {
  local name=$1 target=$2 args=(--fsdp)
  [ "$L" = tp2 ] && args=(--tp 2)
  shift 2
  "$MPIEXEC" --oversubscribe "$@" -np 2 "$BIN" train --config "$cfg" "${args[@]}" --quiet \
    --metrics-out "$TMP/$name.jsonl" --checkpoint-dir "$TMP/${name}_ck" > "$TMP/$name.out" 2>&1 &
  local launcher=$!
  for _ in $(seq 600); do [ "$(rows "$TMP/$name.jsonl")" -ge 10 ] && break; sleep 0.05; done
  [ "$(rows "$TMP/$name.jsonl")" -ge 10 ] || { cat "$TMP/$name.out"; echo "FAIL $name: no steps"; exit 1; }
  if [ "$target" = rank1 ]; then
    # Another run on the same checkpoint directory is refused while this one holds it.
    local rc2=0
    "$BIN" train --config "$cfg" --quiet --checkpoint-dir "$TMP/${name}_ck" 2> "$TMP/lock.txt" || rc2=$?
    [ "$rc2" = 1 ] && grep -qF "is in use by another mxtrain run (PID " "$TMP/lock.txt" ||
      { cat "$TMP/lock.txt"; echo "FAIL $name: a second run was not refused"; exit 1; }
    local victim
    victim=$(rank_pid $launcher 1) ||
      { show_procs $launcher; cat "$TMP/$name.out"; echo "FAIL $name: rank 1 not found"; exit 1; }
    kill -TERM "$victim"
  else
    kill -TERM $launcher
  fi
  local rc=0
  timeout 60 tail --pid=$launcher -f /dev/null || { echo "FAIL $name: still running after 60 s"; exit 1; }
  wait $launcher || rc=$?
  cat "$TMP/$name.out"
  [ "$rc" -ne 0 ] || { echo "FAIL $name: mpirun exited 0"; exit 1; }
  [ "$(rows "$TMP/$name.jsonl")" -lt $STEPS ] ||
    { echo "FAIL $name: all $STEPS steps ran before the signal reached the ranks"; exit 1; }
  STOP=$(grep '"loss"' "$TMP/$name.jsonl" | tail -n 1 | sed 's/.*"step":\([0-9]*\).*/\1/')
  grep -qxF "stopped by SIGTERM at step $STOP; checkpoint at $TMP/${name}_ck/step_$STOP; resume with --resume" \
    "$TMP/$name.out" || { echo "FAIL $name: no stop line for step $STOP"; exit 1; }
  [ "$(grep -c 'stopped by' "$TMP/$name.out")" = 1 ] || { echo "FAIL $name: not one stop line"; exit 1; }
  grep '"summary":true' "$TMP/$name.jsonl" | grep -q "\"steps\":$STOP,.*\"stopped_by_signal\":15" ||
    { echo "FAIL $name: summary row"; exit 1; }
  [ "$(cat "$TMP/${name}_ck/latest")" = "step_$STOP" ] || { echo "FAIL $name: latest"; exit 1; }
  mpi 2 train --config "$cfg" "${args[@]}" --quiet --metrics-out "$TMP/$name.jsonl" \
    --checkpoint-dir "$TMP/${name}_ck" --resume
  python3 "$SAME" "$TMP/full_$L.jsonl" "$TMP/$name.jsonl" $STEPS "$name" ||
    { echo "FAIL $name: resumed losses differ"; exit 1; }
  cmp "$TMP/full_${L}_ck/step_$STEPS/model.safetensors" "$TMP/${name}_ck/step_$STEPS/model.safetensors" ||
    { echo "FAIL $name: final weights differ"; exit 1; }
  echo "ok $name: stopped at step $STOP (exit status $rc), resumed bit for bit"
}

L=fsdp
stop_run to_rank1 rank1
# mpirun forwards SIGTERM to every rank after odls_base_sigkill_timeout seconds and kills
# them that long after; 2 s leave the tiny model's step and save plenty of time.
stop_run to_mpirun mpirun --mca odls_base_sigkill_timeout 2
# At tp 2 too, only rank 0 says how the run stopped (rank 1 printed "no checkpoint").
L=tp2
stop_run tp2_to_rank1 rank1
echo "signals under FSDP and tp 2: all checks passed"
