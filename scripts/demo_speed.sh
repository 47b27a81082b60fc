#!/usr/bin/env bash
# The main job's speed, MXFP8 against BF16: ROUNDS rounds, each the main job's first STEPS
# steps (configs/demo.yaml in mxfp8, its schedule unchanged: --stop-after) followed by the same
# steps in bf16, so machine load hits both alike. Every run's metrics summary becomes one raw
# row with its round, the load average before and after, and its start time; the table (true
# medians and ranges, mxfp8/bf16 per round) comes from tools/demo_speed.py. The tokenizer and
# shards the config reads are made first (as scripts/demo.sh makes them) when missing.
# Usage: bash scripts/demo_speed.sh   (MXTRAIN_BIN overrides build/mxtrain; ROUNDS=N, default
#        3; STEPS=N, default 120; OUT=FILE, default runs/demo_speed/rows.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${MXTRAIN_BIN:-build/mxtrain}")
[ -x "$bin" ] || { bash scripts/build.sh; bin=$(realpath build/mxtrain); }
rounds=${ROUNDS:-3}
steps=${STEPS:-120}
rows=${OUT:-runs/demo_speed/rows.jsonl}
work=runs/demo_speed
mkdir -p "$work" runs/cache "$(dirname "$rows")"
: > "$rows"
tok=runs/cache/fortunes-sp4096.model
shards=runs/cache/fortunes-sp4096
if [ ! -s "$tok" ] || [ ! -s "$shards/shards.json" ] || ! cmp -s "$tok" "$shards/tokenizer.model"; then
  "$bin" tokenizer train --input fortunes --vocab-size 4096 --out "$tok" --quiet
  "$bin" prepare-data --input fortunes --tokenizer "$tok" --out "$shards" --quiet
fi
for round in $(seq 1 "$rounds"); do
  for recipe in mxfp8 bf16; do
    echo "round $round/$rounds: $recipe, $steps steps" >&2
    rm -rf "$work/$recipe"
    mkdir -p "$work/$recipe"
    before=$(cut -d' ' -f1-3 /proc/loadavg)
    started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    "$bin" train --config configs/demo.yaml --recipe "$recipe" --quiet --stop-after "$steps" \
      --metrics-out "$work/$recipe/metrics.jsonl" --checkpoint-dir "$work/$recipe/ckpt"
    after=$(cut -d' ' -f1-3 /proc/loadavg)
    python3 - "$work/$recipe/metrics.jsonl" "$recipe" "$round" "$before" "$after" "$started" \
        "$steps" >> "$rows" <<'PY'
import json, sys
path, recipe, rnd, before, after, started, steps = sys.argv[1:]
s = [json.loads(l) for l in open(path)][-1]
s.update({"run": recipe, "round": int(rnd), "loadavg_before": before, "loadavg_after": after,
          "started_utc": started,
          "command": f"mxtrain train --config configs/demo.yaml --recipe {recipe} --quiet "
                     f"--stop-after {steps}"})
print(json.dumps(s, sort_keys=True))
PY
  done
done
python3 tools/demo_speed.py "$rows"
