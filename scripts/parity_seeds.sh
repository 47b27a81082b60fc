#!/usr/bin/env bash
# Loss parity at the scale of the byte-level main job: configs/demo-bytes.yaml trained for its
# full length in every recipe family (bf16, mxfp8, mxfp8-32x32, blockwise, fp8-current,
# fp8-delayed) with 3 seeds each (the seed sets the initial
# weights and the data order; within a seed every recipe sees the same batches). Reports the
# final validation loss per recipe as mean ± spread (half the min–max range) and the gap of
# each recipe's mean to BF16's. (No speed here: the runs may share the machine with other work;
# speed is measured by the benchmarks.)
# Usage: bash scripts/parity_seeds.sh   (SEEDS="1 2 3", RECIPES="bf16 mxfp8 ...")
# Output: runs/parity_seeds/*.jsonl, docs/results/parity_seeds.md
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
seeds=${SEEDS:-"1 2 3"}
recipes=${RECIPES:-"bf16 mxfp8 mxfp8-32x32 blockwise fp8-current fp8-delayed"}
out=runs/parity_seeds
mkdir -p "$out" docs/results
for seed in $seeds; do
  for recipe in $recipes; do
    rows="$out/$recipe-s$seed.jsonl"
    # a finished run (its summary row written) is kept, so an interrupted sweep resumes
    if [ -f "$rows" ] && grep -q '"summary":true' "$rows"; then continue; fi
    echo "== seed $seed / $recipe" >&2
    "$bin" train --config configs/demo-bytes.yaml --recipe "$recipe" --seed "$seed" --quiet \
      --metrics-out "$rows"
  done
done
"$bin" info | head -1 > "$out/machine.txt"
python3 - "$out" "$recipes" "$seeds" <<'PY' > docs/results/parity_seeds.md
import json, statistics, sys
out, recipes, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def final(r, s):
    rows = [json.loads(l) for l in open(f"{out}/{r}-s{s}.jsonl")]
    summ = [o for o in rows if o.get("summary")][-1]
    return summ["final_val_loss"]
print(f"Machine: {open(out + '/machine.txt').read().strip()}; `bash scripts/parity_seeds.sh` "
      f"(configs/demo-bytes.yaml, seeds {', '.join(seeds)}).\n")
print("| recipe | final val loss per seed | mean ± spread | gap of the mean vs bf16 |")
print("|---|---|---|---|")
base = None
for r in recipes:
    losses = [final(r, s) for s in seeds]
    m = statistics.mean(losses)
    spread = (max(losses) - min(losses)) / 2
    if r == "bf16":
        base = m
    gap = f"{(m - base) / base * 100:+.2f}%" if base is not None else "–"
    print(f"| {r} | {', '.join(f'{x:.4f}' for x in losses)} | {m:.4f} ± {spread:.4f} | {gap} |")
PY
cat docs/results/parity_seeds.md
