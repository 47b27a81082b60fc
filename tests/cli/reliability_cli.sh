#!/usr/bin/env bash
# tests/cli/reliability_cli.sh — bad inputs and unwritable outputs end the real `mxtrain`
# binary with exit code 1 and one `error:` line naming the file, key or flag, within
# seconds, and leave no partial output: unwritable output paths before step 1, a full
# device (/dev/full) as metrics or decisions file, non-regular inputs (/dev/zero),
# deeply nested JSON, a meta.json shape larger than its data, models that cannot fit in
# memory, config sections missing, duplicate keys, non-finite values; strict command-line
# values; error lines without the build machine's paths; FIFO and device inputs named; a
# validation split too short for a sequence refused before step 1; a second run on the same
# outputs refused with the holder's PID, a killed run's lock and temporaries taken over and
# removed; and resuming with a changed recipe or learning rate says what changed, with a
# changed model names the keys; --swiglu-input fp4 trains under nvfp4 and is refused under mxfp8.
# Usage: reliability_cli.sh /path/to/mxtrain /path/to/source   (CTest `cli_reliability`)
set -u
source "$(dirname "$0")/lib.sh"
MXTRAIN=$(realpath "${1:?usage: reliability_cli.sh /path/to/mxtrain /path/to/source}") || exit 1
SRC=$(realpath "${2:?usage: reliability_cli.sh /path/to/mxtrain /path/to/source}") || exit 1
workdir reliability
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

# A tiny model and corpus: a few steps take well under a second.
write_corpus corpus.txt
MODEL='model: {d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, max_seq_len: 16}'
TRAIN='training: {steps: 2, seq_len: 16, micro_batch_size: 2, eval_every: 0, eval_batches: 1}'
cat > ok.yaml <<YAML
$MODEL
$TRAIN
data: {path: corpus.txt}
precision: {recipe: mxfp8}
YAML

# ---- nothing lost: outputs checked before any work, every write checked ----
touch afile
expect_error --at-start --within 5 "checkpoint dir under a file" \
  "--checkpoint-dir afile/ckpt: afile is a file, not a directory" \
  "$MXTRAIN" train --quiet --config ok.yaml --checkpoint-dir afile/ckpt --metrics-out m1.jsonl
[ -e m1.jsonl ] && fail "metrics file created although the checkpoint dir was refused"
expect_error --at-start --within 5 "metrics under a file" \
  "--metrics-out afile/m.jsonl: afile is a file, not a directory" \
  "$MXTRAIN" train --quiet --config ok.yaml --metrics-out afile/m.jsonl
expect_error --at-start --within 5 "decisions into a directory" \
  "--decisions-out $WORK: is a directory" \
  "$MXTRAIN" train --quiet --config ok.yaml --decisions-out "$WORK"
expect_error --at-start --within 5 "profile under a file" \
  "--profile-out afile/p.json: afile is a file, not a directory" \
  "$MXTRAIN" train --quiet --config ok.yaml --profile-steps 1 --profile-out afile/p.json
expect_error --within 5 "profile file without profiled steps" \
  "--profile-out needs --profile-steps N" \
  "$MXTRAIN" train --quiet --config ok.yaml --profile-out p.json
expect_error --within 5 "more profiled steps than the run has" \
  "--profile-steps 2 needs 3 steps in this run (the first is a warm-up), but it runs 2" \
  "$MXTRAIN" train --quiet --config ok.yaml --profile-steps 2
[ -e p.json ] && fail "profile file created by a refused run"
# Asked for, the profile is shown even with --quiet, and written as JSON.
"$MXTRAIN" train --quiet --config ok.yaml --profile-steps 1 --profile-out p.json 2> err.txt ||
  fail "profiled run: $(cat err.txt)"
grep -q "^profile of steps 2-2 (1 step after a warm-up step)" err.txt ||
  fail "no profile table on stderr: $(head -c 300 err.txt)"
python3 -c 'import json, sys; p = json.load(open("p.json")); assert p["steps"] == [2] and p["rows"]' ||
  fail "p.json: $(head -c 300 p.json)"
expect_error --at-start --within 5 "bench-layers report under a file" \
  "--report afile/r.json: afile is a file, not a directory" \
  "$MXTRAIN" bench-layers --config ok.yaml --report afile/r.json
if [ -w /dev/full ]; then
  expect_error --at-start --within 30 "metrics on a full device" \
    "cannot write /dev/full: No space left on device" \
    "$MXTRAIN" train --quiet --config ok.yaml --metrics-out /dev/full
  expect_error --at-start --within 30 "decisions on a full device" \
    "cannot write /dev/full: No space left on device" \
    "$MXTRAIN" train --quiet --config ok.yaml --dry-run --decisions-out /dev/full
  [ -c /dev/full ] || fail "/dev/full is no longer a device"
fi
# Permissions do not stop root: as root this case is left to cli_unprivileged, which runs
# this script as an unprivileged user and checks that the line below was printed.
if [ "$(id -u)" -ne 0 ]; then
  mkdir ro && chmod 555 ro
  expect_error --at-start --within 5 "read-only checkpoint dir" \
    "--checkpoint-dir ro/ckpt: cannot create files in ro" \
    "$MXTRAIN" train --quiet --config ok.yaml --checkpoint-dir ro/ckpt
  chmod 755 ro
  echo "ran: read-only checkpoint dir"
fi

# ---- inputs: regular files only, nesting bounded, shapes checked before allocating ----
expect_error --at-start --within 5 "quantize /dev/zero" \
  "/dev/zero is not a regular file" \
  "$MXTRAIN" quantize --input /dev/zero --recipe mxfp8 --out-dir qz
[ -e qz ] && fail "quantize /dev/zero left qz behind"
mkdir deep
python3 -c "print('{\"format\": ' + '['*100000 + ']'*100000 + '}')" > deep/meta.json
expect_error --at-start --within 5 "deep meta.json" \
  "deep/meta.json: JSON nested deeper than 64 levels" \
  "$MXTRAIN" dequantize --in-dir deep --recipe mxfp8 --output y.npy
[ -e y.npy ] && fail "dequantize of deep meta.json wrote y.npy"
python3 -c "print('{\"version\": 1, \"layers\": ' + '['*100000 + ']'*100000 + '}')" > deep_policy.json
expect_error --at-start --within 5 "deep policy" \
  "deep_policy.json: JSON nested deeper than 64 levels" \
  "$MXTRAIN" train --quiet --config ok.yaml --dry-run --fp8-policy deep_policy.json
# A meta.json claiming 50000x50000 over tiny data files is refused before 2.5 GB is touched.
python3 - <<'PY'
import struct
d = "{'descr': '<f4', 'fortran_order': False, 'shape': (32, 32), }"
pad = 64 - (10 + len(d) + 1) % 64
with open("x.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d) + pad + 1) + (d + " " * pad + "\n").encode())
    f.write(struct.pack("<1024f", *[float(i % 7) for i in range(1024)]))
PY
"$MXTRAIN" quantize --input x.npy --recipe mxfp8 --out-dir big > /dev/null || fail "quantize x.npy"
python3 -c "
import json; m = json.load(open('big/meta.json')); m['shape'] = [50000, 50000]
json.dump(m, open('big/meta.json', 'w'))"
expect_error --at-start --within 5 "meta.json shape over small data" \
  "big/rowwise.npy: shape (32, 32) does not match (50000, 50000)" \
  "$MXTRAIN" dequantize --in-dir big --recipe mxfp8 --output y.npy

# ---- resources: models that cannot fit are refused in under 5 s ----
for model in "d_model: 128, n_layers: 1000000, n_heads: 2, d_ff: 384, max_seq_len: 16" \
             "d_model: 1000000, n_layers: 1, n_heads: 2, d_ff: 384, max_seq_len: 16" \
             "d_model: 16384, n_layers: 64, n_heads: 2, d_ff: 65536, max_seq_len: 16"; do
  printf 'model: {%s}\n%s\ndata: {path: corpus.txt}\nprecision: {recipe: mxfp8}\n' "$model" "$TRAIN" > big.yaml
  expect_error --at-start --within 5 "impossible model ($model)" \
    "model does not fit in memory: it needs at least" \
    "$MXTRAIN" train --quiet --config big.yaml --metrics-out mbig.jsonl
  grep -q "pass --ignore-memory-check" err.txt || fail "no --ignore-memory-check hint: $(cat err.txt)"
done
[ -e mbig.jsonl ] && fail "metrics file written for a refused model"

# ---- configs mean what they say ----
printf '%s\n%s\ndata: {path: corpus.txt}\n' "$MODEL" "$TRAIN" > noprec.yaml
expect_error --at-start --within 5 "no precision section" \
  "noprec.yaml: missing required section \`precision:\`" \
  "$MXTRAIN" train --quiet --config noprec.yaml
printf '%s\ndata: {path: corpus.txt}\nprecision: {recipe: mxfp8}\n' "$TRAIN" > nomodel.yaml
expect_error --at-start --within 5 "no model section" \
  "nomodel.yaml: missing required section \`model:\`" \
  "$MXTRAIN" train --quiet --config nomodel.yaml
{ cat ok.yaml; echo 'data: {path: other.txt}'; } > dup.yaml
expect_error --at-start --within 5 "duplicate section" \
  "dup.yaml: duplicate key \`data\`" \
  "$MXTRAIN" train --quiet --config dup.yaml
sed 's/eval_batches: 1}/eval_batches: 1, lr: .inf}/' ok.yaml > inf.yaml
expect_error --at-start --within 5 "lr .inf" \
  "inf.yaml: \`training.lr\` must be a finite number, got \`.inf\`" \
  "$MXTRAIN" train --quiet --config inf.yaml
# --swiglu-input fp4 keeps 4-bit codes: a 4-bit recipe trains with it, an FP8 one is refused
# naming the flag that set the recipe, the key and the recipe.
"$MXTRAIN" train --quiet --config ok.yaml --recipe nvfp4 --swiglu-input fp4 \
  --metrics-out fp4.jsonl > /dev/null 2> err.txt || fail "nvfp4 --swiglu-input fp4: $(cat err.txt)"
grep -q '"loss"' fp4.jsonl || fail "nvfp4 --swiglu-input fp4 wrote no loss"
expect_error --at-start --within 5 "--swiglu-input fp4 under mxfp8" \
  "--recipe: \`precision.swiglu_input: fp4\` is only valid with a 4-bit recipe (nvfp4, mxfp4) (recipe is \`mxfp8\`)" \
  "$MXTRAIN" train --quiet --config ok.yaml --recipe mxfp8 --swiglu-input fp4

# ---- resume with changed settings says so ----
"$MXTRAIN" train --quiet --config ok.yaml --checkpoint-dir ck --stop-after 1 2> err.txt || fail "checkpointed run: $(cat err.txt)"
sed 's/recipe: mxfp8/recipe: bf16/; s/eval_batches: 1}/eval_batches: 1, lr: 0.01}/' ok.yaml > changed.yaml
"$MXTRAIN" train --quiet --config changed.yaml --checkpoint-dir ck --resume 2> err.txt || fail "resume: $(cat err.txt)"
grep -qF "note: resuming with a changed setting: precision.recipe: mxfp8 -> bf16" err.txt ||
  fail "resume did not report the recipe change: $(cat err.txt)"
grep -qF "note: resuming with a changed setting: training.lr: 0.003 -> 0.01" err.txt ||
  fail "resume did not report the lr change: $(cat err.txt)"

# ---- strict command-line values: 0 where >= 1 is needed, out of range, not decimal, empty ----
expect_error --at-start --within 5 "--steps 0" "--steps: \`training.steps\` must be >= 1, got 0" \
  "$MXTRAIN" train --quiet --config ok.yaml --steps 0
expect_error --at-start --within 5 "--seq-len 0" "--seq-len: \`training.seq_len\` must be >= 1, got 0" \
  "$MXTRAIN" train --quiet --config ok.yaml --seq-len 0
expect_error --at-start --within 5 "--micro-batch-size 0" \
  "--micro-batch-size: \`training.micro_batch_size\` must be >= 1, got 0" \
  "$MXTRAIN" train --quiet --config ok.yaml --micro-batch-size 0
expect_error --at-start --within 5 "--grad-accum 0" \
  "--grad-accum: \`training.grad_accum\` must be >= 1, got 0" \
  "$MXTRAIN" train --quiet --config ok.yaml --grad-accum 0
expect_error --at-start --within 5 "--data ''" "--data: the value is empty" \
  "$MXTRAIN" train --quiet --config ok.yaml --data ''
expect_error --at-start --within 5 "--recipe ''" "--recipe: the value is empty" \
  "$MXTRAIN" train --quiet --config ok.yaml --recipe ''
expect_error --at-start --within 5 "--metrics-out ''" "--metrics-out: the value is empty" \
  "$MXTRAIN" train --quiet --config ok.yaml --metrics-out ''
expect_error --at-start --within 5 "--steps 2^66" \
  "--steps: \`99999999999999999999\` is out of range: it does not fit a 64-bit integer" \
  "$MXTRAIN" train --quiet --config ok.yaml --steps 99999999999999999999
expect_error --at-start --within 5 "--seed -1" \
  "--seed: \`-1\` is out of range: must be between 0 and 18446744073709551615" \
  "$MXTRAIN" train --quiet --config ok.yaml --seed -1
expect_error --at-start --within 5 "--stop-after -1" "--stop-after: \`-1\` is out of range: must be >= 1" \
  "$MXTRAIN" train --quiet --config ok.yaml --stop-after -1
expect_error --at-start --within 5 "--steps 0x10" "--steps: \`0x10\` is not a whole number in decimal digits" \
  "$MXTRAIN" train --quiet --config ok.yaml --steps 0x10
expect_error --at-start --within 5 "--steps 1e3" "--steps: \`1e3\` is not a whole number in decimal digits" \
  "$MXTRAIN" train --quiet --config ok.yaml --steps 1e3
expect_error --at-start --within 5 "--seq-len past int" \
  "--seq-len: \`training.seq_len\` must be between -2147483648 and 2147483647, got 99999999999" \
  "$MXTRAIN" train --quiet --config ok.yaml --seq-len 99999999999
expect_error --at-start --within 5 "--dry-run with --metrics-out" \
  "--dry-run builds the model and prints its precision decisions but trains nothing, so --metrics-out would do nothing" \
  "$MXTRAIN" train --quiet --config ok.yaml --dry-run --metrics-out dry.jsonl
expect_error --within 5 "--dry-run with --resume" "trains nothing, so --resume would do nothing" \
  "$MXTRAIN" train --quiet --config ok.yaml --dry-run --resume
expect_error --at-start --within 5 "unknown option" "The following argument was not expected: --lr" \
  "$MXTRAIN" train --quiet --config ok.yaml --lr
expect_error --at-start --within 5 "bench linear --tokens 0" "--tokens: \`0\` is out of range: must be >= 1" \
  "$MXTRAIN" bench linear --tokens 0
expect_error --at-start --within 5 "bench fsdp --compute-ms nan" "--compute-ms: \`nan\` is not a finite number" \
  "$MXTRAIN" bench fsdp --compute-ms nan
expect_error --at-start --within 5 "no subcommand" "A subcommand is required" "$MXTRAIN"
"$MXTRAIN" train --help > out.txt 2> err.txt || fail "train --help: exit $?"
grep -q -- "--stop-after" out.txt || fail "train --help does not list --stop-after"

# ---- messages: no build machine's path, inputs named for what they are ----
expect_error --within 5 "error location" "[src/train/config.cc:" \
  "$MXTRAIN" train --quiet --config ok.yaml --steps 0
grep -qF "$SRC/" err.txt && fail "an error names the source directory: $(cat err.txt)"
mkfifo fifo
sed 's/corpus.txt/fifo/' ok.yaml > fifo.yaml
expect_error --at-start --within 5 "FIFO corpus" \
  "data.path \`fifo\`: fifo is not a regular file but a FIFO (named pipe)" \
  "$MXTRAIN" train --quiet --config fifo.yaml
expect_error --at-start --within 5 "device corpus" \
  "data.path \`/dev/null\`: /dev/null is not a regular file but a character device" \
  "$MXTRAIN" train --quiet --config ok.yaml --data /dev/null
expect_error --at-start --within 5 "FIFO config" "fifo is not a regular file but a FIFO (named pipe)" \
  "$MXTRAIN" train --quiet --config fifo
expect_error --at-start --within 5 "bench-layers unknown recipe, quiet" "unknown recipe 'nope'" \
  "$MXTRAIN" bench-layers --config ok.yaml --report r.json --recipe nope --quiet
[ -e r.json ] && fail "bench-layers with an unknown recipe wrote its report"
printf '{"version": 1, "machine": {"cpu": "x", "isa": "scalar", "threads": 1, "hostname": ""},
 "recipe": "mxfp8", "tp": 1, "ep": 1, "etp": 1, "model": "m.yaml", "points": []}\n' > empty.json
expect_error --at-start --within 5 "policy merge of an empty report" \
  "empty.json: the report holds no measured points" \
  "$MXTRAIN" policy merge --reports empty.json --output pol.json
[ -e pol.json ] && fail "policy merge of an empty report wrote a policy"
# A policy measured with another FP8 recipe stops the run at start-up, unless allowed.
printf '{"version": 1, "speedup_threshold": 1.0, "recipe": "mxfp8-32x32", "rules": {}}\n' > other.json
expect_error --at-start --within 5 "policy of another recipe" \
  "policy other.json was measured with recipe mxfp8-32x32 but this run uses mxfp8; re-run bench-layers --recipe mxfp8, or pass --allow-policy-recipe-mismatch" \
  "$MXTRAIN" train --config ok.yaml --recipe mxfp8 --fp8-policy other.json --dry-run
"$MXTRAIN" train --config ok.yaml --recipe mxfp8 --fp8-policy other.json \
  --allow-policy-recipe-mismatch --dry-run > /dev/null 2> allowed.txt ||
  fail "--allow-policy-recipe-mismatch did not let the run start: $(cat allowed.txt)"
grep -q "^warning: policy other.json was measured with recipe mxfp8-32x32 but this run uses mxfp8; using it anyway" allowed.txt ||
  fail "no mismatch warning: $(cat allowed.txt)"
rm -f other.json allowed.txt

# ---- every input checked before step 1: a validation split shorter than a sequence ----
head -c 5000 corpus.txt > small.txt
printf 'model: {d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, max_seq_len: 64}
training: {steps: 300, seq_len: 64, micro_batch_size: 2, eval_every: 0, eval_batches: 1}
data: {path: small.txt, val_fraction: 0.01}
precision: {recipe: mxfp8}\n' > shortval.yaml
expect_error --within 5 "short validation split" \
  "the validation split (data.val_fraction 0.01) has 49 bytes, fewer than training.seq_len + 2 = 66" \
  "$MXTRAIN" train --quiet --config shortval.yaml --metrics-out sv.jsonl --checkpoint-dir svck
[ -e sv.jsonl ] && fail "a refused run wrote metrics"
[ -z "$(ls -A svck 2>/dev/null)" ] || fail "a refused run left files in its checkpoint dir: $(ls -A svck)"

# ---- one run per output: locks, stale locks, leftovers of killed runs ----
sed 's/steps: 2,/steps: 1000000,/' ok.yaml > long.yaml
"$MXTRAIN" train --quiet --config long.yaml --checkpoint-dir lk --metrics-out lk.jsonl 2> holder.txt &
holder=$!
for _ in $(seq 100); do [ -s lk.jsonl ] && break; sleep 0.1; done
[ -s lk.jsonl ] || fail "the first run wrote no metrics row within 10 s"
expect_error --at-start --within 5 "second run on the checkpoint dir" \
  "--checkpoint-dir lk is in use by another mxtrain run (PID $holder on host " \
  "$MXTRAIN" train --quiet --config ok.yaml --checkpoint-dir lk
expect_error --at-start --within 5 "second run on the metrics file" \
  "--metrics-out lk.jsonl is in use by another mxtrain run (PID $holder on host " \
  "$MXTRAIN" train --quiet --config ok.yaml --metrics-out lk.jsonl
kill -9 $holder; wait $holder 2>/dev/null
[ -e lk/.lock ] || fail "a killed run's lock file is gone (nothing to take over)"
mkdir lk/.step_9.tmp-$holder-0 && echo partial > lk/.step_9.tmp-$holder-0/model.safetensors
"$MXTRAIN" train --quiet --config ok.yaml --checkpoint-dir lk --metrics-out lk2.jsonl 2> err.txt ||
  fail "run after a killed one: $(cat err.txt)"
grep -qF "note: took over the lock of --checkpoint-dir lk from a run that ended without releasing it (PID $holder on host " err.txt ||
  fail "stale lock takeover not said: $(cat err.txt)"
grep -qF "note: removed 1 temporary file(s) an interrupted run left in lk: .step_9.tmp-$holder-0" err.txt ||
  fail "leftover removal not said: $(cat err.txt)"
[ "$(ls -A lk | sort | tr '\n' ' ')" = "latest step_2 " ] || fail "lk holds $(ls -A lk)"
[ -e lk2.jsonl.lock ] && fail "the metrics lock file was not removed at the end"

# ---- resume: a changed model names each changed key with both values ----
sed 's/d_model: 32/d_model: 64/; s/n_heads: 2/n_heads: 4/' ok.yaml > wide.yaml
expect_error --within 10 "resume with another model" \
  "was written for a different model (checkpoint -> config: model.d_model: 32 -> 64; model.n_heads: 2 -> 4)" \
  "$MXTRAIN" train --quiet --config wide.yaml --checkpoint-dir lk --resume --steps 4

# The loss plot (tools/plot_losses.py, run by the demo after training) is checked before
# training starts, and an unwritable one is one error line; a good one leaves no temp file.
PLOT="$SRC/tools/plot_losses.py"
if [ -f "$PLOT" ]; then
  expect_error --at-start --within 5 "plot under a file" \
    "cannot write the plot corpus.txt/loss.svg" \
    python3 "$PLOT" --check --out corpus.txt/loss.svg
  python3 "$PLOT" --check --out ok_plot.svg || fail "plot --check on a writable path"
  [ -z "$(ls -A . | grep plot)" ] || fail "plot --check left files: $(ls -A | grep plot)"
else
  fail "$PLOT not found"
fi

finish "reliability CLI"
