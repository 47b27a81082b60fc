#!/usr/bin/env bash
# scripts/soak.sh [N] — nothing lost, however a run is stopped. Trains a small model and
# interrupts it N times at random moments, each time with kill -9 or SIGTERM (to the process;
# under FSDP kill -9 to a random rank, as a crash or the OOM killer would, and SIGTERM to a
# random rank or to mpirun), resuming after each, then lets it finish; once in one process
# and once as a 2-rank FSDP job. Checks against an uninterrupted run of each:
# the per-step and validation losses and the final weights are equal bit for bit, every step
# appears once in the metrics, and no temporary file, directory or lock is left.
# N defaults to 10; SOAK_SEED fixes the random moments (printed at the start); MXTRAIN_BIN
# names the binary (default build/mxtrain). CI runs `bash scripts/soak.sh 4`.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/mpi/support/procs.sh
N=${1:-10}
BIN=$(realpath "${MXTRAIN_BIN:-build/mxtrain}")
SEED=${SOAK_SEED:-$$}
RANDOM=$SEED
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mxt_soak_XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo "soak: $N interruptions per mode, SOAK_SEED=$SEED, in $WORK"
STEPS=1500  # a few seconds a run: the random moments fall inside it
cat > "$WORK/soak.yaml" <<YAML
model: {d_model: 64, n_layers: 2, n_heads: 2, d_ff: 128, max_seq_len: 32}
training: {steps: $STEPS, seq_len: 32, micro_batch_size: 4, lr: 0.01, warmup_steps: 5,
           eval_every: 50, eval_batches: 2, checkpoint_every: 20, keep_checkpoints: 2}
precision: {recipe: mxfp8}
YAML

# launch MODE DIR [ARGS...]: `mxtrain train` of the soak config into DIR, in the background;
# PID is the process (mpirun under fsdp).
launch() {
  local mode=$1 dir=$2
  shift 2
  local cmd=("$BIN" train --config "$WORK/soak.yaml" --quiet --metrics-out "$dir/m.jsonl"
             --checkpoint-dir "$dir/ck" "$@")
  if [ "$mode" = fsdp ]; then
    mpirun --oversubscribe -np 2 "${cmd[@]}" --fsdp >> "$dir/log.txt" 2>&1 &
  else
    "${cmd[@]}" >> "$dir/log.txt" 2>&1 &
  fi
  PID=$!
}

# victim MODE SIG: the process a signal goes to — the run itself, or under FSDP a random
# rank, or mpirun for SIGTERM (a SIGKILLed mpirun cannot take its ranks down with it: they
# would train on, holding the lock, until they finish).
victim() {
  if [ "$1" = single ] || { [ "$2" = TERM ] && [ $((RANDOM % 3)) = 0 ]; }; then
    echo $PID
    return
  fi
  # The ranks not up yet: mpirun (which then takes them down).
  rank_pid $PID $((RANDOM % 2)) 0 || echo $PID
}

for mode in single fsdp; do
  ref=$WORK/$mode-ref run=$WORK/$mode
  mkdir -p "$ref" "$run"
  launch $mode "$ref"
  wait $PID || { cat "$ref/log.txt"; echo "soak $mode: the uninterrupted run failed"; exit 1; }
  for i in $(seq "$N"); do
    if [ -e "$run/ck/latest" ]; then launch $mode "$run" --resume; else launch $mode "$run"; fi
    sleep "$((RANDOM % 15 + 1))e-1"  # 0.1 .. 1.5 s
    sig=KILL
    [ $((RANDOM % 2)) = 0 ] && sig=TERM
    target=$(victim $mode $sig)
    kill -$sig "$target" 2>/dev/null || true
    rc=0
    { wait $PID; } 2> /dev/null || rc=$?  # (no job-control "Killed" line)
    latest=$(cat "$run/ck/latest" 2>/dev/null || echo none)
    echo "soak $mode $i: SIG$sig to $([ "$target" = $PID ] && echo the run || echo a rank), exit $rc, latest $latest"
    # rc 0: the run ended before the signal; nothing left to interrupt.
    [ "$rc" = 0 ] && break
    if [ $mode = fsdp ]; then  # no rank may outlive mpirun
      sleep 0.5
      pgrep -f "$WORK/soak.yaml" > /dev/null && { echo "soak fsdp: a rank outlived mpirun"; exit 1; }
    fi
  done
  if ! grep '"summary"' "$run/m.jsonl" 2>/dev/null | grep -q "\"steps\":$STEPS,"; then
    if [ -e "$run/ck/latest" ]; then launch $mode "$run" --resume; else launch $mode "$run"; fi
    wait $PID || { cat "$run/log.txt"; echo "soak $mode: the final resume failed"; exit 1; }
  fi

  python3 tools/same_metrics.py "$ref/m.jsonl" "$run/m.jsonl" "$STEPS" "soak $mode"
  cmp "$ref/ck/step_$STEPS/model.safetensors" "$run/ck/step_$STEPS/model.safetensors" ||
    { echo "soak $mode: final weights differ"; exit 1; }
  left=$(cd "$run" && find . -name '.*' ! -name . | sort | tr '\n' ' ')
  [ -z "$left" ] || { echo "soak $mode: left behind: $left"; exit 1; }
  echo "soak $mode: final weights equal, nothing left behind"
done
echo "soak: all checks passed"
