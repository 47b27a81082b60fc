#!/usr/bin/env bash
# Adaptive FP8 evidence: for the tiny dense, tiny MoE and medium dense configs, benchmark every
# layer kind in BF16 and MXFP8 over a short token sweep (`mxtrain bench-layers`), merge the
# report into a policy (`mxtrain policy merge`), print the per-module decisions (`--dry-run`),
# then time training steps in bf16, mxfp8 and adaptive (mxfp8 + the policy) back to back.
# Sized to finish in about 15 minutes on 2 cores (the medium model dominates).
# Usage: bash scripts/adaptive.sh   (MXTRAIN_BIN=path overrides build/mxtrain; ROUNDS=N, default 3)
# Output: runs/adaptive/* (reports, policies, decision tables, metrics; train stderr in *.log),
#         docs/results/adaptive_speedup.svg, docs/results/adaptive_table.md and the raw rows
#         docs/results/raw/adaptive_rows.jsonl (every training run's rows, tagged by case,
#         run and round).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MXTRAIN_BIN:-}" ]; then
  [ -x build/mxtrain ] || bash scripts/build.sh
  MXTRAIN_BIN=build/mxtrain
fi
bin=$MXTRAIN_BIN
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
out=runs/adaptive
rounds=${ROUNDS:-3}
rm -rf "$out"
mkdir -p "$out" docs/results/raw

# name | config | token sweep | bench warmup | bench iters | train steps (the first step is not
# timed) | extra train options. medium-2k is the medium model at 2048 tokens per step
# (micro-batch 8), where its products are large enough for FP8 to win.
cases=(
  "tiny|tiny|256 1024 4096|1|5|12|"
  "tiny-moe|tiny-moe|256 1024 4096|1|5|12|"
  "medium|medium|128 512 1024|1|3|5|"
  "medium-2k|medium|512 2048 4096|1|3|5|--micro-batch-size 8"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name config tokens warmup iters steps train_opts <<<"$c"
  cfg=configs/$config.yaml
  read -r -a topts <<<"$train_opts"
  echo "== $name: bench-layers (tokens $tokens)" >&2
  # shellcheck disable=SC2086
  "$bin" bench-layers --config "$cfg" --recipe mxfp8 --warmup "$warmup" --iters "$iters" \
    --tokens $tokens --report "$out/$name-report.json" --quiet > "$out/$name-bench.txt"
  "$bin" policy merge --reports "$out/$name-report.json" --output "$out/$name-policy.json" \
    > "$out/$name-merge.txt"
  "$bin" policy show "$out/$name-policy.json" > "$out/$name-policy.txt"
  "$bin" train --config "$cfg" "${topts[@]}" --recipe mxfp8 --fp8-policy "$out/$name-policy.json" --dry-run \
    --decisions-out "$out/$name-decisions.json" > "$out/$name-decisions.txt" 2>&1
  # Rounds of bf16, mxfp8, adaptive back to back, so a change in machine load during the
  # script hits all three alike; the table takes the median over every round's timed steps.
  for round in $(seq 1 "$rounds"); do
    for run in bf16 mxfp8 adaptive; do
      echo "== $name: train $run ($steps steps, round $round of $rounds)" >&2
      extra=(--recipe "$run")
      [ "$run" = adaptive ] && extra=(--recipe mxfp8 --fp8-policy "$out/$name-policy.json")
      "$bin" train --config "$cfg" "${topts[@]}" "${extra[@]}" --steps "$steps" --quiet \
        --metrics-out "$out/$name-$run-r$round.jsonl" > "$out/$name-$run-r$round.log" 2>&1
    done
  done
done
python3 tools/plot_speedup.py --out docs/results/adaptive_speedup.svg \
  tiny="$out/tiny-report.json" tiny-moe="$out/tiny-moe-report.json" \
  medium="$out/medium-report.json" medium-2k="$out/medium-2k-report.json"
python3 tools/adaptive_table.py "$out" tiny tiny-moe medium medium-2k > docs/results/adaptive_table.md
machine=$("$bin" info | head -1)
python3 - "$out" "$machine" > docs/results/raw/adaptive_rows.jsonl <<'PY'
import glob, json, os, re, sys
out, machine = sys.argv[1], sys.argv[2]
for path in sorted(glob.glob(os.path.join(out, "*-r*.jsonl"))):
    m = re.fullmatch(r"(.+)-(bf16|mxfp8|adaptive)-r(\d+)\.jsonl", os.path.basename(path))
    if not m:
        continue
    for line in open(path):
        row = {"case": m[1], "run": m[2], "round": int(m[3]), "machine": machine,
               **json.loads(line)}
        print(json.dumps(row, sort_keys=True))
PY
cat docs/results/adaptive_table.md
