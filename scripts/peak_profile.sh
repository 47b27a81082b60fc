#!/usr/bin/env bash
# The machine's limits and where a training step's time goes against them, as docs/results/
# peak.md reports them:
#   1. `mxtrain bench peak --json`, RUNS times (default 3);
#   2. the peer shape (configs/peer256.yaml: d_model 256, 4 layers, seq 256, micro-batch 8)
#      trained for 6 steps with `--profile-steps 5` (step 1 is the warm-up), bf16 and mxfp8
#      alternated, RUNS rounds; each run measures the peak for its MFU at start.
# Raw JSON in runs/peak/ (peak_rN.json, profile_<recipe>_rN.json, metrics_<recipe>_rN.jsonl);
# the tables (tools/peak_table.py: medians over the runs with their range) in
# docs/results/peak_table.md.
# Usage: bash scripts/peak_profile.sh   (RUNS=N; PEAK_TABLE=path writes the tables elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
runs=${RUNS:-3}
out=runs/peak
rm -rf "$out"
mkdir -p "$out"
for r in $(seq 1 "$runs"); do
  "$bin" bench peak --json --quiet > "$out/peak_r$r.json"
  for recipe in bf16 mxfp8; do
    "$bin" train --config configs/peer256.yaml --recipe "$recipe" --steps 6 --profile-steps 5 \
      --quiet --profile-out "$out/profile_${recipe}_r$r.json" \
      --metrics-out "$out/metrics_${recipe}_r$r.jsonl" 2> "$out/profile_${recipe}_r$r.txt"
  done
  echo "round $r of $runs done" >&2
done
"$bin" info | head -2 > "$out/machine.txt"
uptime >> "$out/machine.txt"
python3 tools/peak_table.py "$out" "${PEAK_TABLE:-docs/results/peak_table.md}"
