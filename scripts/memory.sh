#!/usr/bin/env bash
# Peak memory and step time per recipe, measured as a user would: each run is its own process,
# peak RSS comes from the OS (/usr/bin/time -f %M, KiB) and the step time is the median of the
# run's timed steps (metrics `step_ms`, the first step excluded). Runs alternate recipes for
# ROUNDS rounds so machine load hits all alike.
# Usage: bash scripts/memory.sh [config, default configs/act512.yaml]
#        (MXTRAIN_BIN overrides build/mxtrain; ROUNDS=N, default 2; RECIPES="bf16 mxfp8 ...",
#        where RECIPE:defer turns defer_backward_quant on, RECIPE:sw32 keeps the SwiGLU input
#        in FP32 and RECIPE:sw8 in FP8; the default, auto, is FP8 under FP8 recipes with defer off)
# Output: runs/memory/*.jsonl and a table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=${1:-configs/act512.yaml}
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
rounds=${ROUNDS:-2}
recipes=${RECIPES:-"bf16 mxfp8 mxfp8-32x32 mxfp8:sw32 mxfp8-32x32:sw32"}
out=runs/memory
rm -rf "$out"
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for run in $recipes; do
    # RECIPE:defer runs the recipe with precision.defer_backward_quant on; RECIPE:sw32 and :sw8
    # set precision.swiglu_input to fp32 or fp8.
    c=$cfg
    recipe=${run%%:*}
    extra=()
    if [[ $run == *:defer* ]]; then
      c=$out/defer.yaml
      sed 's/defer_backward_quant: false/defer_backward_quant: true/' "$cfg" > "$c"
    fi
    [[ $run == *:sw8* ]] && extra=(--swiglu-input fp8)
    [[ $run == *:sw32* ]] && extra=(--swiglu-input fp32)
    tag=${run//:/-}
    /usr/bin/time -f %M -o "$out/$tag-r$round.rss" "$bin" train --config "$c" --recipe "$recipe" \
      "${extra[@]}" --quiet --metrics-out "$out/$tag-r$round.jsonl" > "$out/$tag-r$round.log" 2>&1
  done
done
python3 - "$out" $recipes <<'PY'
import glob, json, statistics, sys
out, recipes = sys.argv[1], sys.argv[2:]
rows = []
for run in recipes:
    tag = run.replace(":", "-")
    rss = [int(open(f).read().split()[-1]) for f in sorted(glob.glob(f"{out}/{tag}-r*.rss"))]
    steps, held = [], 0
    for f in sorted(glob.glob(f"{out}/{tag}-r*.jsonl")):
        lines = [json.loads(l) for l in open(f)]
        st = [l for l in lines if "step_ms" in l]
        steps += [l["step_ms"] for l in st[1:]]
        held = max([held] + [l.get("held_bytes", 0) for l in st])
    rows.append((run, statistics.median(rss) / 1024, statistics.median(steps), held / 2**20))
base = rows[0]
print(f"{'recipe':<18} {'peak_rss_MiB':>12} {'vs_' + base[0]:>9} {'step_ms':>9} {'vs_' + base[0]:>9} {'held_MiB':>9}")
for r in rows:
    print(f"{r[0]:<18} {r[1]:12.1f} {r[1] / base[1]:8.2f}x {r[2]:9.1f} {r[2] / base[2]:8.2f}x {r[3]:9.1f}")
PY
