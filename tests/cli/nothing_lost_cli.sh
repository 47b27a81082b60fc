#!/usr/bin/env bash
# tests/cli/nothing_lost_cli.sh — the real `mxtrain` binary never loses a user's work to a
# fresh run, an output that names an input, or a directory it replaces; never runs on the
# wrong data or values with exit 0; and says what is wrong in one line naming the option or
# key, the value and what is allowed (docs/reliability.md, "Nothing lost"):
#   * checkpoints belong to one run: a fresh run over another run's checkpoints is refused,
#     naming its latest step, unless --resume or --overwrite-checkpoints;
#   * no output aliases an input (real paths, links and directory containment), in train,
#     dequantize, prepare-data, tokenizer train, export, import, generate, policy merge;
#   * replacing an output directory (quantize, prepare-data, export) keeps what mxtrain did not
#     write there; a directory of other files is refused;
#   * every check that can fail at step 1 runs at start-up, dry runs included, and an existing
#     metrics file is untouched by a run that fails them;
#   * data: a shard directory without shards.json, a shard listed twice, YAML octal and hex
#     integers, non-finite imported weights, a forged meta.json — each refused by name;
#   * messages: one line, the option or key named, long values cut.
# Usage: nothing_lost_cli.sh /path/to/mxtrain   (CTest `cli_nothing_lost`)
set -u
source "$(dirname "$0")/lib.sh"
M=$(realpath "${1:?usage: nothing_lost_cli.sh /path/to/mxtrain}") || exit 1
workdir nothing_lost
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

write_corpus corpus.txt
cat > ok.yaml <<YAML
model: {d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, max_seq_len: 16}
training: {steps: 2, seq_len: 16, micro_batch_size: 2, eval_every: 0, eval_batches: 1}
data: {path: corpus.txt}
precision: {recipe: mxfp8}
YAML
cp ok.yaml ok.orig
unchanged() {  # unchanged FILE COPY WHAT
  cmp -s "$1" "$2" || fail "$3: $1 was changed"
}

# ---- checkpoints belong to one run ----------------------------------------------------------
"$M" train --quiet --config ok.yaml --checkpoint-dir ck || fail "first run"
cp ck/step_2/model.safetensors first.st
expect_error --at-start --within 10 "fresh run over another run's checkpoints" \
  "--checkpoint-dir ck: holds another run's checkpoints (the latest is step_2); continue that run with --resume, or start over with --overwrite-checkpoints" \
  "$M" train --quiet --config ok.yaml --checkpoint-dir ck --seed 7
unchanged ck/step_2/model.safetensors first.st "refused fresh run"
[ "$(cat ck/latest)" = step_2 ] || fail "refused fresh run: latest is $(cat ck/latest)"
expect_error "--resume with --overwrite-checkpoints" \
  "--resume continues the checkpoints in --checkpoint-dir and --overwrite-checkpoints removes them" \
  "$M" train --quiet --config ok.yaml --checkpoint-dir ck --resume --overwrite-checkpoints
expect_error "--overwrite-checkpoints without a directory" \
  "--overwrite-checkpoints needs --checkpoint-dir" \
  "$M" train --quiet --config ok.yaml --overwrite-checkpoints
touch ck/NOTES.txt
"$M" train --config ok.yaml --checkpoint-dir ck --overwrite-checkpoints --seed 7 2> err.txt ||
  fail "--overwrite-checkpoints: $(cat err.txt)"
grep -qF "note: --overwrite-checkpoints: removed latest, step_2 from ck" err.txt ||
  fail "--overwrite-checkpoints did not say what it removed: $(cat err.txt)"
cmp -s ck/step_2/model.safetensors first.st && fail "--overwrite-checkpoints: step_2 is the old run's"
[ -e ck/NOTES.txt ] || fail "--overwrite-checkpoints removed a file that is not a checkpoint"
expect_error "--stop-after without a checkpoint" \
  "--stop-after 1 stops the run early so that --resume can continue it, which needs a checkpoint: add --checkpoint-dir DIR" \
  "$M" train --quiet --config ok.yaml --stop-after 1

# ---- outputs never name inputs --------------------------------------------------------------
for flag in --metrics-out --decisions-out; do
  expect_error --at-start "$flag = --config" \
    "$flag ok.yaml: is --config ok.yaml; an output may not be written over an input" \
    "$M" train --quiet --config ok.yaml $flag ok.yaml
  unchanged ok.yaml ok.orig "$flag = --config"
done
expect_error --at-start "--profile-out = --config" \
  "--profile-out ok.yaml: is --config ok.yaml; an output may not be written over an input" \
  "$M" train --quiet --config ok.yaml --profile-steps 1 --profile-out ok.yaml
ln -s ok.yaml link.yaml
expect_error --at-start "--metrics-out a link to --config" \
  "--metrics-out link.yaml: is --config ok.yaml" \
  "$M" train --quiet --config ok.yaml --metrics-out link.yaml
ln ok.yaml hard.yaml
expect_error --at-start "--metrics-out a hard link to --config" \
  "--metrics-out hard.yaml: is --config ok.yaml" \
  "$M" train --quiet --config ok.yaml --metrics-out hard.yaml
unchanged ok.yaml ok.orig "links to --config"
expect_error --at-start "--metrics-out = data.path" "--metrics-out corpus.txt: is data.path corpus.txt" \
  "$M" train --quiet --config ok.yaml --metrics-out corpus.txt
python3 - <<'PY'  # x.npy: float32 [64, 64], written without NumPy
import struct
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (64, 64), }"
header += " " * (63 - (10 + len(header)) % 64) + "\n"
data = struct.pack("<4096f", *[i / 100 for i in range(4096)])
open("x.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
PY
"$M" quantize --input x.npy --recipe mxfp8 --out-dir q > /dev/null || fail "quantize"
cp q/rowwise.npy rowwise.orig
expect_error --at-start "dequantize --output inside --in-dir" \
  "--output q/rowwise.npy: lies inside --in-dir q, a directory that is read as input" \
  "$M" dequantize --in-dir q --recipe mxfp8 --output q/rowwise.npy
unchanged q/rowwise.npy rowwise.orig "dequantize over its input"
expect_error --at-start "quantize --out-dir holding --input" \
  "--out-dir .: --input x.npy lies inside it, and the command replaces that directory" \
  "$M" quantize --input x.npy --recipe mxfp8 --out-dir .
"$M" prepare-data --input corpus.txt --tokenizer bytes --out shards --quiet || fail "prepare-data"
mkdir text && cp corpus.txt text/
expect_error --at-start "prepare-data --input X --out X" \
  "--out text: is --input text; an output may not be written over an input" \
  "$M" prepare-data --input text --tokenizer bytes --out text --quiet
expect_error --at-start "tokenizer train --out = --input" \
  "--out corpus.txt: is --input corpus.txt" \
  "$M" tokenizer train --input corpus.txt --out corpus.txt --quiet
unchanged corpus.txt text/corpus.txt "tokenizer train over its input"
expect_error --at-start "export --out = --checkpoint" \
  "--out ck: is --checkpoint ck; an output may not be written over an input" \
  "$M" export --checkpoint ck --out ck --quiet
expect_error --at-start "generate --logits-out inside --checkpoint" \
  "--logits-out ck/l.json: lies inside --checkpoint ck" \
  "$M" generate --checkpoint ck --prompt the --logits-out ck/l.json --quiet

# ---- replacing an output directory keeps what mxtrain did not write --------------------------
"$M" export --checkpoint ck --out hf --quiet || fail "export"
echo "# a model card" > hf/README.md
mkdir hf/eval && echo 0.5 > hf/eval/score.txt
"$M" export --checkpoint ck --out hf --quiet || fail "export over an earlier export"
[ "$(cat hf/README.md)" = "# a model card" ] || fail "export removed the model card"
[ "$(cat hf/eval/score.txt)" = 0.5 ] || fail "export removed a subdirectory"
[ -f hf/config.json ] && [ -f hf/model.safetensors ] || fail "export over an earlier one: files missing"
echo notes > shards/NOTES.md
"$M" prepare-data --input corpus.txt --tokenizer bytes --out shards --quiet || fail "prepare-data again"
[ "$(cat shards/NOTES.md)" = notes ] || fail "prepare-data removed a file it did not write"
echo notes > q/NOTES.md
"$M" quantize --input x.npy --recipe mxfp8-32x32 --out-dir q > /dev/null || fail "quantize again"
[ "$(cat q/NOTES.md)" = notes ] && [ ! -e q/rowwise.npy ] && [ -f q/data.npy ] ||
  fail "quantize over an earlier output: $(ls -A q)"
mkdir mine && echo precious > mine/keep.txt
for cmd in "export --checkpoint ck --out mine --quiet" \
           "prepare-data --input corpus.txt --tokenizer bytes --out mine --quiet" \
           "quantize --input x.npy --recipe mxfp8 --out-dir mine"; do
  flag=--out; [[ $cmd == quantize* ]] && flag=--out-dir
  expect_error --at-start "${cmd%% *} into a directory of other files" \
    "$flag mine: the directory exists and holds files mxtrain did not write (keep.txt)" \
    "$M" $cmd
  [ "$(cat mine/keep.txt)" = precious ] && [ "$(ls -A mine)" = keep.txt ] ||
    fail "${cmd%% *}: a directory of other files was changed: $(ls -A mine)"
done
expect_error "import into a checkpoint directory" \
  "--out ck: holds checkpoints already (the latest is step_2); import into a new directory" \
  "$M" import --input hf --out ck --quiet

# ---- checks of step 1 at start-up; an existing metrics file untouched ------------------------
echo '{"step": 1, "loss": 1.0}' > m.jsonl
cp m.jsonl m.orig
sed 's/max_seq_len: 16}/max_seq_len: 16, vocab_size: 100}/' ok.yaml > v100.yaml
expect_error --at-start --within 10 "vocab_size below the data's bytes" \
  "data \`corpus.txt\`: holds byte 122, outside the model's vocabulary (model.vocab_size 100); set model.vocab_size to at least 123" \
  "$M" train --quiet --config v100.yaml --metrics-out m.jsonl
unchanged m.jsonl m.orig "a run refused at start-up"
expect_error --at-start "vocab_size below the data's bytes, dry run" \
  "data \`corpus.txt\`: holds byte 122, outside the model's vocabulary" \
  "$M" train --quiet --config v100.yaml --dry-run
sed 's/data: {path: corpus.txt}/data: {path: shards}/' v100.yaml > v100s.yaml
expect_error --at-start "vocab_size below the shards' vocabulary" \
  "data \`shards\`: its shards hold tokens of a 256-token vocabulary (bytes), more than model.vocab_size 100" \
  "$M" train --quiet --config v100s.yaml --dry-run

# ---- data and values ------------------------------------------------------------------------
cp -r shards partial && rm partial/shards.json partial/.mxtrain-manifest
sed 's/data: {path: corpus.txt}/data: {path: partial}/' ok.yaml > partial.yaml
expect_error "shard directory without shards.json (train)" \
  "holds token shards (train_00000.bin) but no shards.json, so it is an incomplete shard directory" \
  "$M" train --quiet --config partial.yaml
expect_error "shard directory without shards.json (eval)" \
  "holds token shards (train_00000.bin) but no shards.json" \
  "$M" eval --checkpoint ck --data partial
expect_error "shard directory as prepare-data text" \
  "\`shards\` is a token-shard directory (shards.json), not text" \
  "$M" prepare-data --input shards --tokenizer bytes --out other --quiet
cp -r shards twice
python3 - <<'PY'
import json
m = json.load(open("twice/shards.json"))
m["train"].append(m["train"][0])
json.dump(m, open("twice/shards.json", "w"))
PY
sed 's/data: {path: corpus.txt}/data: {path: twice}/' ok.yaml > twice.yaml
expect_error "a shard listed twice" \
  "twice/shards.json: lists shard \`train_00000.bin\` more than once" \
  "$M" train --quiet --config twice.yaml
sed 's/steps: 2,/steps: 010,/' ok.yaml > oct.yaml
"$M" train --quiet --config oct.yaml --metrics-out oct.jsonl || fail "steps: 010"
grep -q '"summary":true' oct.jsonl && grep '"summary":true' oct.jsonl | grep -q '"steps":10,' ||
  fail "steps: 010 is not ten steps: $(grep summary oct.jsonl)"
sed 's/steps: 2,/steps: 0x3,/' ok.yaml > hex.yaml
expect_error --at-start "steps: 0x3" \
  "hex.yaml: \`training.steps\` must be a whole number in decimal digits (as on the command line), got \`0x3\`" \
  "$M" train --quiet --config hex.yaml
sed 's/steps: 2,/steps: 2, seed: 1e3,/' ok.yaml > exp.yaml
expect_error --at-start "seed: 1e3" "exp.yaml: \`training.seed\` must be a whole number in decimal digits" \
  "$M" train --quiet --config exp.yaml

# Non-finite imported weights are named; --allow-nonfinite keeps them.
cp -r hf nan_hf
python3 - <<'PY'
import json, struct
p = "nan_hf/model.safetensors"
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
t = h["model.norm.weight"]
begin, end = t["data_offsets"]
assert t["dtype"] == "F32"
b[8 + n + begin:8 + n + end] = struct.pack("<f", float("nan")) * ((end - begin) // 4)
open(p, "wb").write(b)
PY
expect_error "import all-NaN weights" \
  "nan_hf: tensor \`model.norm.weight\` holds 32 non-finite value(s) (NaN or Inf) of 32, the first at element 0" \
  "$M" import --input nan_hf --out imp_nan --quiet
[ -e imp_nan ] && fail "import of NaN weights wrote something"
expect_error "train --init-from NaN weights" "tensor \`model.norm.weight\` holds 32 non-finite value(s)" \
  "$M" train --quiet --config ok.yaml --init-from nan_hf
"$M" import --input nan_hf --out imp_nan --quiet --allow-nonfinite || fail "--allow-nonfinite"

# meta.json is checked like the command line.
"$M" quantize --input x.npy --recipe mxfp8 --out-dir qm > /dev/null || fail "quantize qm"
cp qm/meta.json meta.orig
python3 -c "import json; m = json.load(open('meta.orig')); m['block'] = 16; json.dump(m, open('qm/meta.json', 'w'))"
expect_error "meta.json block 16" "qm/meta.json: \`block\` must be 32 for recipe 'mxfp8', got 16" \
  "$M" dequantize --in-dir qm --recipe mxfp8 --output y.npy
python3 -c "import json; m = json.load(open('meta.orig')); m['scale_rounding'] = 'banana'; json.dump(m, open('qm/meta.json', 'w'))"
expect_error "meta.json scale_rounding banana" "qm/meta.json: \`scale_rounding\`: " \
  "$M" dequantize --in-dir qm --recipe mxfp8 --output y.npy
grep -q banana err.txt && grep -q rceil err.txt || fail "scale_rounding banana: not named with the choices: $(cat err.txt)"
python3 -c "import json; m = json.load(open('meta.orig')); m['colour'] = 'red'; json.dump(m, open('qm/meta.json', 'w'))"
expect_error "meta.json unknown key" "qm/meta.json: unknown key \`colour\`" \
  "$M" dequantize --in-dir qm --recipe mxfp8 --output y.npy

# ---- messages -------------------------------------------------------------------------------
expect_error --at-start "--peak-gflops 0" "--peak-gflops: \`0\` is out of range: must be > 0" \
  "$M" train --quiet --config ok.yaml --peak-gflops 0
expect_error --at-start "--peak-gflops ''" "--peak-gflops: the value is empty" \
  "$M" train --quiet --config ok.yaml --peak-gflops ''
expect_error --at-start "--peak-gflops 1,5" "--peak-gflops: \`1,5\` is not a finite number" \
  "$M" train --quiet --config ok.yaml --peak-gflops 1,5
expect_error --at-start "--stop-after 10^23" \
  "--stop-after: \`99999999999999999999999\` is out of range: must be between 1 and 9223372036854775807" \
  "$M" train --quiet --config ok.yaml --stop-after 99999999999999999999999
python3 -c "print(open('ok.yaml').read().replace('path: corpus.txt', 'path: ' + 'x' * 10_000_000), end='')" > long.yaml
expect_error --at-start "a 10 MB data.path" "data.path \`xxxx" "$M" train --quiet --config long.yaml
[ "$(wc -c < err.txt)" -lt 2100 ] || fail "a 10 MB data.path: the error line has $(wc -c < err.txt) bytes"
python3 -c "print('a' * 20000)" > long_line.txt
expect_error "SentencePiece: only over-long lines" \
  "every line of the text input (long_line.txt) is longer than 16384 bytes" \
  "$M" tokenizer train --input long_line.txt --vocab-size 300 --out t.model --quiet
printf 'hello world\nfoo bar\n' > small.txt
expect_error "SentencePiece: vocabulary too large for the text" \
  "--vocab-size 5000 is more pieces than this text can fill (at most 296): lower --vocab-size" \
  "$M" tokenizer train --input small.txt --vocab-size 5000 --out t.model --quiet
grep -qE "trainer_interface|\.cc\([0-9]+\)|character_coverage" err.txt &&
  fail "SentencePiece's internals in the message: $(cat err.txt)"
cp -r hf dup_hf
python3 - <<'PY'
t = open("dup_hf/config.json").read()
open("dup_hf/config.json", "w").write(t.replace("{", '{\n  "hidden_size": 7,', 1))
PY
expect_error "config.json with a key twice" "dup_hf/config.json: hidden_size: duplicate key" \
  "$M" import --input dup_hf --out imp_dup --quiet

finish nothing_lost_cli
