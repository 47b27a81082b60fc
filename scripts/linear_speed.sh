#!/usr/bin/env bash
# Quantized Linear and GroupedLinear forward+backward time against BF16 (docs/results/linear.md,
# "Blockwise and mxfp8 against BF16"): ROUNDS rounds (default 5), each one process timing
# every recipe and defer_backward_quant state back to back on the same data:
#   dense:   2048 tokens, 4096 -> 4096
#   grouped: 8 experts, top-2, 512 tokens, 2048 -> 1408
# Usage: bash scripts/linear_speed.sh   (ROUNDS=5, RECIPES=bf16,mxfp8,blockwise, MXTRAIN_BIN,
#        OUT=rows file)
# Output: OUT (default docs/results/raw/linear_speed_rows.jsonl: every row, tagged with round
#         and machine class) and the table of tools/linear_speed_table.py on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
rounds=${ROUNDS:-5}
recipes=${RECIPES:-bf16,mxfp8,blockwise}
raw=${OUT:-docs/results/raw/linear_speed_rows.jsonl}
mkdir -p "$(dirname "$raw")"
machine=$("$bin" info | head -1)
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
: > "$raw"
for round in $(seq "$rounds"); do
  echo "== round $round / $rounds" >&2
  "$bin" bench linear --json --tokens 2048 --in 4096 --out 4096 --recipes "$recipes" \
    --iters 3 > "$tmp"
  python3 tools/linear_speed_table.py --tag "$tmp" dense "$round" "$machine" >> "$raw"
  "$bin" bench linear --json --experts 8 --topk 2 --tokens 512 --in 2048 --out 1408 \
    --recipes "$recipes" --iters 5 > "$tmp"
  python3 tools/linear_speed_table.py --tag "$tmp" grouped "$round" "$machine" >> "$raw"
done
python3 tools/linear_speed_table.py --table "$raw"
