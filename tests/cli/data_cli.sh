#!/usr/bin/env bash
# tests/cli/data_cli.sh — the data commands end to end with the real `mxtrain` binary: a
# SentencePiece tokenizer (tokenizer train, tokenizer encode), token shards (prepare-data),
# training from them (model.tokenizer, data.path: DIR), generate and eval with the
# checkpoint's tokenizer, the Hugging Face round trip (export, import, export again: the same
# bytes) and `train --init-from`; and each refusal as one `error:` line: shards of another
# tokenizer, a model vocabulary smaller than the tokenizer's, truncated and corrupted shards, an
# empty corpus, text given to a SentencePiece model, resuming with another tokenizer,
# unsupported HF models.
# Usage: data_cli.sh MXTRAIN   (CTest: `cli_data`)
set -u
MXT=$(realpath "${1:?usage: data_cli.sh /path/to/mxtrain}")
source "$(dirname "$0")/lib.sh"
workdir data
TEXT=/usr/share/games/fortunes/cookie

# ---- tokenizer and shards ------------------------------------------------------------------
"$MXT" tokenizer train --input "$TEXT" --vocab-size 500 --out tok.model --quiet ||
  fail "tokenizer train"
[ -s tok.model ] || fail "no tok.model"
"$MXT" tokenizer train --input /usr/share/games/fortunes/computers --vocab-size 500 \
  --out other.model --quiet || fail "second tokenizer"
"$MXT" prepare-data --input "$TEXT" --tokenizer tok.model --out shards --json > prep.json \
  2> prep.err || fail "prepare-data: $(cat prep.err)"
python3 - prep.json "$(stat -c %s "$TEXT")" <<'PY' || fail "prepare-data summary"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["input_bytes"] == int(sys.argv[2]) == j["text_bytes"], j
assert j["train_tokens"] > 10 * j["val_tokens"] > 0, j
assert j["vocab_size"] == 500 and j["tokenizer"].startswith("sentencepiece crc32:"), j
PY
grep -q "prepare-data \[####################\] 100%" prep.err || fail "no progress bar: $(cat prep.err)"
# tokenizer encode: the encoding prepare-data writes (as many ids), and the bytes themselves.
"$MXT" tokenizer encode --tokenizer tok.model --input "$TEXT" --json > enc.json ||
  fail "tokenizer encode"
python3 - enc.json prep.json <<'PY' || fail "tokenizer encode: $(head -c 300 enc.json)"
import json, sys
e, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert e["tokenizer"] == p["tokenizer"] and e["bytes"] == p["text_bytes"], (e["bytes"], p)
assert len(e["ids"]) == p["train_tokens"] + p["val_tokens"], (len(e["ids"]), p)
PY
[ "$("$MXT" tokenizer encode --tokenizer bytes --text 'Ab c')" = "65 98 32 99" ] ||
  fail "byte-level tokenizer encode"
expect_error "encode without a text" "give the text as --text TEXT or --input FILE" \
  "$MXT" tokenizer encode --tokenizer tok.model
expect_error "encode with a missing model" "file not found: nope.model" \
  "$MXT" tokenizer encode --tokenizer nope.model --text x
"$MXT" prepare-data --input "$TEXT" --tokenizer bytes --out bshards --quiet || fail "byte shards"
[ -e bshards/tokenizer.model ] && fail "byte-level shards carry a tokenizer"
"$MXT" prepare-data --input /usr/share/games/fortunes/computers --tokenizer other.model \
  --out othershards --quiet || fail "other shards"

cat > sp.yaml <<EOF
model: {vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, max_seq_len: 32,
        tokenizer: tok.model}
training: {steps: 6, seq_len: 32, micro_batch_size: 4, eval_every: 3, eval_batches: 2}
data: {path: shards}
precision: {recipe: mxfp8}
EOF
"$MXT" train --config sp.yaml --checkpoint-dir ck --metrics-out m.jsonl --quiet ||
  fail "train from shards"
[ -s ck/step_6/tokenizer.model ] || fail "the checkpoint has no tokenizer.model"
cmp -s ck/step_6/tokenizer.model tok.model || fail "the checkpoint's tokenizer differs"
python3 - m.jsonl <<'PY' || fail "summary row"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
s = rows[-1]
assert s["summary"] and 0 < s["final_val_nats_per_byte"] < s["final_val_loss"], s
assert sum(1 for r in rows if "val_nats_per_byte" in r) == 2, rows
PY
# Resume continues; with another tokenizer it is refused.
sed 's/steps: 6/steps: 8/' sp.yaml > sp8.yaml
"$MXT" train --config sp8.yaml --checkpoint-dir ck --resume --quiet || fail "resume"
sed 's/tokenizer: tok.model/tokenizer: other.model/; s/path: shards/path: othershards/' sp8.yaml \
  > other.yaml
sed -i 's/steps: 8/steps: 10/' other.yaml
expect_error "resume with another tokenizer" "was trained with tokenizer sentencepiece crc32:" \
  "$MXT" train --config other.yaml --checkpoint-dir ck --resume --quiet

# generate encodes the prompt and decodes tokens with the checkpoint's tokenizer.
"$MXT" generate --checkpoint ck --prompt "You will" --max-new-tokens 12 --temperature 0 --json \
  --quiet > gen.json || fail "generate"
python3 - gen.json <<'PY' || fail "generate json: $(cat gen.json)"
import json, sys
g = json.load(open(sys.argv[1]))
assert g["tokenizer"].startswith("sentencepiece") and len(g["tokens"]) == 12, g
assert 0 < len(g["prompt_tokens"]) < len("You will"), g  # pieces, not bytes
assert all(0 <= t < 500 for t in g["tokens"]), g
PY
[ "$("$MXT" tokenizer encode --tokenizer tok.model --text "You will")" = \
  "$(python3 -c 'import json; print(*json.load(open("gen.json"))["prompt_tokens"])')" ] ||
  fail "tokenizer encode differs from generate's prompt ids"

# eval: loss, perplexity, bits per byte on the validation shard.
"$MXT" eval --checkpoint ck --data shards --json > ev.json 2> ev.err || fail "eval: $(cat ev.err)"
python3 - ev.json <<'PY' || fail "eval json: $(cat ev.json)"
import json, math, sys
e = json.load(open(sys.argv[1]))
assert e["tokens"] > 1000 and e["bytes"] > e["tokens"], e
assert abs(e["perplexity"] - math.exp(e["loss"])) < 1e-9 * e["perplexity"], e
assert abs(e["bits_per_byte"] * math.log(2) - e["nats_per_byte"]) < 1e-12, e
assert abs(e["nats_per_byte"] - e["loss"] * e["tokens"] / e["bytes"]) < 1e-9, e
PY
"$MXT" eval --checkpoint ck --data shards --max-tokens 100 | grep -q " 100 tokens (" ||
  fail "eval --max-tokens"
expect_error "eval on shards of another tokenizer" "the shards were made with tokenizer" \
  "$MXT" eval --checkpoint ck --data othershards --quiet

# Hugging Face: export, import, export again — the same bytes; train --init-from.
"$MXT" export --checkpoint ck --format hf --out hf1 --quiet || fail "export"
for f in config.json model.safetensors tokenizer.model generation_config.json; do
  [ -s "hf1/$f" ] || fail "export lacks $f"
done
"$MXT" import --format hf --input hf1 --out ck_imported --quiet || fail "import"
"$MXT" export --checkpoint ck_imported --out hf2 --quiet || fail "export of the import"
for f in config.json model.safetensors tokenizer.model generation_config.json; do
  cmp -s "hf1/$f" "hf2/$f" || fail "round trip changed $f"
done
cat > small.yaml <<EOF
model: {d_model: 16, n_layers: 1, n_heads: 2, d_ff: 16, max_seq_len: 16}
training: {steps: 2, seq_len: 16, micro_batch_size: 2, eval_every: 0, eval_batches: 1}
data: {path: shards}
precision: {recipe: bf16}
EOF
"$MXT" train --config small.yaml --init-from hf1 --checkpoint-dir ck_ft > ft.out 2> ft.err ||
  fail "init-from: $(cat ft.err)"
grep -q "note: --init-from hf1: model.d_model: 16 -> 32" ft.err || fail "no init-from note"
grep -q "initial weights: hf1 (LlamaForCausalLM)" ft.err || fail "no initial-weights line"
cmp -s ck_ft/step_2/tokenizer.model tok.model || fail "fine-tune lost the tokenizer"
mkdir gqa && cp hf1/model.safetensors hf1/tokenizer.model gqa/ &&
  sed 's/"num_key_value_heads": 2/"num_key_value_heads": 1/' hf1/config.json > gqa/config.json
expect_error "import of grouped-query attention" "grouped-query attention (num_key_value_heads 1" \
  "$MXT" import --format hf --input gqa --out ck_gqa

# ---- refusals ------------------------------------------------------------------------------
sed 's/tokenizer: tok.model/tokenizer: other.model/' sp.yaml > mismatch.yaml
expect_error "shards of another tokenizer" "the shards were made with tokenizer" \
  "$MXT" train --config mismatch.yaml --quiet
sed 's/vocab_size: 512/vocab_size: 256/' sp.yaml > small_vocab.yaml
expect_error "vocabulary smaller than the tokenizer's" "model.vocab_size 256 is smaller than" \
  "$MXT" train --config small_vocab.yaml --quiet
sed "s|path: shards|path: $TEXT|" sp.yaml > text.yaml
expect_error "text for a SentencePiece model" "is text, but model.tokenizer is a SentencePiece" \
  "$MXT" train --config text.yaml --quiet
cp -r shards trunc && truncate -s -5 trunc/val.bin
sed 's/path: shards/path: trunc/' sp.yaml > trunc.yaml
expect_error "truncated shard" "(truncated)" "$MXT" train --config trunc.yaml --quiet
cp -r shards corrupt && printf '\x11\x22' | dd of=corrupt/train_00000.bin bs=1 seek=4000 \
  conv=notrunc 2> /dev/null
sed 's/path: shards/path: corrupt/' sp.yaml > corrupt.yaml
expect_error "corrupted shard" "data checksum mismatch" "$MXT" train --config corrupt.yaml --quiet
: > empty.txt
expect_error "empty corpus" "is empty: there is nothing to tokenize" \
  "$MXT" prepare-data --input empty.txt --tokenizer tok.model --out e_shards --quiet
[ -e e_shards ] && fail "an empty corpus left an output directory"
expect_error "empty corpus for a tokenizer" "is empty: there is nothing to train a tokenizer on" \
  "$MXT" tokenizer train --input empty.txt --out e.model --quiet
expect_error "bad --val-fraction" "--val-fraction must be in (0, 0.5)" \
  "$MXT" prepare-data --input "$TEXT" --tokenizer bytes --out x --val-fraction 0.7 --quiet
expect_error "out holds files mxtrain did not write" "holds files mxtrain did not write (latest, step_6, step_8)" \
  "$MXT" prepare-data --input "$TEXT" --tokenizer bytes --out ck --quiet

# ---- byte-level: shards and text give nats per byte = loss --------------------------------
cat > bytes.yaml <<EOF
model: {d_model: 32, n_layers: 1, n_heads: 2, d_ff: 32, max_seq_len: 32}
training: {steps: 3, seq_len: 32, micro_batch_size: 2, eval_every: 0, eval_batches: 2}
data: {path: bshards}
precision: {recipe: mxfp8}
EOF
"$MXT" train --config bytes.yaml --checkpoint-dir bck --metrics-out b.jsonl --quiet ||
  fail "byte-level from shards"
python3 -c "
import json, sys
s = [json.loads(l) for l in open('b.jsonl')][-1]
assert s['final_val_nats_per_byte'] == s['final_val_loss'], s" || fail "byte-level nats/byte"
"$MXT" eval --checkpoint bck --data "$TEXT" --json --max-tokens 500 > bev.json ||
  fail "byte-level eval on text"
python3 -c "
import json
e = json.load(open('bev.json'))
assert e['tokens'] == e['bytes'] == 500 and e['nats_per_byte'] == e['loss'], e" ||
  fail "byte-level eval: $(cat bev.json)"
finish data_cli
