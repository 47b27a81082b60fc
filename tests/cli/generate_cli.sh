#!/usr/bin/env bash
# tests/cli/generate_cli.sh — `mxtrain generate` end to end on checkpoints written by
# `mxtrain train`: the latest step is used (a step directory can be named), the output is the
# prompt and its continuation (readable text, --raw bytes, --json), the same seed gives the
# same bytes and another seed other bytes, greedy ignores the seed and equals top-k 1, MoE and
# bf16-trained checkpoints work, a prompt longer than max_seq_len is read from its end with a
# warning. Every bad input ends with exit code 1 and one `error:` line: missing directory, no
# checkpoint, corrupted or truncated weights, empty prompt, a byte outside a smaller
# vocabulary, out-of-range --max-new-tokens, --temperature, --top-k, --context-keep, and a
# full stdout.
# Usage: generate_cli.sh /path/to/mxtrain   (CTest `cli_generate`)
set -u
source "$(dirname "$0")/lib.sh"
MXTRAIN=$(realpath "${1:?usage: generate_cli.sh /path/to/mxtrain}") || exit 1
workdir generate
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

gen() { timeout 120 "$MXTRAIN" generate "$@"; }

write_corpus corpus.txt
TRAIN='training: {steps: 4, seq_len: 32, micro_batch_size: 2, eval_every: 0, eval_batches: 1, checkpoint_every: 2, keep_checkpoints: 3}'
cat > dense.yaml <<YAML
model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, max_seq_len: 32}
$TRAIN
data: {path: corpus.txt}
precision: {recipe: mxfp8}
YAML
cat > moe.yaml <<YAML
model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, max_seq_len: 32, moe: {num_experts: 4, top_k: 2, d_ff: 32}}
$TRAIN
data: {path: corpus.txt}
precision: {recipe: mxfp8}
YAML
sed 's/max_seq_len: 32}/max_seq_len: 32, vocab_size: 128}/' dense.yaml > v128.yaml
for c in dense moe v128; do
  "$MXTRAIN" train --quiet --config $c.yaml --checkpoint-dir ck_$c 2> train.err ||
    { echo "training $c failed: $(cat train.err)"; exit 1; }
done
"$MXTRAIN" train --quiet --config dense.yaml --recipe bf16 --checkpoint-dir ck_bf16 2> /dev/null ||
  { echo "bf16 training failed"; exit 1; }

# ---- output -----------------------------------------------------------------------------------
gen --checkpoint ck_dense --prompt 'the quick' --max-new-tokens 50 > out.txt 2> err.txt ||
  fail "default generation: $(cat err.txt)"
[ "$(head -c 9 out.txt)" = "the quick" ] || fail "stdout does not start with the prompt: $(head -c 80 out.txt)"
grep -q "step 4" err.txt || fail "not the latest step (4): $(cat err.txt)"
grep -q "generated 50 tokens" err.txt || fail "no speed line: $(cat err.txt)"
gen --checkpoint ck_dense/step_2 --prompt 'the' --max-new-tokens 5 > /dev/null 2> err.txt &&
  grep -q "step 2" err.txt || fail "a named step directory is not what was read: $(cat err.txt)"

raw() { gen --checkpoint "$1" --prompt 'the quick' --max-new-tokens 60 --raw --quiet "${@:2}"; }
raw ck_dense --seed 5 --temperature 1 > a.bin
raw ck_dense --seed 5 --temperature 1 > b.bin
raw ck_dense --seed 6 --temperature 1 > c.bin
cmp -s a.bin b.bin || fail "same seed, different bytes"
cmp -s a.bin c.bin && fail "seeds 5 and 6 gave the same 60 bytes"
[ "$(head -c 9 a.bin)" = "the quick" ] || fail "--raw does not start with the prompt"
[ "$(stat -c %s a.bin)" -eq 69 ] || fail "--raw: expected 9 + 60 bytes, got $(stat -c %s a.bin)"
raw ck_dense --temperature 0 --seed 1 > g1.bin
raw ck_dense --temperature 0 --seed 2 > g2.bin
raw ck_dense --temperature 0.7 --top-k 1 --seed 3 > k1.bin
cmp -s g1.bin g2.bin || fail "greedy output depends on the seed"
cmp -s g1.bin k1.bin || fail "top-k 1 differs from greedy"

gen --checkpoint ck_dense --prompt 'the' --max-new-tokens 20 --json --quiet --seed 9 > j.json ||
  fail "--json failed"
python3 - j.json <<'PY' || fail "--json output: $(cat j.json)"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["prompt"] == "the" and j["seed"] == 9 and j["new_tokens"] == 20, j
assert isinstance(j["continuation"], str) and len(j["continuation"]) >= 20, j
assert j["tokens_per_s"] > 0 and j["step"] == 4, j
PY
[ "$(gen --checkpoint ck_dense --prompt 'abc' --max-new-tokens 0 --quiet)" = "abc" ] ||
  fail "--max-new-tokens 0 should print the prompt only"

gen --checkpoint ck_moe --prompt 'the' --max-new-tokens 40 > out.txt 2> err.txt ||
  fail "MoE checkpoint: $(cat err.txt)"
grep -q "MoE" err.txt || fail "MoE checkpoint not described as MoE: $(cat err.txt)"
gen --checkpoint ck_bf16 --prompt 'the' --max-new-tokens 40 > out.txt 2> err.txt ||
  fail "bf16 checkpoint: $(cat err.txt)"
long=$(printf 'fox %.0s' $(seq 20))  # 80 bytes > max_seq_len 32
gen --checkpoint ck_dense --prompt "$long" --max-new-tokens 40 > out.txt 2> err.txt ||
  fail "long prompt: $(cat err.txt)"
grep -q "warning: the prompt has 80 tokens, more than max_seq_len = 32" err.txt ||
  fail "no warning for a long prompt: $(cat err.txt)"
# Non-printable prompt bytes are shown escaped; valid UTF-8 is kept.
gen --checkpoint ck_dense --prompt "$(printf 'a\001\303\251')" --max-new-tokens 0 --quiet > out.txt
[ "$(cat out.txt)" = "$(printf 'a\\x01\303\251')" ] || fail "escaping: $(cat out.txt)"

# ---- errors -------------------------------------------------------------------------------------
P=(--prompt 'the')
expect_error "missing dir" "checkpoint not found: nope" \
  "$MXTRAIN" generate --checkpoint nope "${P[@]}"
mkdir empty
expect_error "no checkpoint" "no checkpoint in empty" \
  "$MXTRAIN" generate --checkpoint empty "${P[@]}"
cp -r ck_dense bad && python3 - bad/step_4/model.safetensors <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-100] ^= 0x40; open(p, 'wb').write(b)
PY
expect_error "corrupted weights" "bad/step_4/model.safetensors: checksum mismatch" \
  "$MXTRAIN" generate --checkpoint bad "${P[@]}"
cp ck_dense/step_4/model.safetensors bad/step_4/ && truncate -s -4 bad/step_4/model.safetensors
expect_error "truncated weights" "(truncated or incomplete checkpoint)" \
  "$MXTRAIN" generate --checkpoint bad "${P[@]}"
expect_error "empty prompt" "--prompt: the value is empty" \
  "$MXTRAIN" generate --checkpoint ck_dense --prompt ''
expect_error "byte outside the vocabulary" "--prompt byte 2 is 195 (\\xc3), outside the model's vocabulary of 128 tokens" \
  "$MXTRAIN" generate --checkpoint ck_v128 --prompt "$(printf 'ab\303\251')"
expect_error "negative max-new-tokens" "--max-new-tokens must be between 0 and 1000000, got -1" \
  "$MXTRAIN" generate --checkpoint ck_dense "${P[@]}" --max-new-tokens=-1
expect_error "huge max-new-tokens" "--max-new-tokens must be between 0 and 1000000, got 5000000000" \
  "$MXTRAIN" generate --checkpoint ck_dense "${P[@]}" --max-new-tokens 5000000000
expect_error "temperature -0.5" "--temperature must be finite and >= 0" \
  "$MXTRAIN" generate --checkpoint ck_dense "${P[@]}" --temperature=-0.5
for t in nan inf; do
  expect_error "temperature $t" "--temperature: \`$t\` is not a finite number" \
    "$MXTRAIN" generate --checkpoint ck_dense "${P[@]}" --temperature=$t
done
expect_error "negative top-k" "--top-k must be >= 0 (0 = every token), got -2" \
  "$MXTRAIN" generate --checkpoint ck_dense "${P[@]}" --top-k=-2
expect_error "context-keep above max_seq_len" "--context-keep 33 is larger than the model's max_seq_len = 32" \
  "$MXTRAIN" generate --checkpoint ck_dense "${P[@]}" --context-keep 33
if [ -w /dev/full ]; then
  timeout 60 "$MXTRAIN" generate --checkpoint ck_dense "${P[@]}" --max-new-tokens 5 --quiet \
    > /dev/full 2> err.txt
  rc=$?
  [ "$rc" -eq 1 ] && grep -q "^error: cannot write to stdout: No space left on device" err.txt ||
    fail "full stdout: exit $rc, $(head -c 300 err.txt)"
fi

finish generate
