#!/usr/bin/env bash
# tests/cli/reliability_cli.sh — bad inputs and unwritable outputs end the real `mxtrain`
# binary with exit code 1 and one `error:` line naming the file, key or flag, within
# seconds, and leave no partial output: unwritable output paths before step 1, a full
# device (/dev/full) as metrics or decisions file, non-regular inputs (/dev/zero),
# deeply nested JSON, a meta.json shape larger than its data, models that cannot fit in
# memory, config sections missing, duplicate keys, non-finite values; and resuming with a
# changed recipe or learning rate says what changed.
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
if [ "$(id -u)" -ne 0 ]; then
  mkdir ro && chmod 555 ro
  expect_error --at-start --within 5 "read-only checkpoint dir" \
    "--checkpoint-dir ro/ckpt: cannot create files in ro" \
    "$MXTRAIN" train --quiet --config ok.yaml --checkpoint-dir ro/ckpt
  chmod 755 ro
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

# ---- resume with changed settings says so ----
"$MXTRAIN" train --quiet --config ok.yaml --checkpoint-dir ck --stop-after 1 2> err.txt || fail "checkpointed run: $(cat err.txt)"
sed 's/recipe: mxfp8/recipe: bf16/; s/eval_batches: 1}/eval_batches: 1, lr: 0.01}/' ok.yaml > changed.yaml
"$MXTRAIN" train --quiet --config changed.yaml --checkpoint-dir ck --resume 2> err.txt || fail "resume: $(cat err.txt)"
grep -qF "note: resuming with a changed setting: precision.recipe: mxfp8 -> bf16" err.txt ||
  fail "resume did not report the recipe change: $(cat err.txt)"
grep -qF "note: resuming with a changed setting: training.lr: 0.003 -> 0.01" err.txt ||
  fail "resume did not report the lr change: $(cat err.txt)"

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
