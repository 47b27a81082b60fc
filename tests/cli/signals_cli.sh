#!/usr/bin/env bash
# tests/cli/signals_cli.sh — `mxtrain train` stopped by a signal loses nothing: SIGTERM,
# SIGINT and SIGHUP let the step in progress finish, then the run writes a checkpoint and the
# summary row, prints one line ("stopped by SIGTERM at step N; checkpoint at ...; resume with
# --resume") and exits with 128 + the signal; resuming gives the losses and final weights of a
# run never stopped, bit for bit, with every step once in the metrics. Without a checkpoint
# directory it says so. A second signal ends the process at once (no save, no summary).
# Usage: signals_cli.sh /path/to/mxtrain   (CTest `cli_signals`)
set -u
source "$(dirname "$0")/lib.sh"
MXTRAIN=$(realpath "${1:?usage: signals_cli.sh /path/to/mxtrain}") || exit 1
SAME=$(realpath "$(dirname "$0")/../../tools/same_metrics.py") || exit 1
workdir signals
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
write_corpus corpus.txt
# About 1.5 ms a step (3 s a run): a signal sent after step 20 lands with most of the run
# to spare.
cat > run.yaml <<'YAML'
model: {d_model: 64, n_layers: 2, n_heads: 2, d_ff: 128, max_seq_len: 32}
training: {steps: 2000, seq_len: 32, micro_batch_size: 4, warmup_steps: 5, eval_every: 0, eval_batches: 1}
data: {path: corpus.txt}
precision: {recipe: mxfp8}
YAML

# rows FILE: the number of training rows (with a loss) in a metrics file.
rows() { local n; n=$(grep -c '"loss"' "$1" 2>/dev/null) || true; echo "${n:-0}"; }

# stopped_run SIGNAL NAME CODE DIR [ARGS...]: starts a run into DIR/m.jsonl (and DIR/ck
# unless ARGS say otherwise), sends SIGNAL once 20 steps are done, checks the exit code, the
# one line and the summary row; sets STOP to the step it stopped at.
stopped_run() {
  local sig=$1 name=$2 code=$3 dir=$4
  shift 4
  mkdir -p "$dir"
  "$MXTRAIN" train --quiet --config run.yaml --metrics-out "$dir/m.jsonl" "$@" 2> "$dir/err.txt" &
  local pid=$!
  for _ in $(seq 300); do [ "$(rows "$dir/m.jsonl")" -ge 20 ] && break; sleep 0.05; done
  kill -"$sig" $pid
  local rc=0
  wait $pid || rc=$?
  [ "$rc" -eq "$code" ] || fail "$name: exit $rc, expected $code: $(cat "$dir/err.txt")"
  STOP=$(grep '"loss"' "$dir/m.jsonl" | tail -n 1 | sed 's/.*"step":\([0-9]*\).*/\1/')
  [ "$STOP" -ge 20 ] && [ "$STOP" -lt 2000 ] || fail "$name: stopped at step '$STOP'"
  grep -q "\"summary\":true" "$dir/m.jsonl" || fail "$name: no summary row"
  grep '"summary":true' "$dir/m.jsonl" | grep -q "\"steps\":$STOP," ||
    fail "$name: summary row does not say step $STOP"
  grep '"summary":true' "$dir/m.jsonl" | grep -q "\"stopped_by_signal\":$((code - 128))" ||
    fail "$name: summary row lacks stopped_by_signal"
  # No validation ran (eval_every 0, and a stopped run saves at once): null, not 0.0.
  grep '"summary":true' "$dir/m.jsonl" |
    grep -q '"final_val_loss":null,"final_val_nats_per_byte":null' ||
    fail "$name: the summary row's final_val_loss is not null: $(grep summary "$dir/m.jsonl")"
}

# ---- SIGTERM: checkpoint, one line, resume bit for bit ----
"$MXTRAIN" train --quiet --config run.yaml --metrics-out full.jsonl --checkpoint-dir full_ck ||
  fail "uninterrupted run"
stopped_run TERM SIGTERM 143 term --checkpoint-dir term/ck
tail -n 1 term/err.txt | grep -qxF "stopped by SIGTERM at step $STOP; checkpoint at term/ck/step_$STOP; resume with --resume" ||
  fail "SIGTERM: last line is not the stop line: $(cat term/err.txt)"
[ "$(cat term/ck/latest)" = "step_$STOP" ] || fail "SIGTERM: latest is $(cat term/ck/latest), not step_$STOP"
"$MXTRAIN" train --quiet --config run.yaml --metrics-out term/m.jsonl --checkpoint-dir term/ck \
  --resume 2> term/err2.txt || fail "resume after SIGTERM: $(cat term/err2.txt)"
python3 "$SAME" full.jsonl term/m.jsonl 2000 "SIGTERM, resumed" ||
  fail "resumed run differs from the uninterrupted one"
cmp -s full_ck/step_2000/model.safetensors term/ck/step_2000/model.safetensors ||
  fail "final weights differ from the uninterrupted run's"
cmp -s full_ck/step_2000/optimizer.safetensors term/ck/step_2000/optimizer.safetensors ||
  fail "final optimizer state differs from the uninterrupted run's"

# ---- SIGINT (Ctrl-C) and SIGHUP: the same stop ----
stopped_run INT SIGINT 130 int --checkpoint-dir int/ck
tail -n 1 int/err.txt | grep -qxF "stopped by SIGINT at step $STOP; checkpoint at int/ck/step_$STOP; resume with --resume" ||
  fail "SIGINT: $(cat int/err.txt)"
stopped_run HUP SIGHUP 129 hup --checkpoint-dir hup/ck
[ "$(cat hup/ck/latest)" = "step_$STOP" ] || fail "SIGHUP: no checkpoint at step $STOP"

# ---- no checkpoint directory: said, still the summary ----
stopped_run TERM "SIGTERM without --checkpoint-dir" 143 nock
tail -n 1 nock/err.txt | grep -qxF "stopped by SIGTERM at step $STOP; no checkpoint (no --checkpoint-dir)" ||
  fail "no-checkpoint stop line: $(cat nock/err.txt)"

# ---- a second signal stops at once: no checkpoint written after it, no summary. Steps of
# about 0.4 s, and the first signal sent as soon as a step's row appears, so that both signals
# come while the next step runs (a first signal near a step's end could let the run stop
# cleanly before the second arrives) ----
sed 's/micro_batch_size: 4,/micro_batch_size: 4, grad_accum: 256,/' run.yaml > slow.yaml
mkdir twice
"$MXTRAIN" train --quiet --config slow.yaml --metrics-out twice/m.jsonl --checkpoint-dir twice/ck \
  2> twice/err.txt &
pid=$!
for _ in $(seq 300); do [ "$(rows twice/m.jsonl)" -ge 1 ] && break; sleep 0.05; done
for _ in $(seq 6000); do [ "$(rows twice/m.jsonl)" -ge 2 ] && break; sleep 0.01; done
kill -TERM $pid
# The second one only once the first was handled (two pending SIGTERMs would be one).
for _ in $(seq 100); do grep -q "stopping after this step" twice/err.txt && break; sleep 0.02; done
kill -TERM $pid
rc=0
wait $pid || rc=$?
[ "$rc" -eq 143 ] || fail "second signal: exit $rc"
grep -q "stopped by" twice/err.txt && fail "second signal: the run still stopped cleanly: $(cat twice/err.txt)"
grep -q '"summary"' twice/m.jsonl && fail "second signal: a summary row was written"
[ -e twice/ck/latest ] && fail "second signal: a checkpoint was written"

finish "signals CLI"
