#!/usr/bin/env bash
# tests/mpi/watchdog_mpi.sh — the collective watchdog (docs/distributed.md, "Collective
# watchdog"): a rank blocked in a call that waits on other ranks for longer than
# MXTRAIN_COLLECTIVE_TIMEOUT seconds ends the job, with one line naming the call.
#   calls       watchdog_hang (2 ranks, bound 2 s): rank 1 never joins rank 0's blocking
#               all-reduce on a communicator named "tp", a non-blocking all-gather's wait,
#               the point-to-point reduce-scatter's wait, a world barrier: each ends non-zero
#               no sooner than the bound and within the bound + 20 s, rank 0 naming the call,
#               the communicator and a wait over the bound; rank 1 joining 1.5 s late under a
#               3 s bound completes (status 0); a malformed bound is refused, naming it.
#   train_fsdp  `mxtrain train` at 2 ranks (FSDP, tp 2, ep 2 on the MoE test model) with a
#   train_tp    6 s bound: once training runs, rank 1 is stopped (SIGSTOP: alive, so neither
#   train_ep    mpirun nor TCP notices); the job ends non-zero within the bound + 20 s with
#               rank 0's watchdog line.
# Usage: watchdog_mpi.sh MXTRAIN MPIEXEC CASE WATCHDOG_HANG   (CTest `mpi_watchdog_CASE`)
source "$(dirname "$0")/support/train_lib.sh"
case_name=${3:?usage: watchdog_mpi.sh MXTRAIN MPIEXEC calls|train_fsdp|train_tp|train_ep HANG}
HANG=${4:?usage: watchdog_mpi.sh MXTRAIN MPIEXEC CASE WATCHDOG_HANG}
margin=20  # MPI_Abort's teardown takes 1-2 s; the rest is room for a loaded CI machine

# elapsed_since T0: seconds (3 decimals) since T0, a `date +%s.%N` reading.
elapsed_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'; }

# check_ended LABEL RC SECONDS BOUND OUT MIN: non-zero status, MIN <= SECONDS <= BOUND + margin,
# and rank 0's watchdog line in OUT with a wait of at least BOUND (2 decimals).
check_ended() {
  local label=$1 rc=$2 took=$3 bound=$4 out=$5 min=$6
  [ "$rc" -ne 0 ] || { cat "$out"; echo "FAIL $label: exit status 0"; exit 1; }
  [ "$rc" -ne 124 ] || { cat "$out"; echo "FAIL $label: still running after the time limit"; exit 1; }
  awk -v t="$took" -v lo="$min" -v hi="$((bound + margin))" 'BEGIN { exit !(t >= lo && t <= hi) }' ||
    { cat "$out"; echo "FAIL $label: ended after $took s, not within [$min, $((bound + margin))] s"; exit 1; }
  local line
  line=$(grep -m1 "^rank 0: error: collective watchdog: " "$out") ||
    { cat "$out"; echo "FAIL $label: no watchdog line from rank 0"; exit 1; }
  echo "$line"
  local waited
  waited=$(sed -n 's/.* has waited \([0-9.]*\) s, over the bound of .*/\1/p' <<< "$line")
  awk -v w="$waited" -v b="$bound" 'BEGIN { exit !(w >= b) }' ||
    { echo "FAIL $label: the line does not report a wait of at least $bound s"; exit 1; }
  grep -q "(MXTRAIN_COLLECTIVE_TIMEOUT)" <<< "$line" ||
    { echo "FAIL $label: the line does not name MXTRAIN_COLLECTIVE_TIMEOUT"; exit 1; }
  echo "ok $label: exit status $rc after $took s (bound $bound s)"
}

case $case_name in
  calls)
    for call in allreduce:"allreduce on the tp communicator (rank 0 of 2)" \
                wait_allgather:"wait for a non-blocking allgather on the tp communicator (rank 0 of 2)" \
                wait_rs:"wait for a non-blocking reduce_scatter on the tp communicator (rank 0 of 2)" \
                barrier:"barrier on the world communicator (rank 0 of 2)"; do
      name=${call%%:*} expect=${call#*:}
      t0=$(date +%s.%N) rc=0
      MXTRAIN_COLLECTIVE_TIMEOUT=2 timeout 120 "$MPIEXEC" --oversubscribe -np 2 "$HANG" "$name" never \
        > "$TMP/out.txt" 2>&1 || rc=$?
      took=$(elapsed_since "$t0")
      # The first call (both ranks) completes before rank 1 stops joining: the job cannot
      # end sooner than the bound.
      check_ended "$name" "$rc" "$took" 2 "$TMP/out.txt" 2
      grep -qF "rank 0: error: collective watchdog: $expect has waited" "$TMP/out.txt" ||
        { echo "FAIL $name: the line does not name \"$expect\""; exit 1; }
    done
    for name in allreduce wait_rs; do
      MXTRAIN_COLLECTIVE_TIMEOUT=3 timeout 120 "$MPIEXEC" --oversubscribe -np 2 "$HANG" "$name" late 1.5 \
        > "$TMP/out.txt" 2>&1 || { cat "$TMP/out.txt"; echo "FAIL $name: a 1.5 s late join under a 3 s bound failed"; exit 1; }
      [ "$(grep -c "$name completed" "$TMP/out.txt")" -eq 2 ] || { cat "$TMP/out.txt"; exit 1; }
      echo "ok $name: a rank 1.5 s late under a 3 s bound completes"
    done
    for bad in 1e3 -5 abc "" 10s 0x10 99999999; do
      if MXTRAIN_COLLECTIVE_TIMEOUT=$bad timeout 120 "$MPIEXEC" --oversubscribe -np 2 "$HANG" allreduce late 0 \
           > "$TMP/out.txt" 2>&1; then
        echo "FAIL: MXTRAIN_COLLECTIVE_TIMEOUT=\"$bad\" was accepted"; exit 1
      fi
      grep -qF "rank 0: error: MXTRAIN_COLLECTIVE_TIMEOUT \"$bad\" is not a number of seconds from 0 to 10000000" \
        "$TMP/out.txt" || { cat "$TMP/out.txt"; echo "FAIL: no one-line error for \"$bad\""; exit 1; }
    done
    echo "ok: malformed bounds refused" ;;
  train_fsdp | train_tp | train_ep)
    cfg=$DATA/mpi_tiny.yaml
    case $case_name in
      train_fsdp) layout=(--fsdp) ;;
      train_tp) layout=(--tp 2) ;;
      train_ep) layout=(--ep 2); cfg=$DATA/mpi_tiny_moe.yaml ;;
    esac
    bound=6
    MXTRAIN_COLLECTIVE_TIMEOUT=$bound "$MPIEXEC" --oversubscribe -np 2 "$BIN" train \
      --config "$cfg" "${layout[@]}" --quiet --steps 100000 --metrics-out "$TMP/m.jsonl" \
      > "$TMP/out.txt" 2>&1 &
    launcher=$!
    victim=
    trap '[ -n "$victim" ] && kill -CONT $victim 2>/dev/null; kill -9 $launcher 2>/dev/null || true; rm -rf "$TMP"' EXIT
    for _ in $(seq 240); do  # training has started once a step is in the metrics
      grep -q '"loss"' "$TMP/m.jsonl" 2>/dev/null && break
      kill -0 $launcher 2>/dev/null || { cat "$TMP/out.txt"; echo "FAIL: run ended early"; exit 1; }
      sleep 0.5
    done
    grep -q '"loss"' "$TMP/m.jsonl" || { echo "FAIL: no training step within 120 s"; exit 1; }
    victim=$(rank_pid $launcher 1) ||
      { show_procs $launcher; cat "$TMP/out.txt"; echo "FAIL: rank 1 not found under mpirun"; exit 1; }
    kill -STOP "$victim"
    t0=$(date +%s.%N)
    while kill -0 $launcher 2>/dev/null &&
          awk -v t="$(elapsed_since "$t0")" -v hi="$((bound + margin + 10))" 'BEGIN { exit !(t < hi) }'; do
      sleep 0.2
    done
    took=$(elapsed_since "$t0")
    if kill -0 $launcher 2>/dev/null; then
      cat "$TMP/out.txt"; echo "FAIL: mpirun still running $took s after rank 1 stopped"; exit 1
    fi
    rc=0
    wait $launcher || rc=$?
    # Rank 0 may have been blocked for part of a step already: the job can end a little
    # sooner than the bound after the stop; the line still reports a wait over the bound.
    check_ended "$case_name" "$rc" "$took" "$bound" "$TMP/out.txt" 0 ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
