#!/usr/bin/env bash
# oneDNN's two shapings of the BF16 products (mxtrain/gemm.h, GemmShapes) at the training shapes,
# in the same process and rounds (`bench gemm --bf16-shapes exact,runtime`): exact shapes
# (brgemm) against runtime M and K (the JIT GEMM driver), per product (fwd, dgrad, wgrad).
#   peer shape (d_model 256, d_ff 672, 2048 tokens): qkv, proj, fc1, fc2
#   d_model 1024 (d_ff 2752, 2048 tokens): qkv, fc1, fc2
#   MoE experts: tiny-moe's (128 -> 384, about 512 rows) and the grouped layer's (2048 -> 1408,
#   128 rows)
# Then whole training steps (STEPS steps, the first untimed), back to back in each round:
#   configs/tiny-moe.yaml, bf16 and mxfp8: the default shaping (runtime for the experts'
#     products) against every product exact (MXTRAIN_GEMM_SHAPES=exact, as before);
#   the peer shape (scripts/gpt_config.sh: d_model 256, d_ff 672, seq 256, micro-batch 8), bf16:
#     the default (every product exact) against every product at run time.
# Usage: bash scripts/gemm_shapes.sh   (ROUNDS=3, ITERS=9, STEPS=30, MXTRAIN_BIN)
# Output: docs/results/raw/gemm_shapes_rows.jsonl (every product row, tagged with round, layer
#         and machine class), docs/results/raw/gemm_shapes_train_rows.jsonl (every training
#         run's summary), and the tables of tools/gemm_shapes_table.py on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
rounds=${ROUNDS:-3}
iters=${ITERS:-9}
steps=${STEPS:-30}
raw=docs/results/raw/gemm_shapes_rows.jsonl
train_raw=docs/results/raw/gemm_shapes_train_rows.jsonl
mkdir -p docs/results/raw
machine=$("$bin" info | head -1)
tmp=$(mktemp)
moe_cfg=$(mktemp --suffix=.yaml)
peer_cfg=$(mktemp --suffix=.yaml)
trap 'rm -f "$tmp" "$moe_cfg" "$peer_cfg"' EXIT
: > "$raw"
: > "$train_raw"
sed -e "s/^  steps: .*/  steps: $steps/; s/^  eval_every: .*/  eval_every: 100000/" \
    -e "s/^  eval_batches: .*/  eval_batches: 1/" configs/tiny-moe.yaml > "$moe_cfg"
bash scripts/gpt_config.sh 256 4 672 "$steps" > "$peer_cfg"
# layer m k n
shapes="peer.qkv 2048 256 768
peer.proj 2048 256 256
peer.fc1 2048 256 1344
peer.fc2 2048 672 256
d1024.qkv 2048 1024 3072
d1024.fc1 2048 1024 5504
d1024.fc2 2048 2752 1024
tiny-moe.expert.fc1 512 128 384
tiny-moe.expert.fc2 512 192 128
grouped.expert.fc1 128 2048 1408
grouped.expert.fc2 128 1408 2048"
for round in $(seq "$rounds"); do
  while read -r layer m k n; do
    echo "== round $round / $rounds: $layer" >&2
    "$bin" bench gemm --json --recipes bf16 --bf16-shapes exact,runtime --m "$m" --k "$k" \
      --n "$n" --iters "$iters" --peak 1 > "$tmp"
    python3 - "$tmp" "$round" "$layer" "$machine" <<'PY' >> "$raw"
import json, sys
for r in json.load(open(sys.argv[1])):
    r.update(round=int(sys.argv[2]), layer=sys.argv[3], machine=sys.argv[4])
    print(json.dumps(r))
PY
  done <<< "$shapes"
done
# config name | config file | recipe | the shaping compared with the default
train_cases="tiny-moe $moe_cfg bf16 exact
tiny-moe $moe_cfg mxfp8 exact
peer $peer_cfg bf16 runtime"
for round in $(seq "$rounds"); do
  while read -r name file recipe other; do
    for shaping in default "$other"; do
      echo "== round $round / $rounds: $name $recipe, shapes $shaping" >&2
      env_shapes=()
      [ "$shaping" = default ] || env_shapes=("MXTRAIN_GEMM_SHAPES=$shaping")
      env "${env_shapes[@]}" "$bin" train --config "$file" --recipe "$recipe" --quiet \
        --metrics-out "$tmp" > /dev/null
      python3 - "$tmp" "$round" "$name" "$recipe" "$shaping" "$machine" <<'PY' >> "$train_raw"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
print(json.dumps({"config": sys.argv[3], "round": int(sys.argv[2]), "recipe": sys.argv[4],
                  "shapes": sys.argv[5], "machine": sys.argv[6],
                  "median_step_ms": s["median_step_ms"], "steps": s["steps"],
                  "final_loss": s.get("final_loss")}))
PY
    done
  done <<< "$train_cases"
done
python3 tools/gemm_shapes_table.py "$raw" "$train_raw"
