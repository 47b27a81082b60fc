#!/usr/bin/env bash
# Speed of `mxtrain generate` on a d_model 256, 4-layer dense model (4 heads, d_ff 768,
# max_seq_len 256; trained for 2 steps, since speed does not depend on the weights). Each run
# is its own process; the figure per case is the median of ROUNDS runs, cases alternating so
# machine load hits all alike. Two rates: tokens per wall-clock second (what a user sees) and
# per CPU-second of the process (all threads; on a shared machine the 1-thread figure is what
# an idle core would give). Cases, at each OMP_NUM_THREADS in THREADS (OMP_WAIT_POLICY passive):
#   decode   32-byte prompt, 200 new tokens: the window never fills (KV cache only)
#   slide    32-byte prompt, 1000 new tokens, default --context-keep (128): 7 rebuilds
#   full     32-byte prompt, 300 new tokens, --context-keep 256: every token after the window
#            fills re-reads 256 tokens (what generation costs without a cache)
#   prompt   a 256-byte prompt read in one pass (tokens/s of that pass)
# Usage: bash scripts/generate_speed.sh   (MXTRAIN_BIN overrides build/mxtrain; ROUNDS=N,
#        default 5; THREADS="1 2" the default). Output: a table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${MXTRAIN_BIN:-build/mxtrain}")
[ -x "$bin" ] || { bash scripts/build.sh; bin=$(realpath build/mxtrain); }
rounds=${ROUNDS:-5}
threads=${THREADS:-"1 2"}
export OMP_WAIT_POLICY=passive
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 2000) > "$tmp/corpus.txt"
cat > "$tmp/m.yaml" <<YAML
model: {d_model: 256, n_layers: 4, n_heads: 4, d_ff: 768, max_seq_len: 256}
training: {steps: 2, seq_len: 256, micro_batch_size: 2, eval_every: 0, eval_batches: 1}
data: {path: $tmp/corpus.txt}
precision: {recipe: mxfp8}
YAML
"$bin" train --quiet --config "$tmp/m.yaml" --checkpoint-dir "$tmp/ck" 2> /dev/null
p32=$(head -c 32 "$tmp/corpus.txt")
p256=$(head -c 256 "$tmp/corpus.txt")
for round in $(seq 1 "$rounds"); do
  for th in $threads; do
    g() { OMP_NUM_THREADS=$th "$bin" generate --checkpoint "$tmp/ck" --json --quiet "$@"; }
    g --prompt "$p32" --max-new-tokens 200 > "$tmp/decode-$th-$round.json"
    g --prompt "$p32" --max-new-tokens 1000 > "$tmp/slide-$th-$round.json"
    g --prompt "$p32" --max-new-tokens 300 --context-keep 256 > "$tmp/full-$th-$round.json"
    g --prompt "$p256" --max-new-tokens 1 > "$tmp/prompt-$th-$round.json"
  done
done
python3 - "$tmp" "$rounds" $threads <<'PY'
import json, statistics, sys
tmp, rounds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"| case | threads | tokens/s | tokens per CPU-s | window slides |  (medians of {rounds})")
print("|---|---|---|---|---|")
for case in ("decode", "slide", "full", "prompt"):
    for th in threads:
        js = [json.load(open(f"{tmp}/{case}-{th}-{r}.json")) for r in range(1, rounds + 1)]
        n = (lambda j: 256) if case == "prompt" else (lambda j: j["new_tokens"])
        wall = (lambda j: j["prefill_s"]) if case == "prompt" else (lambda j: j["prefill_s"] + j["decode_s"])
        rate = statistics.median(n(j) / wall(j) for j in js)
        cpu = statistics.median(n(j) / j["cpu_s"] for j in js)
        print(f"| {case} | {th} | {rate:.0f} | {cpu:.0f} | {js[0]['slides']} |")
PY
