#!/usr/bin/env bash
# mxtrain against PyTorch on the same byte-level GPT, as a user would compare them: each run is
# its own process, peak RSS comes from the OS (/usr/bin/time -f %M) and the step time is the
# median of the run's steps after the first. Within a round the tools run back to back, so a
# change in machine load hits all of them alike.
#   1. the reference shape (d_model 256, 4 layers, 4 heads, d_ff 672, seq 256, micro-batch 8):
#      PyTorch BF16 autocast, mxtrain bf16 and mxtrain mxfp8, ROUNDS rounds (default 3);
#   2. a sweep of model width (d_model 128 .. 1024, heads = d_model/64, d_ff = 8/3 d_model
#      rounded up to 32, 4 layers, same sequence and batch), SWEEP_ROUNDS rounds (default 1),
#      every width and tool once per round.
# PyTorch is Debian's python3-torch run by /usr/bin/python3; without it the PyTorch rows are
# skipped (the script says so) and mxtrain's are still measured.
# Usage: bash scripts/trainer_bench.sh   (ROUNDS=N, SWEEP_ROUNDS=N, STEPS=N (default 10),
#        SIZES="128 256 ...", PEAK=GFLOPS: the tables add mxtrain's MFU against it, e.g. the
#        median of `mxtrain bench peak` runs)
# Output: runs/trainer/rows.jsonl, docs/results/trainer_table.md, docs/results/trainer_tokens.svg
#         (with SIZES set, a partial sweep: the table and plot go to runs/trainer/ instead, and
#         the committed full-sweep ones stay)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
rounds=${ROUNDS:-3}
sweep_rounds=${SWEEP_ROUNDS:-1}
steps=${STEPS:-10}
sizes=${SIZES:-"128 256 512 768 1024"}
out=runs/trainer
table=docs/results/trainer_table.md plot=docs/results/trainer_tokens.svg
[ -n "${SIZES:-}" ] && table=$out/trainer_table.md plot=$out/trainer_tokens.svg
rm -rf "$out"
mkdir -p "$out"
have_torch=1
/usr/bin/python3 -c "import torch" 2>/dev/null || { have_torch=0; echo "PyTorch not installed: its rows are skipped" >&2; }

# mxtrain config for a model shape (scripts/gpt_config.sh).
config() {  # d_model heads d_ff -> path
  local f=$out/gpt-$1.yaml
  bash scripts/gpt_config.sh "$1" "$2" "$3" "$steps" > "$f"
  echo "$f"
}

run_one() {  # label d_model heads d_ff round
  local label=$1 d=$2 h=$3 f=$4 r=$5 tag="$1-$2-r$5"
  if [ "$label" = pytorch ]; then
    [ "$have_torch" = 1 ] || return 0
    /usr/bin/time -f %M -o "$out/$tag.rss" /usr/bin/python3 bench/torch_gpt.py --d-model "$d" \
      --heads "$h" --d-ff "$f" --seq 256 --batch 8 --steps "$steps" > "$out/$tag.json"
    python3 - "$out/$tag.json" "$out/$tag.rss" "$r" <<'PY' >> "$out/rows.jsonl"
import json, sys
o = json.load(open(sys.argv[1]))
print(json.dumps({"tool": "pytorch bf16 autocast", "d_model": o["d_model"], "round": int(sys.argv[3]),
                  "median_step_ms": o["median_step_ms"], "tokens_per_s": o["tokens_per_s"],
                  "peak_rss_kib": int(open(sys.argv[2]).read().split()[-1]),
                  "parameters": o["parameters"], "threads": o["threads"]}))
PY
  else
    local cfg
    cfg=$(config "$d" "$h" "$f")
    /usr/bin/time -f %M -o "$out/$tag.rss" "$bin" train --config "$cfg" --recipe "$label" --quiet \
      --metrics-out "$out/$tag.jsonl" > "$out/$tag.log" 2>&1
    python3 - "$out/$tag.jsonl" "$out/$tag.rss" "$r" "$label" "$d" <<'PY' >> "$out/rows.jsonl"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
print(json.dumps({"tool": "mxtrain " + sys.argv[4], "d_model": int(sys.argv[5]), "round": int(sys.argv[3]),
                  "median_step_ms": s["median_step_ms"],
                  "tokens_per_s": 8 * 256 / (s["median_step_ms"] / 1e3),
                  "peak_rss_kib": int(open(sys.argv[2]).read().split()[-1]),
                  "parameters": s["parameters"], "flops_per_token": s["flops_per_token"]}))
PY
  fi
}

for r in $(seq 1 "$rounds"); do
  for tool in pytorch bf16 mxfp8; do run_one "$tool" 256 4 672 "$r"; done
done
for r in $(seq 1 "$sweep_rounds"); do
  for d in $sizes; do
    [ "$d" = 256 ] && continue  # measured above
    h=$(( d / 64 > 0 ? d / 64 : 1 ))
    f=$(( (d * 8 / 3 + 31) / 32 * 32 ))
    for tool in pytorch bf16 mxfp8; do run_one "$tool" "$d" "$h" "$f" "$r"; done
  done
done
"$bin" info | head -2 > "$out/machine.txt"
python3 tools/trainer_report.py "$out/rows.jsonl" "$out/machine.txt" "$table" "$plot" ${PEAK:+"$PEAK"}
cat "$table"
