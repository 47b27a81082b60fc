#!/usr/bin/env bash
# Peak memory and step time of activation recompute (training.recompute none | attention |
# layer) on one config, measured as a user would: each run is its own process, peak RSS from
# the OS (/usr/bin/time -f %M, KiB), step time the median of the run's steps after the first
# (metrics `step_ms`). The modes alternate for ROUNDS rounds so machine load hits all alike.
# Usage: bash scripts/recompute.sh [config, default configs/act512.yaml]
#        (MXTRAIN_BIN overrides build/mxtrain; ROUNDS=N, default 3; MODES="none attention layer")
# Output: runs/recompute/rows.jsonl (one row per run) and a table on stdout: medians over the
# rounds with their range, each mode against `none`.
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=${1:-configs/act512.yaml}
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
rounds=${ROUNDS:-3}
modes=${MODES:-"none attention layer"}
out=runs/recompute
rm -rf "$out"
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for mode in $modes; do
    tag=$mode-r$round
    /usr/bin/time -f %M -o "$out/$tag.rss" "$bin" train --config "$cfg" --recompute "$mode" \
      --quiet --metrics-out "$out/$tag.jsonl" > "$out/$tag.log" 2>&1
    python3 - "$out" "$tag" "$mode" "$round" "$cfg" >> "$out/rows.jsonl" <<'PY'
import json, statistics, sys
out, tag, mode, rnd, cfg = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{out}/{tag}.jsonl")]
steps = [r for r in rows if "step_ms" in r]
s = rows[-1]
print(json.dumps({"config": cfg, "recompute": mode, "round": int(rnd),
                  "peak_rss_kib": int(open(f"{out}/{tag}.rss").read().split()[-1]),
                  "median_step_ms": statistics.median(r["step_ms"] for r in steps[1:]),
                  "held_bytes": s["held_bytes"], "final_loss": s["final_loss"],
                  "losses": [r["loss"] for r in steps]}))
PY
  done
done
python3 - "$out/rows.jsonl" $modes <<'PY'
import json, statistics, sys
path, modes = sys.argv[1], sys.argv[2:]
rows = [json.loads(l) for l in open(path)]
def med(v):  # the true median: mean of the middle two for an even count
    v = sorted(v); n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
stat = {}
for m in modes:
    rs = [r for r in rows if r["recompute"] == m]
    stat[m] = (med([r["peak_rss_kib"] / 1024 for r in rs]),
               [r["peak_rss_kib"] / 1024 for r in rs],
               med([r["median_step_ms"] for r in rs]), [r["median_step_ms"] for r in rs],
               rs[0]["held_bytes"] / 2**20, rs[0]["losses"])
base = stat[modes[0]]
print(f"{'recompute':<10} {'peak RSS MiB (range)':>24} {'vs ' + modes[0]:>8} "
      f"{'step ms (range)':>22} {'vs ' + modes[0]:>8} {'held MiB':>9} {'losses':>8}")
for m in modes:
    rss, rr, ms, mr, held, losses = stat[m]
    same = "same" if losses == base[5] else "DIFFER"
    print(f"{m:<10} {rss:8.1f} ({min(rr):.1f}-{max(rr):.1f}) {rss / base[0]:7.3f}x "
          f"{ms:8.1f} ({min(mr):.1f}-{max(mr):.1f}) {ms / base[2]:7.3f}x {held:9.1f} {same:>8}")
PY
