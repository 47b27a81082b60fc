#!/usr/bin/env bash
# Loss parity: trains the tiny dense and MoE configs in bf16, mxfp8 and mxfp8-32x32 on the
# default corpus (same seed, same data order), then writes loss plots and a summary table.
# Usage: bash scripts/parity.sh [extra mxtrain train flags, e.g. --steps 100]
# (MXTRAIN_BIN overrides the binary, default build/mxtrain)
# Output: runs/parity/*.jsonl, docs/results/parity_{dense,moe}.svg, docs/results/parity_table.md
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
out=runs/parity
mkdir -p "$out" docs/results
for model in tiny tiny-moe; do
  for recipe in bf16 mxfp8 mxfp8-32x32; do
    echo "== $model / $recipe" >&2
    "$bin" train --config "configs/$model.yaml" --recipe "$recipe" \
      --metrics-out "$out/$model-$recipe.jsonl" "$@"
  done
done
python3 tools/plot_losses.py --out docs/results/parity_dense.svg --title "tiny (dense): loss" \
  bf16=$out/tiny-bf16.jsonl mxfp8=$out/tiny-mxfp8.jsonl mxfp8-32x32=$out/tiny-mxfp8-32x32.jsonl
python3 tools/plot_losses.py --out docs/results/parity_moe.svg --title "tiny-moe: loss" \
  bf16=$out/tiny-moe-bf16.jsonl mxfp8=$out/tiny-moe-mxfp8.jsonl \
  mxfp8-32x32=$out/tiny-moe-mxfp8-32x32.jsonl
python3 tools/parity_table.py "$out" > docs/results/parity_table.md
cat docs/results/parity_table.md
