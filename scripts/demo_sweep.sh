#!/usr/bin/env bash
# The main job's weight-decay sweep (docs/results/data.md, "The main job"): configs/demo.yaml
# in mxfp8 with its weight_decay set to each of WDS, plus one longer run (LONG_STEPS at the
# first decay of WDS), each trained once (the loss is deterministic on a kernel path). Needs
# the tokenizer and shards under runs/cache/ (scripts/demo_data.sh, which makes them when absent).
# Usage: bash scripts/demo_sweep.sh   (WDS="0.1 0.3 0.5 1.0", LONG_STEPS=4000, MXTRAIN_BIN;
#        TABLE_ONLY=1 remakes the rows and the table from runs/demo_sweep/ without training)
# Output: runs/demo_sweep/<run>.jsonl, docs/results/raw/main_job_sweep.jsonl (every 50th step,
#         every validation and the summary of each run, tagged "run") and a table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
wds=${WDS:-"0.1 0.3 0.5 1.0"}
long=${LONG_STEPS:-4000}
out=runs/demo_sweep
mkdir -p "$out" docs/results/raw

if [ "${TABLE_ONLY:-0}" != 1 ]; then
  bash scripts/demo_data.sh "$bin"
  first=${wds%% *}
  runs=()
  for wd in $wds; do runs+=("wd$wd 3000 $wd"); done
  runs+=("wd$first-steps$long $long $first")
  for r in "${runs[@]}"; do
    read -r name steps wd <<< "$r"
    sed -e "s/^  steps: [0-9]*/  steps: $steps/" -e "s/^  weight_decay: .*/  weight_decay: $wd/" \
      configs/demo.yaml > "$out/$name.yaml"
    echo "== $name" >&2
    rm -rf "$out/$name.ckpt"
    /usr/bin/time -f %e -o "$out/$name.seconds" "$bin" train --config "$out/$name.yaml" \
      --recipe mxfp8 --quiet --metrics-out "$out/$name.jsonl" --checkpoint-dir "$out/$name.ckpt"
    rm -rf "$out/$name.ckpt"
  done
fi

machine=$("$bin" info | head -1)
python3 - "$out" "$machine" <<'EOF'
import glob, json, os, sys
out, machine = sys.argv[1], sys.argv[2]
rows, table = [], []
for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
    run = os.path.basename(path)[:-len(".jsonl")]
    seconds = None
    if os.path.exists(os.path.join(out, run + ".seconds")):
        seconds = float(open(os.path.join(out, run + ".seconds")).read().split()[-1])
    vals = []
    for line in open(path):
        r = json.loads(line)
        keep = r.get("summary") or "val_loss" in r or r.get("step", 1) % 50 == 0
        if keep:
            rows.append({"run": run, "machine": machine, **r})
        if "val_nats_per_byte" in r and not r.get("summary"):
            vals.append((r["step"], r["val_nats_per_byte"]))
        if r.get("summary"):
            table.append((run, r["steps"], vals, r["final_val_nats_per_byte"], r["tokens_per_s"],
                          seconds))
with open("docs/results/raw/main_job_sweep.jsonl", "w") as f:
    for r in rows:
        f.write(json.dumps(r, sort_keys=True) + "\n")
print(f"Machine: `{machine}`\n")
print("| run | steps | val nats/byte at 1000 / 2000 / end | best | tokens/s | train command s |")
print("|---|---:|---|---|---:|---:|")
for run, steps, vals, final, tps, sec in table:
    at = dict(vals)
    best = min(vals, key=lambda v: v[1])
    mid = " / ".join(f"{at[s]:.4f}" for s in (1000, 2000) if s in at)
    print(f"| {run} | {steps} | {mid} / **{final:.4f}** | {best[1]:.4f} (step {best[0]}) | "
          f"{tps:,.0f} | {sec if sec is not None else '-'} |")
EOF
